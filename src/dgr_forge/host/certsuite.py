"""A recipe's certification suite: the `[certify]` table, as data (DESIGN.md, *Certification*).

    [certify]
    targets = ["test-backend-ops", "llama-bench"]   # built with the lane, report subjects

    [[certify.steps]]
    name = "ops"
    program = "test-backend-ops"                    # one of `targets`
    args = ["test", "-b", "{device}"]
    parser = "test-backend-ops"                     # test-backend-ops | llama-bench | ctest
    max_failed = 0
    timeout = 600                                   # seconds (1 to 7200; default 600)

    [[certify.steps]]
    name = "speed"
    program = "llama-bench"
    args = ["-m", "{model}", "-p", "64", "-n", "16", "-o", "json"]
    parser = "llama-bench"
    min_avg_ts = { prompt = 50.0, gen = 5.0 }
    by_model.tiny = { prompt = 2000.0, gen = 400.0 }   # this model's own speed gate

Arguments are handed to the program as they are (no shell runs: `;`, `|`, `$(...)` are
just bytes); the only placeholders are `{model}`, `{device}` and `{threads}`, and any other
brace is refused. Every step names its gate: `max_failed` for the counting parsers,
`min_avg_ts` for `llama-bench`; a step without one would pass by default and is refused.
Speed depends on the model: `by_model.<manifest name>` replaces a speed step's
`min_avg_ts` for that model (`certify --model NAME`).
"""

from __future__ import annotations

import re
from typing import Any

from msgspec import Struct, to_builtins

from dgr_forge.attest.parsers import PARSERS, Thresholds
from dgr_forge.core.tomlcheck import Checker, shown_value, type_name

PLACEHOLDERS = ("model", "device", "threads")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
TARGET_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
STEP_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
DEFAULT_TIMEOUT = 600
MAX_TIMEOUT = 7200  # two hours: a whole op suite on a slow device, never unbounded
MAX_STEPS = 32
MAX_ARGS = 64
MAX_ARG = 1024
MAX_FAILED = 1_000_000
MAX_TS = 1e7
_COUNTING = ("test-backend-ops", "ctest")
_STEP_KEYS = {
    "name",
    "program",
    "args",
    "parser",
    "max_failed",
    "min_avg_ts",
    "timeout",
    "by_model",
}
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class Step(Struct, frozen=True):
    name: str
    program: str  # a CMake target of the lane's build (one of `Suite.targets`)
    args: tuple[str, ...]  # with placeholders, substituted at run time
    parser: str
    thresholds: Thresholds
    timeout: int  # seconds
    by_model: tuple[tuple[str, Thresholds], ...] = ()  # a model's own speed gate

    def gate(self, model: str | None) -> Thresholds:
        """The thresholds for a run with `model` (its own, else the step's)."""
        return next((t for name, t in self.by_model if name == model), self.thresholds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "program": self.program,
            "args": list(self.args),
            "parser": self.parser,
            "thresholds": to_builtins(self.thresholds.gate()),
            "timeout": self.timeout,
        }


class Suite(Struct, frozen=True):
    targets: tuple[str, ...]
    steps: tuple[Step, ...]

    @property
    def needs_model(self) -> bool:
        return any("{model}" in a for s in self.steps for a in s.args)


def load_suite(c: Checker, data: dict[str, Any]) -> Suite | None:
    """`[certify]` of a recipe (None when the recipe has none); exit 2 naming the key.

    Whether the lane builds each target is the build's and certify's to say, not the
    recipe's: a build never fails for its suite, and `certify` refuses (exit 1) a target
    the build did not produce as a report subject (with `cmake.targets`, it must be one)."""
    if "certify" not in data:
        return None
    table = c.section(data, "certify", {"targets", "steps"})
    targets = c.strings(table, "targets", "certify", fix='targets = ["test-backend-ops"]')
    if not targets:
        raise c.fail("certify.targets", "empty", 'name the programs: targets = ["llama-bench"]')
    for t in targets:
        if not TARGET_NAME.fullmatch(t) or len(t) > 200:
            raise c.fail(
                "certify.targets", f"{shown_value(t)} is not a CMake target name", "fix the name"
            )
    raw_steps = table.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise c.fail(
            "certify.steps",
            "missing or not an array of tables",
            "add one [[certify.steps]] table per program run",
        )
    if len(raw_steps) > MAX_STEPS:
        raise c.fail("certify.steps", f"{len(raw_steps)} steps, over {MAX_STEPS}", "fewer steps")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        step = _step(c, raw, f"certify.steps[{i}]", targets)
        if any(s.name == step.name for s in steps):
            raise c.fail(f"certify.steps[{i}].name", f"{step.name!r} twice", "name steps uniquely")
        steps.append(step)
    return Suite(targets, tuple(steps))


def _step(c: Checker, raw: Any, where: str, targets: tuple[str, ...]) -> Step:
    table = c.table(raw, where, fix="write each step as a [[certify.steps]] table")
    c.known_keys(table, _STEP_KEYS, where)
    name = c.string(table, "name", where, nonempty=True)
    assert name is not None
    if not STEP_NAME.fullmatch(name) or len(name) > 64:
        raise c.fail(f"{where}.name", f"{shown_value(name)} is not a step name", "use [a-z0-9_-]")
    program = c.string(table, "program", where, nonempty=True)
    assert program is not None
    if program not in targets:
        raise c.fail(
            f"{where}.program",
            f"{shown_value(program)} is not one of certify.targets ({', '.join(targets)}): "
            "only a program the lane's build produced runs",
            "name a target listed in certify.targets (no path, no program from outside the build)",
        )
    args = c.strings(table, "args", where)
    if len(args) > MAX_ARGS:
        raise c.fail(f"{where}.args", f"{len(args)} arguments, over {MAX_ARGS}", "fewer arguments")
    for arg in args:
        _check_arg(c, f"{where}.args", arg)
    parser = c.string(table, "parser", where, nonempty=True)
    if parser not in PARSERS:
        raise c.fail(
            f"{where}.parser",
            f"{shown_value(parser)} is not a parser",
            f"one of {', '.join(PARSERS)}",
        )
    timeout = c.integer(table, "timeout", where, required=False, minimum=1, maximum=MAX_TIMEOUT)
    return Step(
        name=name,
        program=program,
        args=args,
        parser=parser,
        thresholds=_thresholds(c, table, where, parser),
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
        by_model=_by_model(c, table, where, parser),
    )


def _by_model(
    c: Checker, table: dict[str, Any], where: str, parser: str | None
) -> tuple[tuple[str, Thresholds], ...]:
    raw = table.get("by_model")
    if raw is None:
        return ()
    if parser != "llama-bench":
        raise c.fail(
            f"{where}.by_model", "only a llama-bench step has a per-model gate", "remove it"
        )
    models = c.table(raw, f"{where}.by_model", fix="by_model.tiny = { prompt = 50.0, gen = 5.0 }")
    out = []
    for name, speeds in models.items():
        if not MODEL_NAME.fullmatch(name):
            raise c.fail(
                f"{where}.by_model", f"{shown_value(name)} is not a model manifest name", "fix it"
            )
        out.append((name, _speeds(c, speeds, f"{where}.by_model.{name}")))
    return tuple(out)


def _check_arg(c: Checker, key: str, arg: str) -> None:
    if len(arg) > MAX_ARG:
        raise c.fail(key, f"an argument of {len(arg)} characters, over {MAX_ARG}", "shorten it")
    bad = next((ch for ch in arg if ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise c.fail(key, f"{shown_value(arg)} contains a control character", "remove it")
    for m in _PLACEHOLDER.finditer(arg):
        if m.group(1) not in PLACEHOLDERS:
            raise c.fail(
                key,
                f"{shown_value(arg)}: {{{m.group(1)[:40]}}} is not a placeholder",
                "the placeholders are {model}, {device} and {threads}",
            )
    if "{" in _PLACEHOLDER.sub("", arg) or "}" in _PLACEHOLDER.sub("", arg):
        raise c.fail(
            key,
            f"{shown_value(arg)}: a brace outside a placeholder",
            "the placeholders are {model}, {device} and {threads}; no other braces",
        )


def _thresholds(c: Checker, table: dict[str, Any], where: str, parser: str | None) -> Thresholds:
    max_failed = c.integer(
        table, "max_failed", where, required=False, minimum=0, maximum=MAX_FAILED
    )
    speeds = table.get("min_avg_ts")
    if parser in _COUNTING:
        if speeds is not None:
            raise c.fail(f"{where}.min_avg_ts", f"not a {parser} figure", "use max_failed")
        if max_failed is None:
            raise c.fail(
                f"{where}.max_failed",
                "missing: a step never passes by default",
                "add max_failed = 0",
            )
        return Thresholds(max_failed=max_failed)
    if max_failed is not None:
        raise c.fail(f"{where}.max_failed", f"not a {parser} figure", "use min_avg_ts")
    if speeds is None:
        raise c.fail(
            f"{where}.min_avg_ts",
            "missing: a step never passes by default",
            "add min_avg_ts = { prompt = 50.0, gen = 5.0 }",
        )
    return _speeds(c, speeds, f"{where}.min_avg_ts")


def _speeds(c: Checker, raw: Any, where: str) -> Thresholds:
    speeds = c.table(raw, where, fix="min_avg_ts = { prompt = 50.0, gen = 5.0 }")
    c.known_keys(speeds, {"prompt", "gen"}, where)
    if not speeds:
        raise c.fail(where, "empty", "give prompt and/or gen tokens per second")
    got: dict[str, float] = {}
    for key, value in speeds.items():
        if type(value) not in (int, float) or not 0 < value <= MAX_TS:
            raise c.fail(
                f"{where}.{key}",
                f"{shown_value(value)} ({type_name(value)}) is not a speed in (0, {MAX_TS:g}] t/s",
                f"{key} = 5.0",
            )
        got[key] = float(value)
    return Thresholds(min_prompt_ts=got.get("prompt"), min_gen_ts=got.get("gen"))
