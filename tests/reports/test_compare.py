"""`report compare A B` (issue 13 #8): verify both, compare subjects."""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace
from support.cli import run_forge
from support.reports import lane_build

from dgr_forge.attest import keys, reports
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter


def write(forge: Forge, signer: keys.Signer | None, **change: object) -> Path:
    return reports.write_report(forge, replace(lane_build(forge), **change), signer, Reporter())


def test_compare_identical_changed_and_unsigned(forge: Forge, tmp_path: Path) -> None:
    signer = keys.generate(tmp_path / "k.pem")
    pub = str(tmp_path / "k.pem.pub")
    a, b = write(forge, signer), write(forge, signer)
    same = run_forge("--json", "report", "compare", str(a), str(b), "--key", pub)
    assert same.code == 0, same
    assert same.json["identical"] is True

    art = lane_build(forge).artifacts
    other = write(forge, signer, artifacts=[replace(art[0], sha256="0" * 64), *art[1:]])
    diff = run_forge("--json", "report", "compare", str(a), str(other), "--key", pub)
    assert diff.code == 1, diff
    assert diff.json["differences"] == [
        {
            "name": diff.json["differences"][0]["name"],
            "status": "changed",
            "a": art[0].sha256,
            "b": "0" * 64,
        }
    ]
    unsigned = write(forge, None)
    res = run_forge("report", "compare", str(a), str(unsigned), "--key", pub)
    assert res.code == 1, res
    assert "unsigned" in res.stderr
    wrong_key = keys.generate(tmp_path / "other.pem")
    assert wrong_key.keyid != signer.keyid
    res = run_forge("report", "compare", str(a), str(b), "--key", str(tmp_path / "other.pem.pub"))
    assert res.code == 1 and "different key" in res.stderr, res
