"""The hardware probe and the documented hardware-class rule (issue 30 #5): real probes of
this host, and each vendor tool's real output format read exactly; a GPU's UUID never
appears, only its salted hash."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

import msgspec
import pytest

from dgr_forge.certify import hardware
from dgr_forge.certify import shapes as certshapes
from dgr_forge.core import proc
from dgr_forge.core.errors import BadInput

SMI = "NVIDIA H200, 560.35.03, 9.0, 143771, GPU-4b1f2c3d-1111-2222-3333-444455556666\n"
ROCMINFO = """\
*******
Agent 1
*******
  Name:                    AMD EPYC 9654 96-Core Processor
  Marketing Name:          AMD EPYC 9654 96-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx942
  Uuid:                    GPU-1c2d3e4f5a6b7c8d
  Marketing Name:          AMD Instinct MI300X
  Device Type:             GPU
"""
VULKAN = """\
Devices:
========
GPU0:
\tapiVersion         = 1.3.277
\tdriverVersion      = 560.35.3.0
\tvendorID           = 0x10de
\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
\tdeviceName         = NVIDIA H200
\tdriverName         = NVIDIA
\tdeviceUUID         = 4b1f2c3d-1111-2222-3333-444455556666
"""


def fake(answers: dict[str, str]) -> hardware.Runner:
    def run(cmd: Sequence[str]) -> str | None:
        return answers.get(cmd[0])

    return run


def test_this_host_is_probed_and_classed_for_the_cpu_lane() -> None:
    ident = hardware.probe()
    assert ident.probed is True and ident.cpu.model and ident.os.kernel
    assert ident.cpu.count >= 1
    cls = hardware.hardware_class(ident, "CPU")
    assert re.fullmatch(r"cpu-[a-z0-9_]+-(avx512|avx2|avx|sse|sve|neon|base)", cls), cls


def test_nvidia_class_and_the_uuid_only_as_a_salted_hash() -> None:
    ident = hardware.probe(fake({"nvidia-smi": SMI}))
    (gpu,) = msgspec.to_builtins(ident.gpus)
    assert gpu == {
        "vendor": "nvidia", "name": "NVIDIA H200", "driver": "560.35.03", "compute_cap": "9.0",
        "memory_mib": 143771,
        "uuid_sha256": hardware.uuid_digest(
            ident.uuid_salt, "GPU-4b1f2c3d-1111-2222-3333-444455556666"
        ),
    }  # fmt: skip
    assert "4b1f2c3d" not in repr(ident)
    assert hardware.hardware_class(ident, "CUDA") == "nvidia-sm90-h200-141gb"
    other = hardware.probe(fake({"nvidia-smi": SMI}))
    (mine,) = other.gpus  # a fresh salt each time
    assert isinstance(mine, certshapes.NvidiaGpu) and mine.uuid_sha256 != gpu["uuid_sha256"]
    two = hardware.probe(fake({"nvidia-smi": SMI * 2}))
    assert hardware.hardware_class(two, "CUDA") == "nvidia-sm90-h200-141gb-x2"


def test_rocm_and_vulkan_classes() -> None:
    ident = hardware.probe(fake({"rocminfo": ROCMINFO, "vulkaninfo": VULKAN}))
    assert hardware.hardware_class(ident, "ROCm/HIP") == "amd-gfx942-mi300x"
    assert hardware.hardware_class(ident, "Vulkan") == "vulkan-nvidia-h200"
    assert "1c2d3e4f" not in repr(ident) and "4b1f2c3d" not in repr(ident)


def test_cpu_levels_by_flags() -> None:
    def cls(flags: str, machine: str = "x86_64") -> str:
        cpu = certshapes.Cpu(model="", flags=flags.split(), count=1, machine=machine)
        return hardware.hardware_class(msgspec.structs.replace(probed, cpu=cpu), "CPU")

    probed = hardware.probe(fake({}))

    assert cls("sse avx avx2 fma") == "cpu-x86_64-avx2"
    assert cls("avx avx2 fma avx512f avx512bw avx512dq avx512vl") == "cpu-x86_64-avx512"
    assert cls("avx avx2") == "cpu-x86_64-avx"  # avx2 without fma is not the avx2 level
    assert cls("fp asimd sve", "aarch64") == "cpu-aarch64-sve"


@pytest.mark.parametrize(
    "smi",
    [
        "",
        "garbage\n",
        "NVIDIA H200, 560, 9.0, -1, GPU-x\n",  # a negative memory
        "NVIDIA H200, 560, nine, 1000, GPU-x\n",
        "NVIDIA H200, 560, 9.0, 99999999999999999999, GPU-x\n",
    ],
)
def test_a_lane_without_its_hardware_is_exit_2(smi: str) -> None:
    ident = hardware.probe(fake({"nvidia-smi": smi}))
    with pytest.raises(BadInput) as err:
        hardware.hardware_class(ident, "CUDA")
    assert "no CUDA hardware" in err.value.message and err.value.exit_code == 2


def test_a_hanging_or_flooding_probe_is_no_answer(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardware, "PROBE_TIMEOUT", 0.5)
    monkeypatch.setattr(proc, "PROBE_LIMIT", 1000)
    hang = [sys.executable, "-c", "import time; time.sleep(30)"]
    flood = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 4096)"]
    assert hardware.run_probe(hang) is None
    assert hardware.run_probe(flood) is None
    assert hardware.run_probe(["/nonexistent/nvidia-smi"]) is None
    assert hardware.run_probe([sys.executable, "-c", "print('ok')"]) == "ok\n"
