"""Readers of the certification programs' own output, and the thresholds that judge it.

Each parser is a pure function of the program's bytes (bounded by `MAX_OUTPUT_BYTES`) to
`Figures`, or `Unreadable`: output a parser cannot read fails its step, never passes. The
formats read: docs/build-and-reports.md, "Certification", step 6.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping

from msgspec import UNSET, Struct

from dgr_forge.certify import shapes
from dgr_forge.host.recipes import Gate, Speeds

MAX_OUTPUT_BYTES = 16 << 20  # the most of a step's output a parser reads (and a step keeps)
MAX_SHOWN_CASES = 10  # failing cases named in a message; `failed_cases` keeps up to MAX_CASES
MAX_CASES = 1000
BOTH_STREAMS = ("parity",)  # parsers that read stderr too (after stdout, each stream whole)


class Unreadable(Exception):
    """The output is not what the parser reads: the step fails, naming why."""


class Figures(Struct, frozen=True):
    figures: shapes.StepFigures
    failing: tuple[shapes.FailedCase, ...] = ()

    @property
    def parser(self) -> str:
        return str(type(self.figures).__struct_config__.tag)


def failed_count(figures: shapes.StepFigures) -> int | None:
    if isinstance(figures, shapes.OpsFigures):
        return figures.ops_failed
    return figures.failed if isinstance(figures, shapes.CtestFigures) else None


class Verdict(Struct, frozen=True):
    passed: bool
    problems: tuple[str, ...] = ()


def _text(data: bytes, parser: str) -> str:
    if len(data) > MAX_OUTPUT_BYTES:
        raise Unreadable(f"{len(data)} bytes of output, over the {MAX_OUTPUT_BYTES}-byte bound")
    if b"\0" in data:
        raise Unreadable(f"a NUL byte in the output: not {parser} text")
    return data.decode("utf-8", errors="replace")


_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
_BACKEND_HEAD = r"^Backend (\d+)/(\d+): (\S.*)$"
# a case's line: `  OP(params): verdict`, after what the compare found when it failed
# (`[OP] ERR = 1.17 > 1e-07 `, `[OP] NaN at index ...`: printed first, on the same line)
_CASE = r"^(\[[A-Za-z0-9_]+\] .*?)?\s*\b([A-Za-z0-9_]+)\((.*)\): (.*)$"
_TESTS_PASSED = r"^  (\d+)/(\d+) tests passed$"
_BACKEND_STATUS = r"^  Backend (\S.*): (OK|FAIL)$"
_BACKENDS_PASSED = r"^(\d+)/(\d+) backends passed$"
_COUNT_DIGITS = 12  # a count of more digits is not a test count


def _count(text: str) -> int:
    if len(text) > _COUNT_DIGITS:
        raise Unreadable(f"a count of {len(text)} digits")
    return int(text)


class _Section(Struct):  # a backend's, as read so far
    name: str
    ok: int = 0
    failed: int = 0
    unsupported: int = 0
    counted: tuple[int, int] | None = None  # its `N/M tests passed` line
    status: str | None = None  # its `Backend NAME: OK|FAIL` line: the verdict, the name
    status_name: str | None = None


def parse_test_backend_ops(data: bytes) -> Figures:
    text = re.sub(_ANSI, "", _text(data, "test-backend-ops"))
    backends: list[_Section] = []
    current: _Section | None = None
    failing: list[shapes.FailedCase] = []
    overall: tuple[int, int] | None = None
    for line in text.splitlines():  # no "\r" is left in a line
        if m := re.match(_BACKEND_HEAD, line):
            current = _Section(m.group(3).strip())
            backends.append(current)
        elif m := re.match(_BACKENDS_PASSED, line):
            overall = (_count(m.group(1)), _count(m.group(2)))
        elif current is None:
            continue
        elif m := re.match(_TESTS_PASSED, line):
            current.counted = (_count(m.group(1)), _count(m.group(2)))
        elif m := re.match(_BACKEND_STATUS, line):
            current.status, current.status_name = m.group(2), m.group(1)
        elif (m := re.match(_CASE, line)) and (line.startswith("  ") or m.group(1)):
            found, name, params = m.group(1), m.group(2), m.group(3)[:400]
            rest = m.group(4).rstrip()
            if rest.startswith("not supported"):
                current.unsupported += 1
            elif rest == "OK" or rest.endswith(" OK"):
                current.ok += 1
            else:  # FAIL, after its finding, or an error message instead of a verdict
                current.failed += 1
                why = rest[: -len("FAIL")] if rest.endswith("FAIL") else rest
                why = " ".join(p.strip() for p in (found or "", why) if p.strip())[:300]
                if len(failing) < MAX_CASES:
                    failing.append(shapes.FailedCase(name=name, params=params, error=why or None))
    if not (tested := [b for b in backends if b.status is not None]):
        raise Unreadable(
            "no `Backend NAME: OK|FAIL` line: no backend was tested (a wrong -b name, a "
            "crash, or not test-backend-ops output)"
        )
    out: list[shapes.OpsBackend] = []
    for b in tested:
        if b.counted is None:
            raise Unreadable(f"backend {b.name}: no `N/M tests passed` line before its status")
        if b.status_name != b.name:
            raise Unreadable(f"backend {b.name}: its status line names {b.status_name!r}")
        passed, total = b.counted
        if passed > total:
            raise Unreadable(f"backend {b.name}: {passed}/{total} tests passed")
        failed = max(total - passed, b.failed)
        if b.status == "FAIL" and failed == 0:
            raise Unreadable(f"backend {b.name}: FAIL with every test passed")
        if b.status == "OK" and failed:
            raise Unreadable(f"backend {b.name}: OK with {failed} failed test(s)")
        out.append(
            shapes.OpsBackend(
                name=b.name,
                status=b.status or "",
                passed=passed,
                total=total,
                ok=b.ok,
                failed=failed,
                unsupported=b.unsupported,
            )
        )
    figures = shapes.OpsFigures(
        backends=out,
        ops_passed=sum(b.passed for b in out),
        ops_failed=sum(b.failed for b in out),
        ops_unsupported=sum(b.unsupported for b in out),
        ops_total=sum(b.total for b in out),
    )
    if overall is not None:
        figures.backends_passed, figures.backends_total = overall
    return Figures(figures, tuple(failing))


def parse_llama_bench(data: bytes) -> Figures:
    """The slowest prompt and generation speeds are the figures the gate compares."""
    try:
        doc = json.loads(_text(data, "llama-bench"))
    except (ValueError, RecursionError) as err:
        raise Unreadable(f"not JSON ({str(err)[:120]})") from None
    if not isinstance(doc, list) or not doc:
        raise Unreadable("not a JSON array of tests (run llama-bench with -o json)")
    if len(doc) > MAX_CASES:
        raise Unreadable(f"{len(doc)} tests, over {MAX_CASES}")
    tests: list[shapes.BenchTest] = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            raise Unreadable(f"test {i}: not an object")
        for key in ("backends", "model_type"):
            if not isinstance(item.get(key), str):
                raise Unreadable(f"test {i}: {key} is not a string")
        for key in ("n_prompt", "n_gen", "model_size"):
            count = item.get(key)
            if type(count) is not int or count < 0:  # a bool is no count
                raise Unreadable(f"test {i}: {key} is not a whole number")
        for key in ("avg_ts", "stddev_ts"):
            number = item.get(key)
            if isinstance(number, bool) or not (
                isinstance(number, int | float) and math.isfinite(number) and number >= 0
            ):
                raise Unreadable(f"test {i}: {key} is not a finite number of tokens/s")
        if item["n_prompt"] == 0 and item["n_gen"] == 0:
            raise Unreadable(f"test {i}: neither prompt nor generation tokens")
        tests.append(
            shapes.BenchTest(
                n_prompt=item["n_prompt"],
                n_gen=item["n_gen"],
                avg_ts=float(item["avg_ts"]),
                stddev_ts=float(item["stddev_ts"]),
                backends=item["backends"][:200],
                model_type=item["model_type"][:200],
                model_size=item["model_size"],
            )
        )
    prompt = [t.avg_ts for t in tests if t.n_prompt > 0 and t.n_gen == 0]
    gen = [t.avg_ts for t in tests if t.n_gen > 0 and t.n_prompt == 0]
    figures = shapes.BenchFigures(
        tests=tests,
        prompt_ts=min(prompt) if prompt else None,
        gen_ts=min(gen) if gen else None,
        backends=sorted({t.backends for t in tests}),
        model_type=tests[0].model_type,
        model_size=tests[0].model_size,
    )
    return Figures(figures)


def parse_ctest_junit(data: bytes) -> Figures:
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import fromstring

    if len(data) > MAX_OUTPUT_BYTES:
        raise Unreadable(f"{len(data)} bytes of XML, over the {MAX_OUTPUT_BYTES}-byte bound")
    try:  # the reader refuses a DTD as it meets one, whatever the bytes' encoding
        root = fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise Unreadable(
            "a DOCTYPE or entity declaration: JUnit XML has none (refused, nothing expanded)"
        ) from None
    except (ParseError, ValueError, RecursionError) as err:
        raise Unreadable(f"not XML ({str(err)[:120]})") from None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    if root.tag not in ("testsuite", "testsuites") or not suites:
        raise Unreadable(f"root element <{root.tag[:40]}>, not <testsuite>")
    tests = failures = skipped = 0
    failing: list[shapes.FailedCase] = []
    for suite in suites:
        cases = suite.findall("testcase")
        suite_failed = 0
        for case in cases:
            name = (case.get("name") or "?")[:200]
            status = case.get("status", "run")
            bad = case.find("failure")
            bad = case.find("error") if bad is None else bad
            if bad is not None:
                suite_failed += 1
                if len(failing) < MAX_CASES:
                    message = (bad.get("message") or "").strip()[:300] or None
                    failing.append(shapes.FailedCase(name=name, params=None, error=message))
            elif case.find("skipped") is not None or status in ("notrun", "disabled"):
                skipped += 1
            tests += 1
        for attr, count, what in (
            ("tests", len(cases), "<testcase> elements"),
            ("failures", suite_failed, "failing <testcase>"),
        ):
            declared = suite.get(attr)
            if declared is not None and (not declared.isdigit() or int(declared) != count):
                raise Unreadable(f"{attr}={declared[:20]!r} but {count} {what}")
        failures += suite_failed
    if tests == 0:
        raise Unreadable("no <testcase>: no test ran")
    figures = shapes.CtestFigures(
        tests=tests, failed=failures, skipped=skipped, passed=tests - failures - skipped
    )
    return Figures(figures, tuple(failing))


# after common/log.cpp's prefix where it is on (common/common.cpp:370-371 turn it on):
# the timestamp `M.ss.mmm.uuu ` (log.cpp:97-105), then the level, `I ` for LOG_INF. Read
# from stderr alone, an entry can follow another's start on one line: the ETA line's
# end goes to stdout (LOG), so there it must carry the whole prefix
_ESTIMATE = r"Final estimate: PPL = (\d{1,12}\.\d{4}) \+/- (\d{1,12}\.\d{5})$"
_TIMESTAMP = r"\d{1,9}\.\d{2}\.\d{3}\.\d{3} "
_FINAL_PPL = rf"^(?:(?:{_TIMESTAMP})?I )?{_ESTIMATE}|(?<=[ \t]){_TIMESTAMP}I {_ESTIMATE}"


def parse_perplexity(data: bytes) -> Figures:
    lines = re.sub(_ANSI, "", _text(data, "llama-perplexity")).splitlines()
    found = [m for line in lines if (m := re.search(_FINAL_PPL, line))]
    if len(found) != 1:
        raise Unreadable(
            f"{len(found)} `Final estimate: PPL = X +/- Y` lines, not one (a crash, too "
            "little text for the context, a nan figure, or not llama-perplexity output)"
        )
    figure = found[0].group(1) or found[0].group(3)
    if (ppl := float(figure)) < 1:  # exp of a mean negative log-likelihood (>= 0)
        raise Unreadable(f"PPL = {figure}: a perplexity is at least 1")
    return Figures(shapes.ParityFigures(ppl=ppl))


PARSE: Mapping[str, Callable[[bytes], Figures]] = {
    "test-backend-ops": parse_test_backend_ops,
    "llama-bench": parse_llama_bench,
    "ctest": parse_ctest_junit,
    "parity": parse_perplexity,
}


def judge(figures: Figures, gate: Gate, model_size: int | str | None = None) -> Verdict:
    """Each key of the gate against the figures; a figure it needs but the output lacks
    fails (never passes by default). `model_size`: the verified model's tensor bytes, which
    every llama-bench test must report (a str: why they are not known; None: no model)."""
    problems: list[str] = []
    f = figures.figures
    if gate.max_failed is not UNSET:
        if (failed := failed_count(f)) is None:
            problems.append("max_failed: the output has no failure count")
        elif failed > gate.max_failed:
            shown = [c.shown() for c in figures.failing[:MAX_SHOWN_CASES]]
            more = failed - len(shown)  # counted, named or not
            what = "op case(s)" if figures.parser == "test-backend-ops" else "test(s)"
            problems.append(
                f"{failed} {what} failed (max_failed = {gate.max_failed})"
                + (": " + "; ".join(shown) if shown else "")
                + (f"; and {more} more" if more > 0 else "")
            )
    bench = f if isinstance(f, shapes.BenchFigures) else None
    speeds = Speeds() if gate.min_avg_ts is UNSET else gate.min_avg_ts
    for got, want, what in (
        (bench.prompt_ts if bench else None, speeds.prompt, "prompt"),
        (bench.gen_ts if bench else None, speeds.gen, "gen"),
    ):
        if want is UNSET:
            continue
        if got is None:
            problems.append(f"min_avg_ts.{what}: the output has no {what} test")
        elif got < want:
            problems.append(f"{what} speed {got:.2f} t/s is under min_avg_ts.{what} = {want:g}")
    if bench is not None and isinstance(model_size, str):
        problems.append(f"model_size cannot be checked: {model_size}")
    elif bench is not None and model_size is not None:
        wrong = sorted({t.model_size for t in bench.tests if t.model_size != model_size})
        if wrong:
            problems.append(
                f"llama-bench reports model_size {', '.join(map(str, wrong))} bytes, the "
                f"verified model's tensor data is {model_size} bytes: not the model certified"
            )
    if gate.max_rel_diff is not UNSET:
        parity = f if isinstance(f, shapes.ParityFigures) else None
        if parity is None or parity.rel_diff is None:
            problems.append("max_rel_diff: no figure of the pin's build to compare with")
        elif parity.rel_diff > gate.max_rel_diff:
            problems.append(
                f"PPL {parity.ppl:.4f} differs from the pin's {parity.reference_ppl:.4f} by "
                f"{parity.rel_diff:.3g} (relative), over max_rel_diff = {gate.max_rel_diff:g}"
            )
    if gate == Gate():
        problems.append("no threshold: a step never passes by default")
    return Verdict(not problems, tuple(problems))
