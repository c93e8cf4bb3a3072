"""Benchmark: every no-op command against the interpreter floor, `python -c "import typer"`.

A forge root from the test builders (the test upstream, its one-patch series, the test
worker), fetched, patched and built once with a signing key (not timed). Then, interleaved
so load from other processes hits every variant alike (median of --runs, min in brackets):

* floor:      `python -c "import typer"`
* --version:  `dgr-forge --version`                    (target: floor + 0.05 s)
* status:     `dgr-forge status` on the patched tree   (target: floor + 0.15 s)
* patch:      `dgr-forge patch`, nothing to do         (target: floor + 0.15 s)
* build:      `dgr-forge build`, an up-to-date, signed lane (target: floor + 0.15 s)
* status (no trees): `status` on a --patches series whose manifest records no per-patch
              trees (the trees computed once and cached in the workspace)
* a --path-worker-patches series (63, the size of the real one: the test upstream's
  patch plus small ones) with the root's path worker (manifests/shard-worker.toml), built
  once: `patch` and `status` no-op and an up-to-date `build --lane cpu` (issue 46 item 2;
  target: floor + 0.15 s each)

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.noop [--runs 9] [--patches 60] [--path-worker-patches 63]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.build import PATCHED_LLAMA, add_path_worker, make_patched_root, make_worker
from tests.support.cli import forge_cmd, forge_env
from tests.support.git import Upstream, make_upstream
from tests.support.roots import CANONICAL, UPSTREAM_AUTHOR, Edit, make_root

TARGETS = {"--version": 0.05, "status": 0.15, "patch": 0.15, "build": 0.15, "status-60": 0.15}
TARGETS.update({f"{name}-pw": 0.15 for name in ("patch", "status", "build")})


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--patches", type=int, default=60)
    ap.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as set (every start compiles dgr-forge's sources); "
        "by default the runs use compiled bytecode, as an installed package does",
    )
    ap.add_argument(
        "--path-worker-patches",
        type=int,
        default=63,
        metavar="N",
        help="the series of the path-worker root (0: no such root)",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dgr-bench-noop-"))
    try:
        upstream = make_upstream(tmp / "upstream")
        root = make_patched_root(tmp / "forge", upstream)
        worker = make_worker(tmp / "worker")
        key = tmp / "key.pem"
        env = forge_env({"DGR_SIGNING_KEY": str(key)})
        if not args.no_bytecode:
            # an installed package has its .pyc files; an editable checkout under
            # PYTHONDONTWRITEBYTECODE=1 would compile every module at every start
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        base = forge_cmd("--root", str(root))
        subprocess.run(forge_cmd("keygen", "--out", str(key)), env=env, check=True)
        build = [*base, "build", "--worker", str(worker), "--jobs", "2"]
        subprocess.run(build, env=env, check=True, capture_output=True)
        subprocess.run(build, env=env, check=True, capture_output=True)  # settles stat records

        # a longer series whose manifest records no per-patch trees
        edits = [
            Edit({f"docs/bench-{i}.md": f"bench {i}\n"}, f"bench {i}") for i in range(args.patches)
        ]
        long_root = make_root(tmp / "long", upstream, edits, trees=False).root
        subprocess.run(
            [*forge_cmd("--root", str(long_root)), "patch"],
            env=env,
            check=True,
            capture_output=True,
        )
        pw = _path_worker_root(tmp / "pw", upstream, args.path_worker_patches, env)
        variants: dict[str, list[str]] = {
            "floor": [sys.executable, "-c", "import typer"],
            "--version": forge_cmd("--version"),
            "status": [*base, "status"],
            "patch": [*base, "patch"],
            "build": build,
            "status-60": [*forge_cmd("--root", str(long_root)), "status"],
        }
        if pw is not None:
            pw_base = forge_cmd("--root", str(pw))
            variants["patch-pw"] = [*pw_base, "patch"]
            variants["status-pw"] = [*pw_base, "status"]
            variants["build-pw"] = [*pw_base, "build", "--lane", "cpu", "--jobs", "2"]
        for cmd in variants.values():  # warm the page cache once
            subprocess.run(cmd, env=env, check=True, capture_output=True)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, cmd in variants.items():
                times[name].append(timed(cmd, env))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    floor = statistics.median(times["floor"])
    mode = "sources compiled at every start" if args.no_bytecode else "bytecode"
    print(
        f"runs: {args.runs} (median; min in brackets); status-60: {args.patches} patches; "
        f"*-pw: {args.path_worker_patches} patches, a path worker; {mode}"
    )
    for name, values in times.items():
        med = statistics.median(values)
        line = f"{name:10s} {med:6.3f} s  [{min(values):.3f}]"
        if name != "floor":
            over = med - floor
            target = TARGETS[name]
            verdict = "ok" if over <= target else "OVER"
            line += f"  floor {over:+.3f} s  (target +{target:.2f} s: {verdict})"
        print(line)


def _path_worker_root(path: Path, upstream: Upstream, n: int, env: dict[str, str]) -> Path | None:
    """A root with the test upstream's real patch plus n - 1 small ones and the test worker
    as its path worker, patched and built (`build --lane cpu`) twice (settled); None for 0."""
    if n <= 0:
        return None
    edits = [Edit({"src/llama.cpp": PATCHED_LLAMA}, "llama: round-robin layer owner")]
    edits += [
        Edit({f"docs/dgr-{i:02d}.md": f"dgr note {i}\n"}, f"docs: note {i}") for i in range(1, n)
    ]
    make_root(path, upstream, edits, product=True, flags=CANONICAL, author=UPSTREAM_AUTHOR)
    add_path_worker(path)
    build = [*forge_cmd("--root", str(path)), "build", "--lane", "cpu", "--jobs", "2"]
    for _ in range(2):  # the second settles the stat records
        subprocess.run(build, env=env, check=True, capture_output=True)
    return path


if __name__ == "__main__":
    main()
