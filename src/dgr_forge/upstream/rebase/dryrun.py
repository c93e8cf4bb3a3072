"""placeholder"""

from __future__ import annotations


def dry_run() -> None:
    raise NotImplementedError
