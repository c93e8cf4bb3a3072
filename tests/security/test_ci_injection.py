"""Rendered CI carries input text as data (issue 33 #4): a value from the root's files
(the manifest URL, a recipe's backend name) is written where neither GitHub (`${{ }}`)
nor GitLab (`$VAR`, `${VAR}`) evaluates it, and reaches the job as the same bytes; the
hostile workflows still pass the providers' schemas and zizmor (offline, as
tests/test_ci.py runs them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.actions import load_yaml
from support.cli import run_forge
from test_ci import CPU, validate, write_root

HOSTILE_URLS = [
    "https://example.invalid/llama.cpp.git?ref=${{ secrets.DGR_SIGNING_KEY }}",
    "https://example.invalid/$CI_JOB_TOKEN/${CI_JOB_TOKEN}/llama.cpp.git",
    "https://example.invalid/a: b #c/'q'/\"d\"/&x *y !z |>/llama.cpp.git",
]
# the variant: a recipe's free-text field, with a newline (the URL may hold none)
HOSTILE_BACKEND = 'CPU ${{ github.token }} $CI_JOB_TOKEN ${HOME}\n- "x": [y]'

_LITERAL = re.compile(r"\$\{\{ '((?:[^']|'')*)' \}\}")


def github_value(value: str) -> str:
    """What Actions makes of a string: only literal expressions (`${{ '...' }}`) may be
    left in it; any other `${{` would be evaluated."""
    evaluated = _LITERAL.sub(lambda m: m.group(1).replace("''", "'"), value)
    assert "${{" not in _LITERAL.sub("", value), f"a live expression: {value!r}"
    return evaluated


def gitlab_value(var: Any) -> str:
    """What GitLab gives the job for a `variables:` entry: a value with `$` must not be
    expanded (`expand: false`)."""
    if isinstance(var, dict):
        return str(var["value"]) if var.get("expand") is False else _gitlab_expanded(var["value"])
    return _gitlab_expanded(str(var))


def _gitlab_expanded(value: str) -> str:
    assert "$" not in value, f"GitLab expands this: {value!r}"
    return value


def _root(tmp_path: Path, url: str, backend: str = "CPU") -> Path:
    root = write_root(tmp_path / "forge", {"cpu": CPU.replace('"CPU"', json.dumps(backend))})
    manifest = root / "manifests" / "llama.cpp.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace('"https://example.invalid/llama.cpp.git"', json.dumps(url)))
    return root


def _render(root: Path, provider: str) -> str:
    res = run_forge("--root", str(root), "ci", "render", "--provider", provider)
    assert res.code == 0, res
    return res.stdout


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_the_manifest_url_is_data_in_both_providers(tmp_path: Path, url: str) -> None:
    root = _root(tmp_path, url)
    github = load_yaml(_render(root, "github"))
    assert github_value(github["env"]["DGR_UPSTREAM_URL"]) == url
    gitlab = load_yaml(_render(root, "gitlab"))
    assert gitlab_value(gitlab["variables"]["DGR_UPSTREAM_URL"]) == url
    # jobs run under the runner's umask, not 0000: the forge's own files stay its own
    assert gitlab["variables"]["FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR"] == "true"


def test_a_recipe_backend_is_data_in_both_providers(tmp_path: Path) -> None:
    root = _root(tmp_path, HOSTILE_URLS[0], HOSTILE_BACKEND)
    github = load_yaml(_render(root, "github"))
    (entry,) = github["jobs"]["lane"]["strategy"]["matrix"]["include"]
    assert github_value(entry["backend"]) == HOSTILE_BACKEND
    gitlab = load_yaml(_render(root, "gitlab"))
    assert gitlab_value(gitlab["lane:cpu"]["variables"]["DGR_BACKEND"]) == HOSTILE_BACKEND


@pytest.mark.slow
def test_hostile_workflows_pass_the_schemas_and_zizmor(tmp_path: Path) -> None:
    root = _root(tmp_path, HOSTILE_URLS[0] + HOSTILE_URLS[1][8:], HOSTILE_BACKEND)
    findings = validate(tmp_path, _render(root, "github"), _render(root, "gitlab"))
    assert {f["ident"] for f in findings} <= {"unpinned-images"}, findings
