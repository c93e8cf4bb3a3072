"""CI generated from the recipes: the per-lane matrix and workflow files rendered from it.

`matrix` is the single source: `ci matrix` prints it, and every provider's template
receives it, so a new `recipes/<lane>.toml` is a new CI job with no template change.
Templates ship in the package (`dgr_forge/lanes/templates/`) and use `[[ ]]` / `[% %]` as
Jinja delimiters, so the providers' own `${{ }}` / `$VAR` syntax passes through untouched.

What the rendered CI guarantees (SECURITY.md): pull requests build unsigned and read the
compiler cache read-only; only a protected push writes it; signing runs in its own job, in
the `release-signing` environment that alone holds the key; every action is pinned to a
commit (`templates/actions.toml`, the one place for them); dgr-forge itself comes from the
forge root's pinned `ci/requirements.txt`, never from the checked-out tree.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from dgr_forge import __version__
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.urls import mask
from dgr_forge.lanes.recipes import Recipe
from dgr_forge.upstream.manifest import UpstreamManifest


@dataclass(frozen=True)
class Provider:
    name: str
    template: str  # file name under dgr_forge/templates/
    default_path: str  # where the provider looks for its workflow, relative to the repo


PROVIDERS: dict[str, Provider] = {
    "github": Provider("github", "github-actions.yml.j2", ".github/workflows/dgr-forge.yml"),
    "gitlab": Provider("gitlab", "gitlab-ci.yml.j2", ".gitlab-ci.yml"),
}


def matrix(recipes: dict[str, Recipe]) -> dict[str, list[dict[str, Any]]]:
    """`{"include": [...]}`: one entry per lane, in lane-name order (a GitHub matrix as is)."""
    include: list[dict[str, Any]] = []
    for name in sorted(recipes):
        recipe = recipes[name]
        entry: dict[str, Any] = {
            "lane": recipe.name,
            "backend": recipe.backend,
            "runs_on": list(recipe.runs_on),
        }
        if recipe.image:
            entry["container"] = recipe.image  # by digest when the recipe gives one
        entry["tools"] = list(recipe.tools)
        entry["libraries"] = list(recipe.libraries)
        entry["packages"] = list(recipe.packages)
        entry["gitlab_tags"] = list(recipe.gitlab_tags)
        entry["runner_os"] = "darwin" if recipe.host_os == ("darwin",) else "linux"
        include.append(entry)
    return {"include": include}


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


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined,
        block_start_string="[%",
        block_end_string="%]",
        variable_start_string="[[",
        variable_end_string="]]",
        comment_start_string="[#",
        comment_end_string="#]",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["flow"] = _flow
    return env


def _template_source(name: str) -> str:
    return (
        resources.files("dgr_forge.lanes").joinpath("templates", name).read_text(encoding="utf-8")
    )


_SHA = re.compile(r"[0-9a-f]{40}")
_ACTION = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+")
_VERSION = re.compile(r"v[0-9][0-9A-Za-z.-]*")


def pinned() -> dict[str, Any]:
    """`templates/actions.toml`: every action as `owner/repo@<40 hex> # vX.Y.Z`, checked."""
    text = _template_source("actions.toml")
    data = tomllib.loads(text)
    actions: dict[str, str] = {}
    for key, entry in data.get("github", {}).items():
        uses, sha, version = entry.get("uses", ""), entry.get("sha", ""), entry.get("version", "")
        if not (_ACTION.fullmatch(uses) and _SHA.fullmatch(sha) and _VERSION.fullmatch(version)):
            raise OperationFailed(
                f"templates/actions.toml: github.{key}: needs uses, a 40-hex sha and a version",
                hint="the packaged pin list is broken; reinstall dgr-forge or report it",
            )
        actions[key] = f"{uses}@{sha} # {version}"
    return {"actions": actions, "images": dict(data.get("gitlab", {}).get("images", {}))}


REQUIREMENTS = "ci/requirements.txt"
_PINNED_REQ = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+"
    r"(\s+--hash=sha256:[0-9a-f]{64})*"
)


@dataclass(frozen=True)
class Requirements:
    path: Path
    exists: bool
    hashes: bool  # every requirement carries --hash: pip runs with --require-hashes


def requirements(root: Path) -> Requirements:
    """The forge root's pinned `ci/requirements.txt`: how CI installs dgr-forge (never `.`).

    Only exact pins (`name==version`, optionally `--hash=sha256:...`) are accepted: an
    unpinned, URL, editable or option line would let CI install something else."""
    path = root / REQUIREMENTS
    if path.parent.is_symlink() or path.is_symlink() or (path.exists() and not path.is_file()):
        # read or written through a planted link, it would pin whatever the link points at
        raise BadInput(f"{REQUIREMENTS}: not a regular file", hint="commit a plain file")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Requirements(path, False, False)
    except OSError as err:
        raise BadInput(f"{REQUIREMENTS}: cannot read: {err.strerror}", hint="check it") from None
    if len(raw) > 64 * 1024:
        raise BadInput(f"{REQUIREMENTS}: larger than 64 KiB", hint="pin only dgr-forge")
    lines = raw.decode("utf-8", errors="replace").replace("\\\n", " ").splitlines()
    found, hashed = 0, 0
    for number, line in enumerate(lines, 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        if not _PINNED_REQ.fullmatch(body):
            raise BadInput(
                f"{REQUIREMENTS}:{number}: {body[:60]!r} is not an exact pin",
                hint="write name==version (optionally --hash=sha256:...): e.g. "
                f"dgr-forge=={__version__}",
                details={"file": REQUIREMENTS, "line": number},
            )
        found += 1
        hashed += "--hash=" in body
    if not found:
        raise BadInput(f"{REQUIREMENTS}: pins nothing", hint=f"add dgr-forge=={__version__}")
    return Requirements(path, True, hashed == found)


def write_requirements(root: Path) -> bool:
    """Create `ci/requirements.txt` pinning this dgr-forge when the root has none."""
    if requirements(root).exists:
        return False
    text = (
        "# dgr-forge for CI, pinned: the rendered workflows install exactly this (never the\n"
        "# checked-out tree). Written by `dgr-forge ci render`; bump it deliberately, and add\n"
        "# --hash=sha256:... to pin the bytes too (pip then runs with --require-hashes).\n"
        f"dgr-forge=={__version__}\n"
    )
    try:
        (root / "ci").mkdir(exist_ok=True)
        atomic_write_text(root / REQUIREMENTS, text, mode=0o644)
    except OSError as err:
        raise BadInput(
            f"{REQUIREMENTS}: cannot write: {err.strerror}", hint="check the forge root"
        ) from None
    return True


BUMP_SETTINGS = "ci/bump.toml"


def bump_request(root: Path) -> bool:
    """`ci/bump.toml` `[bump] open_request` (default true): whether the nightly roller job
    pushes a branch and opens a pull/merge request when `dgr-forge bump` moved the pin.
    Off, the job still bumps and uploads the report, with read-only permissions."""
    from dgr_forge.core.tomlcheck import Checker

    path = root / BUMP_SETTINGS
    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or path.parent.is_symlink() or not path.is_file():
        raise BadInput(f"{BUMP_SETTINGS}: not a regular file", hint="commit a plain file")
    c = Checker(BUMP_SETTINGS)
    _, data = c.load(path, what="CI bump settings", hint="see docs/bump.md")
    c.schema(data, 1)
    c.known_keys(data, {"schema", "bump"}, "")
    bump = c.section(data, "bump", {"open_request"})
    return c.boolean(bump, "open_request", "bump", True)


def render(
    which: Provider,
    recipes: dict[str, Recipe],
    manifest: UpstreamManifest,
    reqs: Requirements | None = None,
    open_request: bool = True,
) -> str:
    """The workflow text for `which`; the same recipes and manifest give the same bytes."""
    if not recipes:
        raise BadInput(
            "no recipes: a CI workflow needs at least one lane",
            hint="add recipes/<lane>.toml (e.g. recipes/cpu.toml)",
        )
    lanes = matrix(recipes)
    # the cache proof builds one lane twice: cpu when there is one (cheapest), else the first
    proof = next((e for e in lanes["include"] if e["lane"] == "cpu"), lanes["include"][0])
    context = {
        "matrix": lanes,
        "proof": proof,
        "pin": manifest.commit,
        "series_digest": manifest.series_digest,
        "upstream": manifest.name,
        "upstream_url": mask(manifest.url),
        "provider": which.name,
        "requirements": REQUIREMENTS,
        "require_hashes": bool(reqs and reqs.hashes),
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
    """Write the workflow atomically; False (nothing written) when it is already up to date."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        pass  # unreadable or not text: replace it
    if path.is_dir():
        raise BadInput(f"{path}: is a directory", hint="pass --out a file path")
    try:
        atomic_write_text(path, text, mode=0o644)
    except OSError as err:
        raise BadInput(
            f"{path}: cannot write: {err.strerror}", hint="pass --out a writable path"
        ) from None
    return True


def is_current(path: Path, text: str) -> bool:
    """Whether the committed workflow at `path` is exactly what the recipes render to now."""
    return not stale_diff(path, text)


MAX_DIFF_LINES = 400


def stale_diff(path: Path, text: str) -> str:
    """A unified diff from the committed workflow to what renders now ("" when current)."""
    try:
        committed = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(
            f"{path}: no such workflow file", hint="render it with dgr-forge ci render --out PATH"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
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
