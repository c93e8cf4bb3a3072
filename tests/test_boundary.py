"""The worker boundary (DESIGN: "The worker boundary"): what the shard worker includes and
links from upstream is proven after each worker build, and recorded in the report.

One module snapshot (a signed cpu lane of the test worker, built against the test upstream
with its private parts: tests/support/boundary.py); each test edits the worker and builds
again (one compile and link, no fresh configure unless the worker's CMakeLists changes)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from support.boundary import NEWLINE_HEADER, PRIVATE_HEADER, SPACED_HEADER, add_private_parts
from support.build import BuiltLane, LaneSnapshot, built_snapshot, forge_build
from support.cli import run_forge
from support.git import Upstream, copy_upstream

from dgr_forge.core.errors import OperationFailed
from dgr_forge.lanes import boundary


@pytest.fixture(scope="module")
def _lane(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> LaneSnapshot:
    base = tmp_path_factory.mktemp("boundary")
    up = copy_upstream(_upstream_template, base / "template")
    add_private_parts(up)
    (base / "snap").mkdir()
    return built_snapshot(base / "snap", up, worker="option", sign=True)


@pytest.fixture
def lane(_lane: LaneSnapshot) -> BuiltLane:
    return _lane.restore()


OWNER = "int worker_owner(int l) { return llama_layer_owner(l); }\n"


def _reports(built: BuiltLane) -> list[str]:
    return sorted(p.name for p in (built.root / ".dgr" / "reports").iterdir())


def _src(built: BuiltLane) -> Path:
    return built.root / ".dgr" / "src" / "llama.cpp"


def _refused(built: BuiltLane, files: dict[str, str]) -> dict:  # type: ignore[type-arg]
    """Write the worker's files, build again: exit 1, no new report; the lane's leaks."""
    assert built.worker is not None
    before = _reports(built)
    for rel, text in files.items():
        (built.worker / rel).write_text(text)
    res = forge_build(built.root, *built.args())
    assert res.code == 1, res
    assert _reports(built) == before  # nothing signed
    row = res.json["lanes"][0]
    assert row["status"] == "failed"
    return {"leaks": row["leaks"], "stderr": res.stderr}


def _report_of(res_json: dict) -> Path:  # type: ignore[type-arg]
    return Path(res_json["lanes"][0]["report"])


def test_a_clean_worker_passes_and_its_surface_is_recorded(lane: BuiltLane) -> None:
    assert lane.first.code == 0, lane.first
    report = _report_of(lane.first.json)
    shown = run_forge("--json", "report", "show", str(report))
    assert shown.code == 0, shown
    surface = shown.json["summary"]["surface"]
    assert surface["headers"] == ["ggml/include/ggml.h", "include/llama.h"]
    assert surface["symbols"] == [
        {
            "name": "llama_layer_owner",
            "header": "include/llama.h",
            "symbol": "_Z17llama_layer_owneri",
            "library": "libllama.a",
        }
    ]
    assert surface["symbolsChecked"] is True
    text = run_forge("report", "show", str(report))
    assert "  llama_layer_owner  include/llama.h  (libllama.a)" in text.stdout
    assert lane.key is not None
    pub = f"{lane.key}.pub"
    verified = run_forge("--json", "report", "verify", str(report), "--key", str(pub))
    assert verified.code == 0, verified


def test_a_private_header_through_an_include_directory_is_refused(lane: BuiltLane) -> None:
    assert lane.worker is not None
    cmake = (lane.worker / "CMakeLists.txt").read_text() + (
        "target_include_directories(shard-worker PRIVATE ${DGR_UPSTREAM_SOURCE_DIR}/src)\n"
    )
    util = '#include "llama.h"\n#include "llama-model.h"\n' + OWNER
    got = _refused(lane, {"CMakeLists.txt": cmake, "src/util.cpp": util})
    assert got["leaks"]["includes"] == [
        {
            "source": "src/util.cpp",
            "header": PRIVATE_HEADER,
            "boundary": ["ggml/include", "include"],
        }
    ]
    assert got["leaks"]["symbols"] == []
    assert (
        f"src/util.cpp: reads {PRIVATE_HEADER}, outside the boundary (ggml/include, include)"
        in got["stderr"]
    )


def test_a_private_header_by_a_relative_path_is_refused(lane: BuiltLane) -> None:
    assert lane.worker is not None
    rel = os.path.relpath(_src(lane) / PRIVATE_HEADER, lane.worker / "src")
    util = f'#include "llama.h"\n#include "{rel}"\n' + OWNER
    got = _refused(lane, {"src/util.cpp": util})
    assert [(x["source"], x["header"]) for x in got["leaks"]["includes"]] == [
        ("src/util.cpp", PRIVATE_HEADER)
    ]


def test_an_internal_function_in_a_static_build_is_refused(lane: BuiltLane) -> None:
    util = (
        '#include "llama.h"\n'
        "namespace llm { int model_internal(int n); }  // declared by the worker itself\n"
        "int worker_owner(int l) { return llm::model_internal(l) + llama_layer_owner(l); }\n"
    )
    got = _refused(lane, {"src/util.cpp": util})
    assert got["leaks"]["includes"] == []
    assert got["leaks"]["symbols"] == [
        {
            "name": "llm::model_internal(int)",
            "symbol": "_ZN3llm14model_internalEi",
            "library": "libllama.a",
        }
    ]
    assert (
        "llm::model_internal(int) (libllama.a): imported from upstream but declared"
        in got["stderr"]
    )


def test_a_link_in_the_worker_tree_into_upstream_src_is_resolved_and_refused(
    lane: BuiltLane,
) -> None:
    assert lane.worker is not None
    (lane.worker / "src" / "model.h").symlink_to(_src(lane) / PRIVATE_HEADER)
    util = '#include "llama.h"\n#include "model.h"\n' + OWNER
    got = _refused(lane, {"src/util.cpp": util})
    assert [x["header"] for x in got["leaks"]["includes"]] == [PRIVATE_HEADER]


def test_header_names_with_a_space_or_a_newline_are_named_exactly(lane: BuiltLane) -> None:
    assert lane.worker is not None
    rel = os.path.relpath(_src(lane) / SPACED_HEADER, lane.worker / "src")
    # a newline cannot be spelled in an #include: a link reaches it, resolved by the check
    (lane.worker / "src" / "nl.h").symlink_to(_src(lane) / NEWLINE_HEADER)
    util = f'#include "llama.h"\n#include "{rel}"\n#include "nl.h"\n' + OWNER
    got = _refused(lane, {"src/util.cpp": util})
    assert sorted(x["header"] for x in got["leaks"]["includes"]) == sorted(
        [SPACED_HEADER, NEWLINE_HEADER]
    )
    assert "reads src/llama\\nmodel.h, outside" in got["stderr"]  # escaped, one line


# -- the deps log and the objects, damaged: library-level (the build's own check, by hand)


def _check(built: BuiltLane) -> boundary.Checked:
    assert built.worker is not None
    ninja = json.loads((built.root / ".dgr" / "state.json").read_text())  # the lane exists
    assert ninja
    build = built.root / ".dgr" / "build" / "cpu"
    import shutil

    return boundary.check(str(shutil.which("ninja")), build, _src(built), built.worker)


def test_the_check_by_hand_finds_what_the_build_recorded(lane: BuiltLane) -> None:
    checked = _check(lane)
    assert checked.ok and [s.name for s in checked.surface.symbols] == ["llama_layer_owner"]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("delete", "ninja's deps log is missing"),
        ("garbage", "not a ninja deps log"),
        ("link", "not a ninja deps log"),
        ("truncate", "no record of"),
    ],
)
def test_a_missing_or_damaged_deps_log_is_an_error_never_a_pass(
    lane: BuiltLane, damage: str, said: str
) -> None:
    log = lane.root / ".dgr" / "build" / "cpu" / ".ninja_deps"
    data = log.read_bytes()
    log.unlink()
    if damage == "garbage":
        log.write_bytes(b"\0" * 4096)
    elif damage == "link":
        (log.parent / "elsewhere").write_bytes(data)
        log.symlink_to(log.parent / "elsewhere")
    elif damage == "truncate":
        log.write_bytes(data[:16])  # the signature and version, no records
    with pytest.raises(OperationFailed, match=said):
        _check(lane)


def test_a_build_whose_deps_log_is_unreadable_fails_and_signs_nothing(
    lane: BuiltLane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's own wiring: a deps log the check cannot read is the lane's failure
    (exit 1, no report), never a pass. (A log ninja rewrites as it compiles cannot be
    damaged between its compile and the check from outside: the signature it must carry
    is what is changed here, in-process.)"""
    assert lane.worker is not None
    before = _reports(lane)
    monkeypatch.setattr(boundary, "DEPS_SIGNATURE", b"# not-ninja!\n")
    (lane.worker / "src" / "util.cpp").write_text('#include "llama.h"\n' + OWNER)
    res = forge_build(lane.root, *lane.args())
    assert res.code == 1, res
    assert "not a ninja deps log" in res.stdout  # the --json error
    assert _reports(lane) == before


def _symtab_header(obj: Path) -> int:
    """The file offset of the .symtab section header's sh_size (ELF64, little-endian)."""
    data = obj.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        at = shoff + i * shentsize
        if struct.unpack_from("<I", data, at + 4)[0] == 2:  # SHT_SYMTAB
            return at + 0x20
    raise AssertionError("no .symtab")


def test_a_huge_symbol_table_is_bounded(lane: BuiltLane, monkeypatch: pytest.MonkeyPatch) -> None:
    obj = (
        lane.root
        / ".dgr"
        / "build"
        / "cpu"
        / "CMakeFiles"
        / "shard-worker.dir"
        / "src"
        / "util.cpp.o"
    )
    at = _symtab_header(obj)
    data = bytearray(obj.read_bytes())
    st = obj.stat()

    def write(table_bytes: int) -> None:  # the object's mtime kept: ninja's record stays valid
        struct.pack_into("<Q", data, at, table_bytes)
        obj.write_bytes(bytes(data))
        os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))

    write(24 * 10**9)  # claims 10^9 entries, past the file's end
    with pytest.raises(OperationFailed, match="damaged symbol table"):
        _check(lane)
    write(24 * 3)  # a table inside the file, above the limit: refused by count, unread
    monkeypatch.setattr(boundary, "MAX_SYMBOLS", 2)
    with pytest.raises(OperationFailed, match=r"a symbol table of \d+ entries \(limit 2\)"):
        _check(lane)
    obj.touch()  # and a stale record is never read as the object's
    with pytest.raises(OperationFailed, match="is stale"):
        _check(lane)


# -- the surface across pins


def _change_owner_declaration(built: BuiltLane) -> str:
    """A later upstream commit that changes the declaration of a function the worker uses
    (and nothing the series touches)."""
    up = built.upstream
    header = up.read("include/llama.h")
    assert "int llama_layer_owner(int layer);" in header
    changed = header.replace(
        "int llama_layer_owner(int layer);", "int llama_layer_owner(int layer, int n_owners);"
    )
    return up.commit({"include/llama.h": changed}, "llama: owners are counted by the caller")


def test_a_function_a_later_commit_changes_is_named_by_the_dry_run_and_by_bump(
    lane: BuiltLane, tmp_path: Path
) -> None:
    new = _change_owner_declaration(lane)
    root = ("--root", str(lane.root))
    dry = run_forge(*root, "--json", "rebase", "--onto", new, "--dry-run")
    assert dry.code == 0, dry
    assert [(c["name"], c["change"], c["header"]) for c in dry.json["surface"]["changes"]] == [
        ("llama_layer_owner", "declaration changed", "include/llama.h")
    ]
    assert dry.json["surface"]["changes"][0]["new"] == "int llama_layer_owner (int, int)"
    said = run_forge(*root, "rebase", "--onto", new, "--dry-run")
    assert "worker surface: llama_layer_owner: declaration changed (include/llama.h)" in said.stdout
    md = tmp_path / "bump.md"
    bumped = run_forge(*root, "--json", "bump", "--dry-run", "--report", str(md))
    assert bumped.code == 0, bumped
    assert bumped.json["surface"]["changes"][0]["name"] == "llama_layer_owner"
    assert "  - `llama_layer_owner`: declaration changed (`include/llama.h`)" in md.read_text()
    real = run_forge(*root, "--json", "rebase", "--onto", new)  # the rebase itself says it too
    assert real.code == 0, real
    assert [c["name"] for c in real.json["surface"]["changes"]] == ["llama_layer_owner"]
    assert "worker surface: llama_layer_owner: declaration changed" in real.stderr
    # and so does the rebase report that goes into the pull request
    text = Path(real.json["report_markdown"]).read_text(encoding="utf-8")
    assert "  - `llama_layer_owner`: declaration changed (`include/llama.h`)" in text


def test_without_a_recorded_surface_the_rebase_says_it_is_unknown(lane: BuiltLane) -> None:
    new = _change_owner_declaration(lane)
    for report in (lane.root / ".dgr" / "reports").iterdir():
        report.unlink()
    res = run_forge("--root", str(lane.root), "rebase", "--onto", new, "--dry-run")
    assert res.code == 0, res
    assert "worker surface: unknown (no build of the worker has recorded one)" in res.stdout


@pytest.mark.parametrize(
    ("demangled", "qualified"),
    [
        ("llama_layer_owner(int)", "llama_layer_owner"),
        ("llm::model_internal(int)", "llm::model_internal"),
        ("llama_format_tensor_shape[abi:cxx11](ggml_tensor const*)", "llama_format_tensor_shape"),
        ("llama_model::llama_model(llama_model_params const&)", "llama_model::llama_model"),
        ("llama_model_deleter::operator()(llama_model*)", "llama_model_deleter::operator()"),
        ("vtable for llm::graph", "llm::graph"),
        ("int llm::pick<int>(std::vector<int, std::allocator<int> > const&)", "llm::pick"),
    ],
)
def test_a_demangled_name_is_matched_by_its_qualified_name(demangled: str, qualified: str) -> None:
    from dgr_forge.upstream.surface import declarations, qualified_name

    assert qualified_name(demangled) == qualified
    header = (
        "namespace llm { int model_internal(int n); struct graph { virtual ~graph(); }; "
        "template <typename T> T pick(const std::vector<T> & v); }\n"
        "struct llama_model { llama_model(const struct llama_model_params & params); };\n"
        "struct llama_model_deleter { void operator()(llama_model * model) { free(model); } };\n"
        "LLAMA_API int llama_layer_owner(int layer);\n"
        "std::string llama_format_tensor_shape(const struct ggml_tensor * t);\n"
        'DEPRECATED(LLAMA_API void llama_old(void), "use llama_new");\n'
    )
    found = declarations(header)
    assert qualified in found or (qualified == "llm::graph" and "llm::graph" in found)
    assert found["llama_old"] == "void llama_old (void)"  # the wrapper and the macro away
