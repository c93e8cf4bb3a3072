"""Benchmark: `dgr-forge build` vs the raw CMake + Ninja commands it wraps.

The test upstream (tests/support/git.py) with its one-patch series, and the test worker:
  cold:  dgr-forge build (fetch + patch + configure + build + report) in a fresh
         workspace  vs  `cmake -G Ninja <same args>` + `cmake --build` in a fresh dir
  no-op: a second dgr-forge build  vs  a raw `ninja` no-op in the raw build dir
Targets: cold <= 1.05x raw, the fixed overhead (time outside cmake and ninja) <= 0.5 s
(issue 23); no-op <= raw Ninja no-op + 0.5 s; with --artifact-mb 200
(a 200 MB worker binary, which every no-op build re-hashes), no-op <= raw + 0.3 s over the
same figure without it (issue 13).

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.build [--runs 3] [--jobs 2] [--extra-sources N] [--artifact-mb MB]

`--cache-ratios` (issue 16) instead measures the compiler cache, as ratios to a raw cold
CMake + Ninja build of a C project (`--cache-sources N` files) with `build`'s prefix maps,
through `cache.select.select()`'s launcher and env (ccache):
  warm:   a fresh workspace at another path, warm local cache    (target <= 0.2x cold)
  remote: a fresh workspace and empty local cache, warm loopback
          HTTP remote storage (ccache's http backend)             (target <= 0.3x cold)
  cold:   the cache's overhead on a cold build (empty cache)       (target <= 1.05x raw)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.build import make_patched_root, make_worker
from tests.support.cli import forge_cmd, forge_env
from tests.support.git import make_upstream


def timed(cmd: list[str], **kw: object) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--extra-sources",
        type=int,
        default=0,
        help="add N C++ files to the worker, to see how the fixed overhead amortizes",
    )
    parser.add_argument(
        "--artifact-mb",
        type=int,
        default=0,
        help="embed MB of random bytes in the worker binary (no-op re-hash cost)",
    )
    parser.add_argument("--cache-ratios", action="store_true", help="measure the cache only")
    parser.add_argument("--cache-sources", type=int, default=12)
    parser.add_argument(
        "--cache-weight", type=int, default=150, help="functions per source (compile work)"
    )
    args = parser.parse_args()
    if args.cache_ratios:
        cache_ratios(args.runs, args.jobs, args.cache_sources, args.cache_weight)
        return
    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-build-"))
    try:
        upstream = make_upstream(tmp / "upstream")
        root = make_patched_root(tmp / "forge", upstream)
        extra = {
            f"src/extra{i}.cpp": (
                "#include <map>\n#include <string>\n#include <vector>\n#include <algorithm>\n"
                f"int extra{i}() {{ std::map<std::string, std::vector<int>> m; "
                f'm["k"].push_back({i}); std::sort(m["k"].begin(), m["k"].end()); '
                "return (int) m.size(); }\n"
            )
            for i in range(args.extra_sources)
        }
        if args.artifact_mb:
            blob = tmp / "blob.bin"
            with blob.open("wb") as f:
                for _ in range(args.artifact_mb):
                    f.write(os.urandom(1 << 20))
            asm = f'.section .rodata.dgrblob,\\"a\\"\\n.incbin \\"{blob}\\"\\n.previous\\n'
            extra["src/blob.c"] = f'__asm__("{asm}");\n'
        worker = make_worker(tmp / "worker", extra)
        if extra:
            cml = worker / "CMakeLists.txt"
            cml.write_text(
                cml.read_text().replace("src/util.cpp)", "src/util.cpp " + " ".join(extra) + ")")
            )
        env = forge_env()
        jobs = ["--jobs", str(args.jobs)]
        forge = [
            *forge_cmd("--root", str(root), "build", "--worker", str(worker), "--no-sign"),
            *jobs,
        ]

        cold_forge, cold_raw, noop_forge, noop_raw = [], [], [], []
        sizes: list[int] = []
        first_noop: list[float] = []
        phases: dict[str, list[float]] = {}
        raw_configure: list[float] = []
        startup: list[float] = []  # `dgr-forge --version`: interpreter + CLI imports only
        floor: list[float] = []  # `python -c "import typer"`: what no CLI start beats
        # one untimed build: warms the caches and yields the exact commands the forge runs
        subprocess.run(forge, env=env, check=True, capture_output=True)
        log = (root / ".dgr" / "logs" / "build-cpu.log").read_text().splitlines()
        configure_cmd = shlex.split(log[0][2:])
        ninja = next(
            shlex.split(line[2:])[0]
            for line in log
            if line.startswith("$ ") and shlex.split(line[2:])[0].endswith("ninja")
        )

        def forge_cold() -> None:
            shutil.rmtree(root / ".dgr", ignore_errors=True)
            t = time.perf_counter()
            proc = subprocess.run([*forge, "--json"], env=env, check=True, capture_output=True)
            cold_forge.append(time.perf_counter() - t)
            lane = json.loads(proc.stdout)["lanes"][0]
            for phase, seconds in lane["timings"].items():
                phases.setdefault(phase, []).append(seconds)
            sizes.append(sum(Path(a["path"]).stat().st_size for a in lane["artifacts"]))

        def raw_cold(raw_dir: Path) -> None:
            # the same configure command, pointed at a fresh directory
            configure = [
                a.replace(str(root / ".dgr" / "build" / "cpu"), str(raw_dir)) for a in configure_cmd
            ]
            t = time.perf_counter()
            subprocess.run(configure, check=True, capture_output=True)
            raw_configure.append(time.perf_counter() - t)
            subprocess.run(
                [configure[0], "--build", str(raw_dir), "-j", str(args.jobs)],
                check=True,
                capture_output=True,
            )
            cold_raw.append(time.perf_counter() - t)

        for run in range(args.runs):
            raw_dir = tmp / f"raw-{run}"
            if run % 2:  # alternate the order: neither side always gets the warmer cache
                raw_cold(raw_dir)
                forge_cold()
            else:
                forge_cold()
                raw_cold(raw_dir)
            # the first no-op after a build re-hashes every subject (its stat record is
            # still racy); steady no-ops after that trust an unchanged (size, mtime, ctime)
            first_noop.append(timed(forge, env=env))
            time.sleep(2.1)
            for _ in range(3):
                startup.append(timed(forge_cmd("--version"), env=env))
                floor.append(timed([sys.executable, "-c", "import typer"], env=env))
                noop_forge.append(timed(forge, env=env))
                noop_raw.append(timed([ninja, "-C", str(raw_dir)]))

        cf, cr = statistics.median(cold_forge), statistics.median(cold_raw)
        nf, nr = statistics.median(noop_forge), statistics.median(noop_raw)
        print(
            f"cold  : dgr-forge {cf:.3f}s  raw cmake+build {cr:.3f}s  "
            f"ratio {cf / cr:.3f}x  (target <= 1.05x)"
        )
        print(
            f"no-op : dgr-forge {nf:.3f}s  raw ninja {nr:.3f}s  "
            f"overhead {nf - nr:+.3f}s  (target <= +0.5s)"
        )
        fl = statistics.median(floor)
        print(
            f'        python -c "import typer" {fl:.3f}s: no-op {nf - fl:+.3f}s '
            "(target <= +0.15s, issue 23)"
        )
        print(
            f"        (of which CLI start, dgr-forge --version: {statistics.median(startup):.3f}s;"
            f" first no-op right after a build: "
            f"{statistics.median(first_noop):.3f}s)"
        )
        # the fixed overhead: all the time a cold build spends outside cmake and ninja
        outside = [
            total - phases["configure"][i] - phases["build"][i]
            for i, total in enumerate(cold_forge)
        ]
        print(
            f"fixed overhead (cold, outside cmake and ninja): {statistics.median(outside):.3f}s "
            f"[{min(outside):.3f}]  (target <= 0.5s); forge - raw: {cf - cr:+.3f}s"
        )
        detail = "  ".join(f"{k} {statistics.median(v):.3f}s" for k, v in phases.items())
        print(
            f"forge cold phases: {detail}  (raw configure {statistics.median(raw_configure):.3f}s)"
        )
        print(
            f"runs={args.runs} jobs={args.jobs} artifacts={max(sizes) / 1e6:.1f} MB "
            "(medians; cold forge includes fetch + patch + report)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_ratios(runs: int, jobs: int, sources: int, weight: int) -> None:
    """The three cache ratios of issue 16 (medians over `runs`)."""
    from dgr_forge.cache import select as cache
    from tests.support.cache import build, clean_env, doctor, loopback_server, make_project

    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-cache-"))
    doc = doctor()
    n = 0

    def workspace() -> Path:
        nonlocal n
        n += 1
        return make_project(tmp / f"w{n}" / ("deeper/" * (n % 3)) / "ws", sources, heavy=weight)

    cpu: dict[int, float] = {}  # id(list) -> CPU seconds of the builds appended to it

    def timed_build(setup: cache.CacheSetup, env: dict[str, str], ws: Path) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        build(ws, setup, env, jobs=jobs)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        cpu_last.append(used)
        return wall

    cpu_last: list[float] = []
    raw: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    remote: list[float] = []
    try:
        with loopback_server() as (host, _store):
            for run in range(runs):
                local = tmp / f"cache-{run}"
                env = clean_env(CCACHE_DIR=str(local))
                ws_raw, ws_cold = workspace().parent.parent, workspace().parent.parent
                pair = [
                    (raw, cache.OFF, ws_raw),
                    (cold, cache.select(doc, "ccache", workspace=ws_cold, environ=env), ws_cold),
                ]
                for out, setup, ws in pair if run % 2 == 0 else pair[::-1]:
                    out.append(timed_build(setup, env, ws))
                    cpu[id(out)] = cpu.get(id(out), 0.0) + cpu_last[-1]
                ws = workspace().parent.parent
                setup = cache.select(doc, "ccache", workspace=ws, environ=env)
                warm.append(timed_build(setup, env, ws))

                # remote: fill it from one workspace, then a fresh local cache elsewhere
                renv = clean_env(
                    CCACHE_DIR=str(tmp / f"fill-{run}"),
                    CCACHE_REMOTE_STORAGE=f"http://{host}/run{run}",
                )
                ws = workspace().parent.parent
                build(ws, cache.select(doc, "ccache", workspace=ws, environ=renv), renv, jobs=jobs)
                renv["CCACHE_DIR"] = str(tmp / f"fresh-{run}")
                ws = workspace().parent.parent
                setup = cache.select(doc, "ccache", workspace=ws, environ=renv)
                remote.append(timed_build(setup, renv, ws))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    r = statistics.median(raw)
    c, w, m = statistics.median(cold), statistics.median(warm), statistics.median(remote)
    print(f"raw cold (no cache)        {r:.3f}s")
    print(f"cold, empty ccache         {c:.3f}s  overhead {c / r:.3f}x raw  (target <= 1.05x)")
    cr, cc = cpu[id(raw)], cpu[id(cold)]
    print(f"  (CPU time, less sensitive to a loaded machine: {cc / cr:.3f}x raw)")
    print(f"warm local, another path   {w:.3f}s  {w / r:.3f}x raw cold  (target <= 0.2x)")
    print(f"loopback remote, fresh     {m:.3f}s  {m / r:.3f}x raw cold  (target <= 0.3x)")
    print(f"runs={runs} jobs={jobs} sources={sources} weight={weight} (medians; configure + build)")


if __name__ == "__main__":
    main()
