"""The rebase report: `reports/rebase-<old>-<new>.json` and `.md`, what goes into the PR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, write_json
from dgr_forge.upstream.rebase.state import OUTCOME_TEXT, OUTCOMES, RebaseState

# ----------------------------------------------------------------------------- report


def write_report(forge: Forge, state: RebaseState, result_tree: str) -> tuple[Path, Path]:
    """`reports/rebase-<old12>-<new12>.json` and `.md`: what goes into the pull request."""
    rows = rows_of(state)
    counts = {o: sum(1 for r in rows if r["outcome"] == o) for o in OUTCOMES}
    stem = f"rebase-{state.old_commit[:12]}-{state.new_commit[:12]}"
    data = {
        "kind": "dgr-forge/rebase-report",
        "version": 1,
        "upstream": state.upstream,
        "onto": state.onto,
        "old": {"url": state.old_url, "commit": state.old_commit, "tree": state.old_tree},
        "new": {"url": state.new_url, "commit": state.new_commit, "tree": state.new_tree},
        "result_tree": result_tree,
        "counts": counts,
        "patches": rows,
    }
    json_path = forge.reports_dir / f"{stem}.json"
    md_path = forge.reports_dir / f"{stem}.md"
    write_json(json_path, data)
    md = [
        f"### Rebase {state.upstream}: `{state.old_commit[:12]}` → `{state.new_commit[:12]}`",
        "",
        f"- old pin: `{state.old_commit}` ({state.old_url})",
        f"- new pin: `{state.new_commit}` ({state.new_url})"
        + (f", from `{state.onto}`" if state.onto != state.new_commit else ""),
        f"- result tree: `{result_tree}`",
        "- " + ", ".join(f"{n} {o}" for o, n in counts.items() if n),
        "",
        "| patch | now | outcome |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        extra = ""
        if r["upstream_commits"]:
            extra = (
                " (upstream: "
                + ", ".join(f"`{c['commit'][:12]}` {c['subject']}" for c in r["upstream_commits"])
                + ")"
            )
        now = f"`{r['new_file']}`" if r["new_file"] else "—"
        md.append(f"| `{r['file']}` | {now} | {OUTCOME_TEXT[r['outcome']]}{extra} |")
    atomic_write_bytes(md_path, ("\n".join(md) + "\n").encode("utf-8"))
    return json_path, md_path


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
        }
        for s in state.patches
    ]

