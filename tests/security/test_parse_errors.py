"""Messages name the file, key or line for every parse error (issue 21 #9): a bad quote or
octal escape in a patch header, a TOML number of thousands of digits; text from an input
never reaches the terminal with a C1 control character."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream
from support.roots import manifest_text

PATCH = "0001-hostile-header.patch"
HEADER = (
    b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
    b"From: A <a@b>\nDate: Sat, 1 Feb 2025 00:00:00 +0000\nSubject: x\n\n---\n"
)


@pytest.mark.parametrize(
    ("diff", "line", "said"),
    [
        (b'diff --git "a/src/unterminated b/src/x\n', 7, "closing quote"),
        (b'--- "a/src/t\\39x"\n+++ b/src/x\n@@ -1 +1 @@\n-a\n+b\n', 7, "octal escape"),
        (b'--- a/src/x\n+++ "b/src/t\\3"\n@@ -1 +1 @@\n-a\n+b\n', 8, "octal escape"),
    ],
)
def test_a_malformed_patch_header_names_the_patch_and_line(
    upstream: Upstream, forge_root: Path, diff: bytes, line: int, said: str
) -> None:
    data = HEADER + diff
    (forge_root / "patches" / "llama.cpp" / PATCH).write_bytes(data)
    entry = {"file": PATCH, "sha256": hashlib.sha256(data).hexdigest()}
    commit = upstream.head
    (forge_root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text(upstream.url, commit, upstream.tree(commit), series=[entry])
    )
    before = (forge_root / "manifests" / "llama.cpp.toml").read_bytes()
    for flags in ([], ["--json"]):
        res = run_forge(*flags, "patch", cwd=forge_root)
        assert res.code == 2, res
        assert f"patches/llama.cpp/{PATCH}: line {line}: " in res.stderr, res
        assert said in res.stderr and "invalid value" not in res.stderr, res
        if flags:
            assert res.json["file"] == f"patches/llama.cpp/{PATCH}" and res.json["line"] == line
    assert (forge_root / "manifests" / "llama.cpp.toml").read_bytes() == before
    assert (forge_root / "patches" / "llama.cpp" / PATCH).read_bytes() == data


def test_a_number_of_thousands_of_digits_names_the_file_and_line(forge_root: Path) -> None:
    path = forge_root / "manifests" / "llama.cpp.toml"
    path.write_text(path.read_text().replace("schema = 1", "schema = " + "9" * 5000))
    res = run_forge("--json", "status", cwd=forge_root)
    assert res.code == 2, res
    assert "manifests/llama.cpp.toml: line 2: a number with thousands of digits" in res.stderr
    assert "set_int_max_str_digits" not in res.stdout + res.stderr


def test_c1_controls_from_input_are_escaped_on_the_terminal(
    tmp_path: Path, forge_root: Path
) -> None:
    name = str(tmp_path / "report\u009b31m\u0085x.jsonl")
    res = run_forge("report", "show", name, cwd=forge_root)
    assert res.code == 2, res
    assert "\u009b" not in res.stderr and "\u0085" not in res.stderr, res
    assert "\\x9b31m\\x85x" in res.stderr, res


def test_c1_controls_in_a_usage_error_are_escaped(forge_root: Path) -> None:
    res = run_forge("report", "show", "--no-such\u009b2J", cwd=forge_root)
    assert res.code == 2, res
    assert "\u009b" not in res.stderr and "\\x9b2J" in res.stderr, res
