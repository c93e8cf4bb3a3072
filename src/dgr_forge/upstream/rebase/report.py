"""The rebase report: `reports/rebase-<old>-<new>.json` and `.md`, what goes into the PR.

The console table, the JSON and the Markdown are made from the same rows and counts, so
they say the same thing (an upstreamed patch and one dropped by hand are counted apart).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, write_json
from dgr_forge.core.urls import mask
from dgr_forge.upstream.rebase.state import OUTCOME_TEXT, OUTCOMES, RebaseState


def rows_of(state: RebaseState) -> list[dict[str, Any]]:
    return [
        {
            "file": s.file,
            "new_file": s.new_file,
            "subject": s.subject,
            "outcome": s.outcome,
            "old_commit": s.old_commit,
            "new_commit": s.new_commit,
            "upstream_commits": s.upstream_commits,
            "files": s.files,
        }
        for s in state.patches
    ]


def counts_of(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {o: sum(1 for r in rows if r["outcome"] == o) for o in OUTCOMES}


def summary(counts: dict[str, int]) -> str:
    """One line, the same words in the console and the Markdown."""
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no patches"


def _upstream_note(row: dict[str, Any]) -> str:
    commits = row["upstream_commits"]
    if not commits:
        return ""
    listed = ", ".join(f"`{c['commit'][:12]}` {c['subject']}" for c in commits)
    if row["outcome"] == "dropped":
        return f" (upstream: {listed})"
    files = ", ".join(f"`{f}`" for f in row.get("files") or [])
    where = f" in {files}" if files else ""
    return f" (conflicted{where} with upstream: {listed})"


def render_markdown(
    state: RebaseState, result_tree: str | None, rows: list[dict[str, Any]], title: str
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
        now = f"`{r['new_file']}`" if r["new_file"] else "—"
        md.append(f"| `{r['file']}` | {now} | {OUTCOME_TEXT[r['outcome']]}{_upstream_note(r)} |")
    return "\n".join(md) + "\n"


def report_data(
    state: RebaseState, result_tree: str | None, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "kind": "dgr-forge/rebase-report",
        "version": 1,
        "upstream": state.upstream,
        "onto": state.onto,
        "old": {"url": mask(state.old_url), "commit": state.old_commit, "tree": state.old_tree},
        "new": {"url": mask(state.new_url), "commit": state.new_commit, "tree": state.new_tree},
        "result_tree": result_tree,
        "counts": counts_of(rows),
        "patches": rows,
    }


def write_report(forge: Forge, state: RebaseState, result_tree: str) -> tuple[Path, Path]:
    """`reports/rebase-<old12>-<new12>.json` and `.md`: what goes into the pull request."""
    rows = rows_of(state)
    stem = f"rebase-{state.old_commit[:12]}-{state.new_commit[:12]}"
    json_path = forge.reports_dir / f"{stem}.json"
    md_path = forge.reports_dir / f"{stem}.md"
    write_json(json_path, report_data(state, result_tree, rows))
    text = render_markdown(state, result_tree, rows, "Rebase")
    atomic_write_bytes(md_path, text.encode("utf-8"))
    return json_path, md_path
