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
identity (GPUs tagged by `vendor`) are `attest.certshapes`'.
"""

from __future__ import annotations

from dgr_forge.cli.results.attest import (
    Certify,
    CertifyLane,
)
from dgr_forge.cli.results.base import Artifact, Cache, Form
from dgr_forge.cli.results.lanes import Build, BuildLane, BuildUpstream, Doctor, Lanes, Presets
from dgr_forge.cli.results.upstream import (
    Bump,
    Rebase,
    RebaseAbort,
    RebaseDryRun,
)

__all__ = [
    "Artifact",
    "Build",
    "BuildLane",
    "BuildUpstream",
    "Bump",
    "Cache",
    "Certify",
    "CertifyLane",
    "Doctor",
    "Form",
    "Lanes",
    "Presets",
    "Rebase",
    "RebaseAbort",
    "RebaseDryRun",
]
