"""Benchmark: `dgr-forge patch` vs raw `git am` of the same 200 patch files.

A repository with FILES files (default 5,000) and a series of PATCHES small patches
(default 200), each touching one file. Measured (median of --runs):

* cold:  the workspace at the pin -> the whole series applied
         (dgr-forge: the CLI, and the library call without interpreter start-up;
          raw: `git am` in an exact copy of the fetched workspace, at the pin)
* no-op: `dgr-forge patch` again on the applied workspace

Targets (issue 23): cold from the CLI <= 1.1x raw git am; no-op <= `python -c "import typer"`
+ 0.15 s (measured in the same runs).

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.patch [--files 5000] [--patches 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
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
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@dgr.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@dgr.invalid",
    "PYTHONPATH": str(SRC),
    "NO_COLOR": "1",
}


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "gc.auto=0", *args],
        cwd=cwd,
        env=ENV,
        input=input,
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode().strip()


def fast_import_repo(path: Path, files: int, patches: int) -> tuple[str, str]:
    """The upstream (one commit, `files` files) and, on top, `patches` commits touching
    one file each; built with fast-import (seconds, not minutes). Returns (pin, head)."""
    git(path.parent, "init", "-q", str(path))
    lines: list[bytes] = []
    t = 1_700_000_000

    def blob_data(text: str) -> bytes:
        data = text.encode()
        return b"data %d\n%s\n" % (len(data), data)

    def content(i: int, version: int) -> str:
        body = "".join(f"line {n} of file {i}\n" for n in range(20))
        return body + (f"patched {version}\n" if version else "")

    lines.append(b"commit refs/heads/main\nmark :1\n")
    lines.append(b"committer Upstream <u@dgr.invalid> %d +0000\n" % t)
    lines.append(blob_data("upstream import"))
    for i in range(files):
        lines.append(b"M 100644 inline dir%02d/file%05d.c\n" % (i % 50, i))
        lines.append(blob_data(content(i, 0)))
    for k in range(patches):
        i = (k * 37) % files
        lines.append(b"commit refs/heads/series\nmark :%d\n" % (k + 2))
        lines.append(b"author Dev <dev@dgr.invalid> %d +0200\n" % (t + 100 + k))
        lines.append(b"committer Dev <dev@dgr.invalid> %d +0200\n" % (t + 100 + k))
        lines.append(blob_data(f"patch {k}: touch file {i}"))
        lines.append(b"from :%d\n" % (k + 1))
        lines.append(b"M 100644 inline dir%02d/file%05d.c\n" % (i % 50, i))
        lines.append(blob_data(content(i, k + 1)))
    git(path, "fast-import", "--quiet", input=b"".join(lines))
    git(path, "checkout", "-q", "main")
    return git(path, "rev-parse", "main"), git(path, "rev-parse", "series")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--patches", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="dgr-bench-patch-") as tmp_s:
        tmp = Path(tmp_s)
        upstream = tmp / "upstream"
        t0 = time.perf_counter()
        pin, series_head = fast_import_repo(upstream, args.files, args.patches)
        root = tmp / "forge"
        pdir = root / "patches" / "llama.cpp"
        pdir.mkdir(parents=True)
        (root / "manifests").mkdir()
        git(
            upstream,
            "format-patch",
            "-q",
            "-k",
            "--zero-commit",
            "-o",
            str(pdir),
            f"{pin}..{series_head}",
        )
        names = sorted(p.name for p in pdir.glob("*.patch"))
        trees = git(upstream, "log", "--reverse", "--format=%T", f"{pin}..{series_head}").split()
        entries = []
        for name, tree in zip(names, trees, strict=True):
            sha = hashlib.sha256((pdir / name).read_bytes()).hexdigest()
            entries.append(
                f'\n[[patches.series]]\nfile = "{name}"\nsha256 = "{sha}"\ntree = "{tree}"\n'
            )
        (root / "manifests" / "llama.cpp.toml").write_text(
            'schema = 1\n\n[upstream]\nname = "llama.cpp"\n'
            f'url = "{upstream.as_uri()}"\ncommit = "{pin}"\n'
            f'tree = "{git(upstream, "rev-parse", f"{pin}^{{tree}}")}"\n\n'
            '[patches]\ndir = "patches/llama.cpp"\n'
            + "".join(entries)
            + f'\n[patches.result]\ntree = "{trees[-1]}"\n'
        )
        paths = [str(pdir / n) for n in names]
        print(f"setup: {args.files} files, {len(names)} patches ({time.perf_counter() - t0:.1f} s)")

        # dgr-forge in a workspace fetched once (not timed); raw git am in an exact copy of
        # that repository (same shallow pack and index: only dgr-forge's own work differs)
        ws = tmp / "ws"
        cli = [sys.executable, "-m", "dgr_forge", "--root", str(root), "--workspace", str(ws)]
        subprocess.run([*cli, "fetch"], env=ENV, check=True, capture_output=True)
        src = ws / "src" / "llama.cpp"
        raw = tmp / "raw"
        shutil.copytree(src, raw, symlinks=True)

        from dgr_forge.core.forge import Forge
        from dgr_forge.core.output import Reporter
        from dgr_forge.upstream import manifest, patches

        forge = Forge(root=root, workspace=ws)
        m = manifest.load(root / "manifests" / "llama.cpp.toml", root)
        quiet = Reporter(quiet=True)

        def timed(fn, reset_repo: Path | None) -> float:  # type: ignore[no-untyped-def]
            if reset_repo is not None:
                git(reset_repo, "checkout", "-q", "--detach", "-f", pin)
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        def cli_patch() -> None:
            subprocess.run([*cli, "patch"], env=ENV, check=True, capture_output=True)

        # interleaved, so load from other processes hits every variant alike
        raw_t, cli_t, lib_t, noop_cli_t, noop_lib_t, floor_t = [], [], [], [], [], []

        def floor() -> None:  # the interpreter and Typer alone: what no CLI start beats
            subprocess.run([sys.executable, "-c", "import typer"], env=ENV, check=True)

        for _ in range(args.runs):
            raw_t.append(timed(lambda: git(raw, "am", "-q", *paths), raw))
            cli_t.append(timed(cli_patch, src))
            floor_t.append(timed(floor, None))
            noop_cli_t.append(timed(cli_patch, None))
            lib_t.append(timed(lambda: patches.ensure_patched(forge, m, quiet), src))
            noop_lib_t.append(timed(lambda: patches.ensure_patched(forge, m, quiet), None))
        assert git(raw, "rev-parse", "HEAD^{tree}") == trees[-1]
        assert git(src, "rev-parse", "HEAD^{tree}") == trees[-1]
        assert patches.ensure_patched(forge, m, quiet).changed is False
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dgr_forge", "--version"],
            env=ENV,
            check=True,
            capture_output=True,
        )
        startup = time.perf_counter() - start

    med, lo = statistics.median, min
    raw_cold, forge_cold, lib_cold = med(raw_t), med(cli_t), med(lib_t)
    noop_cli, noop_lib = med(noop_cli_t), med(noop_lib_t)
    print(f"runs: {args.runs} (median; min in brackets)")
    print(f"raw git am, cold            {raw_cold:7.3f} s  [{lo(raw_t):.3f}]")
    print(
        f"dgr-forge patch, cold (CLI) {forge_cold:7.3f} s  [{lo(cli_t):.3f}]  "
        f"ratio {forge_cold / raw_cold:.2f}x [{lo(cli_t) / lo(raw_t):.2f}x]"
    )
    print(
        f"ensure_patched, cold (lib)  {lib_cold:7.3f} s  [{lo(lib_t):.3f}]  "
        f"ratio {lib_cold / raw_cold:.2f}x [{lo(lib_t) / lo(raw_t):.2f}x]"
    )
    base = med(floor_t)
    print(
        f"dgr-forge patch, no-op (CLI){noop_cli:7.3f} s   (CLI start-up alone {startup:.3f} s; "
        f'python -c "import typer" {base:.3f} s: no-op {noop_cli - base:+.3f} s)'
    )
    print(f"ensure_patched, no-op (lib) {noop_lib:7.3f} s")
    print("targets (issue 23): cold (CLI) <= 1.1x raw git am; no-op <= import typer + 0.15 s")


if __name__ == "__main__":
    main()
