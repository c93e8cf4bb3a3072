"""The README's first line on a fresh machine: `dgr-forge build` with no key anywhere.

Not at a terminal and not in CI, it builds and writes the report unsigned, saying so
(a person at a terminal gets a default key created instead: tests/test_keys.py). In CI a
missing key and an empty DGR_SIGNING_KEY stay exit 2: never a throwaway key, never a
silently unsigned release build. Runs on the session's demo root (a real, tiny build).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_forge
from support.demo import DemoTour

pytestmark = pytest.mark.slow  # builds in the demo root


def _build(root: Path, config: Path, **extra: str) -> tuple[int, str, dict[str, object]]:
    env = {"XDG_CONFIG_HOME": str(config), "HOME": str(config), "CI": "", **extra}
    r = run_forge("--json", "build", "--cache", "off", cwd=root, env=env)
    return r.code, r.stderr, json.loads(r.stdout) if r.stdout.strip() else {}


def test_no_key_no_terminal_not_ci_builds_unsigned_with_a_warning(
    demo_tour: DemoTour, tmp_path: Path
) -> None:
    root = demo_tour.fresh()
    config = tmp_path / "config"
    config.mkdir()
    code, err, data = _build(root, config)
    assert code == 0, err
    assert "warning: no signing key" in err and "UNSIGNED" in err
    # the report's warning names the real reason: --no-sign was never given
    assert "is UNSIGNED (no signing key found and no terminal to create one)" in err, err
    assert "--no-sign" not in err, err
    assert "dgr-forge keygen" in err  # how to sign next time
    report = data["lanes"][0]["report"]  # type: ignore[index]
    envelope = json.loads(Path(report).read_text())
    assert envelope["signatures"] == []
    assert list(config.iterdir()) == []  # no key was created behind the user's back
    # the unsigned report is what it is: verify says so
    v = run_forge("report", "verify", report, cwd=root, env={"XDG_CONFIG_HOME": str(config)})
    assert v.code != 0 and "unsigned" in v.stdout + v.stderr
    # up to date now: the report handed back is still unsigned, and still said so
    code, err, data = _build(root, config)
    assert code == 0 and data["lanes"][0]["report"] == report  # type: ignore[index]
    assert "UNSIGNED" in err


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"CI": "true"}, "no signing key in CI"),
        ({"DGR_SIGNING_KEY": ""}, "DGR_SIGNING_KEY is set but empty"),
        ({"DGR_SIGNING_KEY": "", "CI": "true"}, "DGR_SIGNING_KEY is set but empty"),
    ],
)
def test_in_ci_or_with_an_empty_key_variable_it_stays_exit_2(
    demo_tour: DemoTour, tmp_path: Path, extra: dict[str, str], words: str
) -> None:
    root = demo_tour.fresh()
    reports = sorted((root / ".dgr" / "reports").iterdir())
    config = tmp_path / "config"
    config.mkdir()
    code, err, _ = _build(root, config, **extra)
    assert code == 2, err
    assert words in err
    assert list(config.iterdir()) == []
    assert sorted((root / ".dgr" / "reports").iterdir()) == reports  # nothing written


def test_no_sign_given_is_the_reason_the_warning_names(demo_tour: DemoTour) -> None:
    root = demo_tour.fresh()
    env = {**demo_tour.env(), "CI": ""}
    r = run_forge("--json", "build", "--cache", "off", "--no-sign", cwd=root, env=env)
    assert r.code == 0, r
    assert "is UNSIGNED (--no-sign given): it cannot be verified" in r.stderr, r.stderr
    assert "no signing key found" not in r.stderr


def test_no_warning_about_a_variable_the_forge_set_itself(demo_tour: DemoTour) -> None:
    """CMake lists CMAKE_C_FLAGS (the forge's, for a project without C) as unused: that
    stays in the build log, and the user, who cannot act on it, gets no warning."""
    assert demo_tour.result.code == 0, demo_tour.result
    assert "set by the forge" not in demo_tour.result.stderr, demo_tour.result.stderr
    assert "CMake did not use" not in demo_tour.result.stderr
    logs = (demo_tour.pristine / ".dgr" / "logs").glob("build-cpu-*.log")
    assert any("Manually-specified variables were not used" in p.read_text() for p in logs)
