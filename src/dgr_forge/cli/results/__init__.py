"""What each command's `--json` object holds, as types: one `msgspec.Struct` per shape a
command's object can take (a *form*: a mode such as `patch --check`, or a result that may
be `ok: false`), each field with the meaning docs/json.md shows. `docs/json-schema/*.json`
and `docs/json.md` are generated from these classes (`python -m dgr_forge.cli.schemas`);
the failure envelope's details are `core.errors.Details`. Besides the generator and the
tests, the commands that answer with one of these types (`build`, `demo`, `keygen`) import
it inside the command's body, never at start: `--version` and `--help` stay off msgspec.

A form's fields come after the envelope (`ok`, `exit_code`, `command`); a field without
a default is required, `UNSET` marks one that may be absent, `X | None` one that may be
null. A form is closed (`forbid_unknown_fields`); nested objects are open to new keys. A
nested object's docstring is its meaning (a field of that type says it only to differ).
A nested object the library makes as a Struct is that type, declared once below `cli`:
a certification step as run, its figures (a union tagged by `parser`) and the hardware
identity (GPUs tagged by `vendor`), a record and `certify`'s result are `certify.shapes`'.
"""

from __future__ import annotations

from dgr_forge.cli.results.attest import (
    Certify,
    Keygen,
    ReportCompare,
    ReportShow,
    ReportVerify,
)
from dgr_forge.cli.results.base import Artifact, Cache, Command, Form
from dgr_forge.cli.results.ci import CiMatrix, CiRender, CiRenderCheck, CiRenderOut
from dgr_forge.cli.results.demo import Demo, DemoStep
from dgr_forge.cli.results.lanes import (
    Build,
    BuildLane,
    BuildUpstream,
    Doctor,
    Lanes,
    Presets,
    ToolchainInstall,
)
from dgr_forge.cli.results.models import (
    ArtifactsManifest,
    ArtifactsMap,
    ArtifactsProvision,
    ArtifactsVerify,
)
from dgr_forge.cli.results.upstream import (
    Bump,
    Check,
    Difference,
    Export,
    ExportedPatch,
    Fetch,
    Patch,
    PatchAbort,
    PatchCheck,
    Rebase,
    RebaseAbort,
    RebaseDryRun,
    Status,
)

__all__ = [
    "COMMANDS",
    "Artifact",
    "ArtifactsManifest",
    "ArtifactsMap",
    "ArtifactsProvision",
    "ArtifactsVerify",
    "Build",
    "BuildLane",
    "BuildUpstream",
    "Bump",
    "Cache",
    "Certify",
    "Check",
    "CiMatrix",
    "CiRender",
    "CiRenderCheck",
    "CiRenderOut",
    "Command",
    "Demo",
    "DemoStep",
    "Difference",
    "Doctor",
    "Export",
    "ExportedPatch",
    "Fetch",
    "Form",
    "Keygen",
    "Lanes",
    "Patch",
    "PatchAbort",
    "PatchCheck",
    "Presets",
    "Rebase",
    "RebaseAbort",
    "RebaseDryRun",
    "ReportCompare",
    "ReportShow",
    "ReportVerify",
    "Status",
    "ToolchainInstall",
]


def _cmd(words: str, summary: str, *forms: type[Form], prose: str = "") -> Command:
    return Command(words, summary, forms, prose)


COMMANDS: tuple[Command, ...] = (
    _cmd("fetch", "Check out the pinned upstream commit, verified.", Fetch),
    _cmd(
        "patch",
        "Apply the series on the pin (or check it, continue or abort a replay of your commits).",
        Patch,
        PatchAbort,
        PatchCheck,
    ),
    _cmd(
        "status",
        "The workspace: upstream checkout, series, lanes, a rebase in progress. URLs masked.",
        Status,
    ),
    _cmd("export", "Write the workspace's commits back as the series and the manifest.", Export),
    _cmd(
        "check", "The CI gate: series round trip byte-compare, CMake options still declared.", Check
    ),
    _cmd("build", "Fetch + patch as needed, configure and build each lane; signed reports.", Build),
    _cmd("lanes", "The lane matrix: backend, buildable here, last build, certified.", Lanes),
    _cmd(
        "doctor",
        "This host: build tools, compilers, GPU toolkits, the compiler cache; which lanes build.",
        Doctor,
    ),
    _cmd(
        "rebase",
        "Replay the series onto a new upstream commit; `--dry-run` is the upstream canary.",
        Rebase,
        RebaseDryRun,
        RebaseAbort,
    ),
    _cmd(
        "bump",
        "Move the pin to the newest commit onto which the series replays cleanly (docs/bump.md).",
        Bump,
    ),
    _cmd("keygen", "Create an Ed25519 signing key (PKCS#8 PEM, mode 0600) and PATH.pub.", Keygen),
    _cmd("report show", "A signed build report, decoded.", ReportShow),
    _cmd(
        "report verify",
        "Verify a report's signature (and with `--artifacts` its subjects on disk).",
        ReportVerify,
    ),
    _cmd(
        "report compare", "Two reports of a lane: verified, and the same subjects?", ReportCompare
    ),
    _cmd(
        "certify",
        "Run the lane's certification suite on this host; sign it when every step passes.",
        Certify,
    ),
    _cmd(
        "ci matrix",
        "The lane matrix for CI.",
        CiMatrix,
        prose=(
            "Without `--json`, stdout is the bare matrix (ready for `fromJSON` or `jq`): "
            '`{"include": [ENTRY, ...]}`. With `--json` the same object is under `matrix`.'
        ),
    ),
    _cmd("ci render", "A CI workflow file from the recipes.", CiRender, CiRenderOut, CiRenderCheck),
    _cmd(
        "artifacts manifest", "A model manifest from the files in a directory.", ArtifactsManifest
    ),
    _cmd(
        "artifacts map",
        "Add the layer map to a model manifest, from the split headers.",
        ArtifactsMap,
    ),
    _cmd(
        "artifacts provision",
        "Download a model's files: resumable, retried, verified, atomic.",
        ArtifactsProvision,
    ),
    _cmd(
        "artifacts verify",
        "Check size, sha256 and GGUF split headers of every file.",
        ArtifactsVerify,
    ),
    _cmd("presets", "CMakeUserPresets.json with a configure + build preset per lane.", Presets),
    _cmd(
        "toolchain install",
        "Install the toolkit the root pins (toolchains/cuda.lock), by sha256, outside the root.",
        ToolchainInstall,
    ),
    _cmd("demo", "The tour without network: a generated upstream, series and worker in DIR.", Demo),
)
