"""CI generated from the recipes: the per-lane matrix and workflow files rendered from it.

`matrix` is the single source: `ci matrix` prints it, and every provider's template
receives it, so a new `recipes/<lane>.toml` is a new CI job with no template change.
Templates ship in the package (`dgr_forge/templates/`) and use `[[ ]]` / `[% %]` as
Jinja delimiters, so the providers' own `${{ }}` / `$VAR` syntax passes through untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import atomic_write_text
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
        if recipe.container:
            entry["container"] = recipe.container
        entry["tools"] = list(recipe.tools)
        entry["libraries"] = list(recipe.libraries)
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


def render(which: Provider, recipes: dict[str, Recipe], manifest: UpstreamManifest) -> str:
    """The workflow text for `which`; the same recipes and manifest give the same bytes."""
    if not recipes:
        raise BadInput(
            "no recipes: a CI workflow needs at least one lane",
            hint="add recipes/<lane>.toml (e.g. recipes/cpu.toml)",
        )
    context = {
        "matrix": matrix(recipes),
        "pin": manifest.commit,
        "series_digest": manifest.series_digest,
        "upstream": manifest.name,
        "provider": which.name,
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
    try:
        return path.read_text(encoding="utf-8") == text
    except FileNotFoundError:
        raise BadInput(
            f"{path}: no such workflow file", hint="render it with dgr-forge ci render --out PATH"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise BadInput(f"{path}: cannot read: {err}", hint="check the path") from None
