"""Model manifests: every malformed case is exit 2 naming file, key and fix; nothing crashes."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli import run_forge

from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

REV = "60d8d70770c6776ff598c94bb586a859a38244f1"
SHA = "c" * 64


def entry(name: str = "m-00001-of-00001.gguf", **over: object) -> dict[str, object]:
    e: dict[str, object] = {
        "name": name,
        "size": 123,
        "sha256": SHA,
        "url": f"https://models.example/m/{name}",
    }
    e.update(over)
    return e


def doc(*files: dict[str, object], **model: object) -> dict[str, object]:
    return {
        "schema": 1,
        "model": {"name": "m", "source_revision": REV, **model},
        "files": list(files) or [entry()],
    }


def write(tmp_path: Path, data: dict[str, object] | str) -> Path:
    path = tmp_path / "manifests" / "models" / "m.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else tomli_w.dumps(data))
    return path


def load_error(tmp_path: Path, data: dict[str, object] | str) -> BadInput:
    with pytest.raises(BadInput) as info:
        models.load(write(tmp_path, data), tmp_path)
    err = info.value
    assert err.exit_code == ExitCode.BAD_INPUT
    assert "manifests/models/m.toml" in str(err)  # the file
    assert err.hint  # the fix
    return err


def test_valid_manifest_loads(tmp_path: Path) -> None:
    files = [entry(f"m-{i:05d}-of-00003.gguf", size=i) for i in (1, 2, 3)]
    files.append(entry("tokenizer.json", size=0, url="file:///srv/mirror/tokenizer.json"))
    m = models.load(write(tmp_path, doc(*files)), tmp_path)
    assert m.name == "m" and m.model.source_revision == REV
    assert [f.name for f in m.files][-1] == "tokenizer.json"
    assert m.total_size == 6 and m.shown == "manifests/models/m.toml"


def test_dumps_round_trips() -> None:
    files = [ModelFile("a.gguf", 5, SHA, "https://h/a.gguf")]
    m = models.loads(models.dumps("x", files, REV).encode())
    assert m.files == tuple(files) and m.model.source_revision == REV
    assert models.loads(models.dumps("x", files).encode()).model.source_revision is None


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({**doc(), "extra": 1}, "extra", "unknown key"),
        (doc(color="red"), "model.color", "unknown key"),
        (doc(entry(mode=1)), "files[0].mode", "unknown key"),
        ({**doc(), "schema": 2}, "schema", "expected 1"),
        ({**doc(), "schema": True}, "schema", "expected 1"),
        (doc(name="../m"), "model.name", "not a plain name"),
        (doc(source_revision="main"), "model.source_revision", "not a full 40-hex"),
        (doc(source_revision=REV[:12]), "model.source_revision", "not a full 40-hex"),
        (doc(source_revision=REV + "\n"), "model.source_revision", "not a full 40-hex"),
        (doc(source_revision=REV.upper()), "model.source_revision", "not a full 40-hex"),
        (doc(entry(sha256="abc")), "files[0].sha256", "not a 64-hex"),
        (doc(entry(sha256=SHA.upper())), "files[0].sha256", "not a 64-hex"),
        (doc(entry(sha256=SHA + "\n")), "files[0].sha256", "not a 64-hex"),
        (doc(entry(size=-1)), "files[0].size", "not a non-negative integer"),
        (doc(entry(size=1.5)), "files[0].size", "not a non-negative integer"),
        (doc(entry(size="12")), "files[0].size", "not a non-negative integer"),
        (doc(entry(size=True)), "files[0].size", "not a non-negative integer"),
        (doc(entry(name="sub/a.gguf")), "files[0].name", "path separator"),
        (doc(entry(name="sub\\a.gguf")), "files[0].name", "path separator"),
        (doc(entry(name="..")), "files[0].name", "'..'"),
        (doc(entry(name="a..gguf")), "files[0].name", "'..'"),
        (doc(entry(name=".hidden")), "files[0].name", "not a plain file name"),
        (doc(entry(name="a.gguf\n")), "files[0].name", "not a plain file name"),
        (doc(entry(name="a.gguf.part")), "files[0].name", "reserved for partial downloads"),
        (doc(entry(url="ftp://h/a")), "files[0].url", "not an http(s):// or file:// URL"),
        (doc(entry(url="https:///a")), "files[0].url", "has no host"),
        (doc(entry(url="file:rel/a")), "files[0].url", "no absolute path"),
        (doc(entry(url="http://[::1")), "files[0].url", "not a URL"),
        (doc(entry(url="https://h/a\x00b")), "files[0].url", "control character"),
        (doc(entry(url="https://h/a\nb")), "files[0].url", "control character"),
        (doc(entry(url="https://-oProxyCommand=x/a")), "files[0].url", "starting with '-'"),
        (doc(entry(url="http://u:SECRET@[::1")), "files[0].url", "http://***@"),
        ({"schema": 1, "model": {"name": "m"}}, "files", "missing or empty"),
        ({"schema": 1, "model": {"name": "m"}, "files": []}, "files", "missing or empty"),
        ({"schema": 1, "model": {"name": "m"}, "files": 3}, "files", "array of tables"),
        ({"schema": 1, "model": {"name": "m"}, "files": [1]}, "files[0]", "must be a table"),
        ({"schema": 1, "files": [entry()]}, "model", "must be a table"),
        ({**doc(entry()), "model": {}}, "model.name", "missing"),
        (doc({"name": "a", "sha256": SHA, "url": "https://h/a"}), "files[0].size", "missing"),
        ("schema = 1\nmodel = [", "(syntax)", "invalid TOML"),
    ],
)
def test_malformed_manifest(tmp_path: Path, data: dict[str, object], key: str, words: str) -> None:
    err = load_error(tmp_path, data)
    assert f": {key}: " in str(err), str(err)
    assert words in str(err), str(err)


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    err = load_error(tmp_path, doc(entry("a.gguf"), entry("b.gguf"), entry("a.gguf")))
    assert "files[2].name" in str(err) and "duplicate file name 'a.gguf' (also files[0])" in str(
        err
    )
    folded = load_error(tmp_path, doc(entry("A.gguf"), entry("a.gguf")))
    assert "duplicate file name" in str(folded)


def test_split_sets_must_be_complete_and_consistent(tmp_path: Path) -> None:
    two_of_three = doc(entry("m-00001-of-00003.gguf"), entry("m-00003-of-00003.gguf"))
    err = load_error(tmp_path, two_of_three)
    assert "split set m is incomplete: not listed: m-00002-of-00003.gguf" in str(err)
    mixed = doc(entry("m-00001-of-00002.gguf"), entry("m-00002-of-00003.gguf"))
    assert "says 3 parts, another part says 2" in str(load_error(tmp_path, mixed))
    zero = doc(entry("m-00000-of-00002.gguf"))
    assert "not a valid split part" in str(load_error(tmp_path, zero))
    beyond = doc(entry("m-00003-of-00002.gguf"))
    assert "not a valid split part" in str(load_error(tmp_path, beyond))
    # two different sets in one manifest are fine when each is complete
    ok = doc(*(entry(f"{p}-{i:05d}-of-00002.gguf") for p in ("a", "b") for i in (1, 2)))
    assert len(models.load(write(tmp_path, ok), tmp_path).files) == 4


def test_missing_and_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such model manifest"):
        models.load(tmp_path / "nope.toml", tmp_path)
    path = write(tmp_path, "x")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(BadInput, match="not UTF-8"):
        models.load(path, tmp_path)


def test_resolve_path_by_name(tmp_path: Path) -> None:
    assert models.resolve_path("deepseek-v4", tmp_path) == (
        tmp_path / "manifests" / "models" / "deepseek-v4.toml"
    )
    assert models.resolve_path("x/y.toml", tmp_path) == Path("x/y.toml")


def test_cli_by_name_from_the_forge_root(tmp_path: Path) -> None:
    write(tmp_path, doc(entry(name="../x")))
    res = run_forge("artifacts", "verify", "m", "--dest", str(tmp_path), "--json", cwd=tmp_path)
    assert res.code == 2, res
    assert res.json["file"] == "manifests/models/m.toml" and res.json["key"] == "files[0].name"
    missing = run_forge("artifacts", "verify", "other", "--dest", str(tmp_path), cwd=tmp_path)
    assert (
        missing.code == 2
        and "manifests/models/other.toml: no such model manifest" in missing.stderr
    )


def test_repo_model_manifests_load() -> None:
    """Whatever the repository ships under manifests/models/ must load, and so must the
    test model (none is shipped on purpose: the loop must still have something to load)."""
    root = Path(__file__).resolve().parent.parent
    paths = sorted((root / "manifests" / "models").glob("*.toml"))
    paths += sorted((root / "tests" / "data" / "models").glob("*.toml"))
    loaded = {models.load(path, root).name: path for path in paths}
    assert "tiny-test" in loaded and len(loaded) == len(paths)


# ----------------------------------------------------------------------------- properties

keys = st.sampled_from(
    ["schema", "model", "files", "name", "source_revision", "size", "sha256", "url", "x"]
)
scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.text(max_size=40),
    st.floats(allow_nan=False),
    st.sampled_from(
        [
            REV,
            SHA,
            "a.gguf",
            "m-00001-of-00002.gguf",
            "m-00002-of-00002.gguf",
            "../x",
            "a/b",
            "https://h/a",
            "file:///a",
            "ftp://x",
            "http://[",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=5),
    max_leaves=14,
)
file_tables = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["a.gguf", "m-00001-of-00002.gguf", "m-00002-of-00002.gguf"])
        | st.text(max_size=12),
        "size": st.integers(min_value=-3, max_value=2**40) | st.booleans(),
        "sha256": st.sampled_from([SHA, SHA[:10]]) | st.text(max_size=3),
        "url": st.sampled_from(["https://h/a", "file:///a", "ftp://x", "http://[", ""]),
        "x": scalars,
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        st.dictionaries(st.sampled_from(["schema", "model", "files", "extra"]), values, max_size=4),
        st.fixed_dictionaries(
            {
                "schema": st.sampled_from([1, 1, 2]),
                "model": st.fixed_dictionaries(
                    {"name": st.sampled_from(["m", "../m", ""])},
                    optional={"source_revision": st.sampled_from([REV, "main"])},
                ),
                "files": st.lists(file_tables, max_size=4),
            }
        ),
    )
)
def test_loader_never_crashes_on_structured_input(tmp_path: Path, data: dict[str, object]) -> None:
    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError):
        return
    path = write(tmp_path, text)
    try:
        m = models.load(path, tmp_path)
    except BadInput as err:
        assert "manifests/models/m.toml" in str(err) and err.hint
        return
    # what loads is sound: plain unique names, sane sizes and hashes
    assert m.files and len({f.name.casefold() for f in m.files}) == len(m.files)
    for f in m.files:
        assert models.check_file_name(f.name) is None and f.size >= 0
        assert len(f.sha256) == 64 and models.check_url(f.url) is None


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=300))
def test_loader_never_crashes_on_bytes(tmp_path: Path, raw: bytes) -> None:
    path = write(tmp_path, "")
    path.write_bytes(raw)
    with contextlib.suppress(BadInput):
        models.load(path, tmp_path)


@given(name=st.text(max_size=30))
def test_file_name_check_never_admits_a_path(name: str) -> None:
    if models.check_file_name(name) is None:
        assert Path(name).name == name and name not in ("", ".", "..")
        assert "/" not in name and "\\" not in name and "\x00" not in name


@pytest.mark.parametrize(
    "url", ["http://u:SECRET@[::1", "ftp://u:SECRET@h/a", "https://u:SECRET@h/\x01"]
)
def test_bad_url_errors_mask_credentials(tmp_path: Path, url: str) -> None:
    err = load_error(tmp_path, doc(entry(url=url)))
    assert "files[0].url" in str(err) and "SECRET" not in str(err) + repr(err.details)
