"""core/proc: the one subprocess runner (real processes, no mocks)."""

from __future__ import annotations

import sys
from pathlib import Path

from dgr_forge.core import proc


def test_capture_never_inherits_stdin_and_keeps_both_streams() -> None:
    code = "import sys; print(sys.stdin.read() == ''); print('e', file=sys.stderr)"
    done = proc.capture([sys.executable, "-c", code])
    assert done.returncode == 0
    assert done.stdout.strip() == "True" and done.stderr.strip() == "e"


def test_capture_passes_input() -> None:
    done = proc.capture(
        [sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"], input="abc"
    )
    assert done.stdout.strip() == "cba"


def test_probe_of_a_missing_or_hanging_tool_is_none() -> None:
    assert proc.probe(["/nonexistent/tool", "--version"]) is None
    assert proc.probe([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2) is None
    assert proc.probe(["tool\x00with-nul"]) is None


def test_stream_splits_progress_redraws_and_merges_streams() -> None:
    code = (
        "import sys; sys.stderr.write('10%\\r50%\\r100%\\n'); sys.stderr.flush();"
        "print('out'); sys.stdout.flush(); sys.stderr.write('tail'); sys.exit(3)"
    )
    seen: list[str] = []
    rc = proc.stream([sys.executable, "-c", code], seen.append)
    assert rc == 3
    assert seen[:3] == ["10%", "50%", "100%"] and "out" in seen and seen[-1] == "tail"
    only_err: list[str] = []
    proc.stream([sys.executable, "-c", code], only_err.append, merge_stdout=False)
    assert "out" not in only_err and "100%" in only_err


def test_bounded_stops_at_the_deadline_and_at_the_output_bound(tmp_path: Path) -> None:
    """A certification step's program: killed (with its children) at its time limit or
    when its output passes the bound, and what it wrote is kept, bounded, in the log."""
    import time

    started = time.monotonic()
    sleeper = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)']); print('started', flush=True); time.sleep(60)"
    )
    done = proc.bounded([sys.executable, "-c", sleeper], timeout=1.0, limit=1 << 20)
    assert done.timed_out and done.returncode is None and done.stdout == b"started\n"
    assert time.monotonic() - started < 10
    log = tmp_path / "log"
    with log.open("wb") as f:
        flood = "import sys\nwhile True: sys.stdout.write('y' * 65536)"
        done = proc.bounded([sys.executable, "-c", flood], timeout=30, limit=100_000, log=f)
    assert done.over_limit and done.returncode is None
    assert len(done.stdout) == 100_000 and log.stat().st_size == 100_000
    ok = proc.bounded(
        [sys.executable, "-c", "import sys; print('o'); print('e', file=sys.stderr); sys.exit(3)"],
        timeout=30, limit=1000,
    )  # fmt: skip
    assert ok.returncode == 3 and ok.stdout == b"o\n" and ok.stderr == b"e\n"
    assert not ok.timed_out and not ok.over_limit
