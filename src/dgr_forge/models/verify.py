"""`artifacts verify`: size + sha256 of every file, then the split headers of the good ones.

No file is read through a symlink, and headers are parsed only for files whose size and
sha256 matched: a planted file cannot make the parser do work the manifest did not vouch for.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.models import gguf_split, subset
from dgr_forge.models.dest import check_destination, kind
from dgr_forge.models.hashing import VerifiedCache, hash_many, human
from dgr_forge.models.manifest import ModelManifest, split_name


class FileCheck(Struct):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    ok: Annotated[bool, d("`status` is `ok`")]
    problems: Annotated[list[str], d("what is wrong (size, sha256, split header)")]
    sha256: Annotated[str | None, d("what is on disk, when it was hashed")] = None
    status: Annotated[str, d("`ok`, `missing` or `bad`")] = "ok"


class ArtifactsVerify(Form, kw_only=True):
    """`artifacts verify`'s result (its `--json` object)."""

    title = "artifacts verify"
    may_fail = True
    note = "exit 1 when a file is not `ok`"

    model: Annotated[str, d("the model's name")]
    dest: Annotated[Path, d("the `--dest` directory")]
    files: Annotated[
        list[FileCheck], d("per file required (all, or those the layers checked need) or present")
    ]
    bad: Annotated[list[str], d("the files not `ok`")]
    bytes: Annotated[int, d("total size of the files listed")]
    seconds: Annotated[float, d("time taken")]
    layers: subset.Layers | None
    serves: subset.Serves | None
    provisioned: subset.Provisioned | None


def verify(
    m: ModelManifest,
    dest: Path,
    out: Reporter,
    *,
    jobs: int | None = None,
    selection: subset.Selection | None = None,
) -> ArtifactsVerify:
    started = time.monotonic()
    target = check_destination(dest)  # the /home rule: it writes .dgr-verified.json there
    if not target.is_dir():
        raise BadInput(
            f"--dest {dest}: {target} is not a directory",
            hint=f"pass the directory the model was provisioned into "
            f"(`dgr-forge artifacts provision {m.shown} --dest DIR`)",
            details={"dest": str(dest)},
        )
    cache = VerifiedCache(target)
    record = None
    if m.layer_map is not None and cache.dir_fd is not None:
        record = subset.read_record(cache.dir_fd, m.name)
    checked = selection
    if checked is None and record is not None:
        checked = subset.select(m, record.ranges, record.first, record.last)
    required = {f.name for f in (checked.files if checked else m.files)}
    files = [f for f in m.files if f.name in required or os.path.lexists(target / f.name)]
    size = sum(f.size for f in files)
    out.step(f"verifying {m.name}: {len(files)} files, {human(size)} in {target}")
    problems: dict[str, list[str]] = {f.name: [] for f in files}
    to_hash: list[Path] = []
    for f in files:
        path = target / f.name
        part = f" (split part {s.no} of {s.count})" if (s := split_name(f.name)) else ""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            problems[f.name].append(f"missing{part}")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems[f.name].append(f"is {kind(st.st_mode)}, not a regular file{part}")
        elif st.st_size != f.size:
            problems[f.name].append(f"wrong size: {st.st_size} bytes, manifest says {f.size}")
        else:
            to_hash.append(path)
    shas = hash_many(to_hash, out, jobs, "verifying", follow=False)
    matched = []
    for f in files:
        path = target / f.name
        if (sha := shas.get(path)) is None:
            continue
        if sha != f.sha256:
            problems[f.name].append(f"wrong sha256: expected {f.sha256}, actual {sha}")
            cache.forget(f.name)
        else:
            cache.record(f.name, path.lstat(), sha)
            matched.append(f)
    for name, extra in gguf_split.header_problems(target, matched, m.layer_map).items():
        problems[name].extend(extra)
    if os.access(target, os.W_OK):
        cache.save()
    cache.close()
    checks = []
    for f in files:
        p = problems[f.name]
        status = ("missing" if p[0].startswith("missing") else "bad") if p else "ok"
        checks.append(FileCheck(f.name, f.size, not p, p, shas.get(target / f.name), status))
        for problem in p:
            out.error(f"{f.name}: {problem}")
    serves = subset.serves(m, {c.name for c in checks if c.ok})
    result = ArtifactsVerify(
        model=m.name,
        dest=target,
        files=checks,
        bad=[c.name for c in checks if not c.ok],
        bytes=sum(c.size for c in checks),
        seconds=round(time.monotonic() - started, 3),
        layers=checked.shown() if checked else None,
        serves=serves,
        provisioned=record,
    )
    # the verdict is the answer (stdout), as `report verify`'s; the problems are diagnostics
    n, rate = len(checks), size / result.seconds if result.seconds > 0 else 0.0
    out.answer(
        f"{m.name}: FAILED verification: {len(result.bad)} of {n} files ({', '.join(result.bad)})"
        if result.bad
        else f"{m.name}: OK: all {n} files verified ({human(size)} at {human(rate)}/s)"
    )
    if serves is not None:
        ends = [w for w, on in (("embeddings", serves.first), ("output head", serves.last)) if on]
        out.answer(
            f"{target} can serve layers {serves.layers or 'none'} of "
            f"{m.layer_map.block_count if m.layer_map else 0}"
            + (f" + {' + '.join(ends)}" if ends else "")
        )
    return result
