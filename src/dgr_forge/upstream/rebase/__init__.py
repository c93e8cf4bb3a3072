"""Move the patch series to a new upstream commit: a resumable 3-way replay.

The release engineer's flow (DESIGN.md, `rebase`):

    dgr-forge rebase --onto <sha|ref>   # replay; stops with exit 3 on a conflict
    (edit, git add)                     # in the workspace's src/<name>
    dgr-forge rebase --continue         # or: dgr-forge rebase --abort

How it works. The workspace first holds the old pin plus the series (`ensure_patched`),
so every patch is a commit O_i whose parent O_(i-1) is the exact base it was written
against. Each O_i is cherry-picked (`--no-commit`, a real 3-way merge with that base)
onto the new head N_(i-1) and committed with plumbing, with the patch's own author,
date and message and the forge's fixed committer identity: the same inputs give the
same commits. A pick that changes nothing was taken upstream and is dropped; a conflict
stops with the files, the upstream commits that touched them and the next commands.
Where one merge of the whole series gives each patch exactly its own merge (`batch`: a
path upstream changed that one patch changes, every other path the patch's own), the
picks are planned from that one merge and committed by one fast-import, to the same
commits; the per-patch replay takes over where that does not hold, writing its commits
(and each merge's scratch base) through one long-running writer (`commits`). The merges run in
memory (merge-tree): HEAD and the work tree move only for a cherry-pick that needs them
(to show a conflict) and at the end.

All progress lives in `<workspace>/rebase.json` (written atomically after every step or
batch of steps),
so `--continue` and `--abort` work from a new shell or after a crash. The manifest and
`patches/` are not touched until the whole series has been replayed; then their new
bytes are staged in `<workspace>/rebase/new/` (the old ones in `rebase/old/`) and
written through the one crash-safe series journal (`upstream.series_journal`, the same
one `export` uses) under the root lock. A crash in that window is finished by
`--continue` or undone by `--abort`.

`--dry-run` (the upstream canary) runs the same replay in a scratch workspace under the
workspace's `tmp/` and reports per patch, touching nothing.

Modules: `state` (rebase.json), `gitops` (git plumbing, REV resolution), `replay`, `batch`,
`conflicts`, `finish` (stage + write), `report`, `commands` (start/resume/abort),
`dryrun`. Fault points (`DGR_FAULT`): `rebase.replay:NNNN`, `rebase.commit:NNNN`,
`rebase.continue`, `rebase.write`, the journal's `rebase.staged`/`rebase.swapped`/
`rebase.manifest`, `rebase.checkout`, `rebase.abort`.
"""

from dgr_forge.upstream.rebase.commands import abort, in_progress, resume, start
from dgr_forge.upstream.rebase.dryrun import dry_run
from dgr_forge.upstream.rebase.finish import inputs_digest, manifest_text
from dgr_forge.upstream.rebase.gitops import resolve_rev, stale_git_state
from dgr_forge.upstream.rebase.state import (
    OUTCOMES,
    PatchStep,
    RebaseResult,
    RebaseState,
    load_rebase_state,
    state_path,
)

__all__ = [
    "OUTCOMES",
    "PatchStep",
    "RebaseResult",
    "RebaseState",
    "abort",
    "dry_run",
    "in_progress",
    "inputs_digest",
    "load_rebase_state",
    "manifest_text",
    "resolve_rev",
    "resume",
    "stale_git_state",
    "start",
    "state_path",
]
