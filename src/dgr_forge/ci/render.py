"""CI generated from the recipes: `matrix` (one job per `recipes/<lane>.toml`, no template
change) and the workflow files rendered from it. The templates use `[[ ]]` / `[% %]` as
Jinja delimiters, so the providers' own `${{ }}` / `$VAR` pass through untouched; what the
rendered CI guarantees is docs/ci.md's and SECURITY.md's.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import jinja2
import msgspec
from msgspec import UNSET, Struct, UnsetType

from dgr_forge.ci.install import VENV_SETUP, Install
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import MAX_WORKFLOW_BYTES, atomic_write_text, read_regular, sha256_bytes
from dgr_forge.core.gitutil import HEX40
from dgr_forge.core.structs import Form, d
from dgr_forge.core.tominput import Checker, Record, Version1, about, decode
from dgr_forge.core.urls import mask
from dgr_forge.host.recipes import Recipe
from dgr_forge.upstream.manifest import UpstreamManifest


@dataclass(frozen=True)
class Provider:
    name: str
    template: str  # file name under dgr_forge/ci/templates/


PROVIDERS: dict[str, Provider] = {
    "github": Provider("github", "github-actions.yml.j2"),
    "gitlab": Provider("gitlab", "gitlab-ci.yml.j2"),
}


class MatrixEntry(Struct, kw_only=True):
    """a lane of the matrix (from its recipe)"""

    lane: Annotated[str, d("the file name (`cuda` for `recipes/cuda.toml`)")]
    backend: Annotated[str, d("`lane.backend`")]
    runs_on: Annotated[list[str], d('`ci.runs_on` (runner labels; default `["ubuntu-latest"]`)')]
    container: Annotated[
        str | UnsetType,
        d(
            "`ci.container`, as `image@sha256:...` when `ci.image_digest` is set; present only "
            "when the recipe names one"
        ),
    ] = UNSET
    tools: Annotated[list[str], d("`requires.tools` (probe names from `toolchains/probes.toml`)")]
    libraries: Annotated[list[str], d("`requires.libraries`")]
    packages: Annotated[list[str], d("`ci.packages` (apt packages the CI job installs first)")]
    gitlab_tags: Annotated[list[str], d("`ci.gitlab_tags` (GitLab runner tags)")]
    runner_os: Annotated[str, d("`linux` or `darwin`: which default GitLab image a lane gets")]


class Matrix(Struct, kw_only=True):
    """`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`"""

    include: Annotated[list[MatrixEntry], d("sorted by lane")]


class CiMatrix(Form, kw_only=True):
    """`ci matrix`'s result (its `--json` object; without `--json`, `matrix` alone)."""

    title = "ci matrix"
    note = "without `--json`, stdout is `matrix` alone, ready for `fromJSON` or `jq`"

    matrix: Annotated[Matrix, d('`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`')]


class Render(Form, kw_only=True):
    """The keys every `ci render` form shares."""

    provider: Annotated[str, d("`github` or `gitlab`")]
    lanes: Annotated[list[str], d("the lanes rendered, sorted")]
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
    """`ci render`'s result (its `--json` object; without `--json`, `workflow` alone)."""

    title = "ci render"

    workflow: Annotated[str, d("the workflow text")]


class CiRenderOut(Render, kw_only=True):
    """`ci render --out`'s result."""

    title = "ci render --out PATH"

    path: Annotated[str, d("the `--out` path")]
    changed: Annotated[bool, d("the file was (re)written; false when already identical")]
    written: Annotated[
        list[str],
        d(
            "the files `--write-pins` wrote because they were missing (`ci/constraints.txt` "
            "from this environment; `ci/requirements.txt` only when this dgr-forge came from "
            "a git commit); none without `--write-pins`"
        ),
    ]
    requirements_written: Annotated[bool, d("`ci/requirements.txt` was among them")]


class CiRenderCheck(Render, kw_only=True):
    """`ci render --check`'s result."""

    title = "ci render --check PATH"
    note = (
        "a stale file is exit 1 (a failure) with the render's keys, `path`, `current: false` "
        "and `diff` (unified diff from the committed file to the rendering)"
    )

    path: Annotated[str, d("the `--check` path")]
    current: Annotated[bool, d("true")]


def rendered(which: Provider, recipes: dict[str, Recipe], how: Install, text: str) -> Render:
    return Render(
        provider=which.name,
        lanes=sorted(recipes),
        sha256=sha256_bytes(text.encode("utf-8")),
        install=how.mode,
        install_args=how.args,
        constraints=how.constraints,
        requirements=how.requirements,
        requirements_exist=how.exists,
        tool_source=how.source,
    )


def matrix(recipes: dict[str, Recipe]) -> Matrix:
    return Matrix(
        include=[
            MatrixEntry(
                lane=r.name,
                backend=r.lane.backend,
                runs_on=list(r.ci.runs_on),
                container=r.image or UNSET,  # by digest when the recipe gives one
                tools=list(r.requires.tools),
                libraries=list(r.requires.libraries),
                packages=list(r.ci.packages),
                gitlab_tags=list(r.gitlab_tags),
                runner_os="darwin" if r.lane.host_os == ("darwin",) else "linux",
            )
            for r in (recipes[name] for name in sorted(recipes))
        ]
    )


def provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise BadInput(
            f"unknown CI provider {name!r}",
            hint="use --provider " + " or --provider ".join(PROVIDERS),
            details={"provider": name},
        ) from None


def _flow(value: Any) -> str:
    """A value as a YAML flow scalar/collection (JSON is YAML): quoted, one line, stable."""
    return json.dumps(value, ensure_ascii=True)


# Input text is data: GitHub evaluates `${{` anywhere in a value, so each one is written as
# the literal expression `${{ '${{' }}` (which evaluates to those three characters: the
# job gets the same bytes); GitLab expands `$VAR`/`${VAR}` in variables, so a variable
# holding a `$` is written with `expand: false`.


def _github_inert(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("${{", "${{ '${{' }}")
    if isinstance(value, list):
        return [_github_inert(v) for v in value]
    if isinstance(value, dict):
        return {k: _github_inert(v) for k, v in value.items()}
    return value


@functools.cache
def _environment() -> jinja2.Environment:
    """One per process (a template compiles in ~20 ms): a compiled template is reused while
    its source reads the same (jinja's `uptodate`)."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template), undefined=jinja2.StrictUndefined,
        block_start_string="[%", block_end_string="%]",
        variable_start_string="[[", variable_end_string="]]",
        comment_start_string="[#", comment_end_string="#]",
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
    )  # fmt: skip
    env.filters["flow"] = _flow
    env.filters["github"] = lambda value: _flow(_github_inert(value))
    env.filters["variable"] = lambda v: _flow({"value": v, "expand": False} if "$" in v else v)
    return env


def _template_source(name: str) -> str:
    return resources.files("dgr_forge.ci").joinpath("templates", name).read_text(encoding="utf-8")


def _load_template(name: str) -> tuple[str, None, Callable[[], bool]]:  # jinja's loader
    source = _template_source(name)
    return source, None, lambda: _template_source(name) == source


_ACTION = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+")
_VERSION = re.compile(r"v[0-9][0-9A-Za-z.-]*")


class _Action(Record, frozen=True):  # [github.<key>]: one action, pinned by commit
    uses: str
    sha: str
    version: str  # the release the commit is, shown beside the pin


class _GitLab(Record, frozen=True):
    images: dict[str, str] = {}  # noqa: RUF012 (msgspec copies an empty default)


class _Pins(Record, frozen=True):  # templates/actions.toml
    schema: Version1
    github: dict[str, _Action] = {}  # noqa: RUF012
    gitlab: _GitLab = msgspec.field(default_factory=_GitLab)


def pinned() -> dict[str, dict[str, str]]:
    """`templates/actions.toml`: every action as `owner/repo@<40 hex> # vX.Y.Z`, checked."""
    shown = "templates/actions.toml"
    broken = "the packaged pin list is broken; reinstall dgr-forge or report it"
    try:
        pins = decode(shown, Checker(shown).parse(_template_source("actions.toml").encode()), _Pins)
    except BadInput as err:  # the package's own file: a broken install, not the user's input
        raise OperationFailed(err.message, hint=broken, details=err.details) from None
    actions: dict[str, str] = {}
    for key, a in pins.github.items():
        if not (
            _ACTION.fullmatch(a.uses) and HEX40.fullmatch(a.sha) and _VERSION.fullmatch(a.version)
        ):
            raise OperationFailed(
                f"{shown}: github.{key}: needs uses, a 40-hex sha and a version", hint=broken
            )
        actions[key] = f"{a.uses}@{a.sha} # {a.version}"
    return {"actions": actions, "images": dict(pins.gitlab.images)}


BUMP_SETTINGS = "ci/bump.toml"


def bump_request(root: Path) -> bool:
    """`ci/bump.toml`'s `[bump] open_request`, default true (docs/bump.md)."""
    if not (path := root / BUMP_SETTINGS).exists() and not path.is_symlink():
        return True
    _, data = Checker(BUMP_SETTINGS).load(
        path, what="CI bump settings", hint="see docs/bump.md", root=root
    )
    return decode(BUMP_SETTINGS, data, BumpSettings).bump.open_request


class Bump(Record, frozen=True):
    """The nightly roller job."""

    open_request: Annotated[
        bool, about("push a branch and open a pull/merge request when the pin moved")
    ] = True


class BumpSettings(Record, frozen=True):
    """`ci/bump.toml`: the nightly roller's settings."""

    schema: Version1
    bump: Bump = msgspec.field(default_factory=Bump)


def render(
    which: Provider,
    recipes: dict[str, Recipe],
    manifest: UpstreamManifest,
    how: Install,
    open_request: bool,
) -> str:
    """The workflow text for `which`; the same recipes and manifest give the same bytes."""
    if not recipes:
        raise BadInput(
            "no recipes: a CI workflow needs at least one lane",
            hint="add recipes/<lane>.toml (e.g. recipes/cpu.toml)",
        )
    lanes = msgspec.to_builtins(matrix(recipes))  # the templates read plain objects
    # the cache proof builds one lane twice: cpu when there is one (cheapest), else the first
    proof = next((e for e in lanes["include"] if e["lane"] == "cpu"), lanes["include"][0])
    # every row defines every key a job reads (actionlint types `matrix` from the rows): a
    # lane without an image has an empty `container`, which GitHub reads as none
    rows = [{**entry, "container": entry.get("container", "")} for entry in lanes["include"]]
    # a certify job per lane whose recipe sets `ci.certify_runs_on`, on that hardware
    certify = [
        {"lane": r.name, "backend": r.lane.backend, "certify_runs_on": list(r.ci.certify_runs_on),
         "needs_model": r.certify.needs_model}
        for r in (recipes[name] for name in sorted(recipes))
        if r.certify is not None and r.ci.certify_runs_on
    ]  # fmt: skip
    context = {
        "matrix": lanes,
        "rows": rows,
        "certify": {"include": certify},
        "proof": proof,
        "proof_row": rows[lanes["include"].index(proof)],
        "pin": manifest.commit,
        "series_digest": manifest.series_digest,
        "upstream": manifest.name,
        "upstream_url": mask(manifest.url),
        "provider": which.name,
        # every job's one install step (ci/install.py): pip's arguments, what they install
        "install_args": how.args,
        "venv_setup": VENV_SETUP,
        "install_what": {
            "checkout": "the checked-out tree, its toolchain pinned by constraints.txt",
            "requirements": f"pinned by {how.requirements} under {how.constraints}",
            "source": f"from --tool-source (DGR_TOOL_SOURCE) under {how.constraints}",
        }[how.mode],
        "tool_source": how.source,  # checked by ci.install.tool_source, or None
        # the workflow's own `ci render` (check, re-render) passes it back
        "render_args": ' --tool-source "$DGR_TOOL_SOURCE"' if how.source else "",
        "bump_request": open_request,
        **pinned(),
    }
    try:
        return _environment().get_template(which.template).render(context)
    except jinja2.TemplateError as err:  # a broken template is our bug, say where
        raise OperationFailed(
            f"template {which.template}: {err}",
            hint="the packaged template is broken; reinstall dgr-forge or report it",
        ) from None


def write(path: Path, text: str) -> bool:
    """Write the workflow atomically; False when it is already up to date."""
    with contextlib.suppress(BadInput, UnicodeDecodeError):  # missing, not a file or text
        old = read_regular(path, what="workflow file", hint="", limit=MAX_WORKFLOW_BYTES)
        if old.decode("utf-8") == text:  # never blocks on a FIFO planted at --out
            return False
    if path.is_dir():
        raise BadInput(f"{path}: is a directory", hint="pass --out a file path")
    try:
        atomic_write_text(path, text, mode=0o644)
    except OSError as err:
        raise BadInput(
            f"{path}: cannot write: {err.strerror}", hint="pass --out a writable path"
        ) from None
    return True


MAX_DIFF_LINES = 400


def stale_diff(path: Path, text: str) -> str:
    """A unified diff from the committed workflow to what renders now ("" when current)."""
    if not os.path.lexists(path):
        raise BadInput(
            f"{path}: no such workflow file", hint="render it with dgr-forge ci render --out PATH"
        )
    raw = read_regular(  # a FIFO or /dev/zero is refused, never read (exit 2)
        path,
        what="workflow file",
        hint="pass the committed workflow file (a regular file of at most 1 MiB)",
        limit=MAX_WORKFLOW_BYTES,
    )
    try:
        committed = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadInput(f"{path}: cannot read: {err}", hint="check the path") from None
    if committed == text:
        return ""
    lines = list(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{path} (committed)",
            tofile=f"{path} (rendered)",
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more line(s)\n"]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
