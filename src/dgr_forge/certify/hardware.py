"""The host, probed for a certification, and its *hardware class* (docs/build-and-reports.md,
*Certification*, step 4). Each probe is optional (a missing tool is no GPU of that kind)
and bounded; a GPU's UUID is kept only as sha256(salt + UUID) with a random salt per probe:
the record can be matched to a device by whoever holds its UUID, never read back to one.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import secrets
from collections.abc import Callable, Sequence

from msgspec import UNSET

from dgr_forge.certify.shapes import AmdGpu, Cpu, Hardware, Identity, NvidiaGpu, OsInfo, VulkanGpu
from dgr_forge.core import proc
from dgr_forge.core.errors import BadInput

PROBE_TIMEOUT = 20.0  # seconds per probe: a hung driver query is no answer, not a hang
PROC_LIMIT = 4 << 20  # bytes read of /proc/cpuinfo (hundreds of cores stay far below)
MAX_DEVICES = 64
_WORD = re.compile(r"[^a-z0-9]+")

# a probe: argv -> stdout text, or None when the tool is missing, fails or hangs
Runner = Callable[[Sequence[str]], str | None]


def run_probe(cmd: Sequence[str]) -> str | None:
    done = proc.probe(cmd, timeout=PROBE_TIMEOUT)  # bounded by `proc.PROBE_LIMIT`
    return done.stdout if done is not None and done.returncode == 0 else None


def _read_proc(path: str) -> str:
    try:
        with open(path, "rb") as f:  # procfs reports size 0: bounded by the read itself
            return f.read(PROC_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""


def _slug(text: str, drop: Sequence[str] = ()) -> str:
    return "-".join(w for w in _WORD.split(text.lower()) if w and w not in drop)[:48] or "unknown"


def uuid_digest(salt: str, uuid: str) -> str:
    return hashlib.sha256(f"{salt}:{uuid.strip()}".encode()).hexdigest()


def cpu_info(cpuinfo: str | None = None) -> Cpu:
    text = _read_proc("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return Cpu(
        model=(model or platform.processor() or platform.machine())[:200],
        flags=sorted(f for f in flags if len(f) < 40)[:400],
        count=os.cpu_count() or 0,
        machine=platform.machine(),
    )


def memory_bytes(meminfo: str | None = None) -> int | None:
    text = _read_proc("/proc/meminfo") if meminfo is None else meminfo
    m = re.search(r"^MemTotal:\s+(\d{1,15}) kB$", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def nvidia_gpus(text: str | None, salt: str) -> list[NvidiaGpu]:
    """nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,uuid
    --format=csv,noheader,nounits: one line per GPU."""
    gpus: list[NvidiaGpu] = []
    for line in (text or "").splitlines()[:MAX_DEVICES]:
        if len(parts := [p.strip() for p in line.split(",")]) != 5 or not parts[0]:
            continue
        name, driver, cap, mem, uuid = parts
        if not re.fullmatch(r"\d{1,2}\.\d{1,2}", cap) or not mem.isdigit() or len(mem) > 9:
            continue
        gpus.append(
            NvidiaGpu(
                name=name[:120],
                driver=driver[:40],
                compute_cap=cap,
                memory_mib=int(mem),
                uuid_sha256=uuid_digest(salt, uuid),
            )
        )
    return gpus


def _blocks(text: str | None, head: str, sep: str, lower: bool = False) -> list[dict[str, str]]:
    """`key<sep>value` lines by block, each line matching `head` starting one (the first
    block: the lines before any); a key's first value is kept."""
    blocks: list[dict[str, str]] = [{}]
    for line in (text or "").splitlines():
        if re.match(head, line.strip()):
            blocks.append({})
        elif sep in line:
            key, _, value = line.partition(sep)
            key = key.strip().lower() if lower else key.strip()
            blocks[-1].setdefault(key, value.strip())
    return blocks


def probe(run: Runner = run_probe) -> Identity:
    salt = secrets.token_hex(16)
    query = "--query-gpu=name,driver_version,compute_cap,memory.total,uuid"
    nvidia = nvidia_gpus(run(["nvidia-smi", query, "--format=csv,noheader,nounits"]), salt)
    amd = [  # rocminfo: `Agent N` blocks; GPU agents by `Device Type: GPU`
        AmdGpu(
            name=block.get("marketing name", "")[:120],
            gfx=block["name"][:20],
            uuid_sha256=uuid_digest(salt, block["uuid"]) if block.get("uuid") else UNSET,
        )
        for block in _blocks(run(["rocminfo"]), r"\*+\s*$|Agent ", ":", lower=True)
        if block.get("device type") == "GPU" and block.get("name", "").startswith("gfx")
    ][:MAX_DEVICES]
    # vulkaninfo --summary: `GPUn:` blocks with `deviceName = ...`, `deviceType = ...`
    devices = _blocks(run(["vulkaninfo", "--summary"]), r"GPU\d+:\s*$", "=")[1 : MAX_DEVICES + 1]
    vulkan = [
        VulkanGpu(
            name=dev["deviceName"][:120],
            type=dev.get("deviceType", "")[:120],
            driver=dev.get("driverInfo", dev.get("driverVersion", ""))[:120],
            uuid_sha256=uuid_digest(salt, dev["deviceUUID"][:120])
            if dev.get("deviceUUID")
            else UNSET,
        )
        for dev in devices
        if dev.get("deviceName")
    ]
    pretty = ""
    for line in _read_proc("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            pretty = line.split("=", 1)[1].strip().strip('"')[:200]
    return Identity(
        cpu=cpu_info(),
        memory_bytes=memory_bytes(),
        os=OsInfo(system=platform.system(), kernel=platform.release(), release=pretty),
        gpus=[*nvidia, *amd, *vulkan],
        uuid_salt=salt,
        probed=True,
    )


def _cpu_level(machine: str, flags: set[str]) -> str:
    if machine in ("x86_64", "amd64", "AMD64"):
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
            return "avx512"
        if {"avx2", "fma"} <= flags:
            return "avx2"
        return "avx" if "avx" in flags else "sse"
    if machine in ("aarch64", "arm64"):
        return "sve" if "sve" in flags else "neon"
    return "base"


def hardware_class(identity: Identity, backend: str) -> str:
    kind = backend.lower()
    if kind == "cpu":
        machine = identity.cpu.machine or platform.machine()
        arch = "x86_64" if machine in ("amd64", "AMD64") else machine.lower()
        level = _cpu_level(machine, set(identity.cpu.flags))
        return f"cpu-{_slug(arch).replace('-', '_')}-{level}"
    if kind == "metal":
        return f"apple-{_slug(identity.cpu.model, ('apple',))}"
    if kind == "cuda":
        why = "no NVIDIA GPU answered `nvidia-smi --query-gpu`"
        names = [
            f"nvidia-sm{g.compute_cap.replace('.', '')}-"
            f"{_slug(g.name, ('nvidia', 'geforce', 'tesla'))}-"
            f"{math.ceil(g.memory_mib / 1024)}gb"
            for g in identity.gpus
            if isinstance(g, NvidiaGpu)
        ]
    elif kind in ("rocm", "rocm/hip", "hip"):
        why = "no GPU agent in `rocminfo`"
        names = [
            f"amd-{_slug(g.gfx)}-{_slug(g.name, ('amd', 'radeon', 'instinct'))}"
            for g in identity.gpus
            if isinstance(g, AmdGpu)
        ]
    elif kind == "vulkan":
        why = "no device in `vulkaninfo --summary`"
        names = [f"vulkan-{_slug(g.name)}" for g in identity.gpus if isinstance(g, VulkanGpu)]
    else:
        why, names = "the forge has no hardware-class rule for this backend", []
    if not names:
        raise BadInput(
            f"this host has no {backend} hardware to certify on: {why}",
            hint="certify the lane on a host with its hardware (`dgr-forge doctor` says what "
            "is here)",
            details={"backend": backend},
        )
    distinct = sorted(set(names))
    return "+".join(f"{n}-x{names.count(n)}" if names.count(n) > 1 else n for n in distinct)


def host(backend: str, described: str | None = None) -> Hardware:
    """As `certify --attested --hardware TEXT` describes it, else this host, probed."""
    if described is not None:
        return Hardware(hardware_class=f"described-{_slug(described)}", description=described)
    identity = probe()
    return Hardware(hardware_class=hardware_class(identity, backend), identity=identity)
