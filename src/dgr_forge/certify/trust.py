"""Trust: what a certification checks before it runs and binds (the report, the inputs as
the checkout has them) and the trust anchors a record is verified with. A record is
advertised only while a trusted key signed it and it binds the current inputs exactly:
any change lapses it, with every reason, until renewed (`records.lapses`).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from dgr_forge.attest import reports as reports_mod
from dgr_forge.attest.keys import PublicKey, load_public
from dgr_forge.certify.shapes import BoundInputs
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_regular, sha256_regular
from dgr_forge.host.recipes import Recipe, Step
from dgr_forge.upstream.manifest import UpstreamManifest

CERT_DIR = reports_mod.CERT_DIR
TRUSTED_KEYS_DIR = "certifications/trusted-keys"
MAX_INPUT_BYTES = 4 << 20  # a toolchain file or CMake module a certification binds
MAX_TEXT_BYTES = 1 << 20  # a step's `text`: a few KiB of fixed prose


def bound_inputs(
    forge: Forge,
    recipe: Recipe,
    worker: Mapping[str, str] | None,
    tools: Mapping[str, str] | None = None,
) -> BoundInputs:
    """`worker` and `tools` come from `lanes.inputs` (None where the host was not probed):
    attest does not read lanes' inputs itself."""
    tc = forge.toolchains_dir / f"{recipe.lane.toolchain}.cmake" if recipe.lane.toolchain else None
    modules = sorted(forge.cmake_dir.glob("*.cmake")) if forge.cmake_dir.is_dir() else []

    def digest(path: Path, what: str) -> str:
        hint, shown = "restore it from the repository", forge.rel(path)
        return sha256_regular(path, what=what, hint=hint, limit=MAX_INPUT_BYTES, shown=shown)

    sha = digest(tc, "toolchain file") if tc is not None and tc.exists() else None
    return BoundInputs(
        toolchain=None if tc is None else {"path": forge.rel(tc), "sha256": sha},
        cmakeModules={p.name: digest(p, "CMake module") for p in modules},
        worker=dict(worker) if worker is not None else None,
        tools=dict(sorted(tools.items())) if tools is not None else None,
    )


def step_text(forge: Forge, step: Step, text: str) -> bytes:
    return read_regular(
        forge.root / text, what="step text file", limit=MAX_TEXT_BYTES, shown=text,
        root=forge.root,
        hint=f"commit the certify step {step.name!r}'s text as a regular file of at most "
        f"{MAX_TEXT_BYTES >> 10} KiB inside the forge root",
    )  # fmt: skip


@dataclass(frozen=True)
class CheckedReport:
    lane: str
    recipe: Recipe
    check: reports_mod.Verification
    inputs: BoundInputs


def check_report(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    report: Path,
    report_key: PublicKey,
    worker: Mapping[str, str] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
    *,
    artifacts_base: Path | None = None,
) -> CheckedReport:
    """Exit 1 when `report` fails verification (with `artifacts_base`, every subject
    re-hashed there); exit 2 when this checkout did not build it."""
    check = reports_mod.verify_report(report, report_key, artifacts_base=artifacts_base)
    if not check.ok:
        raise OperationFailed(
            f"{report}: the report failed verification, refusing to certify it:\n  "
            + "\n  ".join(check.failures),
            hint="certify a report that `dgr-forge report verify` accepts",
            details={"failures": check.failures},
        )
    shown = reports_mod.summary(check.report)  # a verified statement, read as `report show`
    if (lane := str(shown.lane)) not in recipes:
        raise BadInput(
            f"{report}: lane {lane!r} has no recipe in this forge root",
            hint="certify in the checkout whose recipes/ built the report",
        )
    recipe = recipes[lane]
    current = bound_inputs(forge, recipe, worker, (tools or {}).get(lane))
    rep_recipe = str(shown.recipe and shown.recipe.sha256)
    checks = [
        (f"recipe {forge.rel(recipe.path)} sha256", rep_recipe, recipe.sha256),
        ("upstream commit", str(shown.upstream.commit), m.commit),
        ("patch series digest", str(shown.upstream.series_digest), m.series_digest),
    ]
    if (tc := current.toolchain) is not None:
        deps = reports_mod.dependencies(check.report.statement or {})
        named = [d for d in deps if d.get("name") == tc["path"]]
        got = str((named[0].get("digest") or {}).get("sha256")) if named else "none"
        checks.append((f"toolchain file {tc['path']} sha256", got, str(tc["sha256"])))
    if stale := [(what, got, want) for what, got, want in checks if got != want]:
        raise BadInput(
            f"{report}: the report does not match this checkout: "
            + "; ".join(
                f"{what} is {want} here but {got} in the report" for what, got, want in stale
            ),
            hint="rebuild the lane (`dgr-forge build --lane "
            f"{lane}`), run it on the hardware, and certify the new report",
            details={"stale": [w for w, _, _ in stale]},
        )
    return CheckedReport(lane, recipe, check, current)


def trusted_keys(forge: Forge, extra: list[PublicKey] | None = None) -> list[PublicKey]:
    """`extra` plus `certifications/trusted-keys/*.pub`: any doubt is exit 2 naming it."""
    keys = list(extra or [])
    try:  # who may own a trust anchor: the checkout's owner, or root
        owners = {0, os.stat(forge.root).st_uid}
    except OSError:
        owners = {0, os.getuid()}
    if any(_anchor_dir(forge, rel, owners) is None for rel in (CERT_DIR, TRUSTED_KEYS_DIR)):
        return keys
    directory = forge.root / TRUSTED_KEYS_DIR
    return keys + [_trusted_key(p, owners) for p in sorted(directory.glob("*.pub"))]


def _private_group(st: os.stat_result) -> bool:
    """Whether the file's group is its owner's own private group (the user-private-group
    scheme of umask 002 hosts): group-writable then means writable by the owner alone."""
    try:
        import grp
        import pwd

        return pwd.getpwuid(st.st_uid).pw_gid == st.st_gid and not grp.getgrgid(st.st_gid).gr_mem
    except (ImportError, KeyError):
        return False


def _refusal(shown: str, problem: str, fix: str) -> BadInput:
    return BadInput(f"{shown}: {problem}", hint=fix, details={"path": shown})


def _anchor_dir(forge: Forge, rel: str, owners: set[int]) -> os.stat_result | None:
    """`rel` (certifications/ or its trusted-keys/) checked as a trust anchor's directory:
    None when it does not exist; exit 2 naming what is wrong."""
    try:
        st = (forge.root / rel).lstat()
    except FileNotFoundError:
        return None
    refuse = partial(_refusal, rel)  # not resolved: a symlink must be named as itself
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise refuse(
            "not a directory (a symlink or a file): trust anchors must live in the checkout itself",
            f"make {rel} a plain directory holding the trusted .pub files",
        )
    if st.st_mode & stat.S_IWOTH:
        raise refuse(
            f"the directory is world-writable (mode {mode:04o}): anyone here could add a "
            "trusted key or certification",
            f"chmod o-w {forge.root / rel}",
        )
    if st.st_mode & stat.S_IWGRP and not _private_group(st):
        raise refuse(
            f"the directory is group-writable (mode {mode:04o}): the group could add a "
            "trusted key or certification",
            f"chmod g-w {forge.root / rel}",
        )
    if st.st_uid not in owners:
        raise refuse(
            f"owned by uid {st.st_uid}, not by the checkout's owner or root: its owner "
            "could add a trusted key or certification",
            f"chown it to the checkout's owner (chown -R $(stat -c %u {forge.root}) "
            f"{forge.root / rel}) or remove it",
        )
    return st


def _trusted_key(path: Path, owners: set[int]) -> PublicKey:
    """One trust anchor, checked and read through one descriptor opened with O_NOFOLLOW."""
    shown = f"{TRUSTED_KEYS_DIR}/{path.name}"
    refuse = partial(_refusal, shown)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise refuse(
                "a symlink in trusted-keys: a trust anchor must be the key file itself",
                f"replace the link with a copy of the public key (cp --remove-destination "
                f"$(readlink -f {shown}) {shown})",
            ) from None
        raise refuse(f"cannot read the trusted key: {err.strerror}", "check the file") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file", "keep only .pub files in trusted-keys")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise refuse(
                f"the trusted key is writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                f"chmod go-w {shown}",
            )
        if st.st_uid not in owners:
            raise refuse(
                f"the trusted key is owned by uid {st.st_uid}, not by the checkout's owner "
                "or root: its owner could replace it",
                f"chown $(stat -c %u .) {shown}, after checking the key is the one you trust",
            )
        if st.st_size > 64 << 10:
            raise refuse("over 64 KiB: not a public key", "keep only .pub files in trusted-keys")
        data = f.read(64 << 10)
    if b"PRIVATE KEY" in data:
        raise refuse(
            "a PRIVATE key in trusted-keys (it is committed for everyone to read)",
            "remove it, commit only the .pub file, and replace the exposed key "
            "(`dgr-forge keygen --force`): anyone may have copied it",
        )
    return load_public(data, shown)
