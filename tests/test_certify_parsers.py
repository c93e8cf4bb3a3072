"""The certification parsers read llama.cpp's own output formats (issue 30 #3): exact
figures from real-shaped output, and anything else is unreadable, never a pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dgr_forge.certify import parsers
from dgr_forge.certify.parsers import Unreadable, judge
from dgr_forge.host.recipes import Gate, Speeds

OPS_OK = (
    "Testing 2 devices\n\n"
    "Backend 1/2: CUDA0\n"
    "  Device description: NVIDIA H200\n"
    "  Device memory: 143771 MB (143127 MB free)\n\n"
    "  ADD(type=f32,ne=[10,5,4,3],nr=[1,1,1,1]): \x1b[1;32mOK\x1b[0m\n"
    "  MUL_MAT(type_a=q4_0,type_b=f32,m=16,n=1,k=256): \x1b[1;32mOK\x1b[0m\n"
    "  CONV_TRANSPOSE_1D(ne_input=[197,32,1,1]): not supported [CUDA0] \n"
    "  3/3 tests passed\n"
    "  Backend CUDA0: \x1b[1;32mOK\x1b[0m\n\n"
    "Backend 2/2: CPU\n"
    "  Skipping CPU backend\n"
    "2/2 backends passed\n"
    "\x1b[1;32mOK\x1b[0m\n"
)

OPS_FAIL = (
    OPS_OK.replace(
        "  MUL_MAT(type_a=q4_0,type_b=f32,m=16,n=1,k=256): \x1b[1;32mOK\x1b[0m\n",
        "  MUL_MAT(type_a=q4_0,type_b=f32,m=16,n=1,k=256): [MUL_MAT] NMSE = 0.012 > 0.0005 "
        "\x1b[1;31mFAIL\x1b[0m\n",
    )
    .replace("3/3 tests passed", "2/3 tests passed")
    .replace("  Backend CUDA0: \x1b[1;32mOK", "  Backend CUDA0: \x1b[1;31mFAIL")
)


def bench(*tests: dict[str, object]) -> bytes:
    rows = []
    for t in tests:
        rows.append(
            {
                "build_commit": "abc1234",
                "build_number": 4242,
                "cpu_info": "AMD EPYC",
                "gpu_info": "NVIDIA H200",
                "backends": "CUDA",
                "model_filename": "/models/tiny-00001-of-00003.gguf",
                "model_type": "llama 1B Q4_0",
                "model_size": 1234567,
                "model_n_params": 1100048384,
                "n_prompt": 0,
                "n_gen": 0,
                "avg_ts": 1.0,
                "stddev_ts": 0.1,
                "samples_ts": [1.0],
                **t,
            }
        )
    return json.dumps(rows, indent=2).encode()


def fig(f: parsers.Figures) -> dict[str, Any]:
    """The figures as the record and `--json` write them: tagged by the parser."""
    out: dict[str, Any] = msgspec.to_builtins(f.figures)
    assert out["parser"] == f.parser
    return out


def test_test_backend_ops_counts_ok_failed_unsupported() -> None:
    f = parsers.parse_test_backend_ops(OPS_OK.encode())
    assert fig(f)["backends"] == [
        {"name": "CUDA0", "status": "OK", "passed": 3, "total": 3, "ok": 2, "failed": 0,
         "unsupported": 1},
    ]  # fmt: skip
    assert fig(f)["ops_failed"] == 0 and fig(f)["backends_passed"] == 2
    assert judge(f, Gate(max_failed=0)).passed


def test_a_failing_op_case_is_named_with_its_error() -> None:
    f = parsers.parse_test_backend_ops(OPS_FAIL.encode())
    assert fig(f)["ops_failed"] == 1
    v = judge(f, Gate(max_failed=0))
    assert not v.passed
    assert "MUL_MAT(type_a=q4_0,type_b=f32,m=16,n=1,k=256)" in v.problems[0]
    assert "NMSE = 0.012 > 0.0005" in v.problems[0]
    assert judge(f, Gate(max_failed=1)).passed


@pytest.mark.parametrize(
    "output",
    [
        b"",
        b"Segmentation fault\n",
        # a backend filtered out / skipped: nothing was tested
        b"Testing 1 devices\n\nBackend 1/1: CPU\n  Skipping\n1/1 backends passed\nOK\n",
        # status without a count
        b"Backend 1/1: CPU\n  ADD(): OK\n  Backend CPU: OK\n",
        # contradictions
        b"Backend 1/1: CPU\n  2/3 tests passed\n  Backend CPU: OK\n",
        b"Backend 1/1: CPU\n  3/3 tests passed\n  Backend CPU: FAIL\n",
        b"Backend 1/1: CPU\n  4/3 tests passed\n  Backend CPU: OK\n",
        b"Backend 1/1: CPU\n  3/3 tests passed\n  Backend CUDA0: OK\n",
        b"Backend 1/1: CPU\n  1/1 tests passed\n  Backend CPU: OK\n\0",
        b"Backend 1/1: CPU\n  " + b"9" * 40 + b"/1 tests passed\n  Backend CPU: OK\n",
    ],
)
def test_unreadable_test_backend_ops_output(output: bytes) -> None:
    with pytest.raises(Unreadable):
        parsers.parse_test_backend_ops(output)


def test_an_error_line_instead_of_a_verdict_is_a_failure() -> None:
    out = (
        OPS_OK.replace(
            "  ADD(type=f32,ne=[10,5,4,3],nr=[1,1,1,1]): \x1b[1;32mOK\x1b[0m",
            "  ADD(type=f32,ne=[10,5,4,3],nr=[1,1,1,1]): failed to allocate tensors [CUDA0]",
        )
        .replace("3/3 tests passed", "2/3 tests passed")
        .replace("CUDA0: \x1b[1;32mOK", "CUDA0: FAIL")
    )
    f = parsers.parse_test_backend_ops(out.encode())
    assert fig(f)["ops_failed"] == 1 and "failed to allocate" in f.failing[0].shown()


def test_llama_bench_json_prompt_and_generation_speeds() -> None:
    data = bench(
        {"n_prompt": 64, "avg_ts": 812.5, "stddev_ts": 3.25},
        {"n_gen": 16, "avg_ts": 71.25, "stddev_ts": 0.5},
    )
    f = parsers.parse_llama_bench(data)
    assert fig(f)["prompt_ts"] == 812.5 and fig(f)["gen_ts"] == 71.25
    assert fig(f)["backends"] == ["CUDA"] and fig(f)["model_type"] == "llama 1B Q4_0"
    assert fig(f)["tests"][1] == {
        "n_prompt": 0, "n_gen": 16, "avg_ts": 71.25, "stddev_ts": 0.5, "backends": "CUDA",
        "model_type": "llama 1B Q4_0", "model_size": 1234567,
    }  # fmt: skip
    assert judge(f, Gate(min_avg_ts=Speeds(prompt=50.0, gen=5.0))).passed
    slow = judge(f, Gate(min_avg_ts=Speeds(prompt=50.0, gen=100.0)))
    assert not slow.passed and slow.problems == (
        "gen speed 71.25 t/s is under min_avg_ts.gen = 100",
    )


def test_a_gate_on_a_test_the_output_lacks_fails() -> None:
    f = parsers.parse_llama_bench(bench({"n_prompt": 64, "avg_ts": 800.0}))
    v = judge(f, Gate(min_avg_ts=Speeds(prompt=50.0, gen=5.0)))
    assert not v.passed and "no gen test" in v.problems[0]


def test_no_threshold_never_passes() -> None:
    f = parsers.parse_llama_bench(bench({"n_prompt": 64, "avg_ts": 800.0}))
    assert not judge(f, Gate()).passed


@pytest.mark.parametrize(
    "output",
    [
        b"",
        b"main: error: failed to load model\n",
        b"{}",
        b"[]",
        b"[1]",
        b"[" * 100000 + b"]" * 100000,
        bench({"n_prompt": 64, "avg_ts": "fast"}),
        bench({"n_prompt": 64, "avg_ts": float("nan")}).replace(b"NaN", b"NaN"),
        bench({"n_prompt": 64, "avg_ts": -1.0}),
        bench({"n_prompt": True, "avg_ts": 1.0}),
        bench({"avg_ts": 1.0}),  # neither prompt nor generation
        b'[{"n_prompt": 1' + b"0" * 5000 + b"}]",
    ],
)
def test_unreadable_llama_bench_output(output: bytes) -> None:
    with pytest.raises(Unreadable):
        parsers.parse_llama_bench(output)


JUNIT = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="host" tests="3" failures="1" disabled="0" skipped="1" hostname="" time="0">
\t<testcase name="parity-layers" classname="parity-layers" time="0.1" status="run">
\t\t<system-out>ok</system-out>
\t</testcase>
\t<testcase name="parity-kv" classname="parity-kv" time="0.1" status="fail">
\t\t<failure message="Failed"/>
\t</testcase>
\t<testcase name="parity-moe" classname="parity-moe" time="0" status="notrun">
\t\t<skipped message="Disabled"/>
\t</testcase>
</testsuite>
"""


def test_ctest_junit_counts_and_names_failures() -> None:
    f = parsers.parse_ctest_junit(JUNIT)
    assert fig(f) == {"parser": "ctest", "tests": 3, "failed": 1, "skipped": 1, "passed": 1}
    v = judge(f, Gate(max_failed=0))
    assert not v.passed and "parity-kv" in v.problems[0]


@pytest.mark.parametrize(
    "output",
    [
        b"",
        b"not xml",
        b"<html/>",
        b'<testsuite tests="0"></testsuite>',
        JUNIT.replace(b'tests="3"', b'tests="2"'),
        JUNIT.replace(b'failures="1"', b'failures="0"'),
        # billion laughs: refused before any parsing, nothing expanded
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>'
        b'<testsuite tests="1"><testcase name="&b;"/></testsuite>',
        b'<!DOCTYPE t SYSTEM "file:///etc/passwd"><testsuite/>',
        b"<testsuite>" + b"<a>" * 200000 + b"</a>" * 200000 + b"</testsuite>",
    ],
)
def test_unreadable_junit(output: bytes) -> None:
    with pytest.raises(Unreadable):
        parsers.parse_ctest_junit(output)


def test_output_over_the_bound_is_unreadable() -> None:
    huge = b"x" * (parsers.MAX_OUTPUT_BYTES + 1)
    for parse in parsers.PARSE.values():
        with pytest.raises(Unreadable, match="over the"):
            parse(huge)


# The pin's own forms (tests/test-backend-ops.cpp): the compare callback prints its finding
# (`[OP] ERR = %.9f > %.9f `, `[OP] NaN at index ...`) before the case's own line
# (`  OP(params): ` then `FAIL`), and the section ends with `Failing tests:` naming each.
def _cpu_ops(cases: list[str], passed: int, total: int, failing: list[str]) -> bytes:
    status = "\x1b[1;32mOK\x1b[0m" if passed == total else "\x1b[1;31mFAIL\x1b[0m"
    text = "Testing 1 devices\n\nBackend 1/1: CPU\n  Device description: Intel Xeon\n"
    text += "  Device memory: 128000 MB (120000 MB free)\n\n" + "".join(c + "\n" for c in cases)
    text += f"  {passed}/{total} tests passed\n"
    if failing:
        text += "\nFailing tests:\n" + "".join(f"  {name}\n" for name in failing)
    text += f"  Backend CPU: {status}\n\n{int(passed == total)}/1 backends passed\n{status}\n"
    return text.encode()


FAIL = "\x1b[1;31mFAIL\x1b[0m"
OK = "\x1b[1;32mOK\x1b[0m"


def test_the_pins_failing_line_forms_are_named_with_their_error() -> None:
    add = "ADD(type=f32,ne=[10,5,4,3],nr=[1,1,1,1],nf=1)"
    rows = "SUM_ROWS(type=f32,ne=[41,7,1,3],permute=0,slice=0)"
    nan = "SOFT_MAX(type=f32,ne=[16,2,3,1],mask=0,sinks=0)"
    out = _cpu_ops(
        [
            f"[ADD] ERR = 1.170000000 > 0.000000100   {add}: {FAIL}",
            f"  MUL(type=f32,ne=[10,5,4,3]): {OK}",
            f"[SUM_ROWS] NMSE = 0.000000103 > 0.000000100   {rows}: {FAIL}",
            f"[SOFT_MAX] NaN at index 3 (CPU=nan CPU=0.500000)   {nan}: {FAIL}",
        ],
        1, 4, [add, rows, nan],
    )  # fmt: skip
    f = parsers.parse_test_backend_ops(out)
    assert fig(f)["ops_failed"] == 3 and fig(f)["ops_passed"] == 1
    cases = [msgspec.to_builtins(c) for c in f.failing]
    assert cases == [
        {"name": "ADD", "params": add[4:-1], "error": "[ADD] ERR = 1.170000000 > 0.000000100"},
        {"name": "SUM_ROWS", "params": rows[9:-1],
         "error": "[SUM_ROWS] NMSE = 0.000000103 > 0.000000100"},
        {"name": "SOFT_MAX", "params": nan[9:-1],
         "error": "[SOFT_MAX] NaN at index 3 (CPU=nan CPU=0.500000)"},
    ]  # fmt: skip
    (problem,) = judge(f, Gate(max_failed=0)).problems
    assert problem.startswith("3 op case(s) failed (max_failed = 0): ")
    assert f"{add} [ADD] ERR = 1.170000000 > 0.000000100" in problem
    assert rows in problem and nan in problem and "more" not in problem


def test_the_message_names_the_first_ten_then_how_many_more() -> None:
    names = [f"ADD(type=f32,ne=[{i},1,1,1])" for i in range(25)]
    out = _cpu_ops([f"[ADD] ERR = 2.0 > 0.1   {n}: {FAIL}" for n in names], 0, 25, names)
    f = parsers.parse_test_backend_ops(out)
    assert len(f.failing) == 25  # all of them for --json
    (problem,) = judge(f, Gate(max_failed=0)).problems
    assert all(n in problem for n in names[:10]) and names[10] not in problem
    assert problem.endswith("; and 15 more")


def test_a_count_the_lines_do_not_name_still_says_how_many_more() -> None:
    """A failure the program counted but printed no case line for (a crash of the case's
    own output) is still counted in "and N more", never lost."""
    name = "ADD(type=f32,ne=[1,1,1,1])"
    out = _cpu_ops([f"[ADD] ERR = 2.0 > 0.1   {name}: {FAIL}"], 0, 3, [name])
    (problem,) = judge(parsers.parse_test_backend_ops(out), Gate(max_failed=0)).problems
    assert problem.startswith("3 op case(s) failed") and problem.endswith("; and 2 more")


def test_ctest_names_its_failing_tests_with_their_message() -> None:
    junit = (
        b'<testsuite tests="3" failures="2">'
        b'<testcase name="test-tokenizer-0" status="run"><failure message="Failed"/></testcase>'
        b'<testcase name="test-backend-ops" status="run"/>'
        b'<testcase name="test-sampling" status="run"><error message="SEGFAULT"/></testcase>'
        b"</testsuite>"
    )
    f = parsers.parse_ctest_junit(junit)
    assert [msgspec.to_builtins(c) for c in f.failing] == [
        {"name": "test-tokenizer-0", "params": None, "error": "Failed"},
        {"name": "test-sampling", "params": None, "error": "SEGFAULT"},
    ]
    (problem,) = judge(f, Gate(max_failed=0)).problems
    assert (
        problem
        == "2 test(s) failed (max_failed = 0): test-tokenizer-0 Failed; test-sampling SEGFAULT"
    )


def test_llama_bench_model_size_must_be_the_verified_models_tensor_bytes() -> None:
    """Issue 43 #3: llama-bench's model_size is ggml_nbytes of every tensor (less than the
    files: no header); each test must report the verified model's exactly."""
    f = parsers.parse_llama_bench(bench({"n_prompt": 64, "avg_ts": 800.0}))
    gate = Gate(min_avg_ts=Speeds(prompt=50.0))
    assert judge(f, gate, 1234567).passed
    v = judge(f, gate, 461568)
    assert v.problems == (
        "llama-bench reports model_size 1234567 bytes, the verified model's tensor data is "
        "461568 bytes: not the model certified",
    )
    unknown = judge(f, gate, "m.gguf: a tensor type the forge does not know")
    assert unknown.problems == (
        "model_size cannot be checked: m.gguf: a tensor type the forge does not know",
    )


# llama-perplexity's lines, as tools/perplexity/perplexity.cpp prints them at the pin
PERPLEXITY_OUT = b"[1]579.9722,[2]489.8804,\n"
PERPLEXITY_ERR = (
    b"perplexity: tokenizing the input ..\n"
    b"perplexity: calculating perplexity over 2 chunks, n_ctx=128, batch_size=128, n_seq=1\n"
    b"Final estimate: PPL = 266.1472 +/- 12.34567\n"
)


# the real program's stderr at the pin: LOG_INF through common/log.cpp with the prefix and
# timestamps common/common.cpp:370-371 turn on (`M.ss.mmm.uuu I `, log.cpp:96-110), as
# a real llama-perplexity printed it on the tiny model (the figure changed to the one above)
PERPLEXITY_ERR_PREFIXED = (
    b"0.00.136.775 I perplexity: tokenizing the input ..\n"
    b"0.00.138.264 I perplexity: calculating perplexity over 2 chunks, n_ctx=128, "
    b"batch_size=128, n_seq=1\n"
    b"0.00.282.181 I Final estimate: PPL = 266.1472 +/- 12.34567\n"
)  # fmt: skip


def test_perplexity_reads_its_final_estimate_from_either_stream() -> None:
    for data in (
        PERPLEXITY_OUT + b"\n" + PERPLEXITY_ERR,
        PERPLEXITY_ERR + PERPLEXITY_OUT,
        PERPLEXITY_OUT + PERPLEXITY_ERR_PREFIXED,
        PERPLEXITY_ERR_PREFIXED.replace(b"0.00.282.181 I ", b"I "),  # --log-timestamps off
        # stderr alone, as the real program wrote it to its own pipe: the ETA line's end
        # ("0.00 minutes\n", LOG) went to stdout, so the final entry follows its start
        b"0.00.273.595 I perplexity: 0.11 seconds per pass - ETA "
        b"0.00.282.181 I Final estimate: PPL = 266.1472 +/- 12.34567\n",
    ):
        f = parsers.parse_perplexity(data)
        assert fig(f) == {
            "parser": "parity", "ppl": 266.1472, "reference_ppl": None, "rel_diff": None,
            "reference": None, "reference_log": None, "reference_libraries": [],
        }  # fmt: skip
    # the gate: the pin's figure, compared; none is never a pass
    assert not judge(f, Gate(max_rel_diff=0.001)).passed
    near = msgspec.structs.replace(f.figures, reference_ppl=266.2, rel_diff=0.0002)
    assert judge(parsers.Figures(near), Gate(max_rel_diff=0.001)).passed
    far = msgspec.structs.replace(f.figures, reference_ppl=300.0, rel_diff=0.1127)
    v = judge(parsers.Figures(far), Gate(max_rel_diff=0.001))
    assert v.problems == (
        "PPL 266.1472 differs from the pin's 300.0000 by 0.113 (relative), over "
        "max_rel_diff = 0.001",
    )


@pytest.mark.parametrize(
    "output",
    [
        b"",
        PERPLEXITY_OUT,  # no final line: a crash, or too little text
        PERPLEXITY_ERR + PERPLEXITY_ERR,  # two
        PERPLEXITY_ERR.replace(b"266.1472", b"nan"),
        PERPLEXITY_ERR.replace(b"266.1472", b"266.15"),  # not the pin's %.4lf
        PERPLEXITY_ERR.replace(b"266.1472", b"-266.1472"),
        PERPLEXITY_ERR.replace(b"266.1472", b"0.5000"),  # under 1: no perplexity
        PERPLEXITY_ERR.replace(b"Final", b"final"),
        PERPLEXITY_ERR_PREFIXED.replace(b" I Final", b" W Final"),  # a warning says no figure
        PERPLEXITY_ERR_PREFIXED.replace(b"0.00.282.181", b"x.00.282.181"),
        PERPLEXITY_ERR_PREFIXED.replace(b"0.00.282.181 I Final", b"said I Final"),
        PERPLEXITY_ERR.replace(b"+/- 12.34567", b"+/- 12.34567 extra"),
        PERPLEXITY_ERR.replace(b"266.1472", b"9" * 20 + b".1472"),
        PERPLEXITY_ERR + b"\0",
        b"Unexpected negative standard deviation of log(prob)\n",
    ],
)
def test_unreadable_perplexity_output(output: bytes) -> None:
    with pytest.raises(Unreadable):
        parsers.parse_perplexity(output)


def test_a_parity_run_whose_final_entry_was_lost_is_run_again(tmp_path: Path) -> None:
    """llama-perplexity's leaked logger can drop its last entries at exit (exit 0): the
    step runs it again (at most RUNS_FOR_A_LOST_ENTRY times); any other step runs once."""
    from dgr_forge.certify import run as run_mod
    from dgr_forge.host.recipes import Step

    program = tmp_path / "llama-perplexity"
    program.write_text(
        "#!/bin/sh\n"  # the first two runs lose the entry, the third prints it
        "n=$(cat runs 2>/dev/null || echo 0); echo $((n + 1)) > runs\n"
        'printf "[1]12.3400," \n'
        '[ "$n" -ge 2 ] && echo "0.00.001.000 I Final estimate: PPL = 12.3400 +/- 0.10000" >&2\n'
        "exit 0\n"
    )
    program.chmod(0o755)
    prog = run_mod.Program("llama-perplexity", program, "bin/llama-perplexity", "0" * 64)
    parity = Step(
        name="parity", program="llama-perplexity", parser="parity", max_rel_diff=0.1, timeout=10
    )
    done, data = run_mod._run_whole(prog, (), parity, tmp_path, tmp_path / "log")
    assert done.returncode == 0 and b"Final estimate" in data
    assert (tmp_path / "runs").read_text().strip() == "3"
    # one lost too many: still unreadable after the last run, never a figure made up
    (tmp_path / "runs").write_text("-1")
    done, data = run_mod._run_whole(prog, (), parity, tmp_path, tmp_path / "log2")
    assert b"Final estimate" not in data and (tmp_path / "runs").read_text().strip() == "2"
    # another parser's step runs once
    (tmp_path / "runs").unlink()
    ops = msgspec.structs.replace(parity, parser="test-backend-ops")
    run_mod._run_whole(prog, (), ops, tmp_path, tmp_path / "log3")
    assert (tmp_path / "runs").read_text().strip() == "1"
