from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from forgetest import Upstream, make_forge_root, make_upstream


@pytest.fixture(scope="session")
def _upstream_template(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_upstream(tmp_path_factory.mktemp("template") / "upstream")


@pytest.fixture
def upstream(tmp_path: Path, _upstream_template: Upstream) -> Upstream:
    """A fresh copy of the test upstream (a real git repo) that the test may change."""
    dest = tmp_path / "upstream"
    shutil.copytree(_upstream_template.path, dest, symlinks=True)
    return Upstream(dest, list(_upstream_template.commits), _upstream_template._tick)


@pytest.fixture
def forge_root(tmp_path: Path, upstream: Upstream) -> Path:
    """A forge root pinning `upstream` at its head, with an empty patch series."""
    return make_forge_root(tmp_path / "forge", upstream)
