"""The order the suite's files start in (tests/conftest.py sorts the collected items).

With `--dist loadfile` each xdist worker takes the next file when it is done, so a long
file started last leaves the others idle at the end (test_ci_runs.py, last, once kept two
workers idle for 14 s). The longest files start first; `--no-loadscope-reorder` (addopts)
keeps this order, which xdist would otherwise replace by "the most tests first".

Files that share a costly session fixture run on one worker (`scope_of`, the scheduler in
tests/conftest.py): each worker that needs the fixture makes its own.
"""

from __future__ import annotations

# seconds of each file's tests (setup included), measured per test on an idle 2-core
# machine, three workers; "~" figures: twice the serial `-n 0` time, the ratio the
# measured files show (the demo tour's files, one scope, start with test_json_schemas.py)
LONGEST_FIRST = (
    "test_ci_runs.py",  # 27.4
    "test_build_truth.py",  # 19.4
    # 7.0, and the other five files of the demo tour: ~35 (test_exit_codes.py ~15: 7.3 serial)
    "test_json_schemas.py",
    "test_fetch.py",  # 17.5
    "test_build.py",  # 16.9
    "test_cache_dist.py",  # 16.6
    "test_packaging.py",  # 16.6
    "test_export_rebase_crash.py",  # 15.8
    "test_build_repro.py",  # 15.1
    "test_rebase.py",  # 12.6
    "test_certify_run.py",  # 12.2
    "test_gpu_lanes.py",  # ~11.7 (5.9 s serial: the cuda lane's nvcc build, 3.5 s setup)
    "test_cache.py",  # 11.3
    "test_fetch_patch_crash.py",  # 9.9
    "test_ci.py",  # 8.7
    "test_export.py",  # 8.5
    "test_llamalike_ship.py",  # 8.4
    "test_tree_reads.py",  # 7.1
    "test_lane_stale.py",  # 7.0
    "test_cache_build.py",  # 6.9
    "test_bump.py",  # 5.6
    "test_boundary.py",  # ~5.2 (2.6 s serial)
    "test_patch.py",  # 5.4
    "test_rebase_transfer.py",  # 5.4
    "test_artifacts_attacks.py",  # 4.9
    "test_team_series.py",  # 4.8
    "test_nothing_cut.py",  # ~4.7 (2.3 s serial)
    "test_support_cli.py",  # 4.7
)


def longest_first(file_name: str) -> int:
    """The rank of a test file: the listed ones in their order, then all the others."""
    if file_name in LONGEST_FIRST:
        return LONGEST_FIRST.index(file_name)
    return len(LONGEST_FIRST)


# one xdist scope of several files: the session fixture they share is made once, not once
# per worker (the demo tour: `dgr-forge demo`, ~1.8 CPU-s, on each of three workers)
SHARED_FIXTURE_SCOPES = {
    "demo_tour": (
        "test_demo.py",
        "test_docs_examples.py",
        "test_exit_codes.py",
        "test_json_schemas.py",
        "test_streams.py",
        "test_unsigned_fallback.py",
    ),
    # support.build.shared_snapshot: the signed, path-worker and worker-less lanes, each
    # built once (~0.9 CPU-s each) instead of once per file
    "built_lanes": ("test_build_truth.py", "test_build.py", "test_lane_stale.py"),
}
_SCOPE_OF = {name: group for group, names in SHARED_FIXTURE_SCOPES.items() for name in names}


def scope_of(path: str) -> str:
    """The xdist scope of the test file at `path`: its group, else the file itself."""
    return _SCOPE_OF.get(path.rsplit("/", 1)[-1], path)
