"""The one fault-injection hook (core/fault.py): parsing, matching, and each action."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from dgr_forge.core import fault
from dgr_forge.core.errors import BadInput, OperationFailed


def test_unset_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same point fails while DGR_FAULT names it and is a no-op once it is unset
    (nothing of the parsed value is kept)."""
    monkeypatch.setenv("DGR_FAULT", "export.swapped:fail@2")
    fault.point("export.swapped")  # the first hit: not the second yet
    monkeypatch.delenv("DGR_FAULT")
    for _ in range(3):
        assert fault.point("export.swapped") is None  # type: ignore[func-returns-value]
    monkeypatch.setenv("DGR_FAULT", "export.swapped:fail")
    with pytest.raises(OperationFailed, match=r"injected failure at export\.swapped"):
        fault.point("export.swapped")


def test_parse_actions_counts_and_details() -> None:
    specs = fault.parse("a.b, c.d:enospc ,e.f:0002:fail@3")
    assert specs == (
        fault.Spec("a.b"),
        fault.Spec("c.d", "enospc"),
        fault.Spec("e.f:0002", "fail", 3),
    )


@pytest.mark.parametrize("raw", ["x@0", "x@-1", "x@99999999", "bad name", "x\x01y", "@2"])
def test_hostile_values_are_bad_input(raw: str) -> None:
    with pytest.raises(BadInput, match="DGR_FAULT"):
        fault.parse(raw)


def test_too_many_points_are_refused() -> None:
    with pytest.raises(BadInput, match="more than"):
        fault.parse(",".join(f"p{i}" for i in range(100)))


def test_enospc_and_fail_fire_on_the_nth_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGR_FAULT", "w.write:enospc@2,f.step:0002:fail")
    fault.point("w.write")  # first hit passes
    with pytest.raises(OSError) as err:
        fault.point("w.write")
    assert err.value.errno == errno.ENOSPC
    fault.point("f.step", "0001")  # another detail: no match
    with pytest.raises(OperationFailed, match=r"f\.step:0002"):
        fault.point("f.step", "0002")


def test_kill_is_a_real_sigkill() -> None:
    code = "from dgr_forge.core import fault; fault.point('x.y'); print('survived')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"DGR_FAULT": "x.y", "PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0]},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    assert "survived" not in proc.stdout
