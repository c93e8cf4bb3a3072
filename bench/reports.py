"""Benchmark: signed reports vs the raw hashing they wrap.

With artifacts of --mb MiB in total (real files in a workspace):
  write:   reports.write_report (statement + tool/byproduct digests + Ed25519 DSSE)
           vs  `sha256sum` of the byproducts and tool binaries it hashes
  verify:  `dgr-forge report verify --artifacts` (a CLI process)  vs  `sha256sum` of the
           artifacts (a process), i.e. the cost over the unavoidable re-hash

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.reports [--mb 256] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from msgspec.structs import replace

from dgr_forge.attest import keys, reports
from dgr_forge.attest.records import Artifact
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter
from tests.support.cli import forge_cmd, forge_env
from tests.support.git import make_upstream
from tests.support.reports import lane_build, make_patch, setup_root


def best(samples: list[float]) -> float:
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=256, help="total artifact size in MiB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
        up = make_upstream(tmp / "up")
        root = setup_root(tmp / "forge", up, make_patch(up))
        forge = Forge(root, root / ".dgr")
        build = lane_build(forge)
        # make the artifacts big: 4 files of mb/4 MiB of incompressible bytes
        big: list[Artifact] = []
        for i in range(4):
            path = forge.build_dir("cpu") / f"bin/big-{i}"
            path.write_bytes(os.urandom(args.mb * (1 << 20) // 4))
            big.append(Artifact(path.name, "EXECUTABLE", path, sha256_file(path)))
        build = replace(build, artifacts=build.artifacts + big)
        signer = keys.generate(tmp / "k.pem")
        quiet = Reporter(quiet=True)

        hashed = [str(build.log_file), str(build.cmake_cache)] + [t.path for t in build.tools]
        write, raw_write, verify, raw_verify = [], [], [], []
        report = Path()
        for _ in range(args.runs):
            t = time.perf_counter()
            report = reports.write_report(forge, build, signer, quiet)
            write.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["sha256sum", *hashed], check=True, capture_output=True)
            raw_write.append(time.perf_counter() - t)
        files = [str(a.path) for a in build.artifacts]
        cmd = forge_cmd("report", "verify", str(report), "--key", str(tmp / "k.pem.pub"))
        for _ in range(args.runs):
            t = time.perf_counter()
            subprocess.run([*cmd, "--artifacts"], check=True, capture_output=True, env=forge_env())
            verify.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(["sha256sum", *files], check=True, capture_output=True)
            raw_verify.append(time.perf_counter() - t)

    w, rw, v, rv = best(write), best(raw_write), best(verify), best(raw_verify)
    print(f"artifacts: {args.mb} MiB in {len(files)} files; median of {args.runs} runs")
    print(f"write_report  {w:7.3f} s   raw sha256sum of its inputs {rw:7.3f} s   "
          f"ratio {w / rw:5.2f}x")  # fmt: skip
    print(f"verify --artifacts {v:7.3f} s   raw sha256sum of artifacts {rv:7.3f} s   "
          f"ratio {v / rv:5.2f}x   overhead {v - rv:+.3f} s")  # fmt: skip


if __name__ == "__main__":
    main()
