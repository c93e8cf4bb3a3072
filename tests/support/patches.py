"""Helpers for the patch/export tests: a real patch series made by committing in a clone
of the test upstream and running plain `git format-patch` (independent of dgr-forge).
The series is made by the one builder, `support.roots`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .git import GIT_ENV, Upstream, sh_git
from .roots import PLAIN, Edit, Series, commit_edits, write_series

__all__ = [
    "AUTHOR_ENV",
    "DEFAULT_EDITS",
    "commit_in",
    "git_env",
    "gnu_patch_needs_fuzz",
    "head",
    "make_series",
    "plain_am_tree",
    "snapshot",
    "src_dir",
]

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


def commit_in(repo: Path, files: dict[str, str | None], subject: str, tick: int) -> str:
    """Commit `files` in `repo` as the patch author, with the tick-th patch date."""
    edit = Edit(dict(files), subject, _body(subject))
    return commit_edits(repo, [edit], author=AUTHOR_ENV, date=lambda _: _date(tick))[0]


def make_series(
    root: Path,
    upstream: Upstream,
    edits: list[tuple[dict[str, str | None], str]] | None = None,
    *,
    with_trees: bool = True,
    pin: str | None = None,
) -> Series:
    """Commit `edits` on the pin in a scratch clone, format-patch them (plain `-k`) into
    the forge root and write the manifest (sha256, and per-patch/result trees when
    `with_trees`)."""
    return write_series(
        root,
        upstream,
        [Edit(dict(files), subject, _body(subject)) for files, subject in edits or DEFAULT_EDITS],
        pin=pin,
        flags=PLAIN,
        names="slug",
        trees=with_trees,
        author=AUTHOR_ENV,
        date=_date,
    )


def _body(subject: str) -> str:
    return f"Body of {subject!r}."


def _date(tick: int) -> str:
    return f"2025-02-0{1 + tick % 9}T10:00:00+02:00"


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
