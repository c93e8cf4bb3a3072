"""`artifacts verify`: size + sha256 of every file, then the split headers of the good ones.

Files hash in parallel (8 MiB reads; hashlib releases the GIL). A file is never read
through a symlink, and GGUF headers are parsed only for files whose size and sha256
matched, so a planted file cannot make the parser do work the manifest did not vouch for.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models.dest import kind
from dgr_forge.models.hashing import VerifiedCache, default_jobs, hash_many, human
from dgr_forge.models.manifest import ModelManifest


@dataclass
class FileCheck:
    name: str
    size: int
    ok: bool
    problems: list[str]
    sha256: str | None = None  # what is on disk, when it was hashed


@dataclass
class VerifyResult:
    model: str
    dest: Path
    files: list[FileCheck]
    seconds: float

    @property
    def bad(self) -> list[FileCheck]:
        return [f for f in self.files if not f.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dest": str(self.dest),
            "files": [asdict(f) for f in self.files],
            "bad": [f.name for f in self.bad],
            "bytes": sum(f.size for f in self.files),
            "seconds": round(self.seconds, 3),
        }


def verify(m: ModelManifest, dest: Path, out: Reporter, *, jobs: int | None = None) -> VerifyResult:
    started = time.monotonic()
    target = Path(os.path.realpath(Path.cwd() / dest.expanduser()))
    if not target.is_dir():
        raise BadInput(
            f"--dest {dest}: {target} is not a directory",
            hint=f"pass the directory the model was provisioned into "
            f"(`dgr-forge artifacts provision {m.shown} --dest DIR`)",
            details={"dest": str(dest)},
        )
    out.step(f"verifying {m.name}: {len(m.files)} files, {human(m.total_size)} in {target}")
    problems: dict[str, list[str]] = {f.name: [] for f in m.files}
    to_hash: list[Path] = []
    for f in m.files:
        path = target / f.name
        s = models.split_name(f.name)
        part = f" (split part {s.no} of {s.count})" if s else ""
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
    shas = hash_many(to_hash, out, jobs or default_jobs(), "verifying", follow=False)
    cache = VerifiedCache(target)
    matched = []
    for f in m.files:
        path = target / f.name
        sha = shas.get(path)
        if sha is None:
            continue
        if sha != f.sha256:
            problems[f.name].append(f"wrong sha256: expected {f.sha256}, actual {sha}")
            cache.forget(f.name)
        else:
            cache.record(f.name, path.lstat(), sha)
            matched.append(f)
    for name, extra in gguf_split.check(target, matched).items():
        problems[name].extend(extra)
    if os.access(target, os.W_OK):
        cache.save()
    cache.close()
    checks = [
        FileCheck(f.name, f.size, not problems[f.name], problems[f.name], shas.get(target / f.name))
        for f in m.files
    ]
    result = VerifyResult(m.name, target, checks, time.monotonic() - started)
    for c in result.bad:
        for problem in c.problems:
            out.error(f"{c.name}: {problem}")
    if not result.bad:
        rate = m.total_size / result.seconds if result.seconds > 0 else 0.0
        out.info(
            f"{m.name}: all {len(checks)} files verified ({human(m.total_size)} at {human(rate)}/s)"
        )
    return result
