"""The CI emulator (support/actions) reads what the rendered workflows write, as GitHub does."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.actions import condition, evaluate, read_env_file, substitute

MODE = (
    "(github.event_name == 'push' && github.ref == format('refs/heads/{0}', "
    "github.event.repository.default_branch)) && 'rw' || 'ro'"
)


def ctx(event: str, ref: str) -> dict[str, object]:
    return {
        "github": {
            "event_name": event,
            "ref": ref,
            "event": {"repository": {"default_branch": "main"}},
        },
        "matrix": {"lane": "cpu", "packages": ["a", "b"], "container": None},
        "runner": {"os": "Linux"},
        "steps": {"canary": {"outputs": {"status": "3"}}},
    }


@pytest.mark.parametrize(
    ("event", "ref", "mode"),
    [("pull_request", "refs/pull/1/merge", "ro"), ("push", "refs/heads/main", "rw"),
     ("push", "refs/heads/topic", "ro")],
)  # fmt: skip
def test_the_cache_mode_expression(event: str, ref: str, mode: str) -> None:
    assert evaluate(MODE, ctx(event, ref)) == mode


def test_values_conditions_and_functions() -> None:
    c = ctx("pull_request", "refs/pull/1/merge")
    assert substitute("${{ join(matrix.packages, ' ') }}", c) == "a b"
    assert substitute("${{ matrix.container || '' }}", c) == ""
    assert substitute("dgr-report-${{ matrix.lane }}.json", c) == "dgr-report-cpu.json"
    assert substitute("${{ steps.canary.outputs.status }}", c) == "3"
    assert condition("${{ !matrix.container }}", c, "success") is True
    assert condition("${{ runner.os == 'Linux' }}", c, "failure") is False  # success() implied
    assert condition("${{ always() }}", c, "failure") is True
    assert condition(None, c, "failure") is False
    assert evaluate("startsWith(github.ref, 'refs/tags/')", c) is False
    with pytest.raises(ValueError):
        evaluate("github.ref ==", c)


def test_runner_files_plain_and_heredoc(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text("A=1\nB<<EOF\nline 1\nx=y\nEOF\nC=a=b\n")
    assert read_env_file(path) == {"A": "1", "B": "line 1\nx=y", "C": "a=b"}
    assert read_env_file(tmp_path / "missing") == {}
