"""Benchmark: bytes a shard host fetches with `artifacts provision --layers`, per stage of a
4-stage layout, against the whole model.

Run from the repository root (dgr-forge importable: `pip install -e .[test]`, or
PYTHONPATH=src):

    python -m bench.layers [--layers 43] [--splits 9] [--tensor-kib 1024] [--stages 4]

Writes a real split GGUF model in a temporary directory (the tests' `write_layered_gguf`:
embeddings, two tensors per layer, the output head, split by tensor count the way
`gguf-split --split-max-tensors` splits), makes its manifest with the layer map, and
serves it from the tests' loopback HTTP server. Then:

* map: `artifacts map` of a manifest without a map, over HTTP Range requests: header
  bytes read against the model's size;
* per stage (ceil(layers/stages) layers each; the first stage with the embeddings, the
  last with the head, as `--layers` implies): `provision --layers` into a fresh
  directory: files and bytes the server sent, against the whole model; and all stages
  into one destination, one after another (each adds only what is missing).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from dgr_forge.core.output import Reporter
from dgr_forge.models import layermap, subset
from dgr_forge.models import manifest as models
from dgr_forge.models.make_manifest import build_manifest, map_manifest
from dgr_forge.models.provision import provision
from tests.support.server import FaultyServer, write_layered_gguf


def stages(layers: int, n: int) -> list[tuple[int, int]]:
    """`n` stages of ceil(layers/n) layers, the last one shorter: 43 in 4 -> 0-10, 11-21,
    22-32, 33-42 (the issue's layout)."""
    per = -(-layers // n)
    return [(i * per, min(layers, (i + 1) * per) - 1) for i in range(n) if i * per < layers]


def mib(n: int) -> str:
    return f"{n / (1 << 20):9.2f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=43)
    ap.add_argument("--splits", type=int, default=9)
    ap.add_argument("--tensor-kib", type=int, default=1024, help="size of each tensor")
    ap.add_argument("--stages", type=int, default=4)
    args = ap.parse_args()
    out = Reporter(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="dgr-bench-layers-"))
    try:
        src = work / "model"
        write_layered_gguf(
            src, "bench", layers=args.layers, splits=args.splits, elems=args.tensor_kib * 256
        )
        with FaultyServer(src) as server:
            _, text = build_manifest(src, "bench", server.base_url, out)
            mpath = work / "bench.toml"
            mpath.write_text(text)
            m = models.load(mpath)
            whole = m.total_size
            print(f"model: {args.layers} layers in {len(m.files)} files, {mib(whole)}")

            plain = work / "plain.toml"
            plain.write_text(models.dumps("bench", [models.ModelFile(
                f.name, f.size, f.sha256, f.url) for f in m.files]))  # fmt: skip
            server.log.clear()
            started = time.perf_counter()
            mapped = map_manifest(models.load(plain), out)
            took = time.perf_counter() - started
            sent = sum(r.sent for r in server.log)
            print(
                f"map over HTTP Range: {mapped.header_bytes} header bytes in "
                f"{mapped.requests} requests ({sent} sent, {100 * sent / whole:.4f}% of the "
                f"model, {took:.2f}s)"
            )

            print(f"{'stage':<22} {'files':>7} {'fetched':>13} {'of the model':>13}")
            shared = work / "shared"
            total_shared = 0
            for i, (lo, hi) in enumerate(stages(args.layers, args.stages)):
                sel = subset.select(m, ((lo, hi),), False, False)
                server.log.clear()
                res = provision(m, work / f"stage{i}", out, selection=sel)
                assert res.ok, res
                sent = sum(r.sent for r in server.log)
                ends = ("+embd" if sel.first else "") + ("+head" if sel.last else "")
                label = f"{i + 1}: layers {layermap.format_ranges(sel.ranges)}{ends}"
                print(
                    f"{label:<22} {len(sel.files):>3}/{len(m.files):<3} {mib(sent)} "
                    f"{100 * sent / whole:12.1f}%"
                )
                server.log.clear()
                again = provision(m, shared, out, selection=sel)
                assert again.ok
                total_shared += sum(r.sent for r in server.log)
            print(
                f"{'all stages, one disk':<22} {'':>7} {mib(total_shared)} "
                f"{100 * total_shared / whole:12.1f}%  (each run adds only what is missing)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
