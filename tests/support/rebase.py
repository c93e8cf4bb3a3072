"""Fixtures for the rebase and check tests: a forge root with a real three-patch series on
the test upstream, canonicalized by the real `dgr-forge patch` + `dgr-forge export`."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import manifest
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import PatchedTree, ensure_patched

from .cli import forge_cmd, forge_env
from .git import Upstream
from .roots import CANONICAL, UPSTREAM_AUTHOR, Edit, Series, make_root

FORMAT_PATCH = ("format-patch", *CANONICAL)  # the canonical `git format-patch` call

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


def apply_snippet(text: str, old: str, new: str) -> str:
    assert old in text, f"snippet not found: {old!r}"
    return text.replace(old, new, 1)


def _replace(old: str, new: str) -> Callable[[str], str]:
    return lambda text: apply_snippet(text, old, new)


def make_series(tmp: Path, upstream: Upstream) -> Series:
    """A forge root (`tmp/forge`) pinning upstream's head with SERIES as patch files made
    with plain git, then canonicalized by the real flow: `patch`, then `export` (which
    fills the per-patch and result trees)."""
    edits = [Edit({rel: _replace(old, new)}, subject) for subject, rel, old, new in SERIES]
    s = make_root(
        tmp / "forge",
        upstream,
        edits,
        how="forge",
        flags=CANONICAL,
        names="git",
        trees=False,
        author=UPSTREAM_AUTHOR,
    )
    assert len(s.files) == len(SERIES)
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
