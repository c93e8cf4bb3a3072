"""Benchmark: `artifacts verify` vs `sha256sum`, `artifacts provision` vs `curl`.

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.artifacts [--size-mb 2048] [--files 4] [--jobs 2] [--dir DIR]

Generates SIZE MiB of random data in FILES files once (kept in DIR, default a temp
directory named after the size, reused by later runs), then times, with a warm page cache:

* verify: `dgr_forge.models.verify.verify` (size + sha256 + GGUF split headers) with 1 job and
  with --jobs, against `sha256sum` of the same files (one process, and --jobs processes
  through xargs -P). Target: verify's throughput >= 0.9x sha256sum's.
* provision: `dgr_forge.models.provision.provision` from a loopback HTTP server (the tests' Range
  server, sendfile) into a fresh directory, against `curl` fetching the same URLs from the
  same server (sequentially, and --jobs at a time with `curl --parallel`). provision also
  hashes while streaming and fsyncs every file; curl does neither, so "curl + fsync" and
  "curl + sha256sum" are shown too. Skipped with a message when curl is absent.

* GGUF header: the bounded reader verify uses (`gguf_split.read_header`) against the `gguf`
  package's GGUFReader, on a header with a 150,000-token vocabulary (strings, scores, types).

Ratios are "dgr-forge time / raw tool time" style throughput ratios: >1.0 means faster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dgr_forge.core.output import Reporter
from dgr_forge.models import gguf_split
from dgr_forge.models import manifest as models
from dgr_forge.models import provision as provisioning
from dgr_forge.models.make_manifest import build_manifest
from dgr_forge.models.verify import verify
from tests.support.server import FaultyServer

BLOCK = 8 << 20


def generate(directory: Path, size_mb: int, files: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    per = size_mb * (1 << 20) // files
    paths = [directory / f"bench-{i:05d}-of-{files:05d}.bin" for i in range(1, files + 1)]
    for p in paths:
        if p.is_file() and p.stat().st_size == per:
            continue
        print(f"generating {p} ({per >> 20} MiB) ...", file=sys.stderr)
        with p.open("wb") as f:
            left = per
            while left:
                n = min(BLOCK, left)
                f.write(os.urandom(n))
                left -= n
    return paths


def timed(label: str, fn: object, *args: object) -> float:
    start = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    elapsed = time.perf_counter() - start
    return elapsed


def row(label: str, seconds: float, mib: float, note: str = "") -> None:
    print(f"  {label:<32} {seconds:7.2f} s {mib / seconds:8.0f} MiB/s  {note}")


def run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]


def header_bench(work: Path, repeat: int) -> None:
    """The bounded header reader vs the gguf package's reader on a tokenizer-sized header."""
    import gguf
    import numpy as np

    path = work / "dgr-bench-header.gguf"
    if not path.is_file():
        w = gguf.GGUFWriter(path, arch="llama")
        n = 150_000
        w.add_token_list([f"tok{i}".encode() for i in range(n)])
        w.add_token_scores([float(i) for i in range(n)])
        w.add_token_types([1] * n)
        w.add_uint16("split.no", 0)
        w.add_uint16("split.count", 1)
        w.add_int32("split.tensors.count", 1)
        w.add_tensor("t", np.zeros(8, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    ours = min(timed("", gguf_split.read_header, path) for _ in range(repeat))
    theirs = min(timed("", gguf.GGUFReader, path) for _ in range(repeat))
    kib = path.stat().st_size / 1024
    print(f"\nGGUF header ({kib:.0f} KiB, 150,000-token vocabulary)")
    print(f"  {'gguf_split.read_header (bounded)':<32} {ours * 1000:7.1f} ms")
    print(f"  {'gguf.GGUFReader':<32} {theirs * 1000:7.1f} ms  ours is {theirs / ours:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=2048, help="total data size (MiB)")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--dir", type=Path, default=None, help="where the data lives (reused)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N timings")
    args = ap.parse_args()

    data_dir = args.dir or Path(tempfile.gettempdir()) / f"dgr-bench-artifacts-{args.size_mb}"
    paths = generate(data_dir, args.size_mb, args.files)
    total = sum(p.stat().st_size for p in paths)
    mib = total / (1 << 20)
    quiet = Reporter(quiet=True)
    _, text = build_manifest(data_dir, "bench", data_dir.as_uri(), quiet, jobs=args.jobs)
    m = models.loads(text.encode())
    names = [str(p) for p in paths]
    print(f"data: {len(paths)} files, {mib:.0f} MiB in {data_dir}; jobs={args.jobs}")

    def best(fn: object, *a: object) -> float:
        return min(timed("", fn, *a) for _ in range(args.repeat))

    # ------------------------------------------------------------------ verify
    run(["cat", *names])  # warm the page cache for everyone
    t_sum = best(run, ["sha256sum", *names])
    t_sum_p = best(
        run, ["sh", "-c", f'printf "%s\\0" "$@" | xargs -0 -n1 -P{args.jobs} sha256sum', "sh",
              *names],
    )  # fmt: skip
    t_v1 = best(lambda: verify(m, data_dir, quiet, jobs=1))
    t_vj = best(lambda: verify(m, data_dir, quiet, jobs=args.jobs))
    print("\nverify (warm cache)")
    row("sha256sum (1 process)", t_sum, mib)
    row(f"sha256sum (xargs -P{args.jobs})", t_sum_p, mib)
    row("artifacts verify --jobs 1", t_v1, mib, f"vs sha256sum {t_sum / t_v1:.2f}x")
    row(
        f"artifacts verify --jobs {args.jobs}",
        t_vj,
        mib,
        f"vs sha256sum {t_sum / t_vj:.2f}x, vs xargs -P {t_sum_p / t_vj:.2f}x",
    )

    # ------------------------------------------------------------------ GGUF header
    header_bench(data_dir.parent, args.repeat)

    # ------------------------------------------------------------------ provision
    work = Path(tempfile.mkdtemp(prefix="dgr-bench-provision-", dir=data_dir.parent))
    try:
        with FaultyServer(data_dir) as server:
            http = models.loads(
                models.dumps(
                    "bench",
                    [
                        models.ModelFile(f.name, f.size, f.sha256, server.url(f.name))
                        for f in m.files
                    ],
                ).encode()
            )

            def provision() -> None:
                dest = work / "ours"
                shutil.rmtree(dest, ignore_errors=True)
                result = provisioning.provision(http, dest, quiet, jobs=args.jobs)
                assert result.ok, result

            t_prov = best(provision)
            print("\nprovision from a loopback HTTP server")
            row(f"artifacts provision --jobs {args.jobs}", t_prov, mib, "(hash+fsync+rename)")
            if shutil.which("curl") is None:
                print("  curl: not installed, skipped")
                return
            urls = [server.url(p.name) for p in paths]

            def curl(parallel: bool) -> None:
                dest = work / "curl"
                shutil.rmtree(dest, ignore_errors=True)
                dest.mkdir()
                cmd = ["curl", "-sS", "--no-progress-meter", "--fail"]
                if parallel:
                    cmd += ["--parallel", "--parallel-max", str(args.jobs)]
                for u, p in zip(urls, paths, strict=True):
                    cmd += ["-o", str(dest / p.name), u]
                run(cmd)

            def curl_and_fsync() -> None:
                curl(True)
                for p in paths:  # what provision pays for durability before its rename
                    fd = os.open(work / "curl" / p.name, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

            def curl_and_hash() -> None:
                curl(True)
                run(["sha256sum", *(str(work / "curl" / p.name) for p in paths)])

            t_c1 = best(curl, False)
            t_cp = best(curl, True)
            t_cf = best(curl_and_fsync)
            t_ch = best(curl_and_hash)
            row("curl (sequential)", t_c1, mib, f"provision is {t_c1 / t_prov:.2f}x")
            row(f"curl --parallel-max {args.jobs}", t_cp, mib, f"provision is {t_cp / t_prov:.2f}x")
            row("curl --parallel + fsync", t_cf, mib, f"provision is {t_cf / t_prov:.2f}x")
            row("curl --parallel + sha256sum", t_ch, mib, f"provision is {t_ch / t_prov:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
