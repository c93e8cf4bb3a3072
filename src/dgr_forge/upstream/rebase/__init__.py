"""Move the patch series to a new upstream commit: a resumable 3-way replay.

    dgr-forge rebase --onto <sha|ref>   # replay; stops with exit 3 on a conflict
    (edit, git add)                     # in the workspace's src/<name>
    dgr-forge rebase --continue         # or: dgr-forge rebase --abort

The workspace first holds the old pin plus the series (`ensure_patched`), so each patch is
a commit O_i on the exact base it was written against. The replay engine
(`upstream.replay`) merges each onto the new head in memory and commits it with the
patch's author, date and message and the forge's fixed committer (the same inputs give
the same commits); an empty pick was taken upstream and is dropped; a conflict is
cherry-picked in the work tree (HEAD moves only then, and at the end) and stops.

All progress lives in `<workspace>/rebase.json` (written after every step), so
`--continue` and `--abort` work from a new shell or after a crash. The manifest and
`patches/` change only once the whole series is replayed: their new bytes are staged in
`<workspace>/rebase/new/` (the old in `rebase/old/`) and written through the crash-safe
series journal (`upstream.series_journal`, `export`'s) under the root lock.
`--dry-run` runs the same replay in a scratch workspace under `tmp/`, touching nothing.

Modules: `state` (rebase.json, the results), `gitops` (REV, fetches), `replay` (the
engine's driver), `conflicts`, `finish` (stage + write), `report`, `commands`, `bump` +
`bumpsearch`. Fault points (`DGR_FAULT`): `rebase.replay:NNNN`, `rebase.commit:NNNN`,
`rebase.continue`, `rebase.write`, the journal's `rebase.staged`/`rebase.swapped`/
`rebase.manifest`, `rebase.checkout`, `rebase.abort`.
"""

from dgr_forge.upstream.rebase.commands import abort, onto, resume, start
from dgr_forge.upstream.rebase.state import Onto

__all__ = ["Onto", "abort", "onto", "resume", "start"]
