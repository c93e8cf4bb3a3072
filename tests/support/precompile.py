"""Bytecode written once before the xdist workers start: the test modules' assertion-rewritten
code, and src/ and tests/support compiled.

Each worker collects every test module, and pytest rewrites a module's asserts and compiles
it unless it finds its cached `.pyc` (in `__pycache__`, tagged `-pytest-<version>`). With
no cache (a fresh clone, or PYTHONDONTWRITEBYTECODE set, as on these machines) the three
workers each rewrote all of them: about 5 s of CPU each, on two cores, before any test ran.
The controlling process writes them instead, on two processes, through pytest's own rewrite
and pyc writer, so the workers read what pytest would have written itself. It is a cache:
anything unexpected (another pytest's private API) leaves the workers to do it as before.

src/ is compiled too (`compileall`, which skips what is current): under
PYTHONDONTWRITEBYTECODE a source edited since the last compile would otherwise be compiled
again by every forge child process the suite starts (a few hundred).
"""

from __future__ import annotations

import compileall
import multiprocessing
import os
from pathlib import Path

import pytest


def _targets(tests: Path) -> list[Path]:
    found = sorted(tests.rglob("test_*.py")) + sorted(tests.rglob("conftest.py"))
    return [p for p in found if "__pycache__" not in p.parts]


def _write(config: pytest.Config, files: list[Path]) -> None:
    from _pytest.assertion import rewrite

    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None:  # pytest's rewrite hook is not installed here
        return
    for fn in files:
        pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
        try:
            if rewrite._read_pyc(fn, pyc) is not None:
                continue  # current already
            if not rewrite.try_makedirs(pyc.parent):
                return
            source_hash, co = rewrite._rewrite_test(fn, config)
            rewrite._write_pyc(state, co, source_hash, pyc)
        except Exception:  # a cache: the workers rewrite what is not here
            return


def write_bytecode(config: pytest.Config, tests: Path, jobs: int = 2) -> None:
    """Compile src/ and tests/support, then rewrite and cache every test module under
    `tests` that has no current cached pyc (forked children: the config is theirs without
    pickling). With `--assert=plain` there is nothing to rewrite."""
    for tree in (tests.parent / "src", tests / "support"):
        compileall.compile_dir(str(tree), quiet=2, workers=jobs)
    if not hasattr(os, "fork") or config.getoption("assertmode") != "rewrite":
        return
    files = _targets(tests)
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=_write, args=(config, files[i::jobs])) for i in range(jobs)]
    for child in children:
        child.start()
    for child in children:
        child.join()
