"""`fetch` and `status`: the upstream work tree at the pinned commit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dgr_forge.cli.app import Env, app, command
from dgr_forge.cli.options import FetchForce, Mirror, Offline
from dgr_forge.core.errors import ForgeError

if TYPE_CHECKING:
    from dgr_forge.lanes.status import Status
    from dgr_forge.upstream.fetch import Fetch
    from dgr_forge.upstream.series import Footprint


@command(app)
def fetch(
    env: Env, mirror: Mirror = None, offline: Offline = False, force: FetchForce = False
) -> Fetch:
    """Put the upstream at exactly the pinned commit (shallow when the server allows it).

    `--force` saves local changes as a patch under the workspace's logs/, then discards
    them."""
    from dgr_forge.upstream.fetch import fetch, resolve_mirror

    url = resolve_mirror(mirror)  # validated before the lock and before any git call
    # the root lock: fetch records the upstream's build number in the manifest
    with env.session(lock=True, root_lock=True, recover=True, refuse_rebase=True) as s:
        result = fetch(s.forge, s.manifest, env.out, mirror=url, offline=offline, force=force)
    where = s.forge.rel(result.src_dir)
    done = f"at {result.commit} ({result.method}, {result.seconds} s)"
    if not result.changed:
        done = f"already at {result.commit} (verified, nothing to do)"
    env.out.answer(f"{result.upstream}: {where} {done}")
    return result


@command(app)
def status(env: Env) -> Status:
    """The upstream pin, the workspace commit, whether it is verified, and local changes."""
    import msgspec

    from dgr_forge.lanes.status import Status, built_lanes
    from dgr_forge.upstream.series import footprint, footprint_lines
    from dgr_forge.upstream.status import rebase_progress, series_status, workspace_status
    from dgr_forge.upstream.workspace import CHECKOUT_JOURNAL, FETCH_JOURNAL, fetch_failure, inspect

    with env.session() as s:  # read-only: no lock, no recovery; never waits on a build
        forge, m = s.forge, s.manifest
    rebase = rebase_progress(forge)
    ws = inspect(forge.src_dir(m.name), m.commit, len(m.series))
    st = workspace_status(m, ws, rebasing=rebase is not None)
    out = env.out
    out.answer(f"upstream  {st.name}  {st.url}")
    pinned = f"  tree {st.tree}" if st.tree else "  (no tree pinned)"
    out.answer(f"pin       {st.commit}{pinned}")
    number = f"b{m.build_number}" if m.build_number else "unknown (run `dgr-forge fetch`)"
    out.answer(f"build     {number}  (the upstream's own build number at the pin)")
    if not st.present:
        out.answer(f"workspace {forge.rel(st.src_dir)}: not fetched yet (run `dgr-forge fetch`)")
    else:
        head = st.head or "(nothing checked out)"
        extra = f"  (pin + {st.commits_on_top} commits)" if st.commits_on_top else ""
        out.answer(f"workspace {forge.rel(st.src_dir)} at {head}{extra}")
        commit = "yes" if st.commit_verified else "no"
        tree = {True: "yes", False: "NO (mismatch)", None: "not pinned"}[st.tree_verified]
        out.answer(
            f"verified  {'yes' if st.verified else 'no'}  (commit: {commit}, tree: {tree}"
            f"{', shallow' if st.shallow else ''})"
        )
        if st.interrupted:
            note = (
                "an interrupted patch run; `dgr-forge patch` rolls it back and applies the series"
            )
            if CHECKOUT_JOURNAL in ws.journals:
                note = "an interrupted checkout; `dgr-forge fetch` completes it"
            if FETCH_JOURNAL in ws.journals:
                note = "an interrupted fetch; `dgr-forge fetch` completes it"
                if (cause := fetch_failure(st.src_dir)) is not None:  # a killed one recorded none
                    note = f"the last fetch failed: {cause}; `dgr-forge fetch` tries again"
            out.answer(f"note      {note}")
        if st.local_changes:
            out.answer(f"local changes ({len(st.local_changes)}):")
            for change in st.local_changes:
                out.answer(f"  {change.change:<12} {change.path}")
        else:
            out.answer("local changes: none")
        if st.ignored:  # `build` refuses them (exit 3): compiled, yet not the pin
            out.answer(f"ignored files ({len(st.ignored)}), which `build` refuses:")
            for path in st.ignored:
                out.answer(f"  {path}")
    info = series_status(forge, m, ws, have_pin=st.pin_present, rebasing=rebase is not None)
    if rows := [(p.file, p.state, p.detail) for p in info.series]:
        out.table("patches", ["patch", "state", "detail"], rows)
    else:
        out.answer("patches: none (empty series)")
    if info.local_edits.local_commits:
        out.answer(
            f"local commits on top of the series: {len(info.local_edits.local_commits)} "
            "(`dgr-forge export` turns them into patches)"
        )
    if info.moved_since_patched:
        out.answer(
            "the series on disk moved since this workspace was patched "
            f"({info.moved_since_patched.describe()}): `dgr-forge patch` brings it up to date"
        )
    if info.operation_in_progress:
        out.answer(f"in progress in the workspace: {info.operation_in_progress}")
    try:  # the series' footprint in upstream's files
        fp: Footprint | None = footprint(m)
    except ForgeError:  # the series section above already says what is wrong with it
        fp = None
    for line in footprint_lines(fp) if fp is not None else ():
        out.answer(line)
    # the lanes built in this workspace and their last build, as `lanes` gives them
    lanes = built_lanes(forge, m)
    for row, elsewhere in lanes:
        last = row.last_build
        out.answer(
            f"lane {row.lane:<8} not built in this workspace (its state names another "
            "workspace's files: a copied or moved root); `dgr-forge build` builds it here"
            if elsewhere  # never its paths: they are another root's
            else f"lane {row.lane:<8} last build {last.time if last else '?'}: "
            f"{last.line() if last else 'never'}  report {(last and last.report) or '(none)'}"
        )
    if not lanes:
        out.answer("lanes: none built in this workspace (run `dgr-forge build`)")
    if rebase is not None:
        out.answer(
            f"rebase    in progress (state in {forge.rel(forge.rebase_state)}): "
            "`dgr-forge rebase --continue` or `--abort`"
        )
        if rebase.patches_total:
            stop = f", stopped at {rebase.stopped_at}" if rebase.stopped_at else ""
            out.answer(
                f"          onto {str(rebase.new_commit)[:12]} ({rebase.onto}): "
                f"{rebase.patches_done} of {rebase.patches_total} patches replayed"
                f" (phase {rebase.phase}{stop})"
            )
    return Status(
        upstream=st,
        patches=msgspec.structs.replace(info, footprint=fp),
        lanes=[row for row, _ in lanes],
        rebase_in_progress=rebase is not None,
        rebase=rebase,
    )
