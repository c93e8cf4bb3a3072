"""Shard hosts fetch only their layers (issue 34): the layer map in a model manifest,
`artifacts map` (files on disk, or split headers over HTTP Range requests only),
`artifacts provision|verify --layers`, the destination's record of provisioned ranges.

The model is real split GGUF written with the `gguf` package the way `gguf-split
--split-max-tensors` splits (tests/support/server.write_layered_gguf): 43 layers, 9 parts,
part 1 holding the model's KV data. What each range needs is computed here from the
tensor assignment, independently of the code under test.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.server import (
    FaultyServer,
    hostile_gguf,
    layered_tensors,
    manifest_of,
    split_by_count,
    split_names,
    write_layered_gguf,
)

from dgr_forge.models import manifest as models

FAST = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TIMEOUT": "10", "DGR_ARTIFACTS_TRIES": "2"}
NAMES = split_names("m43", 9)
PARTS = split_by_count(layered_tensors(43), 9)


def needed(lo: int, hi: int, *, first: bool = False, last: bool = False) -> set[str]:
    """The parts holding a tensor of layers lo..hi, part 1, and the ends asked for."""
    out = {NAMES[0]}
    for name, tensors in zip(NAMES, PARTS, strict=True):
        for t in tensors:
            m = re.match(r"blk\.(\d+)\.", t)
            if (m and lo <= int(m.group(1)) <= hi) or (
                (first and t.startswith("token_embd."))
                or (last and t.split(".")[0] in ("output", "output_norm"))
            ):
                out.add(name)
    return out


def held_layers(name: str) -> set[int]:
    tensors = PARTS[NAMES.index(name)]
    return {int(m.group(1)) for t in tensors if (m := re.match(r"blk\.(\d+)\.", t))}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    write_layered_gguf(tmp_path / "source", elems=1024)  # ~40 KiB per part
    return tmp_path / "source"


@pytest.fixture
def server(source: Path) -> Iterator[FaultyServer]:
    with FaultyServer(source) as s:
        yield s


def plain_manifest(tmp_path: Path, source: Path, base_url: str) -> Path:
    """A manifest without a layer map, written independently of the code under test."""
    return manifest_of(source, base_url, tmp_path / "m43.toml", "m43")


def forge(*args: str, env: dict[str, str] | None = None) -> Result:
    return run_forge(*args, "--json", env={**FAST, **(env or {})})


def mapped_manifest(tmp_path: Path, source: Path, base_url: str) -> Path:
    out = tmp_path / "m43.toml"
    res = forge("artifacts", "manifest", str(source), "--name", "m43", "--url-base", base_url,
                "--out", str(out))  # fmt: skip
    assert res.code == 0, res
    return out


def fetched(server: FaultyServer) -> set[str]:
    return {r.name for r in server.log if r.status in (200, 206)}


# ----------------------------------------------------------------------------- the map


def test_manifest_records_the_layer_map_from_the_split_headers(
    tmp_path: Path, source: Path
) -> None:
    m = mapped_manifest(tmp_path, source, "https://models.example.org/m43")
    doc = tomllib.loads(m.read_text())
    assert doc["map"] == {"arch": "llama", "block_count": 43}
    for entry in doc["files"]:
        held = held_layers(entry["name"])
        shown = models.loads(m.read_bytes()).files[NAMES.index(entry["name"])]
        assert {n for lo, hi in shown.ranges or () for n in range(lo, hi + 1)} == held
        groups = {t.split(".")[0] for t in PARTS[NAMES.index(entry["name"])]} - {"blk"}
        assert set(entry["tensors"]) == groups
    assert doc["files"][0]["tensors"] == ["token_embd"]
    assert doc["files"][0]["layers"] == "0-4"
    assert doc["files"][-1]["tensors"] == ["output", "output_norm"]


def test_map_over_http_reads_only_header_bytes_from_a_range_only_server(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    server.faults.range_only = True  # a GET without Range is refused: nothing whole
    m = plain_manifest(tmp_path, source, server.base_url)
    res = forge("artifacts", "map", str(m))
    assert res.code == 0, res
    assert res.json["source"] == "url" and res.json["block_count"] == 43
    assert all(r.range is not None and r.status == 206 for r in server.log), server.log
    total = sum(p.stat().st_size for p in source.iterdir())
    served = sum(r.sent for r in server.log)
    assert served == res.json["header_bytes"]  # what was sent is what was read
    assert served < total * 0.15, (served, total)  # headers only: ~4 KiB of ~40 KiB parts
    for name in NAMES:
        assert sum(r.sent for r in server.requests_for(name)) < (source / name).stat().st_size
    # the same map as `artifacts manifest` makes from the files themselves
    on_disk = mapped_manifest(tmp_path / "d", source, server.base_url)
    assert tomllib.loads(m.read_text()) == tomllib.loads(on_disk.read_text())
    assert forge("artifacts", "map", str(m)).json["state"] == "unchanged"


def test_map_from_files_on_disk_checks_them_against_the_manifest(
    tmp_path: Path, source: Path
) -> None:
    m = plain_manifest(tmp_path, source, "https://models.example.org/m43")
    res = forge("artifacts", "map", str(m), "--dest", str(source))
    assert res.code == 0, res
    assert res.json["source"] == "dest" and res.json["state"] == "updated"
    assert tomllib.loads(m.read_text())["map"]["block_count"] == 43
    changed = tmp_path / "changed"
    changed.mkdir()
    for p in source.iterdir():
        (changed / p.name).write_bytes(p.read_bytes())
    data = bytearray((changed / NAMES[3]).read_bytes())
    data[-1] ^= 0xFF  # a tensor byte: same size, another sha256
    (changed / NAMES[3]).write_bytes(bytes(data))
    bad = forge("artifacts", "map", str(m), "--dest", str(changed))
    assert bad.code == 1, bad
    assert NAMES[3] in bad.json["error"] and "sha256" in bad.json["error"]


# ----------------------------------------------------------------------------- provision


def test_provision_layers_fetches_only_their_files_then_adds_the_rest(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = mapped_manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "srv" / "m43"
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "11-21")
    assert res.code == 0, res
    first = needed(11, 21)
    assert first == {NAMES[0], NAMES[2], NAMES[3], NAMES[4]}  # the fixture's own layout
    assert fetched(server) == first
    assert {p.name for p in dest.iterdir() if p.suffix == ".gguf"} == first
    for name in first:
        assert (dest / name).read_bytes() == (source / name).read_bytes()
    subset_bytes = sum((source / n).stat().st_size for n in first)
    assert res.json["bytes"] == res.json["downloaded_bytes"] == subset_bytes
    assert res.json["model_bytes"] == sum(p.stat().st_size for p in source.iterdir())
    assert res.json["layers"] == {"layers": "11-21", "first": False, "last": False}
    assert res.json["provisioned"]["layers"] == "11-21"

    ok = forge("artifacts", "verify", str(m), "--dest", str(dest), "--layers", "11-21")
    assert ok.code == 0, ok
    assert {f["name"] for f in ok.json["files"]} == first

    server.log.clear()
    again = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "22-32")
    assert again.code == 0, again
    second = needed(22, 32)
    assert fetched(server) == second - first  # only what was missing
    assert {f["name"] for f in again.json["files"] if f["status"] == "downloaded"} == (
        second - first
    )
    assert again.json["provisioned"] == {
        "model": "m43", "layers": "11-32", "first": False, "last": False,
    }  # fmt: skip

    # verify without --layers: what the destination records, and what it can serve
    whole = forge("artifacts", "verify", str(m), "--dest", str(dest))
    assert whole.code == 0, whole
    assert whole.json["layers"]["layers"] == "11-32"
    have = first | second
    serve = [n for n in range(43) if all(n not in held_layers(x) or x in have for x in NAMES)]
    assert serve == [0, 1, 2, 3, *range(10, 34)]  # part 1 holds layers 0-3 whole
    assert whole.json["serves"]["layers"] == "0-3,10-33"
    # the embeddings live in part 1, which every stage holds; the head's part is absent
    assert whole.json["serves"]["first"] is True and whole.json["serves"]["last"] is False


def test_first_and_last_stages_bring_the_embeddings_and_the_head(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = mapped_manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "0-10,33-42")
    assert res.code == 0, res
    assert res.json["layers"] == {"layers": "0-10,33-42", "first": True, "last": True}
    assert fetched(server) == needed(0, 10, first=True) | needed(33, 42, last=True)
    ends = forge("artifacts", "verify", str(m), "--dest", str(dest))
    assert ends.json["serves"]["first"] is True and ends.json["serves"]["last"] is True


@pytest.mark.parametrize("tied", [False, True])
def test_first_and_last_flags_add_the_ends_to_a_middle_range(tmp_path: Path, tied: bool) -> None:
    """`--first` / `--last` with a range that touches neither end: the embeddings' split,
    the output head's (with tied weights, no `output` tensor: the embeddings' split too).
    Here the embeddings live in part 3, not in the metadata split every stage holds; every
    stage gets a file outside the map (a README) and the split of a tensor every layer
    reads (`rope_freqs`, in part 8)."""
    parts = split_by_count(layered_tensors(43, tied=tied), 9)
    parts[0].remove("token_embd.weight")
    parts[2].append("token_embd.weight")
    parts[7].append("rope_freqs.weight")
    src = tmp_path / "src"
    write_layered_gguf(src, tied=tied, parts=parts)
    (src / "README.md").write_text("a model card\n")
    m = mapped_manifest(tmp_path, src, "https://models.example.org/m43")

    def holding(test: Callable[[str], bool]) -> set[str]:
        return {NAMES[i] for i, tensors in enumerate(parts) if any(map(test, tensors))}

    def chosen(*flags: str) -> tuple[dict[str, object], set[str]]:
        res = forge("artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
                    "--layers", "22-32", "--dry-run", *flags)  # fmt: skip
        assert res.code == 0, res
        return res.json["layers"], {f["name"] for f in res.json["files"]}

    layers = holding(lambda t: bool(re.match(r"blk\.(2[2-9]|3[0-2])\.", t)))
    rope = holding(lambda t: t.startswith("rope_freqs."))
    mid = {NAMES[0], "README.md"} | layers | rope
    embd = holding(lambda t: t.startswith("token_embd."))
    head = holding(lambda t: t.split(".")[0] in ("output", "output_norm"))
    assert embd == {NAMES[2]} and rope == {NAMES[7]} and not rope & layers  # the layout
    assert not embd & mid and not head & mid
    assert chosen() == ({"layers": "22-32", "first": False, "last": False}, mid)
    assert chosen("--first") == ({"layers": "22-32", "first": True, "last": False}, mid | embd)
    assert chosen("--last") == (
        {"layers": "22-32", "first": False, "last": True},
        mid | head | (embd if tied else set()),
    )


def test_the_room_check_counts_only_the_subset(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    """A file outside the range claims a petabyte: the whole model does not fit on this
    disk (exit 2, nothing fetched), the range's files do."""
    import tomli_w

    m = mapped_manifest(tmp_path, source, server.base_url)
    doc = tomllib.loads(m.read_text())
    assert doc["files"][8]["name"] == NAMES[8] and NAMES[8] not in needed(11, 21)
    doc["files"][8]["size"] = 10**15
    m.write_text(tomli_w.dumps(doc))
    dest = tmp_path / "dest"
    whole = forge("artifacts", "provision", str(m), "--dest", str(dest))
    assert whole.code == 2 and "not enough free space" in whole.json["error"], whole
    assert server.log == [] and not dest.exists()
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "11-21")
    assert res.code == 0, res
    assert fetched(server) == needed(11, 21)


def test_dry_run_says_which_files_and_bytes_and_writes_nothing(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = mapped_manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), "--layers", "11-21",
                "--dry-run")  # fmt: skip
    assert res.code == 0, res
    assert not dest.exists() and server.log == []
    assert res.json["dry_run"] is True
    assert {f["name"] for f in res.json["files"]} == needed(11, 21)
    assert {f["status"] for f in res.json["files"]} == {"planned"}
    assert res.json["missing_bytes"] == sum((source / n).stat().st_size for n in needed(11, 21))
    assert res.json["model_bytes"] > res.json["bytes"]


def test_layers_without_a_map_is_exit_2_naming_the_command_that_adds_one(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = plain_manifest(tmp_path, source, server.base_url)
    dest = tmp_path / "dest"
    for cmd in ("provision", "verify"):
        res = forge("artifacts", cmd, str(m), "--dest", str(dest), "--layers", "0-3")
        assert res.code == 2, res
        assert "no layer map" in res.json["error"] and "artifacts map" in res.json["hint"]
    assert not dest.exists() and server.log == []


@pytest.mark.parametrize(
    "value",
    ["-1", "5-2", "99999999999", "1-2,,3", "43", "0-43", "", "1-", "a", "1 - 2", "0x10", "٣"],
)
def test_hostile_layer_values_are_exit_2_before_anything(
    tmp_path: Path, source: Path, value: str
) -> None:
    m = mapped_manifest(tmp_path, source, "https://models.example.org/m43")
    dest = tmp_path / "dest"
    res = forge("artifacts", "provision", str(m), "--dest", str(dest), f"--layers={value}")
    assert res.code == 2, res
    assert res.json["error"].startswith("--layers"), res
    assert "--layers A-B[,C-D] with 0 <= A <= B <= 42" in res.json["hint"]
    assert not dest.exists()


def test_a_nul_in_layers_is_refused(tmp_path: Path, source: Path) -> None:
    from dgr_forge.core.errors import BadInput
    from dgr_forge.models import subset

    m = models.load(mapped_manifest(tmp_path, source, "https://models.example.org/m43"))
    with pytest.raises(BadInput, match="NUL"):
        subset.parse_layers(m, "1\x00-2")
    res = forge("artifacts", "provision", "x.toml", "--dest", str(tmp_path), "--layers=1\x00")
    assert res.code == 2, res


# ----------------------------------------------------------------------------- exactness


def test_a_map_contradicting_a_header_fails_verification_naming_the_file(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = mapped_manifest(tmp_path, source, server.base_url)
    text = m.read_text()
    doc = tomllib.loads(text)
    victim = doc["files"][2]
    wrong = f'layers = "{victim["layers"]}"'
    assert text.count(wrong) == 1
    lo, hi = victim["layers"].split("-")
    m.write_text(text.replace(wrong, f'layers = "{lo}-{int(hi) + 1}"'))  # claims one more
    dest = tmp_path / "dest"
    res = forge("artifacts", "provision", str(m), "--dest", str(dest))
    assert res.code == 1, res
    assert list(res.json["split_problems"]) == [NAMES[2]]
    assert "layer map mismatch" in res.json["split_problems"][NAMES[2]][0]
    assert res.json["provisioned"] is None  # a failed run records nothing
    bad = forge("artifacts", "verify", str(m), "--dest", str(dest))
    assert bad.code == 1 and bad.json["bad"] == [NAMES[2]], bad
    assert NAMES[2] in bad.stderr and "artifacts map" in bad.stderr


# ----------------------------------------------------------------------------- hostile headers


def test_a_tensor_claiming_a_layer_beyond_block_count_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src, rename={"blk.20.attn_q.weight": "blk.99.attn_q.weight"})
    res = forge("artifacts", "manifest", str(src), "--name", "m43", "--url-base",
                "https://h/m", "--out", str(tmp_path / "m.toml"))  # fmt: skip
    assert res.code == 2, res
    assert "claims layer 99" in res.json["error"] and "m43-00005-of-00009.gguf" in res.json["error"]
    assert not (tmp_path / "m.toml").exists()


def test_a_split_of_another_model_is_refused_over_http(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src)
    other = tmp_path / "other"  # the same names, another split of another model
    write_layered_gguf(other, layers=40, header={4: {"split.tensors.count": 83}})
    (src / NAMES[4]).write_bytes((other / NAMES[4]).read_bytes())
    with FaultyServer(src) as server:
        m = plain_manifest(tmp_path, src, server.base_url)
        res = forge("artifacts", "map", str(m))
    assert res.code == 2, res
    assert NAMES[4] in res.json["error"] and "split.tensors.count" in res.json["error"]
    assert "map" not in tomllib.loads(m.read_text())


def test_a_split_count_from_another_set_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src, header={6: {"split.count": 7}})
    res = forge("artifacts", "manifest", str(src), "--name", "m43", "--url-base",
                "https://h/m", "--out", str(tmp_path / "m.toml"))  # fmt: skip
    assert res.code == 2, res
    assert NAMES[6] in res.json["error"] and "split.count is 7" in res.json["error"]


def test_a_header_that_never_ends_costs_at_most_the_limit(tmp_path: Path) -> None:
    import struct

    src = tmp_path / "src"
    write_layered_gguf(src)
    # part 3: 200,000 small KV pairs (about 4 MiB) before any tensor: well-formed, endless
    n = 200_000
    body = b"".join(
        struct.pack("<Q", 7) + f"k{i:06d}".encode() + struct.pack("<IB", 0, 1) for i in range(n)
    )
    (src / NAMES[2]).write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, n) + body)
    limit = 64 << 10
    with FaultyServer(src) as server:
        m = plain_manifest(tmp_path, src, server.base_url)
        res = forge("artifacts", "map", str(m), env={"DGR_ARTIFACTS_HEADER_MAX": str(limit)})
        served = sum(r.sent for r in server.requests_for(NAMES[2]))
    assert res.code == 2, res
    assert NAMES[2] in res.json["error"] and "header limit" in res.json["error"]
    assert served <= limit, served


def test_huge_counts_in_a_part_are_refused_at_once(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src)
    hostile_gguf(src / NAMES[1])  # an array of 10^12 items in a 43-byte file
    with FaultyServer(src) as server:
        m = plain_manifest(tmp_path, src, server.base_url)
        res = forge("artifacts", "map", str(m))
        served = sum(r.sent for r in server.requests_for(NAMES[1]))
    assert res.code == 2, res
    assert NAMES[1] in res.json["error"] and "10" in res.json["error"]
    assert served <= (src / NAMES[1]).stat().st_size


def test_a_server_ignoring_range_is_refused_without_reading_the_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_layered_gguf(src)
    with FaultyServer(src) as server:
        server.faults.ignore_range = set(NAMES)
        m = plain_manifest(tmp_path, src, server.base_url)
        res = forge("artifacts", "map", str(m))
    assert res.code == 1, res
    assert "HTTP 200 to a Range request" in res.json["error"]
    assert "--dest" in res.json["hint"]


def test_the_progress_counts_the_subset_bytes(
    tmp_path: Path, source: Path, server: FaultyServer
) -> None:
    m = mapped_manifest(tmp_path, source, server.base_url)
    res = run_forge("artifacts", "provision", str(m), "--dest", str(tmp_path / "d"),
                    "--layers", "22-32", env=FAST)  # fmt: skip
    assert res.code == 0, res
    # the total bar ends at 100 % of the subset (the whole model would stop under 50 %)
    assert "total: 100%" in res.stderr, res.stderr
    assert "layers 22-32: 4 of 9 files" in res.stderr


def test_map_from_a_file_mirror_reads_headers_in_place_under_the_limit(
    tmp_path: Path, source: Path
) -> None:
    m = plain_manifest(tmp_path, source, "https://models.example.org/m43")
    res = forge("artifacts", "map", str(m), "--mirror", str(source))
    assert res.code == 0, res
    assert res.json["requests"] == 0 and res.json["block_count"] == 43
    assert 0 < res.json["header_bytes"] < sum(p.stat().st_size for p in source.iterdir()) / 10
    small = forge("artifacts", "map", str(m), "--mirror", str(source),
                  env={"DGR_ARTIFACTS_HEADER_MAX": "100"})  # fmt: skip
    assert small.code == 2 and "header limit of 100 bytes" in small.json["error"], small
    for bad in ("nan", "-5", "10x"):
        res = forge("artifacts", "map", str(m), env={"DGR_ARTIFACTS_HEADER_MAX": bad})
        assert res.code == 2 and res.json["variable"] == "DGR_ARTIFACTS_HEADER_MAX", res
