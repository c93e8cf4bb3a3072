"""The `--json` forms of CI: ci matrix, ci render."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.cli.results.base import Form, Nested, Strs, d

# --- CI ---------------------------------------------------------------------------------------


class MatrixEntry(Nested, kw_only=True):
    """a lane of the matrix (from its recipe)"""

    lane: Annotated[str, d("the file name (`cuda` for `recipes/cuda.toml`)")]
    backend: Annotated[str, d("`lane.backend`")]
    runs_on: Annotated[Strs, d('`ci.runs_on` (runner labels; default `["ubuntu-latest"]`)')]
    container: Annotated[
        str | UnsetType,
        d(
            "`ci.container`, as `image@sha256:...` when `ci.image_digest` is set; present only "
            "when the recipe names one"
        ),
    ] = UNSET
    tools: Annotated[Strs, d("`requires.tools` (probe names from `toolchains/probes.toml`)")]
    libraries: Annotated[Strs, d("`requires.libraries`")]
    packages: Annotated[Strs, d("`ci.packages` (apt packages the CI job installs first)")]
    gitlab_tags: Annotated[Strs, d("`ci.gitlab_tags` (GitLab runner tags)")]
    runner_os: Annotated[str, d("`linux` or `darwin`: which default GitLab image a lane gets")]


class Matrix(Nested, kw_only=True):
    """`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`"""

    include: Annotated[list[MatrixEntry], d("sorted by lane")]


class CiMatrix(Form, kw_only=True):
    title = "ci matrix"

    matrix: Annotated[Matrix, d('`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`')]


class Render(Form, kw_only=True):
    """The keys every `ci render` form shares."""

    provider: Annotated[str, d("`github` or `gitlab`")]
    lanes: Annotated[Strs, d("the lanes rendered, sorted")]
    sha256: Annotated[str, d("of the rendered workflow's bytes")]
    install: Annotated[
        str,
        d(
            "how every job installs dgr-forge: `checkout` (the tool's own repository: the "
            "checked-out tree), `requirements` (`ci/requirements.txt`, pinned by content) or "
            "`source` (`--tool-source`)"
        ),
    ]
    install_args: Annotated[
        str,
        d(
            "pip install's arguments in that step, e.g. `-c constraints.txt .` or "
            "`-c ci/constraints.txt -r ci/requirements.txt` (with `--tool-source`: "
            '`-c ci/constraints.txt "$DGR_TOOL_SOURCE"`, the requirement in the workflow\'s '
            "environment)"
        ),
    ]
    constraints: Annotated[
        str,
        d(
            "the constraints file the step installs under (`constraints.txt` or "
            "`ci/constraints.txt`)"
        ),
    ]
    requirements: Annotated[
        str | None,
        d("`ci/requirements.txt`; null in the tool's own repository and with `--tool-source`"),
    ]
    requirements_exist: Annotated[
        bool, d("every file the install step reads exists (`--check` exits 1 otherwise)")
    ]
    tool_source: Annotated[
        str | None,
        d(
            "the pip requirement `--tool-source` gave (`dgr-forge==X`, `dgr-forge @ "
            "https://...whl#sha256=...`, `dgr-forge @ git+https://...@<commit>`); null without"
        ),
    ]


class CiRender(Render, kw_only=True):
    title = "ci render"

    workflow: Annotated[str, d("the workflow text")]


class CiRenderOut(Render, kw_only=True):
    title = "ci render --out PATH"

    path: Annotated[str, d("the `--out` path")]
    changed: Annotated[bool, d("the file was (re)written; false when already identical")]
    written: Annotated[
        Strs,
        d(
            "the files `--write-pins` wrote because they were missing (`ci/constraints.txt` "
            "from this environment; `ci/requirements.txt` only when this dgr-forge came from "
            "a git commit); none without `--write-pins`"
        ),
    ]
    requirements_written: Annotated[bool, d("`ci/requirements.txt` was among them")]


class CiRenderCheck(Render, kw_only=True):
    title = "ci render --check PATH"
    note = (
        "a stale file is exit 1 (a failure) with the render's keys, `path`, `current: false` "
        "and `diff` (unified diff from the committed file to the rendering)"
    )

    path: Annotated[str, d("the `--check` path")]
    current: Annotated[bool, d("true")]
