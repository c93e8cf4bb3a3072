"""Manifest loading: every malformed case is exit 2 naming file, key and fix."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.roots import manifest_text

from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.upstream import manifest

COMMIT = "4df29be4f4c3673f428170fda944a5b19f743bb8"
TREE = "b" * 40
SHA = "c" * 64


def write(root: Path, text: str) -> Path:
    (root / "manifests").mkdir(exist_ok=True)
    (root / "patches" / "llama.cpp").mkdir(parents=True, exist_ok=True)
    path = root / "manifests" / "llama.cpp.toml"
    path.write_text(text)
    return path


def load_error(root: Path, text: str) -> BadInput:
    path = write(root, text)
    with pytest.raises(BadInput) as info:
        manifest.load(path, root)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "manifests/llama.cpp.toml" in str(info.value)
    assert info.value.hint
    return info.value


def test_valid_manifest_loads(tmp_path: Path) -> None:
    (tmp_path / "patches" / "llama.cpp").mkdir(parents=True)
    (tmp_path / "patches" / "llama.cpp" / "0001-a.patch").write_text("x")
    (tmp_path / "patches" / "llama.cpp" / "0002-b.patch").write_text("y")
    text = manifest_text(
        "https://example.invalid/llama.git",
        COMMIT,
        TREE,
        [
            {"file": "0001-a.patch", "sha256": SHA, "tree": TREE},
            {"file": "0002-b.patch", "sha256": SHA},
        ],
        result_tree=TREE,
    )
    m = manifest.load(write(tmp_path, text), tmp_path)
    assert m.commit == COMMIT and m.tree == TREE and m.name == "llama.cpp"
    assert [e.file for e in m.series] == ["0001-a.patch", "0002-b.patch"]
    assert m.series[1].tree is None and m.result_tree == TREE
    assert m.patches_dir == (tmp_path / "patches" / "llama.cpp").resolve()


def test_repo_manifest_pins_the_real_upstream() -> None:
    root = Path(__file__).resolve().parent.parent
    m = manifest.load(root / "manifests" / "llama.cpp.toml", root)
    assert m.url == "https://github.com/ggml-org/llama.cpp.git"
    assert m.commit == COMMIT


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (manifest_text("u", "main"), "upstream.commit", "branch and tag names are refused"),
        (manifest_text("u", COMMIT[:12]), "upstream.commit", "not a full 40-hex"),
        (manifest_text("u", COMMIT.upper()), "upstream.commit", "not a full 40-hex"),
        (
            manifest_text("u", COMMIT).replace(COMMIT, COMMIT + "\\n"),
            "upstream.commit",
            "not a full 40-hex",
        ),
        (manifest_text("u", COMMIT, "xyz"), "upstream.tree", "tree id"),
        (manifest_text("u", COMMIT) + "color = 1\n", "color", "unknown key"),
        (manifest_text("u", COMMIT).replace("schema = 1", "schema = 2"), "schema", "expected 1"),
        (manifest_text("u", COMMIT).replace("schema = 1", "schema = true"), "schema", "boolean"),
        (manifest_text("u", COMMIT).replace("schema = 1", "schema = 1.0"), "schema", "float"),
        (
            manifest_text("https://h/x.git", COMMIT).replace("https://h/x.git", "-oProxy=x"),
            "[upstream] url",
            "starts with '-'",
        ),
        (manifest_text("u", COMMIT).replace('url = "u"\n', ""), "upstream.url", "missing"),
        (
            manifest_text("u", COMMIT).replace("[upstream]", '[upstream]\nbranch = "x"'),
            "upstream.branch",
            "unknown key",
        ),
        ("schema = 1\nupstream = [", "(syntax)", "invalid TOML"),
        (manifest_text("u", COMMIT, name="../evil"), "upstream.name", "plain directory name"),
    ],
)
def test_malformed_manifest(tmp_path: Path, text: str, key: str, words: str) -> None:
    err = load_error(tmp_path, text)
    assert key in str(err)
    assert words in str(err)


def test_series_errors(tmp_path: Path) -> None:
    pdir = tmp_path / "patches" / "llama.cpp"
    pdir.mkdir(parents=True)
    for name in ("0001-a.patch", "0002-b.patch"):
        (pdir / name).write_text("x")
    entry = lambda f: {"file": f, "sha256": SHA}  # noqa: E731
    out_of_order = manifest_text("u", COMMIT, series=[entry("0002-b.patch"), entry("0001-a.patch")])
    assert "out of numeric order" in str(load_error(tmp_path, out_of_order))
    (pdir / "0001-c.patch").write_text("x")
    dup = manifest_text(
        "u", COMMIT, series=[entry("0001-a.patch"), entry("0001-c.patch"), entry("0002-b.patch")]
    )
    assert "duplicate patch number 0001" in str(load_error(tmp_path, dup))
    (pdir / "0001-c.patch").unlink()
    missing = manifest_text("u", COMMIT, series=[entry("0001-a.patch"), entry("0003-z.patch")])
    err = load_error(tmp_path, missing)
    assert "0003-z.patch does not exist" in str(err) and "patches.series[1].file" in str(err)
    unlisted = manifest_text("u", COMMIT, series=[entry("0001-a.patch")])
    assert "0002-b.patch is on disk but not listed" in str(load_error(tmp_path, unlisted))
    bad_sha = manifest_text("u", COMMIT, series=[{"file": "0001-a.patch", "sha256": "abc"}])
    (pdir / "0002-b.patch").unlink()
    assert "64-hex sha256" in str(load_error(tmp_path, bad_sha))
    bad_name = manifest_text("u", COMMIT, series=[{"file": "a.patch", "sha256": SHA}])
    assert "NNNN-<slug>.patch" in str(load_error(tmp_path, bad_name))


def test_missing_manifest_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such manifest"):
        manifest.load(tmp_path / "manifests" / "llama.cpp.toml", tmp_path)


toml_scalars = st.one_of(
    st.integers(),
    st.booleans(),
    st.text(max_size=50),
    st.floats(allow_nan=False),
    st.sampled_from([COMMIT, TREE, SHA, "0001-a.patch", "patches/llama.cpp", "../x"]),
)
toml_values = st.recursive(
    toml_scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "url",
                    "commit",
                    "tree",
                    "file",
                    "sha256",
                    "dir",
                    "series",
                    "result",
                    "upstream",
                    "patches",
                    "schema",
                    "x",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    doc=st.dictionaries(
        st.sampled_from(["schema", "upstream", "patches", "extra"]), toml_values, max_size=4
    )
)
def test_loader_never_crashes_on_structured_input(tmp_path: Path, doc: dict[str, object]) -> None:
    import tomli_w

    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return
    path = write(tmp_path, text)
    try:
        manifest.load(path, tmp_path)
    except BadInput as err:
        assert "manifests/llama.cpp.toml" in str(err)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200))
def test_loader_never_crashes_on_bytes(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "manifests" / "llama.cpp.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(raw)
    with contextlib.suppress(BadInput):
        manifest.load(path, tmp_path)
