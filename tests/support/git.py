"""A real upstream git repository shaped like llama.cpp, and plain git for the tests.

The upstream is a small CMake C/C++ project with the same option names as llama.cpp (a
ggml library, a llama library, a tool), so recipes and builds exercise real switches.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Upstream Dev",
    "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
    "GIT_COMMITTER_NAME": "Upstream Dev",
    "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
}


# no background maintenance after a commit (a `git maintenance run --auto` child per
# commit), no hook samples copied into each new repository
_CONFIG = tuple(
    arg
    for setting in (
        "init.defaultBranch=main",
        "commit.gpgSign=false",
        "maintenance.auto=false",
        "gc.auto=0",
        "init.templateDir=",
    )
    for arg in ("-c", setting)
)

_COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_TREES: dict[str, str] = {}  # commit id -> its tree (Upstream.tree)


def sh_git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **GIT_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", *_CONFIG, *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def committed_head(repo: Path) -> str:
    """HEAD of `repo` right after a `git commit` there, read from the file git just wrote
    (a commit writes its branch's loose ref, or HEAD itself when detached): the id a
    `rev-parse HEAD` would print, without a process. Asked of git where the files say
    otherwise (a linked worktree, say)."""
    try:
        head = (repo / ".git" / "HEAD").read_text().strip()
        if head.startswith("ref: refs/heads/"):
            head = (repo / ".git" / head.removeprefix("ref: ")).read_text().strip()
    except OSError:
        head = ""
    return head if _COMMIT_ID.fullmatch(head) else sh_git(repo, "rev-parse", "HEAD")


# ----------------------------------------------------------------------------- upstream

BASE_FILES: dict[str, str] = {
    "CMakeLists.txt": textwrap.dedent(
        """\
        cmake_minimum_required(VERSION 3.14)
        project(llama C CXX)

        option(GGML_NATIVE "optimize for the build host" ON)
        option(GGML_CUDA "use CUDA" OFF)
        option(GGML_HIP "use HIP" OFF)
        option(GGML_VULKAN "use Vulkan" OFF)
        option(GGML_METAL "use Metal" OFF)
        option(LLAMA_BUILD_TESTS "build tests" OFF)
        option(LLAMA_BUILD_EXAMPLES "build examples" OFF)
        option(LLAMA_BUILD_TOOLS "build tools" ON)
        option(LLAMA_CURL "use libcurl" OFF)
        option(LLAMA_BUILD_UI "build the server's web UI" ON)
        option(LLAMA_USE_PREBUILT_UI "download the prebuilt web UI" ON)

        add_subdirectory(ggml)
        add_library(llama src/llama.cpp)
        target_include_directories(llama PUBLIC include)
        target_link_libraries(llama PUBLIC ggml)

        if (LLAMA_BUILD_TOOLS)
            add_executable(llama-cli tools/main.cpp)
            target_link_libraries(llama-cli PRIVATE llama)
        endif()
        """
    ),
    "ggml/CMakeLists.txt": textwrap.dedent(
        """\
        add_library(ggml src/ggml.c)
        target_include_directories(ggml PUBLIC include)
        if (GGML_CUDA)
            enable_language(CUDA)
            target_sources(ggml PRIVATE src/ggml-cuda.cu)
            target_compile_definitions(ggml PUBLIC GGML_USE_CUDA)
        endif()
        """
    ),
    "ggml/include/ggml.h": textwrap.dedent(
        """\
        #pragma once
        #ifdef __cplusplus
        extern "C" {
        #endif
        int ggml_backend_count(void);
        #ifdef __cplusplus
        }
        #endif
        """
    ),
    "ggml/src/ggml.c": textwrap.dedent(
        """\
        #include "ggml.h"

        int ggml_backend_count(void) {
            return 1;
        }
        """
    ),
    "ggml/src/ggml-cuda.cu": textwrap.dedent(
        """\
        __global__ void ggml_cuda_noop(int * x) { if (x) { *x = 1; } }
        """
    ),
    "include/llama.h": textwrap.dedent(
        """\
        #pragma once
        #include "ggml.h"

        const char * llama_version(void);
        int llama_layer_owner(int layer);
        """
    ),
    "src/llama.cpp": textwrap.dedent(
        """\
        #include "llama.h"

        const char * llama_version(void) {
            return "upstream";
        }

        int llama_layer_owner(int layer) {
            (void) layer;
            return 0;
        }
        """
    ),
    "tools/main.cpp": textwrap.dedent(
        """\
        #include <cstdio>
        #include "llama.h"

        int main() {
            std::printf("llama %s backends=%d owner(7)=%d\\n",
                        llama_version(), ggml_backend_count(), llama_layer_owner(7));
            return 0;
        }
        """
    ),
    "README.md": "# llama (test upstream)\n\nA tiny stand-in for llama.cpp.\n",
}


@dataclass
class Upstream:
    """A real git repository playing llama.cpp; `commits` oldest first."""

    path: Path
    commits: list[str] = field(default_factory=list)
    _tick: int = 0

    @property
    def url(self) -> str:
        return self.path.as_uri()

    @property
    def head(self) -> str:
        return self.commits[-1]

    def record_at(self, path: Path) -> Upstream:
        """A record of its own of this upstream's commits for the repository at `path` (a
        copy of it, or it put back as it was)."""
        return Upstream(path, list(self.commits), self._tick)

    def tree(self, rev: str) -> str:
        """The tree of `rev`; of a commit id, asked of git once per process (a commit id
        names its tree in every repository: the copies of one upstream share them)."""
        if not _COMMIT_ID.fullmatch(rev):
            return sh_git(self.path, "rev-parse", f"{rev}^{{tree}}")
        if rev not in _TREES:
            _TREES[rev] = sh_git(self.path, "rev-parse", f"{rev}^{{tree}}")
        return _TREES[rev]

    def commit(self, files: dict[str, str | None], message: str) -> str:
        """Write (or delete, with None) files and commit them with a deterministic date."""
        for rel, content in files.items():
            target = self.path / rel
            if content is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        sh_git(self.path, "add", "-A")
        self._tick += 1
        date = f"2025-01-01T00:{self._tick // 60:02d}:{self._tick % 60:02d}Z"
        sh_git(
            self.path,
            "commit",
            "-q",
            "-m",
            message,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
        sha = committed_head(self.path)
        self.commits.append(sha)
        return sha

    def read(self, rel: str, rev: str = "HEAD") -> str:
        return sh_git(self.path, "show", f"{rev}:{rel}")


def copy_upstream(up: Upstream, dest: Path) -> Upstream:
    """A copy of `up` at `dest`, a repository of its own that a test may change."""
    shutil.copytree(up.path, dest, symlinks=True)
    return up.record_at(dest)


def make_upstream(path: Path, extra_commits: int = 3) -> Upstream:
    path.mkdir(parents=True)
    sh_git(path, "init", "-q")
    up = Upstream(path)
    up.commit(dict(BASE_FILES), "initial import")
    for i in range(extra_commits):
        up.commit({f"docs/notes-{i}.md": f"note {i}\n"}, f"docs: note {i}")
    return up
