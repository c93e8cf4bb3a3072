"""The rebase report: `reports/rebase-<old>-<new>.json` and `.md` (what goes into the PR),
made from the same rows and counts as the console's table."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, write_json
from dgr_forge.core.urls import mask
from dgr_forge.upstream.rebase.state import (
    OUTCOME_TEXT,
    REPORT_KIND,
    PinSide,
    RebaseReport,
    RebaseRow,
    RebaseState,
    counts_of,
)
from dgr_forge.upstream.surface import SurfaceReport


def rows_of(state: RebaseState) -> list[RebaseRow]:
    return [RebaseRow.of(s) for s in state.patches]


def summary(counts: dict[str, int]) -> str:
    """One line, the same words in the console and the Markdown."""
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no patches"


def _upstream_note(row: RebaseRow) -> str:
    commits = row.upstream_commits or []
    if not commits:
        return ""
    listed = ", ".join(f"`{c.commit[:12]}` {c.subject}" for c in commits)
    if row.outcome == "dropped":
        return f" (upstream: {listed})"
    files = ", ".join(f"`{f}`" for f in row.files or [])
    where = f" in {files}" if files else ""
    return f" (conflicted{where} with upstream: {listed})"


def render_markdown(
    state: RebaseState,
    result_tree: str | None,
    rows: list[RebaseRow],
    title: str,
    surface: SurfaceReport | None = None,
) -> str:
    counts = counts_of(rows)
    md = [
        f"### {title} {state.upstream}: `{state.old_commit[:12]}` → `{state.new_commit[:12]}`",
        "",
        f"- old pin: `{state.old_commit}` ({mask(state.old_url)})",
        f"- new pin: `{state.new_commit}` ({mask(state.new_url)})"
        + (f", from `{state.onto}`" if state.onto != state.new_commit else ""),
    ]
    if result_tree:
        md.append(f"- result tree: `{result_tree}`")
    md += [
        "- " + summary(counts),
        "",
        "| patch | now | outcome |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        now = f"`{r.new_file}`" if r.new_file else "—"
        md.append(f"| `{r.file}` | {now} | {OUTCOME_TEXT[r.outcome]}{_upstream_note(r)} |")
    text = "\n".join(md) + "\n"
    return text + "\n" + surface.markdown() if surface is not None else text


R = TypeVar("R", bound=RebaseReport)


def report_of(
    type_: type[R], state: RebaseState, result_tree: str | None, rows: list[RebaseRow], **more: Any
) -> R:
    """The report of `state` as `type_` (the file's, or a dry run's with its `more` keys)."""
    return type_(
        kind=REPORT_KIND,
        version=1,
        upstream=state.upstream,
        onto=state.onto,
        old=PinSide(url=mask(state.old_url), commit=state.old_commit, tree=state.old_tree),
        new=PinSide(url=mask(state.new_url), commit=state.new_commit, tree=state.new_tree),
        result_tree=result_tree,
        counts=counts_of(rows),
        patches=rows,
        **more,
    )


def write_report(
    forge: Forge, state: RebaseState, result_tree: str, surface: SurfaceReport | None = None
) -> tuple[Path, Path]:
    """`reports/rebase-<old12>-<new12>.json` and `.md` (with `surface`'s moves)."""
    rows = rows_of(state)
    stem = f"rebase-{state.old_commit[:12]}-{state.new_commit[:12]}"
    json_path = forge.reports_dir / f"{stem}.json"
    md_path = forge.reports_dir / f"{stem}.md"
    write_json(json_path, msgspec.to_builtins(report_of(RebaseReport, state, result_tree, rows)))
    text = render_markdown(state, result_tree, rows, "Rebase", surface)
    atomic_write_bytes(md_path, text.encode("utf-8"))
    return json_path, md_path
