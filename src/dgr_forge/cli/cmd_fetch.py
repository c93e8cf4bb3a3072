"""`fetch` and `status`: the upstream work tree at the pinned commit."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dgr_forge.cli.app import Env, app, run
from dgr_forge.cli.options import Force, Mirror, Offline
from dgr_forge.core.errors import ForgeError

if TYPE_CHECKING:
    from dgr_forge.host.recipes import Recipe
    from dgr_forge.host.worker import WorkerSpec
    from dgr_forge.upstream.manifest import UpstreamManifest

# Library modules are imported inside the commands: every CLI start registers all
# commands, and each should pay only for what it uses.


@app.command()
def fetch(
    ctx: typer.Context,
    mirror: Mirror = None,
    offline: Offline = False,
    force: Force = False,
) -> None:
    """Put the upstream at exactly the pinned commit (shallow when the server allows it).

    `--force` saves local changes as a patch under the workspace's logs/, then discards
    them."""

    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.core.urls import mask
        from dgr_forge.upstream import build_number
        from dgr_forge.upstream.fetch import fetch_locked, resolve_mirror

        url = resolve_mirror(mirror)  # validated before the lock and before any git call
        # the root lock: fetch records the upstream's build number in the manifest
        with env.session(lock=True, root_lock=True, recover=True, refuse_rebase=True) as s:
            forge, m = s.forge, s.manifest
            started = time.monotonic()
            result = fetch_locked(forge, m, env.out, mirror=url, offline=offline, force=force)
            m = build_number.record(forge, m, None if offline else url or m.url, env.out)
        seconds = round(time.monotonic() - started, 3)
        where = forge.rel(result.src_dir)
        if result.changed:
            env.out.answer(f"{m.name}: {where} at {result.commit} ({result.method}, {seconds} s)")
        else:
            env.out.answer(
                f"{m.name}: {where} already at {result.commit} (verified, nothing to do)"
            )
        return {
            "upstream": m.name,
            "url": mask(result.url or m.url),
            "src_dir": str(result.src_dir),
            "commit": result.commit,
            "tree": result.tree,
            "changed": result.changed,
            "method": result.method,
            "shallow": (result.src_dir / ".git" / "shallow").exists(),
            "saved_patch": str(result.saved_patch) if result.saved_patch else None,
            "build_number": m.build_number,
            "seconds": seconds,
        }

    run(ctx, "fetch", body)


def _footprint(env: Env, m: Any) -> Any:  # m: UpstreamManifest
    """The series' footprint in upstream's files (None: a patch file cannot be read)."""
    from dgr_forge.upstream import footprint

    try:
        fp = footprint.footprint(m)
    except ForgeError:  # the series section above already says what is wrong with it
        return None
    for line in footprint.lines(fp):
        env.out.answer(line)
    return fp


@app.command()
def status(ctx: typer.Context) -> None:
    """The upstream pin, the workspace commit, whether it is verified, and local changes."""

    # --json: {"upstream": UpstreamStatus.to_dict()}; later sections (patches, lanes) are
    # added as sibling keys by the helpers that own them.
    def body(env: Env) -> dict[str, Any]:
        from dgr_forge.cli.cmd_patch import status_section
        from dgr_forge.upstream.status import rebase_progress, workspace_status
        from dgr_forge.upstream.workspace import inspect

        with env.session() as s:  # read-only: no lock, no recovery; never waits on a build
            forge, m = s.forge, s.manifest
        rebase = rebase_progress(forge)
        ws = inspect(forge.src_dir(m.name), m.commit, len(m.series))
        st = workspace_status(forge, m, ws, rebasing=rebase is not None)
        out = env.out
        out.answer(f"upstream  {st.name}  {st.url}")
        out.answer(
            f"pin       {st.commit}" + (f"  tree {st.tree}" if st.tree else "  (no tree pinned)")
        )
        number = f"b{m.build_number}" if m.build_number else "unknown (run `dgr-forge fetch`)"
        out.answer(f"build     {number}  (the upstream's own build number at the pin)")
        if not st.present:
            out.answer(
                f"workspace {forge.rel(st.src_dir)}: not fetched yet (run `dgr-forge fetch`)"
            )
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
                out.answer(f"note      {_interrupted(ws.journals, st.src_dir)}")
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
        patch_info = status_section(env, m, ws, have_pin=st.pin_present, rebasing=bool(rebase))
        patch_info["footprint"] = _footprint(env, m)
        lanes = _lanes_section(env, m)
        if rebase is not None:
            out.answer(
                f"rebase    in progress (state in {forge.rel(forge.rebase_state)}): "
                "`dgr-forge rebase --continue` or `--abort`"
            )
            if "patches_total" in rebase:
                stop = f", stopped at {rebase['stopped_at']}" if rebase.get("stopped_at") else ""
                out.answer(
                    f"          onto {str(rebase.get('new_commit'))[:12]} ({rebase.get('onto')}): "
                    f"{rebase['patches_done']} of {rebase['patches_total']} patches replayed"
                    f" (phase {rebase.get('phase')}{stop})"
                )
        return {
            "upstream": st.to_dict(),
            "patches": patch_info,
            "lanes": lanes,
            "rebase_in_progress": rebase is not None,
            "rebase": rebase,
        }

    run(ctx, "status", body)


def _interrupted(journals: frozenset[str], src: Path) -> str:
    from dgr_forge.upstream.workspace import CHECKOUT_JOURNAL, FETCH_JOURNAL, fetch_failure

    if FETCH_JOURNAL in journals:
        cause = fetch_failure(src)
        if cause is not None:  # it failed and said why; a killed one recorded nothing
            return f"the last fetch failed: {cause}; `dgr-forge fetch` tries again"
        return "an interrupted fetch; `dgr-forge fetch` completes it"
    if CHECKOUT_JOURNAL in journals:
        return "an interrupted checkout; `dgr-forge fetch` completes it"
    return "an interrupted patch run; `dgr-forge patch` rolls it back and applies the series"


def _lanes_section(env: Env, m: UpstreamManifest) -> list[dict[str, Any]]:
    """Lanes built in this workspace and their last build (from the build state): a list
    of `{lane, last_build}`, the shape `build` and `lanes` give a lane too. `stale` names
    what moved (pin, series, recipe, worker) since the last report was built."""
    from dgr_forge.lanes.inputs import report_inputs, staleness, with_stale
    from dgr_forge.lanes.state import lane_states

    entries = lane_states(env.forge)
    spec, worker_known = _current_worker(env) if entries else (None, True)
    lanes = []
    for name, entry in entries.items():
        recorded = entry.state.last_build  # this workspace's paths, or None
        last = None
        if recorded is not None:
            current = report_inputs(m, _current_recipe(env, name), spec)
            if not worker_known:
                current["worker"] = "(unreadable)"  # never what a build recorded
            last = {**recorded.public(), **staleness(recorded.inputs, current)}
        lanes.append({"lane": name, "last_build": last})
        if entry.elsewhere:  # never its paths: they are another root's
            env.out.answer(
                f"lane {name:<8} not built in this workspace (its state names another "
                "workspace's files: a copied or moved root); `dgr-forge build` builds it here"
            )
        else:
            shown = last or {}
            env.out.answer(
                f"lane {name:<8} last build {shown.get('time', '?')}: {with_stale(shown)}"
                f"  report {shown.get('report') or '(none)'}"
            )
    if not lanes:
        env.out.answer("lanes: none built in this workspace (run `dgr-forge build`)")
    return lanes


def _current_recipe(env: Env, lane: str) -> Recipe | None:
    """The lane's recipe as it is now; None when it is gone or unreadable (status still
    answers: the last build is then stale by its recipe)."""
    from dgr_forge.host.recipes import load

    path = env.forge.recipes_dir / f"{lane}.toml"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", lane) or not path.is_file():
        return None
    try:
        return load(path, env.forge.rel(path), root=env.forge.root)
    except ForgeError:
        return None


def _current_worker(env: Env) -> tuple[WorkerSpec | None, bool]:
    """The worker the forge root names now, and whether it could be read."""
    from dgr_forge.host import worker

    try:
        return worker.resolve(env.forge, None), True
    except ForgeError:
        return None, False
