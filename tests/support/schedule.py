"""The order the suite's files start in (tests/conftest.py sorts the collected items).

With `--dist loadfile` each xdist worker takes the next file when it is done, so a long
file started last leaves the others idle at the end (test_ci_runs.py, last, once kept two
workers idle for 14 s). The longest files start first; `--no-loadscope-reorder` (addopts)
keeps this order, which xdist would otherwise replace by "the most tests first".
"""

from __future__ import annotations

# wall seconds on one worker of three, idle 2-core machine
LONGEST_FIRST = (
    "test_ci_runs.py",  # 17.6 s
    "test_certify_run.py",  # 24.9 s on one busy worker (-n 0, shared machine): three builds
    "test_build_truth.py",  # 17.0
    "test_build.py",  # 14.2
    "test_build_repro.py",  # 12.4
    "test_cache_dist.py",  # 12.0
    "test_export_rebase_crash.py",  # 10.5
    "test_fetch.py",  # 9.8
    "test_fetch_patch_crash.py",  # 8.1
    "test_cache.py",  # 8.0
    "test_ci.py",  # 7.2
    "test_rebase.py",  # 6.4
    "test_export.py",  # 6.1
    "test_git_calls.py",  # 5.6
    "test_artifacts_attacks.py",  # 4.7
    "test_bump.py",  # 4.5
    "test_docs_examples.py",  # 4.3
)


def longest_first(file_name: str) -> int:
    """The rank of a test file: the listed ones in their order, then all the others."""
    if file_name in LONGEST_FIRST:
        return LONGEST_FIRST.index(file_name)
    return len(LONGEST_FIRST)
