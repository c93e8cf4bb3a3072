"""A recipe's certification suite, `[certify]`, checked for what it means
(docs/build-and-reports.md, *Certification*). Arguments are handed to the program as they
are (no shell runs); any brace but a placeholder's is refused, and so is a step without a
gate (it would pass by default).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from msgspec import UNSET

from dgr_forge.certify.parsers import PARSE
from dgr_forge.core.errors import BadInput
from dgr_forge.core.tominput import fail, shown_value
from dgr_forge.host.recipes import PLACEHOLDERS, SPEEDS_FIX, Recipe, Speeds, Step, Suite

TEXT_FIX = 'name a file of the forge root: text = "recipes/parity.txt"'
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
TARGET_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}")
STEP_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
Refuse = Callable[[str, str, str], BadInput]  # `tominput.fail` for one recipe: key, problem, fix
MAX_STEPS = 32
MAX_ARGS = 64
MAX_ARG = 1024
_COUNTING = ("test-backend-ops", "ctest")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# `text`: root-relative, each component a plain name (no `..`, `/`-leading, `-`-leading)
TEXT_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")


def load(recipe: Recipe) -> Suite | None:
    """Whether the lane builds each target is the build's and certify's to say, not the
    recipe's: a build never fails for its suite."""
    table, refuse = recipe.certify, partial(fail, f"recipes/{recipe.path.name}")
    if table is None:
        return None
    if not (targets := table.targets):
        raise refuse("certify.targets", "empty", 'name the programs: targets = ["llama-bench"]')
    for t in targets:
        _named(refuse, "certify.targets", t, TARGET_NAME, "a CMake target name", "fix the name")
    if not table.steps:
        raise refuse(
            "certify.steps",
            "missing or not an array of tables",
            "add one [[certify.steps]] table per program run",
        )
    if len(table.steps) > MAX_STEPS:
        raise refuse("certify.steps", f"{len(table.steps)} steps, over {MAX_STEPS}", "fewer steps")
    for i, step in enumerate(table.steps):
        _step(refuse, step, f"certify.steps[{i}]", targets)
        if any(s.name == step.name for s in table.steps[:i]):
            raise refuse(f"certify.steps[{i}].name", f"{step.name!r} twice", "name steps uniquely")
    return table


def _step(refuse: Refuse, raw: Step, where: str, targets: tuple[str, ...]) -> None:
    name, program, args, parser = raw.name, raw.program, raw.args, raw.parser
    _named(refuse, f"{where}.name", name, STEP_NAME, "a step name", "use [a-z0-9_-]")
    if program not in targets:
        raise refuse(
            f"{where}.program",
            f"{shown_value(program)} is not one of certify.targets ({', '.join(targets)}): "
            "only a program the lane's build produced runs",
            "name a target listed in certify.targets (no path, no program from outside the build)",
        )
    if len(args) > MAX_ARGS:
        raise refuse(f"{where}.args", f"{len(args)} arguments, over {MAX_ARGS}", "fewer arguments")
    for arg in args:
        _check_arg(refuse, f"{where}.args", arg)
    if parser not in PARSE:  # the names are the parsers's, read in their module
        raise refuse(
            f"{where}.parser",
            f"{shown_value(parser)} is not a parser",
            f"one of {', '.join(PARSE)}",
        )
    # the gate: its parser's own key and no other
    if (parser == "parity") != (raw.reference is not None):
        raise refuse(
            f"{where}.reference",
            "missing: a parity step compares with the pin's build"
            if parser == "parity"
            else f"not a {parser} key",
            'reference = "pin"' if parser == "parity" else "remove it",
        )
    gate, fix = (
        ("max_rel_diff", "add max_rel_diff = 0.001")
        if parser == "parity"
        else ("max_failed", "add max_failed = 0")
        if parser in _COUNTING
        else ("min_avg_ts", f"add {SPEEDS_FIX}")
    )
    for key in ("max_rel_diff", "min_avg_ts", "max_failed"):
        if key == gate or getattr(raw, key) is UNSET:
            continue
        if parser == "parity":
            raise refuse(where, "a parity step's gate is max_rel_diff", "use max_rel_diff")
        use = "remove it" if key == "max_rel_diff" else f"use {gate}"
        raise refuse(f"{where}.{key}", f"not a {parser} figure", use)
    if getattr(raw, gate) is UNSET:
        raise refuse(f"{where}.{gate}", "missing: a step never passes by default", fix)
    if raw.min_avg_ts is not UNSET:
        _speeds(refuse, raw.min_avg_ts, f"{where}.min_avg_ts")
    if raw.by_model is not None and parser != "llama-bench":
        raise refuse(
            f"{where}.by_model", "only a llama-bench step has a per-model gate", "remove it"
        )
    for model, speeds in (raw.by_model or {}).items():
        _named(refuse, f"{where}.by_model", model, MODEL_NAME, "a model manifest name", "fix it")
        _speeds(refuse, speeds, f"{where}.by_model.{model}")
    uses = any("{text}" in a for a in args)
    if raw.text is None:
        if uses:
            raise refuse(f"{where}.text", "missing: an argument has {text}", TEXT_FIX)
        return
    if len(raw.text) > MAX_ARG // 4:
        raise refuse(f"{where}.text", f"over {MAX_ARG // 4} characters", "shorten it")
    fix = f"{TEXT_FIX} (relative, no '..', no leading '/' or '-')"
    _named(refuse, f"{where}.text", raw.text, TEXT_PATH, "a path inside the forge root", fix)
    if not uses:
        raise refuse(f"{where}.text", "no argument reads it", 'pass it: "{text}"')


def _named(
    refuse: Refuse, key: str, value: str, name: re.Pattern[str], what: str, fix: str
) -> None:
    if not name.fullmatch(value):
        raise refuse(key, f"{shown_value(value)} is not {what}", fix)


def _check_arg(refuse: Refuse, key: str, arg: str) -> None:
    if len(arg) > MAX_ARG:
        raise refuse(key, f"an argument of {len(arg)} characters, over {MAX_ARG}", "shorten it")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in arg):
        raise refuse(key, f"{shown_value(arg)} contains a control character", "remove it")
    for m in _PLACEHOLDER.finditer(arg):
        if m.group(1) not in PLACEHOLDERS:
            raise refuse(
                key,
                f"{shown_value(arg)}: {{{m.group(1)[:40]}}} is not a placeholder",
                "the placeholders are {model}, {device}, {threads} and {text}",
            )
    if "{" in _PLACEHOLDER.sub("", arg) or "}" in _PLACEHOLDER.sub("", arg):
        raise refuse(
            key,
            f"{shown_value(arg)}: a brace outside a placeholder",
            "the placeholders are {model}, {device}, {threads} and {text}; no other braces",
        )


def _speeds(refuse: Refuse, speeds: Speeds, where: str) -> None:
    if speeds == Speeds():
        raise refuse(where, "empty", "give prompt and/or gen tokens per second")
