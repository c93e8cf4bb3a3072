"""`dgr-forge presets`: CMakeUserPresets.json that builds what the forge builds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.build import make_patched_root, make_worker
from support.cli import run_forge
from support.git import Upstream


def test_presets_print_mirrors_recipes(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    res = run_forge("--root", str(root), "--json", "presets", "--print")
    assert res.code == 0, res
    data = res.json["content"]
    assert data["version"] == 3
    names = [p["name"] for p in data["configurePresets"]]
    assert names == ["dgr-cpu", "dgr-cuda-sm90", "dgr-cuda", "dgr-metal", "dgr-rocm", "dgr-vulkan"]
    cpu = data["configurePresets"][0]
    assert cpu["generator"] == "Ninja"
    assert cpu["binaryDir"] == str(root / ".dgr" / "build" / "cpu")
    assert cpu["toolchainFile"] == str(root / "toolchains" / "gcc.cmake")
    assert cpu["cacheVariables"]["GGML_NATIVE"] == "OFF"
    assert cpu["cacheVariables"]["CMAKE_EXPORT_COMPILE_COMMANDS"] == "ON"
    cuda = data["configurePresets"][1]
    assert cuda["cacheVariables"]["GGML_CUDA"] == "ON"
    assert [b["configurePreset"] for b in data["buildPresets"]] == names
    assert not (root / "CMakeUserPresets.json").exists()  # --print writes nothing
    assert not (root / "dgr-forge.presets.json").exists()


def test_presets_write_root_file(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    # no worker and no upstream tree yet: nowhere `cmake --preset` would work (issue 13 #9)
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu")
    assert res.code == 2, res
    assert "dgr-forge patch" in res.stderr
    assert not (root / "CMakeUserPresets.json").exists()
    # --out still writes exactly where asked
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu", "--out", str(root))
    assert res.code == 0, res
    path = root / "dgr-forge.presets.json"
    assert res.json["path"] == str(path)
    assert res.json["user_presets"] == str(root / "CMakeUserPresets.json")
    assert [p["name"] for p in json.loads(path.read_text())["configurePresets"]] == ["dgr-cpu"]


def test_presets_under_a_path_a_build_cannot_run_in_are_refused(
    tmp_path: Path, upstream: Upstream
) -> None:
    # presets that could never configure there (the rule `build` keeps): exit 2, none written
    root = make_patched_root(tmp_path / "in;here", upstream)
    for args in (["--print"], ["--out", str(root)]):
        res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu", *args)
        assert res.code == 2, res
        assert "holds ';'" in res.json["error"] and res.json["path"] == str(root)
    assert not (root / "CMakeUserPresets.json").exists()
    assert not (root / "dgr-forge.presets.json").exists()


@pytest.mark.slow
def test_ide_preset_builds_the_same_tree(tmp_path: Path, upstream: Upstream) -> None:
    """An IDE configuring with the preset reuses the forge's build: the forge stays a no-op."""
    root = make_patched_root(tmp_path / "forge", upstream)
    worker = make_worker(tmp_path / "worker")
    first = run_forge(
        "--root", str(root), "--json", "build", "--worker", str(worker), "--no-sign", "-j", "2"
    )
    assert first.code == 0, first
    res = run_forge(
        "--root",
        str(root),
        "presets",
        "--lane",
        "cpu",
        "--worker",
        str(worker),
        "--out",
        str(worker),
    )
    assert res.code == 0, res
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.probes import load_probes

    cmake = Doctor(load_probes(root / "toolchains" / "probes.toml")).tool("cmake").path
    assert cmake
    subprocess.run([cmake, "--preset", "dgr-cpu"], cwd=worker, check=True, capture_output=True)
    built = subprocess.run(
        [cmake, "--build", "--preset", "dgr-cpu"],
        cwd=worker,
        check=True,
        capture_output=True,
        text=True,
    )
    assert "no work to do" in built.stdout  # same args -> same build graph, nothing rebuilt
    again = run_forge("--root", str(root), "--json", "build", "--worker", str(worker), "--no-sign")
    assert again.code == 0, again
    assert again.json["lanes"][0]["configured"] is False, again.stderr


def test_presets_refuse_to_write_through_a_planted_symlink(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "CMakeUserPresets.json").symlink_to(victim)
    res = run_forge("--root", str(root), "presets", "--lane", "cpu", "--out", str(out))
    assert res.code == 2, res
    assert "symlink" in res.stderr and "Traceback" not in res.stderr
    assert victim.read_text() == "keep\n"


# ------------------------------------------------------- the user's CMakeUserPresets.json

USER_OWN = """{
  "version": 6,
  "configurePresets": [
    {"name": "mine", "generator": "Ninja", "binaryDir": "${sourceDir}/build-mine",
     "cacheVariables": {"X": "ü"}}
  ],
  "vendor": {"example.com/ide": {"keep": [1, 2,   3]}}
}
"""


def _write(root: Path, out: Path, *args: str) -> Any:
    return run_forge("--root", str(root), "--json", "presets", "--lane", "cpu", "--out",
                     str(out), *args)  # fmt: skip


def test_users_own_presets_are_kept_byte_for_byte_and_the_include_removed_again(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    out = tmp_path / "ide"
    out.mkdir()
    user = out / "CMakeUserPresets.json"
    user.write_text(USER_OWN)
    before = user.read_bytes()

    dry = _write(root, out, "--dry-run")
    assert dry.code == 0, dry
    assert user.read_bytes() == before and not (out / "dgr-forge.presets.json").exists()
    assert dry.json["dry_run"] is True and dry.json["user_presets_change"] == "changed"
    assert '+  "configurePresets": [' not in dry.json["diff"]
    assert '-    {"name": "mine"' not in dry.json["diff"]
    assert '+  "include": ["dgr-forge.presets.json"]' in dry.json["diff"]
    human = run_forge("--root", str(root), "presets", "--lane", "cpu", "--out", str(out),
                      "--dry-run")  # fmt: skip
    assert human.code == 0 and dry.json["diff"] in human.stdout, human

    res = _write(root, out)
    assert res.code == 0, res
    own = out / "dgr-forge.presets.json"
    assert res.json["path"] == str(own) and res.json["user_presets"] == str(user)
    text = user.read_text()
    # every byte of the user's file stays, one member more after the last one
    assert text == USER_OWN.replace(
        '  "vendor": {"example.com/ide": {"keep": [1, 2,   3]}}\n',
        '  "vendor": {"example.com/ide": {"keep": [1, 2,   3]}},\n'
        '  "include": ["dgr-forge.presets.json"]\n',
    )
    assert [p["name"] for p in json.loads(own.read_text())["configurePresets"]] == ["dgr-cpu"]
    again = _write(root, out)  # once: no second entry
    assert again.code == 0 and again.json["user_presets_change"] == "unchanged"
    assert user.read_text() == text

    removed = run_forge("--root", str(root), "--json", "presets", "--remove", "--out", str(out))
    assert removed.code == 0, removed
    assert removed.json["user_presets_change"] == "changed"
    assert user.read_bytes() == before and not own.exists()


def test_a_missing_user_file_is_created_and_removed_with_the_include(
    tmp_path: Path, upstream: Upstream
) -> None:
    from dgr_forge.upstream.workspace import USER_PRESETS_STUB

    root = make_patched_root(tmp_path / "forge", upstream)
    out = tmp_path / "ide"
    out.mkdir()
    res = _write(root, out)
    assert res.code == 0 and res.json["user_presets_change"] == "created", res
    assert (out / "CMakeUserPresets.json").read_text() == USER_PRESETS_STUB
    removed = run_forge("--root", str(root), "--json", "presets", "--remove", "--out", str(out))
    assert removed.code == 0 and removed.json["user_presets_change"] == "deleted", removed
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"version": 4}', '{"version": 4, "include": ["dgr-forge.presets.json"]}'),
        ('{"version": 3}', '{"version": 4, "include": ["dgr-forge.presets.json"]}'),
        ('{"include":[],"version":5}', '{"include":["dgr-forge.presets.json"],"version":5}'),
        (
            '{\n\t"version": 4,\n\t"include": [ "a.json" ]\n}',
            '{\n\t"version": 4,\n\t"include": [ "a.json", "dgr-forge.presets.json" ]\n}',
        ),
        (
            '{"include": ["dgr-forge.presets.json", "b.json"], "version": 4}',
            '{"include": ["dgr-forge.presets.json", "b.json"], "version": 4}',
        ),
    ],
)
def test_the_include_is_inserted_keeping_every_other_byte(text: str, expected: str) -> None:
    from dgr_forge.lanes import presets

    added = presets.with_include(Path("u.json"), text)
    assert added == expected
    removed = presets.without_include(Path("u.json"), added)
    if text.startswith('{"include":[]'):  # the forge's entry was the whole list: it goes
        assert removed == '{"version":5}'
    elif text.startswith('{"include": ["dgr'):
        assert removed == '{"include": ["b.json"], "version": 4}'
    else:  # as it was, the version raised to 4
        assert removed == text.replace('"version": 3', '"version": 4')


def _fifo(path: Path) -> None:
    os.mkfifo(path)


HOSTILE = {
    "symlink": lambda p: p.symlink_to(p.parent / "elsewhere.json"),
    "fifo": _fifo,
    "huge": lambda p: p.write_bytes(b'{"version": 4, "x": "' + b"a" * (2 << 20) + b'"}'),
    "invalid JSON": lambda p: p.write_text('{"version": 4,'),
    "include not a list": lambda p: p.write_text('{"version": 4, "include": "x.json"}'),
    "include of numbers": lambda p: p.write_text('{"version": 4, "include": [1]}'),
    "not an object": lambda p: p.write_text("[1, 2]"),
    "not UTF-8": lambda p: p.write_bytes(b'{"version": 4, "x": "\xff"}'),
    "a directory": lambda p: p.mkdir(),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_user_presets_file_is_refused_and_left_unchanged(
    tmp_path: Path, upstream: Upstream, kind: str
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    out = tmp_path / "ide"
    out.mkdir()
    (out / "elsewhere.json").write_text('{"version": 4}')
    user = out / "CMakeUserPresets.json"
    HOSTILE[kind](user)
    state = {p.name: (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink()
                      and kind != "fifo" else None) for p in out.iterdir()}  # fmt: skip
    for args in ((), ("--remove",), ("--dry-run",)):
        res = run_forge("--root", str(root), "--json", "presets", "--out", str(out), *args)
        assert res.code == 2, (kind, args, res)
        assert "CMakeUserPresets.json" in res.json["error"] and "Traceback" not in res.stderr
        assert res.json.get("hint"), res.json
        after = {p.name: (p.lstat().st_mode, p.read_bytes() if p.is_file() and not p.is_symlink()
                          and kind != "fifo" else None) for p in out.iterdir()}  # fmt: skip
        assert after == state, (kind, args)
    assert (out / "elsewhere.json").read_text() == '{"version": 4}'
