"""The shapes of a certification, as its record and `--json` write them, each key declared
once with its meaning. Its own module, light to import: `lanes` and the schemas read these
without the parsers' patterns, the probes or the signing code.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge.core.structs import SHA, Form, d
from dgr_forge.host.recipes import Gate


class StepProgram(Struct, kw_only=True):
    """the program it ran: a subject of the report (a parity reference: the pin's build)"""

    target: Annotated[str, d("the CMake target")]
    path: Annotated[str, d("its file: the report subject's name (the reference's, in scratch)")]
    sha256: Annotated[str, SHA]


class StepLog(Struct, kw_only=True):
    """the step's full log (stdout and stderr)"""

    path: Annotated[str, d("the file, relative to the root (under `.dgr/logs/`)")]
    sha256: Annotated[str, SHA]


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


class ParityFigures(Parsed, kw_only=True, tag="parity"):
    """llama-perplexity, this build's and the pin's own (`reference = "pin"`): their final
    estimates compared"""

    ppl: Annotated[float, d("this build's `Final estimate: PPL = ...`")]
    reference_ppl: Annotated[
        float | None, d("the same program built from the pin without the series (null: unread)")
    ] = None
    rel_diff: Annotated[
        float | None, d("`|ppl - reference_ppl| / reference_ppl` (null: no reference figure)")
    ] = None
    reference: Annotated[
        StepProgram | None, d("the pin's program that ran: its scratch path and sha256")
    ] = None
    reference_log: Annotated[StepLog | None, d("its full log (stdout and stderr)")] = None
    reference_libraries: Annotated[
        list[StepProgram], d("the shared libraries the pin's build made (the program loads them)")
    ] = []


StepFigures = OpsFigures | BenchFigures | CtestFigures | ParityFigures


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
    """the host, probed (`hardware`): GPU UUIDs only as salted hashes"""

    cpu: Cpu
    memory_bytes: Annotated[int | None, d("`MemTotal` in bytes (null: unreadable)")]
    os: OsInfo
    gpus: Annotated[list[AnyGpu], d("every GPU the probes found")]
    uuid_salt: Annotated[str, d("the random salt of this probe's `uuid_sha256`s")]
    probed: Annotated[bool, d("true: probed by the forge")]


class FailedCase(Struct, kw_only=True):
    """a failing case as the program named it"""

    name: Annotated[str, d("the op (test-backend-ops) or the test (ctest)")]
    params: Annotated[str | None, d("the op's parameters as the program prints them")]
    error: Annotated[
        str | None,
        d("its error line (`[ADD] ERR = 1.17 > 1e-07`, `[OP] NMSE = ...`), or ctest's message"),
    ]

    def shown(self) -> str:
        case = self.name if self.params is None else f"{self.name}({self.params})"
        return case if self.error is None else f"{case} {self.error}"


class CertStep(Struct, kw_only=True):
    """one step as run"""

    name: Annotated[str, d("the step")]
    program: StepProgram
    args: Annotated[list[str], d("its arguments as run (placeholders substituted)")]
    parser: Annotated[str, d("`test-backend-ops`, `llama-bench`, `ctest` or `parity`")]
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
    problems: Annotated[tuple[str, ...], d("why it failed (empty when it passed)")]
    log: StepLog
    text_sha256: Annotated[
        str | UnsetType, d("the step's `text` file as the program read it (`{text}`)")
    ] = UNSET
    failed_cases: Annotated[
        list[FailedCase], d("every failing case its parser read (up to 1000), in order")
    ] = []

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


# what an entry and `certify`'s result both name, described once
Kind = Annotated[
    str, d("`checked` (`certify --lane`: the forge ran the suite) or `attested` (evidence)")
]
ModelName = Annotated[
    str, d("the model manifest's name (`none`: a suite without a model; `attested`)")
]
HardwareClass = Annotated[
    str, d("the hardware class (e.g. `cpu-x86_64-avx2`, `nvidia-sm90-h200-141gb`)")
]


class Hardware(Struct, kw_only=True):
    """the hardware a record names"""

    hardware_class: Annotated[str, d("its class: the record's file name")] = field(name="class")
    identity: Annotated[Identity | None, d("the host, probed (null: described)")] = None
    description: Annotated[str | None, d("`certify --attested --hardware TEXT`")] = None


class Evidence(Struct, kw_only=True):
    """the evidence file of an attested record"""

    name: Annotated[str, d("its file name")]
    sha256: Annotated[str, SHA]


class Entry(Struct, kw_only=True):
    """a certification record: `certifications/<lane>/<model>/<hardware-class>.json`"""

    lane: Annotated[str, d("the lane")]
    kind: Kind
    model: ModelName
    hardware_class: HardwareClass
    advertised: Annotated[bool, d("checked, signed by a trusted key, matching every input")]
    reason: Annotated[
        str,
        d(
            "`certified`, `attested, not checked`, or why not (`untrusted: ...`, "
            "`lapsed: ...` naming every input that moved, `invalid: ...`)"
        ),
    ]
    file: Annotated[str, d("the record, relative to the root")]
    keyid: Annotated[str, d('the trusted key that verified it (`""` when none did)')]
    certified_on: Annotated[str | None, d("when (ISO 8601, UTC)")]
    figures: Annotated[
        dict[str, StepFigures | None],
        d(
            "per step name: what its parser read, tagged by `parser` (the step's `figures` in "
            "`certify --lane --json`); null: unreadable"
        ),
    ]
    evidence_sha256: Annotated[str | None, d("an attested record's evidence file")] = None


class BoundInputs(Struct, kw_only=True):
    """the inputs a record binds besides recipe, pin and series (`trust.bound_inputs`)"""

    toolchain: Annotated[dict[str, str | None] | None, d("the toolchain file: `path`, `sha256`")]
    cmakeModules: Annotated[dict[str, str], d("`cmake/` modules by name")]
    worker: Annotated[
        dict[str, str] | None, d("the worker: `location` + `commit`, or `location` + `tree`")
    ]
    tools: Annotated[
        dict[str, str] | None,
        d(
            "the host's tools the lane builds with (cmake, ninja, the recipe's tools) by "
            "version; null where not probed"
        ),
    ] = None


class Certified(Form, kw_only=True):
    """a record written: `certify`'s result"""

    title = "certify --lane L | --attested FILE --build-report R"
    note = "an `attested` record is shown `attested, not checked`: never advertised"

    certification: Annotated[str, d("the record's path")]
    trusted: Annotated[bool, d("its key is in trusted-keys/")]
    kind: Kind
    lane: Annotated[str, d("the lane")]
    model: ModelName
    hardware_class: HardwareClass
    report_sha256: Annotated[str, SHA]
    keyid: Annotated[str, d("the signing key's id")]
    steps: Annotated[list[CertStep], d("every step, all passed (none for `attested`)")]
    hardware: Hardware
    evidence_sha256: Annotated[str | None, d("`attested`: the evidence file's")]
    inputs: BoundInputs
    certified_on: Annotated[str, d("when (ISO 8601, UTC)")]
