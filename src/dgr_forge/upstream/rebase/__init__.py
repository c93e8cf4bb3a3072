"""Move the patch series to a new upstream commit: a resumable 3-way replay.

Progress is in `<workspace>/rebase.json` after every step; the manifest and `patches/` change
only at the end, through the series journal under the root lock (docs/patches-and-rebase.md,
'Rebase': the commands and fault points; docs/architecture.md, 'The series journal').
"""

from dgr_forge.upstream.rebase.commands import abort, onto, resume, start
from dgr_forge.upstream.rebase.state import Onto

__all__ = ["Onto", "abort", "onto", "resume", "start"]
