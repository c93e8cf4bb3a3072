"""The one reader and decoder (core/tominput) as every loader uses them:
exact types, unknown keys, bounded size and depth; each refusal names the file and the key
(exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from msgspec import Meta

from dgr_forge.core import fsutil, tominput
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.forge import Forge
from dgr_forge.host import probes, recipes, worker
from dgr_forge.models import manifest as models
from dgr_forge.upstream import manifest

REPO = Path(__file__).resolve().parent.parent
COMMIT = "4df29be4f4c3673f428170fda944a5b19f743bb8"

MANIFEST = f"""schema = 1
[upstream]
name = "llama.cpp"
url = "https://example.invalid/llama.git"
commit = "{COMMIT}"
"""
MODEL = f"""schema = 1
[model]
name = "m"
[[files]]
name = "m.gguf"
size = 3
sha256 = "{"a" * 64}"
url = "https://example.invalid/m.gguf"
"""
RECIPE = 'schema = 1\n[lane]\nbackend = "CPU"\n[cmake]\noptions = { GGML_NATIVE = "OFF" }\n'
PROBES = (REPO / "toolchains" / "probes.toml").read_text()
WORKER = 'schema = 1\n[worker]\npath = "w"\n'


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for d in ("manifests", "patches/llama.cpp", "recipes", "toolchains", "w"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "w" / "CMakeLists.txt").write_text("project(w)\n")
    return root


def load_manifest(root: Path, text: str) -> object:
    path = root / "manifests" / "llama.cpp.toml"
    path.write_text(text)
    return manifest.load(path, root)


def load_model(root: Path, text: str) -> object:
    path = root / "manifests" / "m.toml"
    path.write_text(text)
    return models.load(path, root)


def load_recipe(root: Path, text: str) -> object:
    path = root / "recipes" / "cpu.toml"
    path.write_text(text)
    return recipes.load(path, "recipes/cpu.toml")


def load_probes(root: Path, text: str) -> object:
    path = root / "toolchains" / "probes.toml"
    path.write_text(text)
    return probes.load_probes(path, "toolchains/probes.toml")


def load_worker(root: Path, text: str) -> object:
    (root / worker.MANIFEST).write_text(text)
    return worker.resolve(Forge(root=root, workspace=root / ".dgr"), None)


LOADERS: dict[str, tuple[Callable[[Path, str], object], str, str]] = {
    # name: (loader, valid text, the file the messages name)
    "manifest": (load_manifest, MANIFEST, "manifests/llama.cpp.toml"),
    "models": (load_model, MODEL, "manifests/m.toml"),
    "recipes": (load_recipe, RECIPE, "recipes/cpu.toml"),
    "probes": (load_probes, PROBES, "toolchains/probes.toml"),
    "worker": (load_worker, WORKER, "manifests/shard-worker.toml"),
}


def refused(tmp_path: Path, loader: str, text: str) -> BadInput:
    load, _, shown = LOADERS[loader]
    with pytest.raises(BadInput) as info:
        load(_root(tmp_path), text)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert str(info.value).startswith(f"{shown}: "), info.value
    assert info.value.hint
    return info.value


@pytest.mark.parametrize("loader", list(LOADERS))
def test_valid_input_loads(tmp_path: Path, loader: str) -> None:
    load, text, _ = LOADERS[loader]
    assert load(_root(tmp_path), text) is not None


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("schema", ["true", "1.0", '"1"', "2", "-1"])
def test_schema_must_be_the_integer_1_everywhere(tmp_path: Path, loader: str, schema: str) -> None:
    text = LOADERS[loader][1].replace("schema = 1\n", f"schema = {schema}\n", 1)
    err = refused(tmp_path, loader, text)
    assert ": schema: expected 1" in str(err) and "set schema = 1" in str(err)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_missing_schema_is_refused(tmp_path: Path, loader: str) -> None:
    text = LOADERS[loader][1].replace("schema = 1\n", "", 1)
    assert "schema: expected 1, got nothing" in str(refused(tmp_path, loader, text))


@pytest.mark.parametrize("loader", list(LOADERS))
def test_unknown_top_level_key_is_refused(tmp_path: Path, loader: str) -> None:
    text = "colour = 1\n" + LOADERS[loader][1]
    err = refused(tmp_path, loader, text)
    assert ": colour: unknown key" in str(err) and "remove it" in str(err)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_5000_deep_nesting_is_exit_2_not_a_recursion_error(tmp_path: Path, loader: str) -> None:
    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    err = refused(tmp_path, loader, deep + LOADERS[loader][1])
    assert "nested more than" in str(err)
    # deep dotted keys parse without recursion, but are still refused by the depth walk
    dotted = "[" + ".".join(["a"] * 5000) + "]\n"
    err = refused(tmp_path, loader, LOADERS[loader][1] + dotted)
    assert "nested more than" in str(err)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_huge_file_is_refused_by_its_size_before_parsing(tmp_path: Path, loader: str) -> None:
    # a syntax error at the end: if the file were parsed, the message would be "invalid TOML"
    text = LOADERS[loader][1] + "#" * tominput.MAX_BYTES + "\n= broken"
    err = refused(tmp_path, loader, text)
    assert "-byte limit" in str(err) and "invalid TOML" not in str(err)


def test_nul_in_a_string_is_refused(tmp_path: Path) -> None:
    err = refused(tmp_path, "manifest", MANIFEST + '[patches]\ndir = "patches/\\u0000x"\n')
    assert "patches.dir: contains a NUL byte" in str(err)
    err = refused(tmp_path, "worker", 'schema = 1\n[worker]\npath = "w\\u0000"\n')
    assert "worker.path: contains a NUL byte" in str(err)
    err = refused(tmp_path, "recipes", RECIPE + '[ci]\nruns_on = ["a\\u0000"]\n')
    assert "ci.runs_on: contains a NUL byte" in str(err)


def test_nul_in_a_path_is_exit_2() -> None:
    with pytest.raises(BadInput, match="NUL byte"):
        fsutil.read_regular(Path("a\x00b.toml"), what="manifest", hint="h", limit=9)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "m.toml"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        fsutil.read_regular(fifo, what="manifest", hint="h", limit=9)


class _N(tominput.Record):
    n: Annotated[int, Meta(ge=1)]


class _Counted(tominput.Record):
    t: _N


class _Schema1(tominput.Record):
    schema: Literal[1]


def test_float_and_bool_are_not_integers(tmp_path: Path) -> None:
    bad_size = MODEL.replace("size = 3", "size = 3.0")
    assert "files[0].size" in str(refused(tmp_path, "models", bad_size))
    bad_size = MODEL.replace("size = 3", "size = true")
    assert "files[0].size" in str(refused(tmp_path, "models", bad_size))
    assert tominput.decode("f.toml", {"t": {"n": 3}}, _Counted).t.n == 3
    for value in (True, 3.0, "3"):
        with pytest.raises(BadInput, match=r"f.toml: t.n: .* is not an integer"):
            tominput.decode("f.toml", {"t": {"n": value}}, _Counted)
    with pytest.raises(BadInput, match="out of range"):
        tominput.decode("f.toml", {"t": {"n": 0}}, _Counted)
    # a float option value is not a CMake value either
    err = refused(tmp_path, "recipes", RECIPE.replace('"OFF"', "1.5"))
    assert "cmake.options.GGML_NATIVE" in str(err)


def test_a_hostile_value_is_shown_bounded() -> None:
    shown = tominput.shown_value("A" * 1_000_000)
    assert len(shown) < 100
    with pytest.raises(BadInput) as info:
        tominput.decode("f.toml", {"schema": "x" * 1_000_000}, _Schema1)
    assert len(str(info.value)) < 300


def test_wrong_types_name_the_key(tmp_path: Path) -> None:
    err = refused(tmp_path, "recipes", RECIPE.replace('backend = "CPU"', "backend = 1"))
    assert "lane.backend: must be a string, got integer" in str(err)
    err = refused(tmp_path, "recipes", RECIPE + "[requires]\ntools = 3\n")
    assert "requires.tools: must be an array of strings" in str(err)
    err = refused(
        tmp_path, "probes", PROBES.replace("[tools.cmake]\n", "[tools.cmake]\npath_search = 1\n", 1)
    )
    assert "tools.cmake.path_search: must be true or false" in str(err)
    err = refused(tmp_path, "worker", "schema = 1\nworker = 3\n")
    assert "worker: must be a table, got integer" in str(err)


def test_upstream_and_worker_urls_are_validated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = f"--upload-pack=touch {marker};git-upload-pack"
    err = refused(
        tmp_path, "manifest", MANIFEST.replace("https://example.invalid/llama.git", hostile)
    )
    assert "manifests/llama.cpp.toml: [upstream] url" in str(err) and "starts with '-'" in str(err)
    err = refused(
        tmp_path,
        "worker",
        f'schema = 1\n[worker]\nurl = "ext::sh -c touch% {marker}"\ncommit = "{COMMIT}"\n',
    )
    assert "manifests/shard-worker.toml: [worker] url" in str(err)
    assert not marker.exists()


def test_repository_inputs_load() -> None:
    """The checked-in files pass the stricter reader."""
    manifest.load(REPO / "manifests" / "llama.cpp.toml", REPO)
    recipes.load_all(REPO / "recipes", REPO)
    probes.load_probes(REPO / "toolchains" / "probes.toml")
    shipped = sorted((REPO / "manifests" / "models").glob("*.toml"))
    test_models = sorted((REPO / "tests" / "data" / "models").glob("*.toml"))
    assert test_models  # the loop loads at least one real model manifest
    for path in shipped + test_models:
        models.load(path, REPO)


def test_the_same_bytes_are_parsed_once_and_each_caller_gets_its_own_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tomllib

    from dgr_forge.core import tominput

    parses: list[str] = []
    real = tomllib.loads

    def counted(text: str) -> dict[str, Any]:
        parses.append(text)
        return real(text)

    monkeypatch.setattr(tominput.tomllib, "loads", counted)
    raw = b'schema = 1\n[t]\nitems = ["a", "b"]\n# parse-cache test 1\n'
    first = tominput.Checker("f.toml").parse(raw)
    first["t"]["items"].append("changed by its caller")
    second = tominput.Checker("g.toml").parse(raw)
    assert second == {"schema": 1, "t": {"items": ["a", "b"]}} and len(parses) == 1
    # a value marshal cannot hold (a datetime) is parsed every time, and right
    stamped = b"schema = 1\nwhen = 2025-01-01T00:00:00Z\n# parse-cache test 2\n"
    assert tominput.Checker("h.toml").parse(stamped) == tominput.Checker("h.toml").parse(stamped)
    assert len(parses) == 3
    # a refused document is refused again, never remembered as anything
    for _ in range(2):
        with pytest.raises(BadInput, match="invalid TOML"):
            tominput.Checker("bad.toml").parse(b"schema = = 1\n")
    for i in range(3 * tominput._PARSED_MAX):  # bounded
        tominput.Checker("n.toml").parse(f"n = {i}\n".encode())
    assert len(tominput._PARSED) <= tominput._PARSED_MAX
