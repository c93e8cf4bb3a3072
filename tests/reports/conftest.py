"""Fixtures shared by the signed-report and certification tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.git import Upstream
from support.reports import isolate_key_env, make_patch, setup_root

from dgr_forge.core.forge import Forge


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may read or create a key in the user's real config directory."""
    isolate_key_env(tmp_path, monkeypatch)


@pytest.fixture
def patch_text(upstream: Upstream) -> str:
    return make_patch(upstream)


@pytest.fixture
def forge(tmp_path: Path, upstream: Upstream, patch_text: str) -> Forge:
    root = setup_root(tmp_path / "forge", upstream, patch_text)
    return Forge(root, root / ".dgr")
