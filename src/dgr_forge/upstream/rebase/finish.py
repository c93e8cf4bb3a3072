"""The end of a rebase: the new series staged, written through the journal, reported."""

from __future__ import annotations

import os
import shutil
import stat
import tomllib
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path

from msgspec import UNSET

from dgr_forge.core import fault, fsutil, gitutil
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.gitutil import git, out
from dgr_forge.core.lock import root_lock
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import export, manifest, series_base, series_journal
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.rebase import state as rs
from dgr_forge.upstream.rebase.gitops import patch_ids
from dgr_forge.upstream.rebase.state import Rebase, RebaseState
from dgr_forge.upstream.surface import Recorded, across


def inputs_digest(m: UpstreamManifest) -> str:
    """One sha256 over the manifest and every patch file: the rebase's inputs."""
    # the root's files (a tree a pull request writes): bounded, a patch link its text
    parts = [manifest.read_raw(m.path)]
    for p in sorted(m.patches_dir.glob("*.patch")):  # none where the directory is not
        parts += [p.name.encode(), fsutil.sha256_bytes(_patch_bytes(m, p.name)).encode()]
    return fsutil.sha256_bytes(b"\0".join(parts))


def _patch_bytes(m: UpstreamManifest, name: str) -> bytes:
    return series_journal.patch_bytes(m.patches_dir, name) or b""


def end(forge: Forge, src: Path) -> None:
    """The rebase's refs (REF_PREFIX, in one transaction), journal and state removed."""
    if refs := out(src, "for-each-ref", "--format=%(refname)", rs.REF_PREFIX):
        lines = "".join(f"delete {r}\n" for r in refs.split())
        git(src, "update-ref", "--stdin", input=lines, check=False)
    shutil.rmtree(rs.journal_dir(forge), ignore_errors=True)
    forge.rebase_state.unlink()


def noop_result(m: UpstreamManifest, src: Path, surface: Recorded | None, out_: Reporter) -> Rebase:
    """Already pinned there: every patch unchanged."""
    rows = [rs.RebaseRow(file=e.file, new_file=e.file, outcome="unchanged") for e in m.series]
    moved = None if surface is None else across(src, m.commit, m.commit, surface)
    for line in moved.lines() if moved is not None else []:
        out_.answer(line)
    return Rebase(
        status="noop",
        old_commit=m.commit,
        new_commit=m.commit,
        new_tree=m.tree or "",
        result_tree=m.result_tree,
        patches=rows,
        counts=rs.counts_of(rows),
        report=None,
        report_markdown=None,
        surface=UNSET if moved is None else moved,
    )


def stage(forge: Forge, state: RebaseState, m: UpstreamManifest) -> None:
    """Compute the new series and manifest bytes; stage old and new copies in the journal."""
    src = Path(state.src_dir)
    # beside the export: the new pin's build number (a commit-only fetch from a network
    # server), then the round trip's check while the outcomes and the manifest are made;
    # nothing is written before all are done
    with ThreadPoolExecutor(2) as pool:
        number = pool.submit(_build_number, forge, src, state, m)
        # (HEAD may be behind state.head: the replay merges in memory; finish checks out)
        rendered = export.compute_series(
            src, state.new_commit, head=state.head, tmp_root=forge.tmp_dir
        )
        kept = [s for s in state.patches if s.new_commit is not None]
        verified = pool.submit(export.verify_round_trip, src, state.new_commit, rendered)
        made = [p.commit for p in rendered] == [s.new_commit for s in kept]
        new_manifest = ""
        if made:  # each kept patch's new file and outcome; the new manifest's text
            changed: list[tuple[rs.PatchStep, str]] = []
            for step, p in zip(kept, rendered, strict=True):
                step.new_file = p.file
                if step.outcome == "resolved":
                    continue
                if p.data == _patch_bytes(m, step.file):
                    step.outcome = "unchanged"
                else:
                    changed.append((step, p.commit))
            # the same change on another base (refreshed) or not (merged)
            ids = patch_ids(src, [c for s, made_as in changed for c in (s.old_commit, made_as)])
            for step, made_as in changed:
                step.outcome = "refreshed" if ids[step.old_commit] == ids[made_as] else "merged"
            from dgr_forge.upstream import manifest_edit  # tomlkit: only when writing

            # the patch helper's editor (comments and key order kept); the new pin's build number
            # as counted (None: not countable here; the old one dropped, `fetch` counts it)
            new_manifest = manifest_edit.updated_text(
                manifest.read_raw(m.path).decode("utf-8"),
                rendered,
                # the tree of state.head: the last exported commit's (none left: the new pin)
                rendered[-1].tree if rendered else state.new_tree,
                upstream_commit=state.new_commit,
                upstream_tree=state.new_tree,
                upstream_url=state.new_url if state.new_url != m.url else None,
                upstream_build_number=number.result(),
            )
        verified.result()
    if not made:
        raise OperationFailed(
            f"export saw {len(rendered)} commits over {state.new_commit[:12]}, the replay "
            f"made {len(kept)}",
            hint="`dgr-forge rebase --abort` restores the workspace; then retry",
        )
    jdir = rs.journal_dir(forge)
    old, new = jdir / "old" / "patches", jdir / "new" / "patches"
    shutil.rmtree(jdir, ignore_errors=True)
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    # the old patch files linked (the series journal never rewrites a file in place), so
    # are new ones with the same bytes; the rest in one batch, synced before any is in
    # place (a flush per file costs a long series more than its replay)
    olds = {p.name: _patch_bytes(m, p.name) for p in sorted(m.patches_dir.glob("*.patch"))}
    linked = {name for name in olds if _link(m.patches_dir / name, old / name)}
    same = {olds[name]: name for name in linked}  # a renumbered patch keeps its bytes
    for p in rendered:
        if (was := same.get(p.data)) is not None:
            _link(m.patches_dir / was, new / p.file)
    written = [(old / n, d) for n, d in olds.items() if n not in linked]
    written += [(new / p.file, p.data) for p in rendered if not (new / p.file).exists()]
    fsutil.atomic_write_many(
        [
            (jdir / "old" / "manifest.toml", manifest.read_raw(m.path)),
            *written,
            (jdir / "new" / "manifest.toml", new_manifest.encode("utf-8")),
        ]
    )


def _link(path: Path, dest: Path) -> bool:
    with suppress(OSError):
        if stat.S_ISREG(path.lstat().st_mode):
            os.link(path, dest, follow_symlinks=False)
            return True
    return False


def _build_number(forge: Forge, src: Path, state: RebaseState, m: UpstreamManifest) -> int | None:
    """The upstream's build number at the new pin (issue 29), None when not counted."""
    if state.new_commit == m.commit:
        return m.build_number
    if state.canary:  # a dry run's scratch forge writes no manifest anyone keeps
        return None
    cache = rs.journal_dir(forge) / _NUMBER
    held = read_tree_file(cache.parent, cache.name, hint=_NUMBER_HINT, limit=128, missing_ok=True)
    commit, _, number = (held or b"").decode("ascii", "replace").strip().partition(" ")
    if commit == state.new_commit and number.isdigit():
        return int(number)  # counted while the rebase's start replayed
    from dgr_forge.upstream import build_number

    return build_number.count(src, state.fetch_url, state.new_commit, forge.tmp_dir)[0]


_NUMBER = "build-number"  # in the rebase journal: "<new pin> <its count>"
_NUMBER_HINT = "`dgr-forge rebase --abort` removes the rebase's journal"


def count_build_number(forge: Forge, state: RebaseState, m: UpstreamManifest) -> None:
    """The new pin's build number counted beside the start's replay and kept in the
    journal: a `--continue` does not count it again."""
    number = _build_number(forge, Path(state.src_dir), state, m)
    if number is not None and number != m.build_number:
        cache = rs.journal_dir(forge) / _NUMBER
        cache.parent.mkdir(parents=True, exist_ok=True)
        fsutil.atomic_write_bytes(cache, f"{state.new_commit} {number}\n".encode(), durable=False)


def staged_patches_dir(forge: Forge) -> Path:
    # read from the staged old manifest: the live one may be half-written
    data = tomllib.loads((rs.journal_dir(forge) / "old" / "manifest.toml").read_text("utf-8"))
    rel = data.get("patches", {}).get("dir") or f"patches/{data['upstream']['name']}"
    return forge.root / rel


def write_side(forge: Forge, side: str, out_: Reporter) -> None:
    """Make patches/ and the manifest equal to the journal's `side` (old or new) through
    the series journal, under the root lock; idempotent (a killed write rolled forward)."""
    jdir = rs.journal_dir(forge) / side
    wanted = {p.name: p.read_bytes() for p in sorted((jdir / "patches").glob("*.patch"))}
    data = (jdir / "manifest.toml").read_bytes()
    with root_lock(forge.root, out_):
        series_journal.recover(forge.root, out_)
        series_journal.write(
            forge.root,
            staged_patches_dir(forge),
            wanted,
            forge.upstream_manifest,
            data if manifest.read_raw(forge.upstream_manifest) != data else None,
            points="rebase",
            out=out_,
            linked=jdir / "patches",
        )


def finish(
    forge: Forge,
    state: RebaseState,
    out_: Reporter,
    m: UpstreamManifest | None,
    surface: Recorded | None = None,
) -> Rebase:
    """Stage (unless a killed run did: phase "write", `m` may be None), write, check out,
    report (with `surface`'s moves old -> new pin)."""
    src = Path(state.src_dir)
    if state.phase != "write":
        assert m is not None
        # the phase turns to "write" only once the journal is complete: from then on a
        # crash is finished (or undone) from the staged copies
        stage(forge, state, m)
        state.phase = "write"
        rs.save_state(forge, state)
    pdir = staged_patches_dir(forge)  # the series' directory, which a rebase never moves
    write_side(forge, "new", out_)
    fault.point("rebase.checkout")
    git(src, "checkout", "-q", "-f", "--detach", state.head)
    # the workspace holds the re-exported series: the base of its next export
    pinned = manifest.load(forge.upstream_manifest, forge.root)
    # the replay's commits and the tree the manifest records for the last: no git asked
    own = tuple(s.new_commit for s in state.patches if s.new_commit is not None)
    if len(own) != (n := len(pinned.series)):
        listed = out(src, "rev-list", "--first-parent", f"--max-count={n}", state.head, "--")
        own = tuple(reversed(listed.split()))
    series_base.record(src, series_base.SeriesBase.of(pinned, own))
    result_tree = pinned.result_tree or gitutil.tree_of(src, state.head)
    moved = None if surface is None else across(src, state.old_commit, state.new_commit, surface)
    report_json, report_md = rs.write_report(forge, state, result_tree, moved)
    end(forge, src)
    rows = rs.rows_of(state)
    out_.table(
        f"rebase {state.old_commit[:12]} -> {state.new_commit[:12]}",
        ["patch", "now", "outcome"],
        [(r.file, r.new_file or "-", r.outcome) for r in rows],
        empty="no patches replayed",
    )
    out_.answer(rs.summary(rs.counts_of(rows)))
    out_.answer(f"report: {report_md}")
    out_.answer(
        f"manifest re-pinned to {state.new_commit}; commit "
        f"{forge.rel(forge.upstream_manifest)} and {forge.rel(pdir)}/"
    )
    for line in moved.lines() if moved is not None else []:
        out_.answer(line)
    return Rebase(
        status="done",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        new_tree=state.new_tree,
        result_tree=result_tree,
        patches=rows,
        counts=rs.counts_of(rows),
        report=str(report_json),
        report_markdown=str(report_md),
        surface=UNSET if moved is None else moved,
    )
