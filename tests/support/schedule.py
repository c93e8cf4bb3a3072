"""The order the suite's files start in (tests/conftest.py sorts the collected items).

With `--dist loadfile` each xdist worker takes the next file when it is done, so a long
file started last leaves the others idle at the end (test_ci_runs.py, last, once kept two
workers idle for 14 s). The longest files start first; `--no-loadscope-reorder` (addopts)
keeps this order, which xdist would otherwise replace by "the most tests first".
"""

from __future__ import annotations

# seconds of each file's tests (setup included), measured with --durations=0 on an idle
# 2-core machine, three workers
LONGEST_FIRST = (
    "test_ci_runs.py",  # 53.1
    "test_build_truth.py",  # 26.1
    "test_packaging.py",  # 21.6
    "test_build_repro.py",  # 19.3
    "test_build.py",  # 19.1
    "test_ci.py",  # 18.4
    "test_fetch.py",  # 17.9
    "test_cache_dist.py",  # 16.0
    "test_export_rebase_crash.py",  # 15.9
    "test_certify_run.py",  # 11.8
    "test_rebase.py",  # 11.0
    "test_fetch_patch_crash.py",  # 9.9
    "test_llamalike_ship.py",  # 8.2
    "test_export.py",  # 8.0
    "test_docs_examples.py",  # 7.7
    "test_cache.py",  # 7.5
    "test_artifacts_attacks.py",  # 6.7
    "test_json_schemas.py",  # 6.5
    "test_patch.py",  # 5.8
    "test_rebase_canary.py",  # 5.0
    "test_cache_build.py",  # 4.9
    "test_team_series.py",  # 4.6
    "test_secrets.py",  # 4.6
    "test_rebase_transfer.py",  # 4.3
    "test_deadlines.py",  # 4.0
)


def longest_first(file_name: str) -> int:
    """The rank of a test file: the listed ones in their order, then all the others."""
    if file_name in LONGEST_FIRST:
        return LONGEST_FIRST.index(file_name)
    return len(LONGEST_FIRST)
