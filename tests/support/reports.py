"""Helpers for the report/key/certify tests (and bench/reports.py): a forge root with a
real patch, a recipe and a worker repo, and a `LaneBuild` over real artifact files with
their real hashes."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dgr_forge.attest.records import Artifact, LaneBuild, PatchInput, Tool, WorkerSource
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.upstream import manifest

from .git import Upstream, committed_head, sh_git
from .roots import UPSTREAM_AUTHOR, Edit, author_patches, make_root, manifest_text

if TYPE_CHECKING:
    import pytest

RECIPE = """schema = 1
[lane]
backend = "CPU"
description = "portable CPU build"
[cmake]
options = { GGML_NATIVE = "OFF" }
"""

PATCH_FILE = "0001-layer-owner.patch"


def isolate_key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No default key from the user's config, no key or CI setting from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("DGR_SIGNING_KEY", "DGR_VERIFY_KEY", "CI", "GITHUB_ACTIONS"):
        monkeypatch.delenv(var, raising=False)


def make_patch(upstream: Upstream) -> str:
    """A real patch (plain `git format-patch`) against the upstream's head; the upstream is
    left as it was."""
    edit = Edit(
        {"src/llama.cpp": lambda text: text.replace("return 0;", "return layer % 2;")},
        "add layer range ownership",
    )
    flags = ("--zero-commit", "--no-signature")
    patches, _, _ = author_patches(upstream, [edit], flags=flags, author=UPSTREAM_AUTHOR)
    return patches[0][1].decode().strip() + "\n"


def make_worker(path: Path) -> str:
    """A worker source repo with a fixed date: the same commit id wherever it is made."""
    path.mkdir(parents=True)
    sh_git(path, "init", "-q")
    (path / "CMakeLists.txt").write_text(
        "project(worker CXX)\nadd_executable(dgr-shard-worker w.cpp)\n"
    )
    (path / "w.cpp").write_text("int main() { return 0; }\n")
    sh_git(path, "add", "-A")
    date = "2025-02-01T00:00:00Z"
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    sh_git(path, "commit", "-q", "-m", "worker", env=env)
    return committed_head(path)


def setup_root(path: Path, upstream: Upstream, patch_text: str) -> Path:
    """A forge root pinning upstream's head with one real patch and a cpu recipe."""
    root = make_root(path, upstream).root
    (root / "patches/llama.cpp" / PATCH_FILE).write_text(patch_text)
    write_manifest(root, upstream, upstream.head, patch_text)
    (root / "recipes/cpu.toml").write_text(RECIPE)
    make_worker(root / "worker")
    return root


def write_manifest(root: Path, upstream: Upstream, commit: str, patch_text: str) -> None:
    series = [{"file": PATCH_FILE, "sha256": sha256_bytes(patch_text.encode())}]
    text = manifest_text(upstream.url, commit, upstream.tree(commit), series=series)
    (root / "manifests/llama.cpp.toml").write_text(text)


def lane_build(forge: Forge, lane: str = "cpu", tag: str = "") -> LaneBuild:
    """Write real build outputs into the workspace and describe them as `build` would."""
    m = manifest.load(forge.upstream_manifest, forge.root)
    build_dir = forge.build_dir(lane)
    (build_dir / "bin").mkdir(parents=True, exist_ok=True)
    files = {
        build_dir / "bin/llama-cli": b"\x7fELF llama-cli built bytes" + tag.encode(),
        build_dir / "bin/dgr-shard-worker": b"\x7fELF worker built bytes" + tag.encode(),
        build_dir / "libllama.so": b"\x7fELF libllama" + tag.encode(),
    }
    for p, data in files.items():
        p.write_bytes(data)
    cache = build_dir / "CMakeCache.txt"
    cache.write_text("CMAKE_BUILD_TYPE:STRING=Release\nGGML_NATIVE:BOOL=OFF\n")
    forge.logs_dir.mkdir(parents=True, exist_ok=True)
    log = forge.logs_dir / f"build-{lane}.log"
    log.write_text("[1/3] Building C object ggml.c.o\n[3/3] Linking llama-cli\n")
    worker_dir = forge.root / "worker"
    worker_commit = sh_git(worker_dir, "rev-parse", "HEAD")
    cc = shutil.which("cc") or shutil.which("gcc") or "/usr/bin/cc"
    cc_version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    recipe = forge.recipes_dir / f"{lane}.toml"
    now = datetime.now(UTC)
    kinds = {
        "llama-cli": "EXECUTABLE",
        "dgr-shard-worker": "EXECUTABLE",
        "libllama.so": "SHARED_LIBRARY",
    }
    return LaneBuild(
        lane=lane,
        recipe_file=f"recipes/{lane}.toml",
        recipe_sha256=sha256_file(recipe),
        manifest_file="manifests/llama.cpp.toml",
        manifest_sha256=sha256_file(forge.upstream_manifest),
        upstream_name=m.name,
        upstream_url=m.url,
        upstream_commit=m.commit,
        upstream_tree=m.tree or "",
        patches=[PatchInput(f"{m.patches_dir_rel}/{e.file}", e.sha256) for e in m.series],
        series_digest=m.series_digest,
        result_tree="a" * 40,
        worker=WorkerSource(str(worker_dir), worker_commit, False),
        tools=[Tool("c-compiler", cc, cc_version.splitlines()[0] if cc_version else "unknown")],
        cmake_args=[
            "-G",
            "Ninja",
            f"-DDGR_UPSTREAM_SOURCE_DIR={forge.src_dir(m.name)}",
            f"-DCMAKE_MODULE_PATH={forge.cmake_dir}",
            "-DGGML_NATIVE=OFF",
        ],
        compiler_launcher=None,
        source_date_epoch=1735689600,
        build_dir=build_dir,
        log_file=log,
        cmake_cache=cache,
        started_on=now - timedelta(seconds=3),
        finished_on=now,
        artifacts=[
            Artifact(name=p.name, kind=kinds[p.name], path=p, sha256=sha256_file(p)) for p in files
        ],
    )


def keyid_from_pub(pub_path: Path) -> str:
    """The documented keyid, computed independently: securesystemslib's own default for
    the public key (sha256 of its canonical JSON key form)."""
    from securesystemslib.signer import SSlibKey

    key = serialization.load_pem_public_key(pub_path.read_bytes())
    return SSlibKey.from_crypto(key).keyid


def spki_der(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def legacy_keyid_of(public_key: Ed25519PublicKey) -> str:
    """The key id reports named before 0.1 took securesystemslib's."""
    return hashlib.sha256(spki_der(public_key)).hexdigest()


def read_envelope(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def payload_of(envelope: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return data
