"""Old reports are pruned by one rule (issue 46): a lane's newest `KEEP_REPORTS`, plus
every report a record names (the lane's state, a certification by name or sha256), however
old; a certification that cannot be read prunes nothing. Real files, no build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from dgr_forge.attest import dsse, reports
from dgr_forge.certify import records, trust
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.lanes.lane_build import _prune_reports


def _forge(tmp_path: Path) -> Forge:
    forge = Forge(root=tmp_path, workspace=tmp_path / ".dgr")
    forge.reports_dir.mkdir(parents=True)
    return forge


def _reports(forge: Forge, lane: str, count: int) -> list[Path]:
    """`count` report files of `lane`, oldest first (one a minute)."""
    made = []
    for i in range(count):
        path = forge.reports_dir / f"{lane}-20261201T10{i:02d}00Z-{i:08x}{reports.SUFFIX}"
        path.write_text(json.dumps({"build": i}) + "\n")
        made.append(path)
    return made


def _certify(forge: Forge, rel: str, report: dict[str, str]) -> None:
    path = forge.root / trust.CERT_DIR / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"_type": records.RECORD_TYPE, "report": report}).encode()
    path.write_bytes(msgspec.json.encode(dsse.sign(body, records.CERT_PAYLOAD_TYPE, None)) + b"\n")


def test_the_newest_per_lane_and_every_named_report_are_kept(tmp_path: Path) -> None:
    forge = _forge(tmp_path)
    cpu = _reports(forge, "cpu", 9)
    other = _reports(forge, "cpu-real", 7)  # a lane whose name starts with another's
    rebase = forge.reports_dir / "rebase-aaaa-bbbb.json"  # not a build report
    rebase.write_text("{}\n")
    _certify(forge, "cpu.json", {"name": cpu[0].name, "sha256": "0" * 64})
    _certify(forge, "cpu/model/x86.json", {"name": "gone", "sha256": sha256_file(cpu[1])})
    _prune_reports(forge, "cpu", cpu[-1])
    kept = sorted(p for p in forge.reports_dir.iterdir())
    assert kept == sorted([cpu[0], cpu[1], *cpu[-reports.KEEP_REPORTS :], *other, rebase])
    # the state names one (a failed build keeps naming the last good report)
    removed = reports.prune(forge, "cpu-real", {other[0].name}, set())
    assert removed == other[1:2]


def test_an_unreadable_certification_prunes_nothing(tmp_path: Path) -> None:
    forge = _forge(tmp_path)
    cpu = _reports(forge, "cpu", 8)
    _certify(forge, "cpu.json", {"name": cpu[0].name})
    (forge.root / trust.CERT_DIR / "evil.json").symlink_to("/dev/zero")
    assert reports.named_reports(forge) is None
    _prune_reports(forge, "cpu", cpu[-1])
    assert sorted(forge.reports_dir.iterdir()) == cpu
    (forge.root / trust.CERT_DIR / "evil.json").unlink()
    os.mkfifo(forge.root / trust.CERT_DIR / "fifo.json")  # never a wait
    _prune_reports(forge, "cpu", cpu[-1])
    assert sorted(forge.reports_dir.iterdir()) == cpu


def test_what_is_not_a_plain_report_file_is_left_alone(tmp_path: Path) -> None:
    forge = _forge(tmp_path)
    cpu = _reports(forge, "cpu", 6)
    target = tmp_path / "outside.txt"
    target.write_text("mine\n")
    link = forge.reports_dir / f"cpu-20261201T090000Z-deadbeef{reports.SUFFIX}"
    link.symlink_to(target)
    odd = forge.reports_dir / f"cpu-..-x{reports.SUFFIX}"
    odd.write_text("x\n")
    removed = reports.prune(forge, "cpu", set(), set())
    assert removed == [cpu[0]] and link.is_symlink() and target.read_text() == "mine\n"
    assert odd.exists()  # not a report name of this lane
