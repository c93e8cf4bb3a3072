"""The typed TOML decoder (core/tominput): each hostile value a Shape meets is exit 2 with
``file: key: words`` and a fix, through a real loader (the upstream manifest) and directly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import Meta
from support.roots import manifest_text

from dgr_forge.core import tominput
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.upstream import manifest

COMMIT = "4df29be4f4c3673f428170fda944a5b19f743bb8"
SHA = "c" * 64
SHOWN = "manifests/llama.cpp.toml"


def refusal_of(load: Callable[[], object]) -> BadInput:
    """What `load()` raises: a BadInput, exit 2."""
    with pytest.raises(BadInput) as info:
        load()
    assert info.value.exit_code == ExitCode.BAD_INPUT
    return info.value


def refused(tmp_path: Path, text: str) -> BadInput:
    (tmp_path / "manifests").mkdir(exist_ok=True)
    (tmp_path / "patches" / "llama.cpp").mkdir(parents=True, exist_ok=True)
    path = tmp_path / "manifests" / "llama.cpp.toml"
    path.write_text(text)
    err = refusal_of(lambda: manifest.load(path, tmp_path))
    assert err.hint
    assert str(err).startswith(f"{SHOWN}: ") and err.details["file"] == SHOWN
    return err


def base() -> str:
    return manifest_text("https://example.invalid/l.git", COMMIT)


def series(n: int, extra: str = "") -> str:
    entries = "".join(
        f'\n[[patches.series]]\nfile = "000{i + 1}-a.patch"\nsha256 = "{SHA}"\n' for i in range(n)
    )
    return base() + entries + extra


def test_nul_in_a_string(tmp_path: Path) -> None:
    err = refused(tmp_path, base().replace('name = "llama.cpp"', 'name = "ll\\u0000ama"'))
    assert err.message == f"{SHOWN}: upstream.name: contains a NUL byte (a control character)"
    assert err.details["key"] == "upstream.name" and err.hint == "remove it"


def test_nul_in_a_key_is_shown_escaped(tmp_path: Path) -> None:
    err = refused(tmp_path, base().replace("[upstream]", '[upstream]\n"a\\u0000b" = 1'))
    assert "upstream.'a\\x00b': unknown key" in str(err) and "\x00" not in str(err)


@pytest.mark.parametrize("number", ["10000000000000000000000000000000", "0", "-5"])
def test_out_of_range_integer(tmp_path: Path, number: str) -> None:
    err = refused(tmp_path, base().replace("[patches]", f"build_number = {number}\n[patches]"))
    assert f"upstream.build_number: {number} is out of range: must be between 1 and" in str(err)
    assert "git rev-list --count" in (err.hint or "")  # the field's own fix


def test_a_5000_digit_integer_is_refused_by_parse(tmp_path: Path) -> None:
    err = refused(tmp_path, base().replace("[patches]", f"build_number = {'9' * 5000}\n[patches]"))
    assert "a number with thousands of digits" in str(err) and len(str(err)) < 300


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("true", "True is not an integer (a boolean)"),
        ("3.0", "3.0 is not an integer (a float)"),
        ('"3"', "'3' is not an integer (a string)"),
    ],
)
def test_bool_float_and_string_are_not_integers(tmp_path: Path, value: str, words: str) -> None:
    err = refused(tmp_path, base().replace("[patches]", f"build_number = {value}\n[patches]"))
    assert err.message == f"{SHOWN}: upstream.build_number: {words}"


def test_a_table_where_an_array_is_expected(tmp_path: Path) -> None:
    err = refused(tmp_path, base() + "\n[patches.series]\nfile = 1\n")
    assert f"{SHOWN}: patches.series: must be an array of tables" in str(err)
    assert err.hint == "write [[patches.series]]"


def test_an_array_where_a_table_is_expected(tmp_path: Path) -> None:
    err = refused(tmp_path, "schema = 1\nupstream = [1]\n")
    assert f"{SHOWN}: upstream: must be a table, got array" in str(err)


def test_an_unknown_key_deep_inside(tmp_path: Path) -> None:
    err = refused(tmp_path, series(4, 'x = "y"\n'))
    assert err.message == f"{SHOWN}: patches.series[3].x: unknown key"
    assert err.details["key"] == "patches.series[3].x"
    assert err.hint == "remove it; allowed keys in patches.series[3]: file, sha256, tree"


def test_a_wrong_type_deep_inside(tmp_path: Path) -> None:
    err = refused(tmp_path, series(3).replace(f'sha256 = "{SHA}"', "sha256 = 7", 3)[:-1] + "\n")
    assert "patches.series[0].sha256: must be a string, got integer" in str(err)


def test_a_missing_key_deep_inside(tmp_path: Path) -> None:
    err = refused(tmp_path, series(2).replace(f'sha256 = "{SHA}"\n', "", 2))
    assert err.message == f"{SHOWN}: patches.series[0].sha256: missing"
    assert err.hint == 'add sha256 = "..." under [patches.series[0]]'


@pytest.mark.parametrize("key", ['"--help"', '".."', '"a.b"', '"$.upstream"'])
def test_keys_that_look_like_options_or_paths(tmp_path: Path, key: str) -> None:
    err = refused(tmp_path, base().replace("[upstream]", f"[upstream]\n{key} = 1"))
    assert f"{SHOWN}: upstream.{key.strip(chr(34))}: unknown key" in str(err)
    err = refused(tmp_path, f"{key} = 1\n" + base())
    assert f"{SHOWN}: {key.strip(chr(34))}: unknown key" in str(err)


def test_a_missing_table(tmp_path: Path) -> None:
    err = refused(tmp_path, "schema = 1\n")
    assert err.message == f"{SHOWN}: upstream: must be a table, got nothing"
    assert err.hint == "add a [upstream] table"


# -- the decoder on its own shapes


class _Inner(tominput.Record):
    tags: tuple[str, ...] = ()
    on: bool = True
    n: Annotated[int, tominput.about("a count", ge=1, fix="count from 1")] = 1


class _Doc(tominput.Record):
    schema: tominput.Version1
    name: tominput.NonEmpty = "x"
    tools: dict[str, _Inner] = {}  # noqa: RUF012 (msgspec copies an empty default)
    value: str | int | bool = ""


def decoded_error(data: dict[str, object]) -> BadInput:
    return refusal_of(lambda: tominput.decode("f.toml", data, _Doc))


def test_decoder_words() -> None:
    assert tominput.decode("f.toml", {"schema": 1}, _Doc).tools == {}
    cases = {
        "f.toml: schema: expected 1, got boolean True": {"schema": True},
        "f.toml: schema: expected 1, got integer 2": {"schema": 2},
        "f.toml: schema: expected 1, got nothing": {},
        "f.toml: name: empty": {"schema": 1, "name": "  "},
        "f.toml: tools.b.tags: must be an array of strings": {
            "schema": 1,
            "tools": {"a": {}, "b": {"tags": ["x", 3]}},
        },
        "f.toml: tools.a.tags: must be an array of strings ": {
            "schema": 1,
            "tools": {"a": {"tags": "x"}},
        },
        "f.toml: tools.a.on: must be true or false, got integer": {
            "schema": 1,
            "tools": {"a": {"on": 1}},
        },
        "f.toml: tools.a.n: 0 is out of range: must be at least 1": {
            "schema": 1,
            "tools": {"a": {"n": 0}},
        },
        "f.toml: value: must be a string, an integer or a boolean, got float": {
            "schema": 1,
            "value": 1.5,
        },
        "f.toml: tools.a: must be a table, got string": {"schema": 1, "tools": {"a": "x"}},
    }
    for words, data in cases.items():
        assert str(decoded_error(data)).startswith(words.strip()), words
    assert decoded_error({"schema": 1, "tools": {"a": {"n": 0}}}).hint == "count from 1"
    assert decoded_error({"schema": 1, "tools": {"a": {"on": 1}}}).hint == "on = true"
    huge = decoded_error({"schema": "x" * 1_000_000})
    assert len(str(huge)) < 300


# -- each loader's Shape, through the loader


def worker_refusal(tmp_path: Path, text: str) -> BadInput:
    from dgr_forge.core.forge import Forge
    from dgr_forge.host import worker

    (tmp_path / "manifests").mkdir(exist_ok=True)
    (tmp_path / worker.MANIFEST).write_text(text)
    return refusal_of(
        lambda: worker.resolve(Forge(root=tmp_path, workspace=tmp_path / ".dgr"), None)
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("commit = 5", "worker.commit: must be a string, got integer"),
        ('"--help" = "x"', "worker.--help: unknown key"),
        ("path = []", "worker.path: must be a string, got array"),
        ('path = "w\\u0000"', "worker.path: contains a NUL byte"),
    ],
)
def test_worker_shape(tmp_path: Path, body: str, words: str) -> None:
    err = worker_refusal(tmp_path, f"schema = 1\n[worker]\n{body}\n")
    assert err.message == f"manifests/shard-worker.toml: {words}" + (
        " (a control character)" if "NUL" in words else ""
    )


def probes_refusal(tmp_path: Path, text: str) -> BadInput:
    from dgr_forge.host import probes

    path = tmp_path / "probes.toml"
    path.write_text(text)
    return refusal_of(lambda: probes.load_probes(path, "toolchains/probes.toml"))


@pytest.mark.parametrize(
    ("body", "words", "hint"),
    [
        ('packages = { debian = "gcc" }', "tools.cc.packages.debian: must be an array of strings",
         'write debian = ["..."]'),
        ("packages = 3", "tools.cc.packages: must be a table, got integer",
         'write packages = { debian = ["..."] }'),
        ('executables = ["cc", 1]', "tools.cc.executables: must be an array of strings",
         'write executables = ["..."]'),
        ('"../x" = 1', "tools.cc.../x: unknown key", None),
    ],
)  # fmt: skip
def test_probes_shape(tmp_path: Path, body: str, words: str, hint: str | None) -> None:
    good = 'schema = 1\n[tools.a]\nexecutables = ["a"]\n'
    err = probes_refusal(tmp_path, f"{good}[tools.cc]\n{body}\n")
    assert err.message == f"toolchains/probes.toml: {words}"
    assert hint is None or err.hint == hint


def recipe_refusal(tmp_path: Path, text: str) -> BadInput:
    from dgr_forge.host import recipes

    path = tmp_path / "cpu.toml"
    path.write_text(text)
    return refusal_of(lambda: recipes.load(path, "recipes/cpu.toml"))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("[cmake]\noptions = { X = 1.5 }", "cmake.options.X: must be a string, integer or boolean"),
        ('[cmake]\noptions = { X = ["a", 1.5] }',
         "cmake.options.X[1]: must be a string, integer or boolean"),
        ("[cmake]\noptions = [1]", "cmake.options: must be a table, got array"),
        ('[cmake]\n"--help" = 1', "cmake.--help: unknown key"),
        ("[ci]\nrunner = 'x'", "ci.runner: unknown key"),
        ("[requires]\ntools = [{ a = 1 }]", "requires.tools: must be an array of strings"),
    ],
)  # fmt: skip
def test_recipe_shape(tmp_path: Path, body: str, words: str) -> None:
    err = recipe_refusal(tmp_path, f'schema = 1\n[lane]\nbackend = "CPU"\n{body}\n')
    assert err.message == f"recipes/cpu.toml: {words}"


@pytest.mark.parametrize("key", ["sha256", "path", "shown"])
def test_the_loaders_own_fields_are_not_keys_of_a_recipe(tmp_path: Path, key: str) -> None:
    """A recipe is one Struct with the fields its loader sets (where it was read, its
    bytes' hash): a file naming them is refused like any unknown key, never believed."""
    err = recipe_refusal(tmp_path, f'schema = 1\n{key} = "x"\n[lane]\nbackend = "CPU"\n')
    assert err.message == f"recipes/cpu.toml: {key}: unknown key"
    assert err.hint == "remove it; allowed keys: certify, ci, cmake, lane, requires, schema"


def test_a_recipe_without_a_lane(tmp_path: Path) -> None:
    err = recipe_refusal(tmp_path, "schema = 1\n")
    assert err.message == "recipes/cpu.toml: lane: must be a table, got nothing"
    assert err.hint == 'add [lane] with backend = "CPU"'


@pytest.mark.parametrize(
    ("body", "words", "hint"),
    [
        ("steps = 3", "certify.steps: must be an array of tables",
         "add one [[certify.steps]] table per program run"),
        ("steps = [1]", "certify.steps[0]: must be a table, got integer",
         "write each step as a [[certify.steps]] table"),
        ('steps = [{ name = "s", program = "t", parser = "llama-bench", min_avg_ts = 5 }]',
         "certify.steps[0].min_avg_ts: must be a table, got integer",
         "min_avg_ts = { prompt = 50.0, gen = 5.0 }"),
        ('steps = [{ name = "s", program = "t", parser = "ctest", timeout = true }]',
         "certify.steps[0].timeout: True is not an integer (a boolean)", None),
        ('steps = [{ name = "s", program = "t", parser = "llama-bench",'
         ' by_model = { m = { gen = true } } }]',
         "certify.steps[0].by_model.m.gen: True (boolean) is not a speed in (0, 1e+07] t/s",
         "gen = 5.0"),
        ('steps = [{ program = "t", parser = "ctest" }]', "certify.steps[0].name: missing",
         'add name = "..." under [certify.steps[0]]'),
    ],
)  # fmt: skip
def test_certify_shape(tmp_path: Path, body: str, words: str, hint: str | None) -> None:
    text = f'schema = 1\n[lane]\nbackend = "CPU"\n[certify]\ntargets = ["t"]\n{body}\n'
    err = recipe_refusal(tmp_path, text)
    assert err.message == f"recipes/cpu.toml: {words}"
    assert hint is None or err.hint == hint


def model_refusal(text: str) -> BadInput:
    from dgr_forge.models import manifest as models

    return refusal_of(lambda: models.loads(text.encode(), shown="manifests/models/m.toml"))


MODEL = 'schema = 1\n[model]\nname = "m"\n'
ENTRY = f'[[files]]\nname = "m.gguf"\nsha256 = "{"a" * 64}"\nurl = "https://h/m.gguf"\n'


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (ENTRY + "size = true", "files[0].size: True is not a non-negative integer number of"),
        (ENTRY + "size = -1", "files[0].size: -1 is not a non-negative integer number of bytes"),
        (ENTRY + "size = 1.5", "files[0].size: 1.5 is not a non-negative integer number of"),
        ('[[files]]\nname = "../a"', "files[0].name: '../a' contains a path separator"),
        ("[[files]]\nname = 7", "files[0].name: must be a string, got integer"),
        (f"{ENTRY}size = 1\n[map]\narch = \"llama\"\nblock_count = {10**30}",
         f"map.block_count: {10**30} is out of range: must be between 1 and"),
        (ENTRY + 'size = 1\ntensors = "x"', "files[0].tensors: must be an array of strings"),
        (ENTRY + "size = 1\n[files.x]\ny = 1", "files[0].x: unknown key"),
    ],
)  # fmt: skip
def test_model_manifest_shape(body: str, words: str) -> None:
    err = model_refusal(f"{MODEL}{body}\n")
    assert err.message.startswith(f"manifests/models/m.toml: {words}"), err.message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('schema = 1\n[github.x]\nuses = "a/b"\nsha = 1\nversion = "v1"\n',
         "templates/actions.toml: github.x.sha: must be a string, got integer"),
        ('schema = 1\n[github.x]\nuses = "a/b"\nsha = "main"\nversion = "v1"\n',
         "templates/actions.toml: github.x: needs uses, a 40-hex sha and a version"),
        ('schema = 1\n[gitlab.images]\nlinux = ["x"]\n',
         "templates/actions.toml: gitlab.images.linux: must be a string, got array"),
    ],
)  # fmt: skip
def test_the_packaged_pin_list_is_a_shape_too(
    monkeypatch: pytest.MonkeyPatch, text: str, words: str
) -> None:
    """templates/actions.toml ships with the tool: a broken one is exit 1 (reinstall),
    named by key like any input."""
    from dgr_forge.ci import render
    from dgr_forge.core.errors import OperationFailed

    assert render.pinned()["actions"]["checkout"].startswith("actions/checkout@")
    monkeypatch.setattr(render, "_template_source", lambda name: text)
    with pytest.raises(OperationFailed) as info:
        render.pinned()
    assert info.value.message == words and "reinstall" in (info.value.hint or "")


class _Speed(tominput.Record):
    gen: Annotated[float, Meta(gt=0, le=100)] = 1.0
    ratio: Annotated[float, Meta(ge=0, lt=1)] = 0.5


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"gen": 0.0}, "f.toml: gen: 0.0 is out of range: must be over 0 and at most 100"),
        ({"gen": float("inf")}, "f.toml: gen: inf is out of range: must be over 0 and at most"),
        ({"gen": float("nan")}, "f.toml: gen: nan is out of range"),
        ({"ratio": 1}, "f.toml: ratio: 1 is out of range: must be at least 0 and under 1"),
        ({"gen": "5"}, "f.toml: gen: must be a number, got string"),
    ],
)
def test_float_bounds_in_words(data: dict[str, object], words: str) -> None:
    err = refusal_of(lambda: tominput.decode("f.toml", data, _Speed))
    assert err.message.startswith(words), err.message


def test_a_hostile_key_is_shown_bounded(tmp_path: Path) -> None:
    err = refused(tmp_path, f"{'k' * 1_000_000} = 1\n" + base())
    assert len(str(err)) < 400 and err.message.endswith("...: unknown key")


# -- any mutation of a real input: exit 2 naming the file, or a value; never another error

REPO = Path(__file__).resolve().parent.parent
HOSTILE_KEYS = st.sampled_from(["x", "--help", "..", "a.b", "$.x", "[0]", "\x00", "k" * 300])
SCALARS = (
    st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | HOSTILE_KEYS, inner, max_size=3)
    ),
    max_leaves=6,
)


def _seeds() -> list[tuple[str, type[tominput.Record], dict[str, object]]]:
    import tomllib

    from dgr_forge.ci import render
    from dgr_forge.host import probes, recipes, worker
    from dgr_forge.models import manifest as models

    def read(rel: str) -> dict[str, object]:
        return tomllib.loads((REPO / rel).read_text())

    return [
        ("manifests/llama.cpp.toml", manifest.UpstreamManifest, read("manifests/llama.cpp.toml")),
        ("recipes/cpu.toml", recipes.Recipe, read("recipes/cpu.toml")),
        ("recipes/cuda.toml", recipes.Recipe, read("recipes/cuda.toml")),
        ("toolchains/probes.toml", probes.Probes, read("toolchains/probes.toml")),
        ("m.toml", models.ModelManifest, read("tests/data/models/tiny-test.toml")),
        ("w.toml", worker.Manifest, {"schema": 1, "worker": {"path": "w"}}),
        ("ci/bump.toml", render.BumpSettings, {"schema": 1, "bump": {"open_request": False}}),
    ]


SEEDS = _seeds()


def _places(doc: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every table key and array index in `doc`, as paths from the top."""
    found: list[tuple[object, ...]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += [(*path, k), *_places(v, (*path, k))]
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += [(*path, i), *_places(v, (*path, i))]
    return found


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_mutation_of_a_real_input_is_a_value_or_exit_2(data: st.DataObject) -> None:
    import copy

    shown, shape, seed = data.draw(st.sampled_from(SEEDS))
    doc = copy.deepcopy(seed)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        *parents, last = data.draw(st.sampled_from(_places(doc)))
        holder: object = doc
        for step in parents:
            holder = holder[step]  # type: ignore[index]
        op = data.draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "replace":
            holder[last] = data.draw(VALUES)  # type: ignore[index]
        elif op == "delete":
            del holder[last]  # type: ignore[attr-defined]
        elif isinstance(holder, dict):
            holder[data.draw(HOSTILE_KEYS)] = data.draw(VALUES)
        if not _places(doc):
            break
    try:
        tominput.decode(shown, doc, shape)  # type: ignore[arg-type]
    except BadInput as err:
        assert err.message.startswith(f"{shown}: ") and err.hint, err.message
        assert isinstance(err.details["key"], str) and len(err.message) < 600, err.message
        # in the inputs' words, never msgspec's or a type's own name
        assert not any(w in err.message for w in ("Expected `", "Annotated", "Union")), err.message


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_mutation_through_the_whole_loader_is_a_value_or_exit_2(
    tmp_path: Path, data: st.DataObject
) -> None:
    """The same mutations written as TOML and read by the loaders themselves: the checks
    after decoding (names, ids, URLs, options, placeholders, split sets) meet typed values
    only, and refuse with exit 2 too."""
    import copy

    import tomli_w

    from dgr_forge.host import probes, recipes
    from dgr_forge.models import manifest as models

    loaders = {
        "recipes/cpu.toml": lambda p: recipes.load(p, "recipes/cpu.toml"),
        "recipes/cuda.toml": lambda p: recipes.load(p, "recipes/cuda.toml"),
        "toolchains/probes.toml": lambda p: probes.load_probes(p, "toolchains/probes.toml"),
        "m.toml": lambda p: models.loads(p.read_bytes(), shown="m.toml"),
    }
    shown, _, seed = data.draw(st.sampled_from([s for s in SEEDS if s[0] in loaders]))
    doc = copy.deepcopy(seed)
    *parents, last = data.draw(st.sampled_from(_places(doc)))
    holder: object = doc
    for step in parents:
        holder = holder[step]  # type: ignore[index]
    if isinstance(holder, dict) and data.draw(st.booleans()):
        holder[data.draw(HOSTILE_KEYS)] = data.draw(VALUES)
    else:
        holder[last] = data.draw(VALUES)  # type: ignore[index]
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):  # a mutation TOML cannot write (an array of tables, mixed)
        return
    path = tmp_path / "cpu.toml"
    path.write_text(text)
    try:
        loaders[shown](path)
    except BadInput as err:
        assert err.message.startswith(f"{shown}: ") and err.hint, err.message
