"""Helpers for the patch/export tests: a real patch series made by committing in a clone
of the test upstream and running plain `git format-patch` (independent of dgr-forge)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from forgetest import GIT_ENV, Upstream, manifest_text, sh_git

AUTHOR_ENV = {
    "GIT_AUTHOR_NAME": "Patch Author",
    "GIT_AUTHOR_EMAIL": "author@dgr.invalid",
    "GIT_COMMITTER_NAME": "Patch Author",
    "GIT_COMMITTER_EMAIL": "author@dgr.invalid",
}

# (files, subject): three patches touching different files, one adding a file
DEFAULT_EDITS: list[tuple[dict[str, str | None], str]] = [
    (
        {
            "src/llama.cpp": '#include "llama.h"\n\nconst char * llama_version(void) {\n'
            '    return "upstream";\n}\n\nint llama_layer_owner(int layer) {\n'
            "    return layer < 16 ? 0 : 1;\n}\n",
        },
        "Add layer range ownership",
    ),
    (
        {
            "ggml/src/ggml.c": '#include "ggml.h"\n\nint ggml_backend_count(void) {\n'
            "    return 2;\n}\n",
        },
        "ggml: report two backends",
    ),
    (
        {"docs/dgr.md": "# DGR\n\nShard worker notes.\n"},
        "docs: add DGR notes",
    ),
]


@dataclass
class Series:
    files: list[str]  # file names in patches/llama.cpp
    commits: list[str]  # the commits in the authoring clone
    trees: list[str]
    pin: str

    def paths(self, root: Path) -> list[Path]:
        return [root / "patches" / "llama.cpp" / f for f in self.files]


def slugify(subject: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:52].rstrip("-")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def commit_in(repo: Path, files: dict[str, str | None], subject: str, tick: int) -> str:
    for rel, content in files.items():
        target = repo / rel
        if content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    sh_git(repo, "add", "-A")
    date = f"2025-02-0{1 + tick % 9}T10:00:00+02:00"
    env = {**AUTHOR_ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    sh_git(repo, "commit", "-q", "-m", subject, "-m", f"Body of {subject!r}.", env=env)
    return sh_git(repo, "rev-parse", "HEAD")


def make_series(
    root: Path,
    upstream: Upstream,
    edits: list[tuple[dict[str, str | None], str]] | None = None,
    *,
    with_trees: bool = True,
    pin: str | None = None,
) -> Series:
    """Commit `edits` on the pin in a scratch clone, format-patch them into the forge root
    and write the manifest (sha256, and per-patch/result trees when `with_trees`)."""
    pin = pin or upstream.head
    work = root.parent / f"author-{root.name}"
    if work.exists():
        shutil.rmtree(work)
    sh_git(root.parent, "clone", "-q", str(upstream.path), str(work))
    sh_git(work, "checkout", "-q", "--detach", pin)
    edits = edits or DEFAULT_EDITS
    commits = [commit_in(work, files, subject, i) for i, (files, subject) in enumerate(edits)]
    trees = [sh_git(work, "rev-parse", f"{c}^{{tree}}") for c in commits]
    pdir = root / "patches" / "llama.cpp"
    for old in pdir.glob("*.patch"):
        old.unlink()
    out = root.parent / f"fp-{root.name}"
    shutil.rmtree(out, ignore_errors=True)
    sh_git(work, "format-patch", "-q", "-k", "--zero-commit", "-o", str(out), f"{pin}..HEAD")
    files: list[str] = []
    for i, (path, (_files, subject)) in enumerate(
        zip(sorted(out.glob("*.patch")), edits, strict=True), start=1
    ):
        name = f"{i:04d}-{slugify(subject)}.patch"
        shutil.copyfile(path, pdir / name)
        files.append(name)
    write_manifest(root, upstream, files, trees if with_trees else None, pin=pin)
    return Series(files=files, commits=commits, trees=trees, pin=pin)


def write_manifest(
    root: Path,
    upstream: Upstream,
    files: list[str],
    trees: list[str] | None,
    *,
    pin: str | None = None,
    result_tree: str | None = None,
) -> None:
    pin = pin or upstream.head
    pdir = root / "patches" / "llama.cpp"
    series = []
    for i, name in enumerate(files):
        entry = {"file": name, "sha256": sha256(pdir / name)}
        if trees:
            entry["tree"] = trees[i]
        series.append(entry)
    result = result_tree or (trees[-1] if trees else None)
    text = manifest_text(upstream.url, pin, upstream.tree(pin), series, result)
    (root / "manifests" / "llama.cpp.toml").write_text(text)


def plain_am_tree(tmp: Path, upstream: Upstream, pin: str, patch_paths: list[Path]) -> str:
    """The tree a plain `git am` of the files gives in a plain clone: the independent oracle."""
    clone = tmp / "oracle"
    shutil.rmtree(clone, ignore_errors=True)
    sh_git(tmp, "clone", "-q", str(upstream.path), str(clone))
    sh_git(clone, "checkout", "-q", "--detach", pin)
    if patch_paths:
        sh_git(clone, "am", "-q", *map(str, patch_paths), env=AUTHOR_ENV)
    return sh_git(clone, "rev-parse", "HEAD^{tree}")


def src_dir(root: Path) -> Path:
    return root / ".dgr" / "src" / "llama.cpp"


def snapshot(tree: Path, with_git: bool = False) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime_ns under `tree` (.git excluded unless asked)."""
    result: dict[str, tuple[bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        if not with_git and ".git" in dirnames and Path(dirpath) == tree:
            dirnames.remove(".git")
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                result[str(path.relative_to(tree))] = (os.readlink(path).encode(), 0)
                continue
            result[str(path.relative_to(tree))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return result


def head(repo: Path) -> str:
    return sh_git(repo, "rev-parse", "HEAD")


def git_env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def gnu_patch_needs_fuzz(target: Path, patch: Path) -> bool | None:
    """Whether GNU patch would apply `patch` only with fuzz (None: no GNU patch here)."""
    if shutil.which("patch") is None:
        return None
    proc = subprocess.run(
        ["patch", "-p1", "--dry-run", "-i", str(patch)],
        cwd=target,
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0 and "fuzz" in proc.stdout
