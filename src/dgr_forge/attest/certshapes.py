"""The shapes of a checked certification, as its record and `--json` write them (`certify
--lane`'s steps and hardware, `lanes`' figures), each key declared once with its meaning:
what a parser read (`parsers`: a union tagged by `parser`), the gate, the host's identity
(`hardware`: GPUs tagged by `vendor`) and a step as run (`lanes.certrun` makes it,
`checked` writes and reads it back). Its own module, light to import: `cli.results`
declares the `--json` forms with these, and a no-op `build` imports those without the
parsers' patterns, the probes or the signing code.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Struct, UnsetType

from dgr_forge.core.structs import SHA, d

# --- what a parser read (`parsers`) ----------------------------------------------------


class Parsed(Struct, kw_only=True, tag_field="parser"):
    """what the parser read, tagged by the parser (`parser`)"""


class OpsBackend(Struct, kw_only=True):
    """a backend test-backend-ops tested"""

    name: Annotated[str, d("the backend, as test-backend-ops names it (`CPU`, `CUDA0`)")]
    status: Annotated[str, d("its status line's verdict: `OK` or `FAIL`")]
    passed: Annotated[int, d("op cases passed (its `N/M tests passed` line)")]
    total: Annotated[int, d("op cases tested")]
    ok: Annotated[int, d("case lines ending in `OK`")]
    failed: Annotated[int, d("op cases failed (not passed, or a `FAIL` line)")]
    unsupported: Annotated[int, d("op cases the backend does not support")]


class OpsFigures(Parsed, kw_only=True, tag="test-backend-ops"):
    """test-backend-ops (mode `test`): op cases per backend, and their sums"""

    backends: Annotated[list[OpsBackend], d("per backend tested")]
    ops_passed: Annotated[int, d("op cases passed, all backends")]
    ops_failed: Annotated[int, d("op cases failed, all backends")]
    ops_unsupported: Annotated[int, d("op cases not supported, all backends")]
    ops_total: Annotated[int, d("op cases tested, all backends")]
    backends_passed: Annotated[int | UnsetType, d("its `P/T backends passed` line: P")] = UNSET
    backends_total: Annotated[int | UnsetType, d("and T (both absent without that line)")] = UNSET


class BenchTest(Struct, kw_only=True):
    """a llama-bench test (`-o json`)"""

    n_prompt: Annotated[int, d("prompt tokens (0: a generation test)")]
    n_gen: Annotated[int, d("generated tokens (0: a prompt test)")]
    avg_ts: Annotated[float, d("tokens per second, the average of its repetitions")]
    stddev_ts: Annotated[float, d("their standard deviation")]
    backends: Annotated[str, d("the backends it ran on, as llama-bench names them")]
    model_type: Annotated[str, d("the model's type, e.g. `llama 1B Q4_0`")]
    model_size: Annotated[int, d("the model's size in bytes")]


class BenchFigures(Parsed, kw_only=True, tag="llama-bench"):
    """llama-bench (`-o json`): per test, and the speeds the gate compares"""

    tests: Annotated[list[BenchTest], d("per test")]
    prompt_ts: Annotated[
        float | None, d("the slowest prompt test's tokens per second (null: no prompt test)")
    ]
    gen_ts: Annotated[
        float | None, d("the slowest generation test's tokens per second (null: none)")
    ]
    backends: Annotated[list[str], d("the tests' backends, each once")]
    model_type: Annotated[str, d("the first test's model type")]
    model_size: Annotated[int, d("the first test's model size in bytes")]


class CtestFigures(Parsed, kw_only=True, tag="ctest"):
    """ctest (JUnit XML): test counts"""

    tests: Annotated[int, d("`<testcase>` elements")]
    failed: Annotated[int, d("those with `<failure>` or `<error>`")]
    skipped: Annotated[int, d("those skipped, not run or disabled")]
    passed: Annotated[int, d("the rest")]


StepFigures = OpsFigures | BenchFigures | CtestFigures


# --- the gate (`parsers.Thresholds.gate`) ----------------------------------------------


class Speeds(Struct, kw_only=True):
    """the useful-speed gate, tokens per second"""

    prompt: Annotated[float | UnsetType, d("the least prompt speed")] = UNSET
    gen: Annotated[float | UnsetType, d("the least generation speed")] = UNSET


class Gate(Struct, kw_only=True):
    """the gate applied (one of its keys, or both)"""

    max_failed: Annotated[int | UnsetType, d("the most failed op cases or tests")] = UNSET
    min_avg_ts: Annotated[Speeds | UnsetType, d("the least `avg_ts`")] = UNSET


# --- the host, probed (`hardware`) -----------------------------------------------------

UUID_SHA = d("sha256 of `<uuid_salt>:<UUID>`: never the UUID itself")


class Cpu(Struct, kw_only=True):
    """the CPU (`/proc/cpuinfo`, `platform`)"""

    model: Annotated[str, d("its model name")]
    flags: Annotated[list[str], d("its feature flags, sorted")]
    count: Annotated[int, d("logical CPUs")]
    machine: Annotated[str, d("the machine, e.g. `x86_64`, `aarch64`")]


class OsInfo(Struct, kw_only=True):
    """the OS"""

    system: Annotated[str, d("e.g. `Linux`")]
    kernel: Annotated[str, d("the kernel release")]
    release: Annotated[str, d('`/etc/os-release`\'s `PRETTY_NAME` (`""` without one)')]


class Gpu(Struct, kw_only=True, tag_field="vendor"):
    """a GPU, tagged by how it was found (`vendor`)"""


class NvidiaGpu(Gpu, kw_only=True, tag="nvidia"):
    """an NVIDIA GPU (`nvidia-smi --query-gpu`)"""

    name: Annotated[str, d("its name, e.g. `NVIDIA H200`")]
    driver: Annotated[str, d("the driver version")]
    compute_cap: Annotated[str, d("the compute capability, e.g. `9.0`")]
    memory_mib: Annotated[int, d("its memory in MiB")]
    uuid_sha256: Annotated[str, UUID_SHA]


class AmdGpu(Gpu, kw_only=True, tag="amd"):
    """an AMD GPU agent (`rocminfo`)"""

    name: Annotated[str, d("its marketing name")]
    gfx: Annotated[str, d("its gfx target, e.g. `gfx942`")]
    uuid_sha256: Annotated[str | UnsetType, UUID_SHA] = UNSET


class VulkanGpu(Gpu, kw_only=True, tag="vulkan"):
    """a Vulkan device (`vulkaninfo --summary`)"""

    name: Annotated[str, d("its `deviceName`")]
    type: Annotated[str, d("its `deviceType`")]
    driver: Annotated[str, d("its `driverInfo` (or `driverVersion`)")]
    uuid_sha256: Annotated[str | UnsetType, UUID_SHA] = UNSET


AnyGpu = NvidiaGpu | AmdGpu | VulkanGpu


class Identity(Struct, kw_only=True):
    """the host, probed (`attest.hardware`): GPU UUIDs only as salted hashes"""

    cpu: Cpu
    memory_bytes: Annotated[int | None, d("`MemTotal` in bytes (null: unreadable)")]
    os: OsInfo
    gpus: Annotated[list[AnyGpu], d("every GPU the probes found")]
    uuid_salt: Annotated[str, d("the random salt of this probe's `uuid_sha256`s")]
    probed: Annotated[bool, d("true: probed by the forge")]


# --- a step as run (`lanes.certrun`, `checked`) ----------------------------------------


class StepProgram(Struct, kw_only=True):
    """the program it ran: a subject of the report"""

    target: Annotated[str, d("the CMake target")]
    path: Annotated[str, d("its file: the report subject's name")]
    sha256: Annotated[str, SHA]


class StepLog(Struct, kw_only=True):
    """the step's full log (stdout and stderr)"""

    path: Annotated[str, d("the file, relative to the root (under `.dgr/logs/`)")]
    sha256: Annotated[str, SHA]


class CertStep(Struct, kw_only=True):
    """one step as run"""

    name: Annotated[str, d("the step")]
    program: StepProgram
    args: Annotated[list[str], d("its arguments as run (placeholders substituted)")]
    parser: Annotated[str, d("`test-backend-ops`, `llama-bench` or `ctest`")]
    thresholds: Gate
    figures: Annotated[
        StepFigures | None,
        d("what the parser read, tagged by `parser`; null: the output was unreadable"),
    ]
    exit_code: Annotated[
        int | None, d("the program's exit code; null: stopped (time limit, output bound)")
    ]
    seconds: Annotated[float, d("how long it ran")]
    verdict: Annotated[str, d("`pass` or `fail`")]
    problems: Annotated[list[str], d("why it failed (empty when it passed)")]
    log: StepLog
