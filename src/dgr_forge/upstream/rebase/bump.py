"""`dgr-forge bump`: the roller. Move the pin to the newest upstream commit (up to REV) onto
which the whole series replays cleanly; exit 3 when a patch stopped it short.

`TreeReplay` probes a candidate by the replay engine in a scratch repository; `search`
bisects, verified by a real replay (docs/bump.md, 'What it does').
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from msgspec import UNSET, UnsetType

from dgr_forge.core.errors import BadInput, ExitCode, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.gitutil import git, out, rev_parse
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import COMMIT, Form, Nested, d
from dgr_forge.core.urls import check_url, mask
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import ensure_patched
from dgr_forge.upstream.rebase import commands
from dgr_forge.upstream.rebase import state as rs
from dgr_forge.upstream.rebase.commands import start
from dgr_forge.upstream.rebase.finish import stage
from dgr_forge.upstream.rebase.gitops import check_rev, ensure_history, resolve_rev
from dgr_forge.upstream.rebase.replay import explain
from dgr_forge.upstream.replay import Replay, subject_of
from dgr_forge.upstream.series_journal import borrow_objects, scratch_dir
from dgr_forge.upstream.surface import Recorded, SurfaceReport, across
from dgr_forge.upstream.workspace import git_dir

BATCH_REF = "refs/dgr/bump/batch"  # the replays' one merge for many (a scratch repository)


def max_replays(candidates: int) -> int:
    """ceil(log2 n) + 2: the target, the bisection, the verifying replay."""
    return math.ceil(math.log2(candidates)) + 2 if candidates > 1 else 2


def candidates(src: Path, pin: str, target: str) -> list[str]:
    """The first-parent commits after the pin up to the target, oldest first."""
    if target == pin:
        return []
    if git(src, "merge-base", "--is-ancestor", pin, target, check=False).returncode != 0:
        raise BadInput(
            f"--to {target[:12]} is not a descendant of the pin {pin[:12]} (it is older, or on "
            "another branch): bump only moves the pin forward",
            hint="use `dgr-forge rebase --onto REV` to move the pin anywhere else",
            details={"pin": pin, "target": target},
        )
    return out(
        src, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{pin}..{target}"
    ).split()


@dataclass(frozen=True)
class Break:
    """Why a candidate is not clean: the first patch that conflicts onto it."""

    commit: str
    patch: str
    files: list[str]
    upstream_commits: list[rs.UpstreamCommit]

    @staticmethod
    def of(commit: str, step: rs.PatchStep) -> Break:
        return Break(commit, step.file, list(step.files), rs.unique(step.upstream_commits))


class TreeReplay:
    """Dry-run replays of the series (`patches`: (file, O_i) in order) onto candidates, in
    a scratch repository `repo`; one engine for all (`with` it). A break's upstream commits
    are named only when asked (`explained`): the search needs the first's alone."""

    def __init__(self, repo: Path, pin: str, patches: list[tuple[str, str]]) -> None:
        self.repo, self.pin, self.patches = repo, pin, patches
        self.engine = Replay(repo, [c for _, c in patches], git_dir(repo), batch_ref=BATCH_REF)
        self._merged: dict[str, tuple[str, str]] = {}  # candidate -> (merged tree, head)

    def __call__(self, candidate: str) -> Break | None:
        """None when the whole series replays cleanly onto `candidate`."""
        head = candidate
        for step in self.engine.onto(candidate):
            file = self.patches[step.index][0]
            if step.kind == "worktree":
                raise OperationFailed(
                    f"git merge-tree failed replaying {file} onto {candidate[:12]}: "
                    f"{step.error or 'a merge commit in the series'}",
                    hint="git 2.38 or newer is needed (`git --version`)",
                )
            if step.kind == "conflict":
                assert step.tree is not None
                self._merged[candidate] = (step.tree, head)
                return Break(candidate, file, step.files, [])
            head = step.commit or head
        return None

    def explained(self, b: Break) -> Break:
        """`b` with the upstream commits on its lines, as `rebase` names a conflict."""
        if b.commit not in self._merged:
            return b  # a real replay's break: named already
        merged, head = self._merged[b.commit]
        found = explain(self.repo, self.pin, b.commit, head, b.files, merged)
        return replace(b, upstream_commits=rs.unique(c for f in b.files for c in found.upstream[f]))


@dataclass
class SearchResult:
    newest_clean: int  # index into the candidates, -1 = the pin itself
    first_breaking: int | None
    breaks: dict[int, Break]
    replays: int  # dry-run probes + verifying replays
    verified: Any = None  # what the successful verifying replay returned


def search(
    n: int,
    probe: Callable[[int], Break | None],
    verify: Callable[[int], tuple[Break | None, Any]],
    out_: Reporter,
    real_probe: Callable[[int], Break | None] | None = None,
) -> SearchResult:
    """Candidates 0..n-1 (oldest first; -1 the pin, clean). The target first (the nightly
    case costs one probe), else bisection; the answer is replayed for real (`verify`).
    When that conflicts the probe was wrong: it counts as broken and the search narrows
    below it, from then on with `real_probe` (its other verdicts dropped)."""
    verdict: dict[int, Break | None] = {-1: None}
    replays = 0

    def test(i: int) -> bool:
        nonlocal replays
        if i not in verdict:
            replays += 1
            found = verdict[i] = probe(i)
            state = "clean" if found is None else f"breaks ({found.patch})"
            out_.info(f"  replay {replays}: candidate {i + 1}/{n}: {state}")
        return verdict[i] is None

    hi: int | None = None if test(n - 1) else n - 1
    while True:
        lo = max(i for i, v in verdict.items() if v is None and (hi is None or i < hi))
        # a clean verdict above a broken one contradicts monotonicity: ignore it (the
        # oldest broken bounds the search, so the answer is never past a known break)
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if test(mid) else (lo, mid)
        if lo < 0:
            return SearchResult(-1, hi, _breaks(verdict), replays)
        replays += 1
        broken, verified = verify(lo)
        if broken is None:
            return SearchResult(lo, hi, _breaks(verdict), replays, verified)
        out_.warn(
            f"the real replay onto candidate {lo + 1} conflicts ({broken.patch}) where the "
            "dry run found it clean: narrowing the search below it"
            + (" with real replays" if real_probe is not None and probe is not real_probe else "")
        )
        if real_probe is not None and probe is not real_probe:
            probe = real_probe
            verdict = {-1: None}
        verdict[lo] = broken
        hi = lo


def _breaks(verdict: dict[int, Break | None]) -> dict[int, Break]:
    return {i: b for i, b in verdict.items() if b is not None}


class FirstBreaking(Nested, kw_only=True):
    """the first commit that breaks a patch"""

    commit: Annotated[str, COMMIT]
    patch: Annotated[str, d("the patch it breaks")]
    files: Annotated[list[str], d("the conflicted files")]
    upstream_commits: Annotated[
        list[rs.UpstreamCommit], d("the upstream commits that touched their conflicted lines")
    ]
    subject: Annotated[str | None, d("its subject")]


class Dropped(Nested, kw_only=True):
    """a patch upstreamed on the way"""

    file: Annotated[str, d("the patch file")]
    upstream_commits: Annotated[list[rs.UpstreamCommit], d("the upstream commits that took it")]


class Bump(Form, kw_only=True):
    """`bump`'s result (its `--json` object, and what its Markdown and console say)."""

    title = "bump"
    may_fail = True
    note = "exit 0 when the target was reached, 3 when a patch stopped it short"

    status: Annotated[str, d("`noop`, `dry-run`, `bumped`, `stopped`")]
    upstream: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("masked")]
    to: Annotated[str, d("`--to` (or the default branch), as given")]
    pin: Annotated[str, d("the pin before")]
    target: Annotated[str, d("what `--to` resolved to")]
    target_subject: Annotated[str | None, d("its subject")]
    newest_clean: Annotated[str, d("the newest commit the series replays onto cleanly")]
    newest_clean_subject: Annotated[str | None, d("its subject")]
    candidates: Annotated[int, d("first-parent commits between pin and target")]
    taken: Annotated[int, d("how many of them the pin moved by")]
    first_breaking: FirstBreaking | None
    replays: Annotated[int, d("replays run")]
    max_replays: Annotated[int, d("⌈log2 candidates⌉ + 2")]
    moved: Annotated[bool, d("the pin moved (false with `--dry-run`)")]
    dry_run: Annotated[bool, d("`--dry-run`")]
    dropped: Annotated[list[Dropped], d("upstreamed on the way")]
    patches: Annotated[list[rs.RebaseRow], d("the verifying replay's rows")]
    rebase_report: Annotated[str | None, d("the rebase report written")]
    rebase_report_markdown: Annotated[str | None, d("its Markdown")]
    surface: SurfaceReport | UnsetType = UNSET  # the worker surface, pin -> newest clean
    report_markdown: Annotated[str | None, d("`--report`: the bump's Markdown")]

    @property
    def reached(self) -> bool:
        return self.newest_clean == self.target

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.reached else ExitCode.NEEDS_HUMAN


class Verified(NamedTuple):
    """What the verifying replay gave: its rows, reports and Markdown table."""

    patches: list[rs.RebaseRow]
    table: str
    report: str | None = None
    report_markdown: str | None = None


def bump(
    forge: Forge,
    out_: Reporter,
    m: UpstreamManifest,
    to: str | None = None,
    *,
    dry_run: bool = False,
    report: Path | None = None,
    mirror: str | None = None,
    surface: Recorded | None = None,  # asked by the command: the worker surface's moves
) -> Bump:
    target_md = commands.check_report_path(report, forge) if report is not None else None
    rev = check_rev(to, "--to") if to is not None else "HEAD"
    commands.reject_in_progress(forge)
    check_url(m.url, f"{forge.rel(m.path)}: [upstream] url")
    url = mirror or m.url
    own_src = forge.src_dir(m.name)
    label = "--to" if to is not None else "the upstream's default branch"
    sha = resolve_rev(url, rev, own_src if own_src.is_dir() else None, label)
    if sha == m.commit:
        return _noop(m, rev, dry_run, target_md, out_)
    with scratch_dir(forge.tmp_dir, "dgr-bump-") as tmp:
        # a scratch forge loads the copy it made (the caller loaded this forge's, under the lock)
        work, wm = commands.scratch_forge(forge, m, tmp, out_) if dry_run else (forge, m)
        patched = ensure_patched(work, wm, out_, mirror=mirror)
        src = patched.src_dir
        commits = commands.patch_commits(src, m, patched.head_commit)
        series = [(e.file, c) for e, (c, _) in zip(m.series, commits, strict=True)]
        # an abbreviated id names a commit of the default branch's history after the pin
        want = sha or resolve_rev(url, "HEAD", src, "--to") or ""
        ensure_history(src, url, m.commit, want, out_, to=want)
        target = rev_parse(src, want) if sha else _abbreviated(src, m, want, rev)
        if target is None:
            raise BadInput(f"--to {rev}: {sha} is not a commit (nor a tag of one)")
        if target == m.commit:
            return _noop(m, rev, dry_run, target_md, out_)
        chain = candidates(src, m.commit, target)
        borrow_objects(src, tmp / "replay", Reporter(quiet=True))
        probe = TreeReplay(tmp / "replay", m.commit, series)
        out_.step(
            f"bisecting {len(chain)} first-parent commit(s) {m.commit[:12]}..{target[:12]} "
            f"(at most {max_replays(len(chain))} replays of {len(m.series)} patch(es))"
        )
        with probe.engine:
            found = search(
                len(chain),
                lambda i: probe(chain[i]),
                lambda i: _verify(work, wm, out_, chain[i], dry_run, mirror),
                out_,
                lambda i: _canary(work, wm, chain[i], mirror)[0],
            )
            first = None
            if found.first_breaking is not None:
                b = probe.explained(found.breaks[found.first_breaking])
                first = FirstBreaking(**vars(b), subject=subject_of(src, b.commit))
        newest = chain[found.newest_clean] if found.newest_clean >= 0 else m.commit
        verified: Verified = found.verified or Verified([], "")
        rows = verified.patches
        result = _bump(
            m,
            rev,
            dry_run,
            status="dry-run" if dry_run else ("bumped" if newest != m.commit else "stopped"),
            target=target,
            target_subject=subject_of(src, target),
            newest_clean=newest,
            newest_clean_subject=subject_of(src, newest),
            candidates=len(chain),
            taken=found.newest_clean + 1,
            first_breaking=first,
            replays=found.replays,
            max_replays=max_replays(len(chain)),
            moved=newest != m.commit and not dry_run,
            dropped=[
                Dropped(file=r.file, upstream_commits=r.upstream_commits or [])
                for r in rows
                if r.outcome == "dropped"
            ],
            patches=rows,
            rebase_report=verified.report,
            rebase_report_markdown=verified.report_markdown,
        )
        # the worker's recorded surface between the pin and where it moves (or would)
        if surface is not None:
            result.surface = across(src, m.commit, result.newest_clean, surface)
    return _finish(result, verified.table, target_md, out_)


def _abbreviated(src: Path, m: UpstreamManifest, head: str, rev: str) -> str:
    """An abbreviated --to: the one first-parent commit from the pin on that starts with it."""
    found = [c for c in [m.commit, *candidates(src, m.commit, head)] if c.startswith(rev.lower())]
    if len(found) != 1:
        raise BadInput(
            f"--to {rev} (an abbreviated commit id): "
            + (
                f"ambiguous ({len(found)} commits start with it)"
                if found
                else f"no first-parent commit of {mask(m.url)}'s default branch after the "
                f"pin {m.commit[:12]} starts with it"
            ),
            hint="pass more digits, the full 40-hex commit id, a tag or a branch",
        )
    return found[0]


def _canary(
    work: Forge, wm: UpstreamManifest, commit: str, mirror: str | None, *, rows: bool = False
) -> tuple[Break | None, Verified | None]:
    """A real replay onto `commit` that changes nothing (the canary's), then undone; with
    `rows` (the dry run's verifying replay) the rows and their table when it is clean
    (the search ends there, the scratch forge is removed whole)."""
    done = False
    try:
        start(work, Reporter(quiet=True), wm, rs.Onto(rev=commit, mirror=mirror), canary=True)
        if (state := rs.load_rebase_state(work)) is None:
            raise OperationFailed(f"the replay onto {commit[:12]} left no rebase state")
        if (bad := next((s for s in state.patches if s.outcome == "conflict"), None)) is not None:
            return Break.of(commit, bad), None
        if not rows:
            return None, None
        stage(work, state, wm)
        table = rs.render_markdown(state, None, rs.rows_of(state), "Replay (dry run)")
        done = True
        return None, Verified(rs.rows_of(state), table)
    finally:
        if not done and rs.load_rebase_state(work) is not None:  # ready for the next replay
            commands.abort(work, Reporter(quiet=True))


def _verify(
    work: Forge,
    wm: UpstreamManifest,
    out_: Reporter,
    commit: str,
    dry_run: bool,
    mirror: str | None,
) -> tuple[Break | None, Verified | None]:
    """The real replay onto `commit` (with --dry-run the canary's); a conflict is a Break."""
    out_.step(f"replaying the series onto {commit[:12]}" + (" (canary)" if dry_run else ""))
    if dry_run:
        return _canary(work, wm, commit, mirror, rows=True)
    try:
        result = start(work, out_, wm, rs.Onto(rev=commit, mirror=mirror))
    except NeedsHuman:
        state = rs.load_rebase_state(work)
        if state is None or state.phase != "conflict":
            raise
        commands.abort(work, out_)
        return Break.of(commit, state.patches[state.next]), None
    md = Path(result.report_markdown) if result.report_markdown else None
    table = md.read_text(encoding="utf-8") if md and md.is_file() else ""
    return None, Verified(result.patches, table, result.report, result.report_markdown)


def _bump(m: UpstreamManifest, rev: str, dry_run: bool, **fields: Any) -> Bump:
    return Bump(
        upstream=m.name,
        url=mask(m.url),
        to=rev,
        pin=m.commit,
        dry_run=dry_run,
        report_markdown=None,
        **fields,
    )


def _noop(
    m: UpstreamManifest, rev: str, dry_run: bool, target_md: Path | None, out_: Reporter
) -> Bump:
    out_.answer(f"the pin {m.commit[:12]} already is {rev}: nothing to bump")
    none = ("target_subject", "newest_clean_subject", "first_breaking", "rebase_report")
    result = _bump(
        m,
        rev,
        dry_run,
        status="noop",
        target=m.commit,
        newest_clean=m.commit,
        moved=False,
        dropped=[],
        patches=[],
        rebase_report_markdown=None,
        **dict.fromkeys(none),
        **dict.fromkeys(("candidates", "taken", "replays", "max_replays"), 0),
    )
    return _finish(result, "", target_md, out_)


def _finish(result: Bump, table: str, target_md: Path | None, out_: Reporter) -> Bump:
    for line in summary_lines(result):
        out_.answer(line)
    if target_md is not None:
        atomic_write_bytes(target_md, render(result, table).encode("utf-8"))
        out_.answer(f"report: {target_md}")
        result.report_markdown = str(target_md)
    return result


def summary_lines(b: Bump) -> list[str]:
    """The console's words (`render` says the same)."""
    if b.status == "noop":
        return [f"pin {b.pin[:12]} is already {b.to}: nothing changed"]
    lines = [
        f"newest clean: {b.newest_clean[:12]} ({b.taken} of {b.candidates} "
        f"first-parent commit(s) after the pin {b.pin[:12]}; target {b.target[:12]})"
    ]
    if fb := b.first_breaking:
        lines.append(
            f"first breaking: {fb.commit[:12]} {fb.subject}: {fb.patch} conflicts in "
            + ", ".join(fb.files)
        )
        lines += [f"    upstream {c.commit[:12]} {c.subject}" for c in fb.upstream_commits]
    for drop in b.dropped:
        by = ", ".join(c.commit[:12] for c in drop.upstream_commits) or "upstream"
        lines.append(f"dropped (upstreamed): {drop.file} by {by}")
    if not isinstance(b.surface, UnsetType):
        lines += b.surface.lines()
    lines.append(f"replays: {b.replays} (at most {b.max_replays})")
    if b.dry_run:
        lines.append("nothing was changed (dry run)")
    elif b.moved:
        lines.append(f"manifest re-pinned to {b.newest_clean}")
    else:
        lines.append("the pin did not move: the first candidate already breaks the series")
    return lines


def render(b: Bump, table: str) -> str:
    """The Markdown report (the pull request's description in CI)."""
    if b.status == "noop":
        return (
            f"### Bump {b.upstream}: already at `{b.to}`\n\n"
            f"- pin: `{b.pin}` ({b.url}): nothing changed\n"
        )
    # the words follow the answer: a dry run whose newest clean commit is the pin itself
    # would move nothing (this text becomes a pull request's body)
    if b.dry_run:
        verb = "would move" if b.newest_clean != b.pin else "would stay"
    else:
        verb = "moved" if b.moved else "stays"
    md = [
        f"### Bump {b.upstream}: `{b.pin[:12]}` → `{b.newest_clean[:12]}`"
        + (" (dry run)" if b.dry_run else ""),
        "",
        f"- pin (before): `{b.pin}` ({b.url})",
        f"- target: `{b.target}` {b.target_subject or ''}"
        + (
            " (the upstream's default branch head)"
            if b.to == "HEAD"
            else (f" (from `{b.to}`)" if b.to != b.target else "")
        ),
        f"- newest clean: `{b.newest_clean}` {b.newest_clean_subject or ''} — "
        f"{b.taken} of {b.candidates} first-parent commit(s); the pin {verb}"
        + ("; **target reached**" if b.reached else "; **stopped short of the target**"),
    ]
    if fb := b.first_breaking:
        md.append(
            f"- first breaking: `{fb.commit}` {fb.subject}: patch `{fb.patch}` "
            f"conflicts in {', '.join(f'`{f}`' for f in fb.files)}"
        )
        md += [f"  - upstream `{c.commit[:12]}` {c.subject}" for c in fb.upstream_commits]
    for drop in b.dropped:
        by = ", ".join(f"`{c.commit[:12]}` {c.subject}" for c in drop.upstream_commits)
        md.append(f"- dropped (upstreamed): `{drop.file}`" + (f" by {by}" if by else ""))
    md.append(
        f"- replays: {b.replays} (bisection; at most ⌈log2 {b.candidates}⌉ + 2 = {b.max_replays})"
    )
    if b.rebase_report_markdown:
        md.append(f"- rebase report: `{b.rebase_report_markdown}`")
    text = "\n".join(md) + "\n"
    if not isinstance(b.surface, UnsetType):
        text += b.surface.markdown()
    if table:
        text += "\n" + table.replace("### ", "#### ", 1)
    return text
