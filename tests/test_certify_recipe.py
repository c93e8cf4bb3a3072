"""The `[certify]` table of a recipe is data, checked like every recipe key (issue 30 #2):
only the lane's own targets run, only three placeholders, a gate on every step, bounded
timeouts; hostile values are exit 2 naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from dgr_forge.certify import suite
from dgr_forge.core.errors import BadInput
from dgr_forge.host import recipes

BASE = """\
schema = 1
[lane]
backend = "CPU"
[cmake]
options = { LLAMA_BUILD_TESTS = "ON" }
"""

SUITE = """\
[certify]
targets = ["llama-perplexity", "test-backend-ops", "llama-bench"]

[[certify.steps]]
name = "ops"
program = "test-backend-ops"
args = ["test", "-b", "{device}", "-o", "ADD,MUL_MAT"]
parser = "test-backend-ops"
max_failed = 0

[[certify.steps]]
name = "speed"
program = "llama-bench"
args = ["-m", "{model}", "-t", "{threads}", "-p", "64", "-n", "16", "-o", "json"]
parser = "llama-bench"
min_avg_ts = { prompt = 50.0, gen = 5 }
by_model.tiny = { prompt = 2000.0, gen = 400.0 }
timeout = 120

[[certify.steps]]
name = "parity"
program = "llama-perplexity"
args = ["-m", "{model}", "-f", "{text}"]
text = "recipes/parity.txt"
parser = "parity"
reference = "pin"
max_rel_diff = 0.001
"""


def load(tmp_path: Path, text: str) -> Any:
    """The recipe, its `certify` the suite `certify.suite` reads from it."""
    path = tmp_path / "cpu.toml"
    path.write_text(text)
    recipe = recipes.load(path, "recipes/cpu.toml")
    return msgspec.structs.replace(recipe, certify=suite.load(recipe))


def refused(tmp_path: Path, text: str) -> BadInput:
    with pytest.raises(BadInput) as err:
        load(tmp_path, text)
    assert err.value.exit_code == 2
    return err.value


def test_the_suite_loads_as_data(tmp_path: Path) -> None:
    r = load(tmp_path, BASE + SUITE)
    assert r.certify is not None
    assert r.certify.targets == ("llama-perplexity", "test-backend-ops", "llama-bench")
    ops, speed, parity = r.certify.steps
    assert (parity.text, parity.reference, parity.gate(None).max_rel_diff) == (
        "recipes/parity.txt", "pin", 0.001,
    )  # fmt: skip
    assert ops.args == ("test", "-b", "{device}", "-o", "ADD,MUL_MAT")
    assert ops.gate(None).max_failed == 0 and ops.timeout == 600
    assert speed.gate(None).min_avg_ts == recipes.Speeds(prompt=50.0, gen=5.0)
    assert speed.timeout == 120 and r.certify.needs_model
    assert speed.gate("tiny").min_avg_ts == recipes.Speeds(prompt=2000.0, gen=400.0)
    assert speed.gate("other") == speed.gate(None)
    assert load(tmp_path, BASE).certify is None


def test_shell_metacharacters_are_just_bytes(tmp_path: Path) -> None:
    """No shell runs: `;`, `|`, `$(...)`, backticks are handed to the program as they are."""
    text = BASE + SUITE.replace('"-o", "ADD,MUL_MAT"', '"-o", "ADD;rm -rf / | $(id) `id` &&"')
    r = load(tmp_path, text)
    assert r.certify is not None
    assert r.certify.steps[0].args[-1] == "ADD;rm -rf / | $(id) `id` &&"


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        # a program that is not one of the lane's targets, or a path to one
        (('program = "llama-bench"', 'program = "/bin/sh"'), "certify.steps[1].program",
         "not one of certify.targets"),
        (('program = "llama-bench"', 'program = "../bin/llama-bench"'),
         "certify.steps[1].program", "not one of certify.targets"),
        (('program = "llama-bench"', 'program = "-llama-bench"'), "certify.steps[1].program",
         "not one of certify.targets"),
        (('"test-backend-ops", "llama-bench"]', '"-rf", "llama-bench"]'), "certify.targets",
         "not a CMake target name"),
        # placeholders other than {model} {device} {threads}
        (('"{threads}"', '"{home}"'), "certify.steps[1].args", "{home} is not a placeholder"),
        (('"{threads}"', '"${{ secrets.TOKEN }}"'), "certify.steps[1].args", "placeholder"),
        (('"{threads}"', '"{}"'), "certify.steps[1].args", "{} is not a placeholder"),
        (('"{threads}"', '"{model"'), "certify.steps[1].args", "a brace outside"),
        (('"{threads}"', '"a\\u0000b"'), "certify.steps[1].args", "NUL"),
        (('"{threads}"', '"a\\nb"'), "certify.steps[1].args", "control character"),
        # huge or silly timeouts, thresholds
        (("timeout = 120", "timeout = 999999999"), "certify.steps[1].timeout", "out of range"),
        (("timeout = 120", "timeout = 0"), "certify.steps[1].timeout", "out of range"),
        (("timeout = 120", "timeout = 1e9"), "certify.steps[1].timeout", "not an integer"),
        (("max_failed = 0", "max_failed = -1"), "certify.steps[0].max_failed", "out of range"),
        (("max_failed = 0", "max_failed = true"), "certify.steps[0].max_failed",
         "not an integer"),
        (("gen = 5", "gen = nan"), "certify.steps[1].min_avg_ts.gen", "not a speed"),
        (("gen = 5", "gen = inf"), "certify.steps[1].min_avg_ts.gen", "not a speed"),
        (("gen = 5", "gen = 0"), "certify.steps[1].min_avg_ts.gen", "not a speed"),
        (("gen = 5", 'gen = "5"'), "certify.steps[1].min_avg_ts.gen", "not a speed"),
        (("gen = 5", "tg = 5"), "certify.steps[1].min_avg_ts.tg", "unknown key"),
        # a step without its gate never passes by default: refused
        (("max_failed = 0\n", ""), "certify.steps[0].max_failed", "never passes by default"),
        (("min_avg_ts = { prompt = 50.0, gen = 5 }\n", ""), "certify.steps[1].min_avg_ts",
         "never passes by default"),
        (("max_failed = 0", "min_avg_ts = { gen = 1.0 }"), "certify.steps[0].min_avg_ts",
         "not a test-backend-ops figure"),
        (('parser = "llama-bench"', 'parser = "sh"'), "certify.steps[1].parser",
         "not a parser"),
        (('name = "speed"', 'name = "ops"'), "certify.steps[1].name", "twice"),
        (('name = "speed"', 'name = "../x"'), "certify.steps[1].name", "not a step name"),
        (('name = "speed"', 'name = "speed"\nshell = true'), "certify.steps[1].shell",
         "unknown key"),
        # a model's own gate: speed steps only, a manifest name, a speed
        (("max_failed = 0", "max_failed = 0\nby_model.tiny = { gen = 1.0 }"),
         "certify.steps[0].by_model", "only a llama-bench step"),
        (("by_model.tiny", 'by_model."../x"'), "certify.steps[1].by_model",
         "not a model manifest name"),
        (("gen = 400.0", "gen = -1.0"), "certify.steps[1].by_model.tiny.gen", "not a speed"),
        (("gen = 400.0 }", "gen = 400.0, tg = 1.0 }"), "certify.steps[1].by_model.tiny.tg",
         "unknown key"),
        # a parity step: its text a path inside the root, the pin its reference, its gate
        (('"recipes/parity.txt"', '"../parity.txt"'), "certify.steps[2].text",
         "not a path inside the forge root"),
        (('"recipes/parity.txt"', '"recipes/../../x"'), "certify.steps[2].text",
         "not a path inside the forge root"),
        (('"recipes/parity.txt"', '"/etc/passwd"'), "certify.steps[2].text",
         "not a path inside the forge root"),
        (('"recipes/parity.txt"', '"-f"'), "certify.steps[2].text",
         "not a path inside the forge root"),
        (('"recipes/parity.txt"', '"recipes//x"'), "certify.steps[2].text",
         "not a path inside the forge root"),
        (('"recipes/parity.txt"', '"a\\u0000b"'), "certify.steps[2].text", "NUL"),
        (('"recipes/parity.txt"', '"' + "x" * 300 + '"'), "certify.steps[2].text", "over 256"),
        (('text = "recipes/parity.txt"\n', ""), "certify.steps[2].text",
         "an argument has {text}"),
        (('"-f", "{text}"', '"-f", "x"'), "certify.steps[2].text", "no argument reads it"),
        (('reference = "pin"\n', ""), "certify.steps[2].reference", "missing"),
        (('reference = "pin"', 'reference = "main"'), "certify.steps[2].reference", "pin"),
        (("max_rel_diff = 0.001\n", ""), "certify.steps[2].max_rel_diff",
         "never passes by default"),
        (("max_rel_diff = 0.001", "max_rel_diff = -1.0"), "certify.steps[2].max_rel_diff",
         "out of range"),
        (("max_rel_diff = 0.001", "max_rel_diff = nan"), "certify.steps[2].max_rel_diff",
         "out of range"),
        (("max_rel_diff = 0.001", "max_failed = 0"), "certify.steps[2]", "max_rel_diff"),
        (("max_failed = 0", "max_failed = 0\nreference = \"pin\""),
         "certify.steps[0].reference", "not a test-backend-ops key"),
        (("max_failed = 0", "max_failed = 0\nmax_rel_diff = 0.1"),
         "certify.steps[0].max_rel_diff", "not a test-backend-ops figure"),
    ],
)  # fmt: skip
def test_hostile_suites_are_exit_2_naming_the_key(
    tmp_path: Path, edit: tuple[str, str], key: str, says: str
) -> None:
    old, new = edit
    assert old in SUITE
    err = refused(tmp_path, BASE + SUITE.replace(old, new, 1))
    assert f"recipes/cpu.toml: {key}:" in err.message, err.message
    assert says in err.message, err.message
    assert err.hint


def test_too_many_arguments_or_steps(tmp_path: Path) -> None:
    many = ", ".join('"x"' for _ in range(65))
    err = refused(tmp_path, BASE + SUITE.replace('"-o", "ADD,MUL_MAT"', many))
    assert "over 64" in err.message
    huge = '"' + "x" * 2000 + '"'
    err = refused(tmp_path, BASE + SUITE.replace('"ADD,MUL_MAT"', huge))
    assert "over 1024" in err.message


def test_a_certify_target_the_lane_does_not_build_still_loads(tmp_path: Path) -> None:
    """A build never fails for its suite: `certify` refuses a target the build did not
    produce (not a report subject), at its own run (tests/test_certify_run.py)."""
    text = BASE.replace("[cmake]", '[cmake]\ntargets = ["llama-cli", "llama-bench"]') + SUITE
    r = load(tmp_path, text)
    assert r.cmake.targets == ("llama-cli", "llama-bench")
    assert r.certify is not None and "test-backend-ops" in r.certify.targets


def test_certify_runs_on_needs_a_suite(tmp_path: Path) -> None:
    ci = '[ci]\ncertify_runs_on = ["self-hosted", "gpu-cuda"]\n'
    r = load(tmp_path, BASE + ci + SUITE)
    assert r.ci.certify_runs_on == ("self-hosted", "gpu-cuda")
    err = refused(tmp_path, BASE + ci)
    assert "ci.certify_runs_on" in err.message
    err = refused(tmp_path, BASE + ci.replace("gpu-cuda", "${{ github.token }}") + SUITE)
    assert "ci.certify_runs_on" in err.message
