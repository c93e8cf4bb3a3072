"""Fixtures for the rebase and check tests: a forge root with a real three-patch series on
the test upstream, canonicalized by the real `dgr-forge patch` + `dgr-forge export`."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from forgetest import (
    Result,
    Upstream,
    forge_cmd,
    forge_env,
    make_forge_root,
    manifest_text,
    run_forge,
    sh_git,
)

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import export, manifest
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import PatchedTree, ensure_patched

FORMAT_PATCH = (
    "format-patch",
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--no-numbered",
    "--keep-subject",
    "--no-stat",
)

LLAMA_OWNER_OLD = "    (void) layer;\n    return 0;\n"
LLAMA_OWNER_NEW = "    return layer % 2; /* dgr: odd layers are remote */\n"
GGML_OLD = "    return 1;\n"
GGML_NEW = "    return 2; /* dgr: cpu + rpc */\n"
MAIN_OLD = "int main() {\n"
MAIN_NEW = 'int main() {\n    std::puts("dgr shard worker build");\n'

# (subject, file, old text, new text): each patch replaces one snippet in one file
SERIES: list[tuple[str, str, str, str]] = [
    ("llama: add layer-range ownership", "src/llama.cpp", LLAMA_OWNER_OLD, LLAMA_OWNER_NEW),
    ("ggml: count the rpc backend", "ggml/src/ggml.c", GGML_OLD, GGML_NEW),
    ("tools: print a build banner", "tools/main.cpp", MAIN_OLD, MAIN_NEW),
]


@dataclass
class Series:
    root: Path
    upstream: Upstream
    pin: str

    @property
    def manifest(self) -> Path:
        return self.root / "manifests" / "llama.cpp.toml"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches" / "llama.cpp"

    @property
    def src(self) -> Path:
        return self.root / ".dgr" / "src" / "llama.cpp"

    def snapshot(self) -> dict[str, bytes]:
        """Every byte of the manifest and patches/: what must survive an abort."""
        files = {"manifest": self.manifest.read_bytes()}
        for p in sorted(self.patches_dir.iterdir()):
            files[p.name] = p.read_bytes()
        return files

    def patch_files(self) -> list[str]:
        return sorted(p.name for p in self.patches_dir.glob("*.patch"))

    def forge(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return run_forge("--root", str(self.root), *args, env=env)


def apply_snippet(text: str, old: str, new: str) -> str:
    assert old in text, f"snippet not found: {old!r}"
    return text.replace(old, new, 1)


def make_series(tmp: Path, upstream: Upstream) -> Series:
    """A forge root pinning upstream's head with SERIES as canonical patch files."""
    pin = upstream.head
    root = make_forge_root(tmp / "forge", upstream)
    author = tmp / "author"
    sh_git(tmp, "clone", "-q", str(upstream.path), str(author))
    sh_git(author, "checkout", "-q", "--detach", pin)
    for i, (subject, rel, old, new) in enumerate(SERIES):
        path = author / rel
        path.write_text(apply_snippet(path.read_text(), old, new))
        sh_git(author, "add", "-A")
        date = f"2025-02-01T00:00:{i:02d}Z"
        sh_git(
            author,
            "commit",
            "-q",
            "-m",
            subject,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
    pdir = root / "patches" / "llama.cpp"
    sh_git(author, *FORMAT_PATCH, "-o", str(pdir), f"{pin}..HEAD")
    entries = [{"file": p.name, "sha256": sha256_file(p)} for p in sorted(pdir.glob("*.patch"))]
    assert len(entries) == len(SERIES)
    (root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text(upstream.url, pin, upstream.tree(pin), entries)
    )
    s = Series(root, upstream, pin)
    # the real flow canonicalizes: apply, then re-export (fills per-patch and result trees)
    patch(root)
    forge = Forge.locate(root)
    export.export_workspace(forge, load_manifest(root), Reporter(quiet=True))
    return s


def load_manifest(root: Path) -> UpstreamManifest:
    return manifest.load(root / "manifests" / "llama.cpp.toml", root)


def patch(root: Path, workspace: Path | None = None) -> PatchedTree:
    """`dgr-forge patch` through the library (the patch helper's ensure_patched)."""
    forge = Forge.locate(root, workspace)
    return ensure_patched(forge, load_manifest(root), Reporter(quiet=True))


def upstream_edit(up: Upstream, rel: str, old: str, new: str, message: str) -> str:
    text = (up.path / rel).read_text()
    return up.commit({rel: apply_snippet(text, old, new)}, message)


def start_paused(s: Series, step: str, *args: str) -> subprocess.Popen[str]:
    """Start `rebase` paused at the fault point `step` (DGR_FAULT=<step>:pause) and wait
    until it sits there."""
    return start_paused_cmd(s, step, "rebase", *args)


def start_paused_cmd(
    s: Series, step: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Any forge command paused at the fault point `step`."""
    proc = subprocess.Popen(
        forge_cmd("--root", str(s.root), *args),
        env=forge_env({**(env or {}), "DGR_FAULT": f"{step}:pause"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if f"paused at {step}" in line:
            return proc
    proc.wait()
    raise AssertionError(f"never paused at {step}: rc={proc.returncode}\n{''.join(seen)}")


def kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
