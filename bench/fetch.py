"""Benchmark: `dgr-forge fetch` vs the same fetch done raw: `git init`, `git fetch --depth 1
<sha>` and `git checkout` of it (what the forge really does, issue 46), on a large upstream.

Builds (once, cached) a local upstream with many commits, incompressible history and a
llama.cpp-sized tree (`--files`, about 3,000 source files at llama.cpp's pin) using `git
fast-import`, pins a commit a few behind the tip (so only a SHA want reaches it), and
prints: the first fetch's time, forge and raw, runs interleaved (load hits both alike),
their ratio (target <= 1.1), the bytes on disk beside a full `git clone`, and the no-op
re-fetch time (the whole CLI, and the library call alone).

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.fetch [--cache DIR] [--commits 2000] [--mb 60] [--files 3000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # for the CLI processes the bench starts

ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("DGR_")},
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "PYTHONPATH": str(SRC),
    "NO_COLOR": "1",
}


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, input=stdin, capture_output=True, check=True
    )
    return proc.stdout.decode().strip()


def build_upstream(path: Path, commits: int, megabytes: int, sources: int) -> None:
    """A bare repo: a source tree of text files plus data files rewritten with random bytes."""
    files = 50
    blob_size = megabytes * 1024 * 1024 // commits
    path.mkdir(parents=True)
    git(path, "init", "-q", "--bare")
    proc = subprocess.Popen(
        ["git", "fast-import", "--quiet", "--done"], cwd=path, env=ENV, stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    w = proc.stdin.write

    def data(payload: bytes) -> None:
        w(b"data %d\n" % len(payload) + payload + b"\n")

    for i in range(commits):
        w(b"commit refs/heads/master\n")
        w(b"committer Bench <bench@invalid> %d +0000\n" % (1_700_000_000 + i * 60))
        data(b"change %d" % i)
        if i == 0:
            for n in range(sources):  # the "source code": compressible text
                w(b"M 100644 inline src/d%02d/file-%04d.c\n" % (n // 100, n))
                data(b"/* file %d */\nint f%d(void) { return %d; }\n" % (n, n, n) * 40)
            for n in range(files):
                w(b"M 100644 inline data/blob-%02d.bin\n" % n)
                data(os.urandom(blob_size))
        else:
            w(b"M 100644 inline data/blob-%02d.bin\n" % (i % files))
            data(os.urandom(blob_size))
    w(b"done\n")
    proc.stdin.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    (path / "bench-ready").write_text(f"{commits} {megabytes} {sources}\n")


def disk_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            p = Path(dirpath) / name
            if not p.is_symlink():
                total += p.stat().st_blocks * 512
    return total


def mib(n: float) -> str:
    return f"{n / 1024 / 1024:8.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "dgr-bench-fetch"
    )
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=60, help="MiB of random history")
    parser.add_argument("--files", type=int, default=3000, help="source files in the tree")
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each")
    args = parser.parse_args()

    upstream = args.cache / f"upstream-{args.commits}-{args.mb}-{args.files}.git"
    if not (upstream / "bench-ready").exists():
        shutil.rmtree(upstream, ignore_errors=True)
        print(f"building {upstream} ({args.commits} commits, {args.mb} MiB) ...", flush=True)
        t = time.perf_counter()
        build_upstream(upstream, args.commits, args.mb, args.files)
        print(f"  built in {time.perf_counter() - t:.1f} s", flush=True)
    url = upstream.as_uri()
    pin = git(upstream, "rev-parse", "master~3")
    tree = git(upstream, "rev-parse", "master~3^{tree}")
    count = int(git(upstream, "rev-list", "--count", "master"))

    with tempfile.TemporaryDirectory(prefix="dgr-bench-", dir=args.cache) as tmp:
        work = Path(tmp)
        root = work / "forge"
        (root / "manifests").mkdir(parents=True)
        (root / "patches" / "llama.cpp").mkdir(parents=True)
        # the build number recorded, as after a root's first fetch: each run is the fetch
        (root / "manifests" / "llama.cpp.toml").write_text(
            'schema = 1\n\n[upstream]\nname = "llama.cpp"\n'
            f'url = "{url}"\ncommit = "{pin}"\ntree = "{tree}"\nbuild_number = {count - 3}\n\n'
            '[patches]\ndir = "patches/llama.cpp"\n'
        )
        cli = [sys.executable, "-m", "dgr_forge", "--root", str(root)]
        src = root / ".dgr" / "src" / "llama.cpp"
        raw = work / "raw"
        forge_s, raw_s = [], []
        for _ in range(args.runs):
            shutil.rmtree(root / ".dgr", ignore_errors=True)
            t = time.perf_counter()
            proc = subprocess.run(
                [*cli, "fetch", "--json"], env=ENV, capture_output=True, text=True
            )
            forge_s.append(time.perf_counter() - t)
            if proc.returncode != 0:
                raise SystemExit(f"dgr-forge fetch failed:\n{proc.stderr}")
            shutil.rmtree(raw, ignore_errors=True)
            t = time.perf_counter()
            subprocess.run(["git", "init", "-q", str(raw)], env=ENV, check=True)
            git(raw, "fetch", "-q", "--depth", "1", url, pin)
            git(raw, "checkout", "-q", "--detach", pin)
            raw_s.append(time.perf_counter() - t)
        result = json.loads(proc.stdout)
        forge_bytes, forge_git = disk_bytes(src), disk_bytes(src / ".git")
        raw_bytes = disk_bytes(raw)

        t = time.perf_counter()
        subprocess.run(["git", "clone", "-q", url, str(work / "clone")], env=ENV, check=True)
        clone_s = time.perf_counter() - t
        clone_bytes = disk_bytes(work / "clone")
        clone_git = disk_bytes(work / "clone" / ".git")

        noop_cli = []
        for _ in range(args.runs):
            t = time.perf_counter()
            proc = subprocess.run(
                [*cli, "fetch", "--json"], env=ENV, capture_output=True, text=True
            )
            noop_cli.append(time.perf_counter() - t)
            assert json.loads(proc.stdout)["changed"] is False, proc.stderr

        from dgr_forge.core.forge import Forge
        from dgr_forge.core.output import Reporter
        from dgr_forge.upstream import manifest
        from dgr_forge.upstream.fetch import fetch_locked

        forge = Forge.locate(root)
        noop_lib = []
        for _ in range(args.runs):
            t = time.perf_counter()
            m = manifest.load(forge.upstream_manifest, forge.root)
            # no other process runs here: the lock the command context takes is not needed
            done = fetch_locked(
                forge, m, Reporter(quiet=True), mirror=None, offline=False, force=False
            )
            assert done.changed is False
            noop_lib.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        python_s = time.perf_counter() - t

    up_bytes = disk_bytes(upstream)
    forge_m, raw_m = statistics.median(forge_s), statistics.median(raw_s)
    print(
        f"\nupstream: {count} commits, {mib(up_bytes)} packed history, {args.files} source "
        f"files, pin = master~3 ({pin[:12]}); {args.runs} runs each, interleaved (median, min)"
    )
    print(f"{'':34}{'time':>10}  {'on disk (total)':>16}  {'.git only':>14}")
    print(
        f"{'raw init + fetch --depth 1 + checkout':34}{raw_m:9.2f}s  {mib(raw_bytes):>16}"
        f"   min {min(raw_s):.2f}s"
    )
    print(
        f"{'dgr-forge fetch':34}{forge_m:9.2f}s  {mib(forge_bytes):>16}  {mib(forge_git):>14}"
        f"   min {min(forge_s):.2f}s  method={result['method']}"
    )
    print(f"{'git clone (full)':34}{clone_s:9.2f}s  {mib(clone_bytes):>16}  {mib(clone_git):>14}")
    print(
        f"ratio dgr-forge / raw fetch-by-SHA + checkout: time {forge_m / raw_m:.3f} (min "
        f"{min(forge_s) / min(raw_s):.3f})   target: <= 1.1"
    )
    print(f"ratio dgr-forge / clone: bytes {forge_bytes / clone_bytes:.3f}   target: <= 0.100")
    print(
        f"no-op re-fetch: CLI median {statistics.median(noop_cli):.3f} s "
        f"(min {min(noop_cli):.3f}; bare `python -c pass` {python_s:.3f} s), "
        f"library call median {statistics.median(noop_lib) * 1000:.1f} ms   target: < 0.5 s"
    )


if __name__ == "__main__":
    main()
