from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import configuration, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from support import precompile, scratch
from support.cli import CACHE_DIR_ENV, TOOLCHAINS_ENV
from support.demo import DemoTour, make_demo
from support.git import Upstream, copy_upstream, make_upstream, sh_git
from support.roots import SHARED_DIR_ENV, make_forge_root
from support.schedule import longest_first, scope_of


def pytest_configure(config: pytest.Config) -> None:
    """The run's temporary files on a RAM-backed file system when there is one with room
    (support.scratch); chosen once, by the process that starts the xdist workers, which
    inherit it."""
    if not hasattr(config, "workerinput") and config.option.basetemp is None:
        scratch.use(scratch.choose())
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        precompile.write_bytecode(config, Path(__file__).parent)


def _hypothesis_home() -> Path:
    """Hypothesis's examples and caches live in the user's cache, never in the checkout
    (HYPOTHESIS_STORAGE_DIRECTORY still wins when set)."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return Path(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dgr-forge" / "hypothesis"


configuration.set_hypothesis_home_dir(_hypothesis_home())
settings.register_profile(
    "dgr-forge", database=DirectoryBasedExampleDatabase(_hypothesis_home() / "examples")
)
settings.load_profile("dgr-forge")


@pytest.fixture(scope="session", autouse=True)
def _own_compiler_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """With the `cache` extra installed, test builds go through ccache: give them a cache of
    their own, never the user's (nor its remote storage or settings)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("CCACHE_", "SCCACHE_")):
                mp.delenv(name)
        mp.setenv("CCACHE_DIR", str(tmp_path_factory.mktemp("ccache")))
        mp.setenv("SCCACHE_DIR", str(tmp_path_factory.mktemp("sccache")))
        mp.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("dgr-cache")))
        # nor the toolkits the user installed (`toolchain install cuda`): a test sees the
        # host's toolchains, or asks for the user's (support.build.USER_TOOLCHAINS)
        toolchains = str(tmp_path_factory.mktemp("toolchains"))
        mp.setenv(TOOLCHAINS_ENV, toolchains)  # the forge's children get it (support.cli)
        yield


@pytest.fixture(scope="session", autouse=True)
def _shared_between_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A directory of this run that every xdist worker sees (support.roots shares the
    roots it canonicalized there): the parent of the workers' own base directories."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    shared.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SHARED_DIR_ENV, str(shared))
        yield


@pytest.fixture(scope="session")
def _upstream_template(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    """The upstream every `upstream` copies: its objects in one pack, its refs packed, so
    a copy is 23 files, not 48 in 45 directories (~3 ms a copy, not ~7, a thousand times a
    run). A test that deletes a loose object deletes one of a commit it made itself."""
    up = make_upstream(tmp_path_factory.mktemp("template") / "upstream")
    sh_git(up.path, "repack", "-adqn")
    sh_git(up.path, "pack-refs", "--all")
    return up


@pytest.fixture
def upstream(tmp_path: Path, _upstream_template: Upstream) -> Upstream:
    """A fresh copy of the test upstream (a real git repo) that the test may change."""
    return copy_upstream(_upstream_template, tmp_path / "upstream")


@pytest.fixture
def forge_root(tmp_path: Path, upstream: Upstream) -> Path:
    """A forge root pinning `upstream` at its head, with an empty patch series."""
    return make_forge_root(tmp_path / "forge", upstream)


@pytest.fixture(scope="session")
def demo_tour(tmp_path_factory: pytest.TempPathFactory) -> DemoTour:
    """`dgr-forge demo DIR` run once (offline, no key but the demo's); see support.demo."""
    return make_demo(tmp_path_factory.mktemp("demo"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: longest_first(item.path.name))  # stable: each file keeps its order


def pytest_collection_finish(session: pytest.Session) -> None:
    """What a worker holds once it has collected (the imported modules, the test items)
    lives until it exits: frozen out of the cyclic collector, whose full passes would
    otherwise walk it again and again (~0.8 CPU-s a worker a suite)."""
    gc.collect()
    gc.freeze()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (addopts), with the files that share a session fixture in one
    scope (support.schedule.scope_of); any other --dist is xdist's own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(super()._split_scope(nodeid))

    return SharedFixtureScheduling(config, log)
