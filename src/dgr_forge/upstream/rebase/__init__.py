"""Move the patch series to a new upstream commit: a resumable 3-way replay.

The release engineer's flow (DESIGN.md, `rebase`):

    dgr-forge rebase --onto <sha|ref>   # replay; stops with exit 3 on a conflict
    (edit, git add)                     # in the workspace's src/<name>
    dgr-forge rebase --continue         # or: dgr-forge rebase --abort

How it works. The workspace first holds the old pin plus the series (`ensure_patched`),
so every patch is a commit O_i whose parent O_(i-1) is the exact base it was written
against. The replay engine (`upstream.replay`) merges each O_i (3-way, with that base, as
cherry-pick does) onto the new head N_(i-1) in memory and commits it with the patch's own
author, date and message and the forge's fixed committer identity: the same inputs give
the same commits. A pick that changes nothing was taken upstream and is dropped; a
conflict is cherry-picked in the work tree (HEAD moves only then, and at the end) and
stops with the files, the upstream commits that touched them and the next commands.

All progress lives in `<workspace>/rebase.json` (written atomically after every step),
so `--continue` and `--abort` work from a new shell or after a crash. The manifest and
`patches/` are not touched until the whole series has been replayed; then their new
bytes are staged in `<workspace>/rebase/new/` (the old ones in `rebase/old/`) and
written through the one crash-safe series journal (`upstream.series_journal`, the same
one `export` uses) under the root lock. A crash in that window is finished by
`--continue` or undone by `--abort`.

`--dry-run` (the upstream canary) runs the same replay in a scratch workspace under the
workspace's `tmp/` and reports per patch, touching nothing.

Modules: `state` (rebase.json), `gitops` (REV resolution, fetches), `replay` (the engine's
driver), `conflicts`, `finish` (stage + write), `report`, `commands` (start/resume/abort),
`dryrun`, `bump` + `bumpsearch`. Fault points (`DGR_FAULT`): `rebase.replay:NNNN`,
`rebase.commit:NNNN`, `rebase.continue`, `rebase.write`, the journal's `rebase.staged`/
`rebase.swapped`/`rebase.manifest`, `rebase.checkout`, `rebase.abort`.
"""

from dgr_forge.upstream.rebase.commands import abort, in_progress, resume, start
from dgr_forge.upstream.rebase.dryrun import dry_run
from dgr_forge.upstream.rebase.finish import inputs_digest, manifest_text
from dgr_forge.upstream.rebase.gitops import resolve_rev, stale_git_state
from dgr_forge.upstream.rebase.state import (
    OUTCOMES,
    PatchStep,
    Rebase,
    RebaseState,
    load_rebase_state,
    state_path,
)

__all__ = [
    "OUTCOMES",
    "PatchStep",
    "Rebase",
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
