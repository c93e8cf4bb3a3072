"""The workspace lock's inputs: DGR_LOCK_TIMEOUT and the lock file itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from forgetest import run_forge


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e300", "99999999", "soon", "-"])
def test_lock_timeout_must_be_finite_bounded_and_not_negative(forge_root: Path, value: str) -> None:
    res = run_forge("--json", "fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": value})
    assert res.code == 2, res
    assert "DGR_LOCK_TIMEOUT" in res.stderr and "Traceback" not in res.stderr, res
    assert not (forge_root / ".dgr" / "src").exists()


@pytest.mark.parametrize("value", ["0", "0.5", "600"])
def test_lock_timeout_sane_values_work(forge_root: Path, value: str) -> None:
    res = run_forge("fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": value})
    assert res.code == 0, res


def test_lock_that_is_a_directory_is_one_clear_error(forge_root: Path) -> None:
    (forge_root / ".dgr" / "lock").mkdir(parents=True)
    for args in (["fetch"], ["patch"], ["--json", "fetch"]):
        res = run_forge(*args, cwd=forge_root)
        assert res.code == 2, res
        assert "Traceback" not in res.stderr, res
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "lock" in errors[0], res
    assert (forge_root / ".dgr" / "lock").is_dir()  # nothing of the user's is removed


def test_lock_that_is_a_symlink_is_refused(tmp_path: Path, forge_root: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (forge_root / ".dgr").mkdir()
    (forge_root / ".dgr" / "lock").symlink_to(victim)
    res = run_forge("fetch", cwd=forge_root)
    assert res.code == 2 and "lock" in res.stderr, res
    assert victim.read_text() == "keep\n"
