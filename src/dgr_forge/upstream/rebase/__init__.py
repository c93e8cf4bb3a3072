"""Move the patch series to a new upstream commit: a resumable 3-way replay.

    dgr-forge rebase --onto <sha|ref>   # replay; stops with exit 3 on a conflict
    (edit, git add)                     # in the workspace's src/<name>
    dgr-forge rebase --continue         # or: dgr-forge rebase --abort

Each patch is a commit O_i on the old pin plus the series (`ensure_patched`); the replay
engine (`upstream.replay`) merges each onto the new head in memory, restamped (the same
inputs give the same commits); an empty pick is dropped, a conflict is cherry-picked in
the work tree and stops. Progress lives in `<workspace>/rebase.json` (after every step),
so `--continue` and `--abort` work from a new shell or after a crash. The manifest and
`patches/` change only at the end, staged in `<workspace>/rebase/{old,new}/` and written
through the series journal (`upstream.series_journal`) under the root lock.

Fault points (`DGR_FAULT`): `rebase.replay:NNNN`, `rebase.commit:NNNN`, `rebase.continue`,
`rebase.write`, the journal's `rebase.staged`/`rebase.swapped`/`rebase.manifest`,
`rebase.checkout`, `rebase.abort`.
"""

from dgr_forge.upstream.rebase.commands import abort, onto, resume, start
from dgr_forge.upstream.rebase.state import Onto

__all__ = ["Onto", "abort", "onto", "resume", "start"]
