"""Habits a user brings from other tools (issue 44 point 8): `-C DIR` as git, make and
ninja take it; `report show --lane L` for that lane's latest report."""

from __future__ import annotations

from pathlib import Path

from support.cli import run_forge
from support.git import Upstream


def test_dash_c_is_the_short_form_of_root_anywhere_on_the_line(
    forge_root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    long = run_forge("--root", str(forge_root), "status", "--json", cwd=elsewhere)
    assert long.code == 0, long
    for args in (
        ("-C", str(forge_root), "status", "--json"),
        ("status", "-C", str(forge_root), "--json"),
        (f"-C{forge_root}", "status", "--json"),
    ):
        short = run_forge(*args, cwd=elsewhere)
        assert short.code == 0, (args, short)
        assert short.json["upstream"] == long.json["upstream"], args
    # a hostile value is the path it names, never an option
    bad = run_forge("-C", "-x", "status", cwd=elsewhere)
    assert bad.code == 2, bad
    assert "-x" in bad.stderr
    help_text = " ".join(run_forge("status", "--help", env={"COLUMNS": "400"}).stdout.split())
    assert "-C" in help_text


def test_a_printed_report_path_is_normalized(forge_root: Path, upstream: Upstream) -> None:
    """`--report ROOT/../canary.md` is written and printed as the one path it is, never
    with a `..` in it."""
    given = forge_root / ".." / "canary.md"
    upstream.commit({"docs/later.md": "later\n"}, "docs: later")
    r = run_forge(
        "-C", str(forge_root), "rebase", "--dry-run", "--onto", upstream.head,
        "--report", str(given),
    )  # fmt: skip
    assert r.code == 0, r
    printed = [line for line in r.stdout.splitlines() if line.startswith("report: ")]
    assert printed == [f"report: {forge_root.parent.resolve() / 'canary.md'}"], r.stdout
    assert (forge_root.parent / "canary.md").is_file()
