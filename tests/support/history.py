"""Long upstream histories, made cheaply with `git fast-import` (one process for hundreds
of commits), and what a workspace holds of them afterwards: the rebase and bump transfer
tests count the upstream commits a workspace fetched before the pin and in the range."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from .git import GIT_ENV, Upstream, sh_git

EPOCH_2025 = 1735689600  # 2025-01-01T00:00:00Z: Upstream.commit's dates count on from it


def add_history(
    up: Upstream, count: int, path: str = "docs/history.md", blob_bytes: int = 0
) -> list[str]:
    """`count` commits on the upstream's branch, each rewriting `path` (one small blob a
    commit, as a changelog or a vocab file moves; with `blob_bytes`, that many more bytes
    of incompressible, reproducible data), dated on from Upstream.commit's clock so the
    history stays in date order. Returns their ids, oldest first."""
    branch = sh_git(up.path, "symbolic-ref", "HEAD")
    parent = sh_git(up.path, "rev-parse", "HEAD")
    chunks: list[bytes] = []
    for i in range(count):
        up._tick += 1
        when = f"{EPOCH_2025 + up._tick} +0000"
        message = f"history: entry {i}\n".encode()
        body = "".join(f"- entry {n}\n" for n in range(max(0, i - 8), i + 1)).encode()
        body += _noise(f"{path} {up._tick}", blob_bytes)
        chunks += [
            f"commit {branch}\n".encode(),
            f"author Upstream Dev <dev@upstream.invalid> {when}\n".encode(),
            f"committer Upstream Dev <dev@upstream.invalid> {when}\n".encode(),
            f"data {len(message)}\n".encode() + message,
            (f"from {parent}\n".encode() if i == 0 else b""),
            f"M 100644 inline {path}\n".encode(),
            f"data {len(body)}\n".encode() + body + b"\n",
        ]
    subprocess.run(
        ["git", "fast-import", "--quiet", "--force"],
        cwd=up.path,
        input=b"".join(chunks),
        env={**os.environ, **GIT_ENV},
        check=True,
    )
    sh_git(up.path, "reset", "-q", "--hard", "HEAD")
    made = sh_git(up.path, "rev-list", "--reverse", f"{parent}..HEAD").split()
    up.commits += made
    return made


def _noise(seed: str, size: int) -> bytes:
    """`size` bytes of hex that does not compress, the same on every run."""
    out = bytearray()
    block = hashlib.sha256(seed.encode()).digest()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block.hex().encode()
    return bytes(out[:size])


def workspace_commits(src: Path) -> set[str]:
    """Every commit object the workspace repository holds (packed or loose)."""
    listing = sh_git(
        src, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"
    )
    return {line.split()[0] for line in listing.splitlines() if line.endswith(" commit")}


def before(up: Upstream, commit: str) -> set[str]:
    """The upstream commits strictly before `commit` (its ancestors)."""
    return set(sh_git(up.path, "rev-list", f"{commit}^").split())


def between(up: Upstream, old: str, new: str) -> set[str]:
    return set(sh_git(up.path, "rev-list", f"{old}..{new}").split())


# an `uploadpack.packObjectsHook`: runs the server's pack-objects and logs each pack it
# sends ("<objects> <bytes>", the count read from the pack header), passing it through
_COUNT_HOOK = textwrap.dedent(
    """\
    #!{python}
    import subprocess, sys
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
    head, size = b"", 0
    while chunk := proc.stdout.read(65536):
        if len(head) < 12:
            head += chunk[: 12 - len(head)]
        size += len(chunk)
        sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
    rc = proc.wait()
    objects = int.from_bytes(head[8:12], "big") if head[:4] == b"PACK" else 0
    with open({log!r}, "a") as log:
        log.write(f"{{objects}} {{size}}\\n")
    sys.exit(rc)
    """
)


@dataclass
class PackLog:
    """What the server sent, pack by pack, while its env was in use."""

    path: Path
    env: dict[str, str]

    def packs(self) -> list[tuple[int, int]]:
        if not self.path.exists():
            return []
        return [
            (int(a), int(b))
            for a, b in (ln.split() for ln in self.path.read_text().split("\n") if ln)
        ]

    @property
    def objects(self) -> int:
        return sum(n for n, _ in self.packs())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.packs())


def pack_log(tmp: Path) -> PackLog:
    """A git global config whose upload-pack logs every pack it serves: pass `env` to the
    forge (its network git calls keep the user's global config; a file:// upload-pack runs
    with that environment, and the hook is honoured from global config only)."""
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "packs.log"
    hook = tmp / "count-pack-objects"
    hook.write_text(_COUNT_HOOK.format(python=sys.executable, log=str(log)))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    config = tmp / "gitconfig"
    config.write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    return PackLog(log, {"GIT_CONFIG_GLOBAL": str(config)})


def range_objects(up: Upstream, old: str, new: str) -> int:
    """How many objects old..new adds to the old pin's (what a range fetch must send)."""
    return len(sh_git(up.path, "rev-list", "--objects", new, f"^{old}").split("\n"))
