"""Hostile inputs, fifth round (issue 45, cause 6): a split's header read by HTTP Range
requests had a byte bound (DGR_ARTIFACTS_HEADER_MAX) but no request or time bound. A
server answering one byte per 206 took 5,006 requests and 232 s for 4.9 KiB of header;
one dripping bytes inside an answer was never cut off. Now a header read has a request
budget, an overall deadline and the downloads' minimum rate, each set small here so
every attack is refused in well under 2 s against a real loopback server."""

from __future__ import annotations

import time
from pathlib import Path

from support.cli import Result, run_forge
from support.server import FaultyServer
from test_layers_attacks import FAST, NAMES, manifest, server, source

__all__ = ["server", "source"]  # the fixtures


def mapped(tmp_path: Path, source: Path, server: FaultyServer, **env: str) -> tuple[Result, float]:
    m = manifest(tmp_path, source, server.base_url, mapped=False)
    started = time.monotonic()
    res = run_forge("artifacts", "map", str(m), "--json", env={**FAST, **env}, timeout=60)
    return res, time.monotonic() - started


def test_a_server_answering_one_byte_per_206_meets_the_request_budget(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    server.faults.range_max = 1
    res, took = mapped(tmp_path, source, server, DGR_ARTIFACTS_RANGE_REQUESTS="40")
    assert res.code == 1, res
    assert "more than 40 Range requests" in res.stderr, res
    assert "DGR_ARTIFACTS_RANGE_REQUESTS" in res.json["error"]
    assert all(len(server.requests_for(n)) <= 40 for n in NAMES), len(server.log)
    assert took < 2, took


def test_one_byte_per_206_under_a_big_budget_meets_the_deadline(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    """The variant: a budget large enough to let it run; the overall deadline ends it."""
    server.faults.range_max = 1
    server.faults.answer_delay = 0.002
    res, took = mapped(
        tmp_path, source, server, DGR_ARTIFACTS_RANGE_REQUESTS="1000000",
        DGR_ARTIFACTS_RANGE_DEADLINE="0.4", DGR_ARTIFACTS_STALL_S="60",
    )  # fmt: skip
    assert res.code == 1, res
    assert "not read within 0.4s" in res.stderr and "DGR_ARTIFACTS_RANGE_DEADLINE" in res.stderr
    assert took < 2, took


def test_a_server_dripping_bytes_inside_an_answer_is_cut_at_the_minimum_rate(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    server.faults.trickle = dict.fromkeys(NAMES, 0)  # every answer drips from its first byte
    server.faults.trickle_interval = 0.02
    res, took = mapped(tmp_path, source, server, DGR_ARTIFACTS_STALL_S="0.3")
    assert res.code == 1, res
    assert "too slow" in res.stderr and "DGR_ARTIFACTS_MIN_RATE" in res.stderr, res
    assert took < 2, took


def test_quick_answers_of_a_byte_each_are_slow_all_the_same(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    """The variant: no single answer drips (each 206 is one byte, at once, after a short
    pause), so only a rate taken over the whole header read sees it."""
    server.faults.range_max = 1
    server.faults.answer_delay = 0.005
    res, took = mapped(tmp_path, source, server, DGR_ARTIFACTS_STALL_S="0.3")
    assert res.code == 1, res
    assert "too slow" in res.stderr, res
    assert took < 2, took


def test_an_honest_server_maps_within_the_bounds(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    res, _ = mapped(tmp_path, source, server, DGR_ARTIFACTS_RANGE_REQUESTS="8")
    assert res.code == 0, res
    assert all(len(server.requests_for(n)) <= 8 for n in NAMES)
