"""The model a certification measures is the model it binds: the steps read a private view
of the verified files, verified again after them (docs/build-and-reports.md,
"Certification", step 3: why `--dest` must be writable by its owner alone).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from dgr_forge.certify import records, trust
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.gitutil import NAME
from dgr_forge.core.output import Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models.dest import check_destination
from dgr_forge.models.provision import provision
from dgr_forge.models.verify import verify

PRIVATE = ".dgr-certify-"  # + the lane: the steps' view, inside the destination


@dataclass(frozen=True)
class Prepared:
    bound: records.BoundModel
    manifest: models.ModelManifest
    private: Path  # the steps' view of the files
    first: Path  # the first split, in `private`: `{model}`


def _refuse_shared(target: Path, declared: str | None) -> None:
    try:
        st = target.stat()
    except FileNotFoundError:
        return  # provisioning makes it, ours
    mode = stat.S_IMODE(st.st_mode)
    others = st.st_mode & stat.S_IWOTH or (
        st.st_mode & stat.S_IWGRP and not trust._private_group(st)
    )
    if not others and st.st_uid == os.getuid():
        return
    is_declared = declared is not None and Path(declared).resolve() == target.resolve()
    if is_declared and st.st_mode & stat.S_ISVTX:
        return
    rule = (
        f"the model directory {target} is writable by others or not yours (mode {mode:04o}, "
        f"owner uid {st.st_uid}): another user could swap a file between its verification "
        "and the program reading it"
    )
    if is_declared:
        raise BadInput(
            f"{rule}; it is the manifest's shared_dir, but not sticky",
            hint=f"chmod +t {target} (only a file's owner may then replace it)",
            details={"dest": str(target)},
        )
    raise BadInput(
        rule,
        hint=f"use a directory only you can write (chmod go-w {target}), or declare this "
        f'sticky shared directory in the model manifest ([model] shared_dir = "{target}")',
        details={"dest": str(target)},
    )


def _private_view(mm: models.ModelManifest, source: Path, private: Path) -> None:
    if private.exists():
        shutil.rmtree(private)
    private.mkdir(mode=0o700, parents=True)
    for f in mm.files:
        src, dst = source / f.name, private / f.name
        try:
            st = src.lstat()
        except FileNotFoundError:
            continue  # missing: the verification names it
        foreign = st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        try:
            if foreign:  # a link to a file others may write would not hold it still
                raise OSError(errno.EPERM, "not ours alone")
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copyfile(src, dst, follow_symlinks=False)


def prepare(
    forge: Forge, out: Reporter, lane: str, name: str, dest: Path | None, mirror: str | None
) -> Prepared:
    if not NAME.match(name) or name.endswith(".toml"):
        raise BadInput(
            f"--model {name[:80]!r}: not a manifest name",
            hint="name a manifest under manifests/models/ by its file name without .toml",
            details={"model": name[:80]},
        )
    path = forge.root / models.MODELS_DIR / f"{name}.toml"
    mm = models.load(path, forge.root)
    target = dest or forge.workspace / "models" / name
    check_destination(target)  # the /home rule, before anything is made or hashed there
    _refuse_shared(target, mm.model.shared_dir)
    # beside the files (one file system: a link, not a copy), in a directory of ours
    private = target / f"{PRIVATE}{lane}"
    if target.is_dir():
        _private_view(mm, target, private)
        result = verify(mm, private, out)
        if wrong := [f for f in result.files if f.status == "bad"]:
            bad = [f"{f.name}: {'; '.join(f.problems)}" for f in wrong]
            shutil.rmtree(private, ignore_errors=True)
            raise OperationFailed(
                f"model {name}: files in {target} do not match the manifest: " + "; ".join(bad),
                hint=f"remove them and re-run, or `dgr-forge artifacts provision {name} "
                f"--dest {target}`",
                details={"model": name, "bad": result.bad},
            )
    if not target.is_dir() or result.bad:
        if not provision(mm, target, out, mirror=mirror).ok:
            raise OperationFailed(
                f"model {name}: provisioning into {target} failed",
                hint="see the errors above; re-run to resume",
                details={"model": name},
            )
        _refuse_shared(target, mm.model.shared_dir)
        _private_view(mm, target, private)
        if (result := verify(mm, private, out)).bad:
            shutil.rmtree(private, ignore_errors=True)
            raise OperationFailed(
                f"model {name}: {', '.join(result.bad)} do not verify",
                hint="re-provision the model",
                details={"model": name},
            )

    # `{model}`: the first split (by part number; the one file of an unsplit model)
    first = min(mm.files, key=lambda f: split.no if (split := models.split_name(f.name)) else 0)
    bound = records.BoundModel(
        name=name,
        model_name=mm.name,
        manifest=forge.rel(path),
        manifest_sha256=records.manifest_sha256(forge, name),
        files=[records.ModelFile(f.name, f.size, f.sha256) for f in mm.files],
        first_split=first.name,
        tensor_bytes=tensor_bytes(mm, private),
    )
    return Prepared(bound, mm, private, private / first.name)


def tensor_bytes(mm: models.ModelManifest, private: Path) -> int | str:
    """Of every `.gguf` file (all splits), from their headers."""
    if not (headers := gguf_split.read_headers(private, list(mm.files))):
        return "the model has no .gguf file"
    total = 0
    for name, header in sorted(headers.items()):
        if isinstance(header, str) or header.data_bytes is None:
            why = header if isinstance(header, str) else "a tensor type the forge does not know"
            return f"{name}: {why}"
        total += header.data_bytes
    return total


def check_after(prepared: Prepared, out: Reporter) -> None:
    if (result := verify(prepared.manifest, prepared.private, out)).bad:
        raise OperationFailed(
            f"model {prepared.bound.name}: {', '.join(result.bad)} changed while the steps ran: "
            "the figures are not the verified model's, nothing written",
            hint="find what writes the model's files, and run certify again",
            details={"model": prepared.bound.name, "bad": result.bad},
        )
