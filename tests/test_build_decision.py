"""A lane's build decision, reached without CMake: `lanes.decision` from constructed
states (as state.json holds them, written by this forge, an older one, or by hand) and
snapshots of what is there now. Each decision and its reason; the transitions the
builder writes; the checks a reuse still makes on disk (`decision`'s checks, real files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dgr_forge.core.fsutil import sha256_file
from dgr_forge.lanes import decision, programs, stamps
from dgr_forge.lanes.decision import Decision, Snapshot, after_compile, decide
from dgr_forge.lanes.state import Artifact, LaneState, LastBuild

HEAD = "a" * 40
DIGEST = "d" * 64
FP = "f" * 64
KEYID = "k" * 64


def recorded(**last: Any) -> dict[str, Any]:
    """A lane's entry in state.json, as this forge writes it after a signed build."""
    return {
        "inputs_digest": DIGEST,
        "head_commit": HEAD,
        "source_date_epoch": 1_700_000_000,
        "configured_at": "2026-12-01T09:00:00+00:00",
        "last_build": {
            "time": "2026-12-01T09:01:00+00:00",
            "result": "ok",
            "report": "/ws/reports/cpu.intoto.jsonl",
            "log": "/ws/logs/build-cpu.log",
            **last,
        },
        "evidence": {
            "report_sha256": "r" * 64,
            "signed_by": KEYID,
            "signer_fingerprint": FP,
            "input_digest": "w" * 64,
        },
    }


def state(**last: Any) -> LaneState:
    return LaneState.from_dict(recorded(**last))


def now(**changes: Any) -> Snapshot:
    """What is there after a completed build, nothing touched since."""
    base = Snapshot(
        configure_digest=DIGEST,
        build_files=True,
        upstream_head=HEAD,
        upstream_clean=True,
        key_fingerprint=FP,
    )
    return msgspec.structs.replace(base, **changes)


def test_nothing_moved_reuses_the_last_report_without_ninja() -> None:
    d = decide(state(), now())
    assert (d.action, d.configured, d.rebuilt, d.handback) == ("reuse", True, (), True)
    assert "last report" in d.reason
    # the whole input is the report's: Ninja is not even asked
    assert decision.skips_ninja(d, "w" * 64, "w" * 64)
    assert not decision.skips_ninja(d, "w" * 64, "x" * 64)
    assert not decision.skips_ninja(d, None, "w" * 64)


def test_after_ninja_content_decides_whatever_ninja_ran() -> None:
    d = decide(state(), now())
    same = {"recorded": "w" * 64, "whole": "w" * 64}
    # an always-run step wrote nothing, or a relink gave the same bytes: the same report
    assert after_compile(d, wrote=False, subjects_same=True, **same) == "reuse"
    assert after_compile(d, wrote=True, subjects_same=True, **same) == "reuse"
    # a subject changed: a new report
    assert after_compile(d, wrote=True, subjects_same=False, **same) == "report"
    # the inputs moved and Ninja wrote something: a new report, even with the same bytes
    moved = {"recorded": "w" * 64, "whole": "x" * 64}
    assert after_compile(d, wrote=True, subjects_same=True, **moved) == "report"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"configure_digest": "e" * 64}, "configure's inputs changed"),
        ({"build_files": False}, "no CMakeCache.txt or build.ninja"),
        ({"upstream_head": None}, "patched tree is not there"),
        ({"upstream_head": "b" * 40}, "patched tree moved (aaaaaaaaaaaa -> bbbbbbbbbbbb)"),
        ({"upstream_clean": False}, "modified or untracked files"),
        ({"worker_at": False}, "worker checkout"),
    ],
)
def test_what_configure_depends_on_moved_reconfigures(changes: dict[str, Any], reason: str) -> None:
    d = decide(state(), now(**changes))
    assert d.action == "reconfigure" and not d.configured
    assert reason in d.reason
    assert d.rebuilt == ()  # artifacts are relinked by the configure's build anyway


def test_moved_recipe_is_refused_before_anything_even_a_pending_wipe() -> None:
    st = LaneState.from_dict({**recorded(), "in_progress": "wipe"})
    d = decide(st, now(moved=("/root/recipes/cpu.toml",), programs_changed=("CMAKE_C_COMPILER",)))
    assert d.action == "refuse" and d.moved == ("/root/recipes/cpu.toml",)
    assert d.reason == f"changed {decision.BEFORE_LOCK}"


def test_a_removal_cut_short_is_finished_first() -> None:
    d = decide(LaneState.from_dict({**recorded(), "in_progress": "wipe"}), now())
    assert d.action == "rebuild" and "cut short" in d.reason


def test_a_changed_program_rebuilds_it_all(tmp_path: Path) -> None:
    # a compiler replaced at the same path since configure: a real file, a real stamp
    cc = tmp_path / "cc"
    cc.write_bytes(b"#!/bin/sh\necho one\n")
    stamp = stamps.stamp(cc)
    assert stamp is not None
    progs = {"CMAKE_C_COMPILER": programs.Program(str(cc), list(stamp), version="1")}
    assert programs.changed(progs) == []
    cc.write_bytes(b"#!/bin/sh\necho two, another compiler\n")
    changed = tuple(programs.changed(progs))
    assert changed == ("CMAKE_C_COMPILER",)
    d = decide(state(), now(programs_changed=changed))
    assert d.action == "rebuild" and d.reason == "changed since configure: CMAKE_C_COMPILER"


def test_a_changed_key_writes_a_new_report() -> None:
    other = now(key_fingerprint="0" * 64, key_id="1" * 64)
    d = decide(state(), other)
    assert (d.action, d.reason) == ("compile", "the last report was signed by another key")
    # the same key at another path (or mode): the fingerprint differs, the keyid says same
    assert decision.needs_key_id(state(), "0" * 64)
    assert decide(state(), now(key_fingerprint="0" * 64, key_id=KEYID)).action == "reuse"
    # the fingerprint matches: no key load needed at all
    assert not decision.needs_key_id(state(), FP)
    # a key the fingerprint cannot tell (a FIFO, a device) needs the full load
    assert decision.needs_key_id(state(), None)
    assert decide(state(), now(key_fingerprint=None, key_id=KEYID)).action == "compile"


def test_unsigned_report_is_reused_only_when_unsigned_is_asked() -> None:
    st = state()
    assert st.last_build is not None
    st.last_build.signed_by, st.last_build.signer_fingerprint = None, "unsigned"
    assert decide(st, now(key_fingerprint="unsigned")).action == "reuse"
    assert decide(st, now(key_fingerprint=FP, key_id=KEYID)).action == "compile"


def test_artifacts_changed_on_disk_are_rebuilt_and_reported_again() -> None:
    d = decide(state(), now(subjects_changed=("/ws/build/cpu/bin/worker",)))
    assert d.action == "compile" and d.rebuilt == ("/ws/build/cpu/bin/worker",)
    same = {"recorded": "w" * 64, "whole": "w" * 64}
    assert after_compile(d, wrote=True, subjects_same=False, **same) == "report"
    # relinked to the very bytes the report names: it is still true, handed back
    assert after_compile(d, wrote=True, subjects_same=True, **same) == "reuse"


def test_a_failed_build_is_never_handed_back_a_cut_short_one_by_content() -> None:
    failed = state(result="failed", phase="build")
    d = decide(failed, now())
    assert (d.action, d.reason) == ("compile", "no completed build (the last one failed)")
    assert not d.handback
    same = {"recorded": "w" * 64, "whole": "w" * 64}
    assert after_compile(d, wrote=False, subjects_same=True, **same) == "report"
    never = LaneState.from_dict({k: v for k, v in recorded().items() if k != "last_build"})
    assert never.last_build is None
    assert decide(never, now()).reason == "no completed build"
    cut = LaneState.from_dict({**recorded(), "in_progress": "build"})
    d = decide(cut, now())
    assert (d.action, d.reason) == ("compile", "the last run was cut short (in build)")
    assert not decision.skips_ninja(d, "w" * 64, "w" * 64)  # Ninja finishes what it began
    # then its inputs and subjects decide: the same ones, the same report
    assert after_compile(d, wrote=True, subjects_same=True, **same) == "reuse"
    assert after_compile(d, wrote=True, subjects_same=False, **same) == "report"
    # another key asked for now: never handed back
    other = decide(cut, now(key_fingerprint="0" * 64, key_id="1" * 64))
    assert after_compile(other, wrote=False, subjects_same=True, **same) == "report"


def test_a_state_recorded_by_an_older_forge_is_built_again_not_trusted() -> None:
    # schema-1 entries before the evidence block: no input digest, no key fingerprint
    old = {
        "inputs_digest": DIGEST,
        "head_commit": HEAD,
        "source_date_epoch": 1_700_000_000,
        "last_build": {
            "time": "2026-01-01T00:00:00+00:00",
            "result": "ok",
            "log": "/ws/logs/build-cpu.log",
            "report": "/ws/reports/cpu.intoto.jsonl",
            "signed_by": KEYID,
        },
    }
    st = LaneState.from_dict(old)
    assert st.last_build is not None and st.last_build.input_digest is None
    assert decision.needs_key_id(st, FP)  # nothing recorded to compare the fingerprint to
    d = decide(st, now(key_id=KEYID))
    assert d.action == "reuse"
    # but its report's inputs are unknown: Ninja runs, and writing nothing means a fresh
    # build directory
    assert not decision.skips_ninja(d, None, "w" * 64)
    assert after_compile(d, wrote=False, recorded=None, whole="w" * 64, subjects_same=True) == (
        "rebuild"
    )


@pytest.mark.parametrize(
    "entry",
    [
        None,
        [],
        "state",
        {"inputs_digest": 7, "head_commit": ["x"], "source_date_epoch": "1700000000"},
        {**recorded(), "source_date_epoch": True},  # a bool is not an epoch
        {**recorded(), "head_commit": ""},
        {**recorded(), "last_build": {"result": "ok", "time": 1, "log": None}},
    ],
)
def test_hand_edited_or_damaged_states_reconfigure_or_rebuild_never_reuse(entry: Any) -> None:
    st = LaneState.from_dict(entry)
    d = decide(st, now())
    assert d.action in ("reconfigure", "compile"), d
    assert d.action != "reuse"


def test_an_unknown_in_progress_value_is_a_run_cut_short_not_a_wipe() -> None:
    for value in ("../../etc", "-rf", "${{ github.token }}", "wipe\0"):
        d = decide(LaneState.from_dict({**recorded(), "in_progress": value}), now())
        assert d.action == "compile" and "cut short" in d.reason, value


def test_nothing_written_on_other_inputs_than_the_reports_means_a_fresh_build_directory() -> None:
    # an edit with an old mtime: configure ran, Ninja wrote nothing (an always-run step at
    # most), the whole input moved
    d = decide(state(), now(configure_digest="e" * 64))
    assert d.handback  # the same key: the report could be handed back by content
    w, x = "w" * 64, "x" * 64
    assert after_compile(d, wrote=False, recorded=w, whole=x, subjects_same=True) == "rebuild"
    assert after_compile(d, wrote=False, recorded=w, whole=w, subjects_same=True) == "reuse"
    assert after_compile(d, wrote=True, recorded=w, whole=x, subjects_same=True) == "report"


# -- the transitions the builder writes (each once)


def test_transitions_say_what_the_next_run_must_know() -> None:
    st = state()
    st.programs = {"CMAKE_C_COMPILER": programs.Program("/usr/bin/cc", [], version="1")}
    assert decision.started(st, Decision("reuse", "")).in_progress == "build"
    assert decision.started(st, Decision("reconfigure", "")).in_progress == "configure"
    wiping = decision.wiping(st)
    assert (wiping.inputs_digest, wiping.programs, wiping.in_progress) == (None, {}, "wipe")
    assert decide(wiping, now()).action == "rebuild"  # killed in the removal: finish it
    assert decision.wiped(wiping).in_progress is None
    assert st.in_progress is None and st.inputs_digest == DIGEST  # never changed in place

    failed = decision.failed(st, phase="configure", at="t", log="l", log_file="lf")
    assert failed.last_build is not None and failed.in_progress is None
    assert (failed.last_build.result, failed.last_build.phase) == ("failed", "configure")
    assert failed.last_build.report == "/ws/reports/cpu.intoto.jsonl"  # the kept report
    assert decide(failed, now()).action == "compile"

    # what is written is what is read back: the on-disk form round-trips
    given = decision.Configuration("b" * 40, 5, ("GGML_CCACHE",), (), [], "c" * 64)
    conf = decision.configured(decision.unconfigured(st), given, at="t")
    back = LaneState.from_dict(conf.stored())
    assert (back.inputs_digest, back.head_commit, back.source_date_epoch) == ("c" * 64, "b" * 40, 5)
    assert back.launcher_switches == ["GGML_CCACHE"]
    assert decision.unconfigured(st).inputs_digest is None


# -- what a reuse still checks on disk after Ninja (real files, no CMake)


def _last_with_report(tmp_path: Path) -> LastBuild:
    report = tmp_path / "cpu.intoto.jsonl"
    report.write_text('{"payloadType": "application/vnd.in-toto+json"}\n')
    log = tmp_path / "build-cpu-1.log"
    log.write_text("[1/1] Linking CXX executable worker\n")
    return LastBuild(
        time="t",
        result="ok",
        log=str(log),
        report=str(report),
        report_sha256=sha256_file(report),
        byproducts={str(log): sha256_file(log)},
    )


def test_a_missing_or_edited_report_is_never_handed_back(tmp_path: Path) -> None:
    last = _last_with_report(tmp_path)
    assert decision.report_true(last)
    report = Path(str(last.report))
    report.unlink()
    assert not decision.report_true(last)  # a missing report
    report.write_text('{"payloadType": "application/vnd.in-toto+json"}\n')
    assert decision.report_true(last)
    report.write_text('{"payloadType": "application/vnd.in-toto+json"} \n')
    assert not decision.report_true(last)  # other bytes
    report.write_text('{"payloadType": "application/vnd.in-toto+json"}\n')
    Path(next(iter(last.byproducts))).write_text("edited log\n")
    assert not decision.report_true(last)  # a byproduct it names changed
    last.report_sha256 = None
    assert not decision.report_true(last)  # a state that recorded no digest


def test_a_report_replaced_by_a_fifo_or_symlink_to_dev_zero_is_not_read(tmp_path: Path) -> None:
    last = _last_with_report(tmp_path)
    report = Path(str(last.report))
    report.unlink()
    os.mkfifo(report)
    assert not decision.report_true(last)  # never blocks on the FIFO
    report.unlink()
    report.symlink_to("/dev/zero")
    assert not decision.report_true(last)


def test_an_artifact_changed_on_disk_is_found_by_its_bytes(tmp_path: Path) -> None:
    binary = tmp_path / "worker"
    binary.write_bytes(b"\x7fELF one")
    last = LastBuild(
        time="t",
        result="ok",
        log="l",
        artifacts=[
            Artifact(name="worker", kind="EXECUTABLE", path=str(binary), sha256=sha256_file(binary))
        ],
    )
    assert decision.changed_subjects(last) == []
    binary.write_bytes(b"\x7fELF two")
    changed = decision.changed_subjects(last)
    assert changed == [binary]
    d = decide(state(), now(subjects_changed=tuple(map(str, changed))))
    assert d.action == "compile" and d.rebuilt == (str(binary),)
    binary.unlink()
    assert decision.changed_subjects(last) == [binary]  # a missing one too
