"""Imports point one way (docs/architecture.md): each package imports only packages below
it in `LAYERS`, `core` imports nothing of the forge, and no module cycle exists, even one
hidden by a function-local or TYPE_CHECKING import. Read from the source with `ast`."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "dgr_forge"

# lowest first: a package may import the ones before it (and the top-level package)
# certify/ consumes a build (lanes) and a model (models): it sits above both, below the CLI
LAYERS = [
    "core", "upstream", "attest", "host", "cache", "ci", "lanes", "models", "certify",
    "demo", "cli",
]  # fmt: skip


@functools.cache  # src/ does not change during a run; four walks of it shared one parse
def _parsed_src(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def parsed(path: Path) -> ast.Module:
    """`path`'s syntax tree: parsed once a run when it is under src/ (a test's own tree
    under tmp_path may change between two reads, so it is parsed each time)."""
    if path.is_relative_to(SRC):
        return _parsed_src(path)
    return ast.parse(path.read_text(encoding="utf-8"))


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every forge module `path` imports, wherever the import statement stands (in a
    function, under TYPE_CHECKING): `from pkg import mod` names `mod`, not `pkg`."""
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named = {f"{node.module}.{a.name}" for a in node.names}
            subs = named & modules
            found |= subs
            if len(subs) < len(named):
                found.add(node.module)
    return found & modules


_SRC_GRAPH: dict[str, set[str]] = {}  # the tree under test does not change during a run


def graph(src: Path = SRC) -> dict[str, set[str]]:
    if src == SRC and _SRC_GRAPH:
        return {name: set(targets) for name, targets in _SRC_GRAPH.items()}
    modules = {_module_name(p, src): p for p in src.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges[name] = _imports(path, set(modules)) - {name}
    if src == SRC:
        _SRC_GRAPH.update({name: set(targets) for name, targets in edges.items()})
    return edges


def package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, targets in edges.items():
        src_pkg = package(mod)
        for target in targets:
            dst_pkg = package(target)
            if src_pkg is None or dst_pkg is None or src_pkg == dst_pkg:
                continue
            if src_pkg not in LAYERS or dst_pkg not in LAYERS:
                bad.append(f"{mod} -> {target} (a package missing from LAYERS)")
            elif LAYERS.index(dst_pkg) > LAYERS.index(src_pkg):
                bad.append(f"{mod} -> {target} ({src_pkg} imports {dst_pkg}, above it)")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _package_tree(tmp: Path, files: dict[str, str]) -> Path:
    src = tmp / "dgr_forge"
    for rel, text in {"__init__.py": "", **files}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def test_imports_point_down_the_layers() -> None:
    assert upward_imports(graph()) == []


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_core_imports_nothing_of_the_forge_but_core() -> None:
    edges = graph()
    outside = [f"{m} -> {t}" for m in edges if package(m) == "core" for t in edges[m]]
    assert [e for e in outside if package(e.split(" -> ")[1]) not in ("core", None)] == []


def test_the_check_sees_an_upward_import_and_a_hidden_cycle(tmp_path: Path) -> None:
    """The checks themselves can fail: an upward import inside a function, and a cycle."""
    src = _package_tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/a.py": "def f():\n    from dgr_forge.lanes import b\n",
            "lanes/__init__.py": "",
            "lanes/b.py": "from dgr_forge.lanes.c import x\n",
            "lanes/c.py": "from dgr_forge.lanes import b\nx = 1\n",
        },
    )
    edges = graph(src)
    assert upward_imports(edges) == [
        "dgr_forge.core.a -> dgr_forge.lanes.b (core imports lanes, above it)"
    ]
    assert cycles(edges) == [["dgr_forge.lanes.b", "dgr_forge.lanes.c"]]


def test_every_forge_name_the_benchmarks_import_exists() -> None:
    """bench/ is not run by the suite: a name a refactor removed fails here instead of in
    the next person's benchmark run (bench/fetch.py once imported a function that was gone).
    Function-local imports included."""
    import importlib
    import importlib.util

    bench = SRC.parent.parent / "bench"
    missing = []
    for path in sorted(bench.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dgr_forge"):
                module = importlib.import_module(node.module or "")
                missing += [
                    f"{path.name}: {node.module}.{a.name}"
                    for a in node.names
                    if not hasattr(module, a.name)
                    and importlib.util.find_spec(f"{node.module}.{a.name}") is None
                ]
    assert missing == []


MAX_MODULE_LINES = 600  # issue 31: a module past this holds more than one concern


def oversized(src: Path = SRC, limit: int = MAX_MODULE_LINES) -> list[str]:
    """Every module of `src` longer than `limit` lines, with its count."""
    found = []
    for path in sorted(src.rglob("*.py")):
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            found.append(f"{path.relative_to(src.parent)}: {count} lines")
    return found


def test_no_module_exceeds_600_lines() -> None:
    assert oversized() == []


def test_the_size_check_sees_a_long_module(tmp_path: Path) -> None:
    """The check itself can fail: one line past the limit is caught, the limit itself not."""
    src = _package_tree(
        tmp_path, {"lanes/long.py": "x = 1\n" * 601, "lanes/edge.py": "x = 1\n" * 600}
    )
    assert oversized(src) == ["dgr_forge/lanes/long.py: 601 lines"]


ENGINE = "dgr_forge.upstream.replay"  # the one three-way replay engine (issue 40)
# the replays it serves: the rebase (and its canary, bump's verifying replay), bump's
# bisection probes, and `patch` replaying a person's commits on a moved series
REPLAYERS = (
    "dgr_forge.upstream.rebase.replay",
    "dgr_forge.upstream.rebase.bump",
    "dgr_forge.upstream.local_replay",
)


def _git_words(path: Path) -> set[str]:
    """Every string constant of a module (a git subcommand is one)."""
    tree = parsed(path)
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_one_replay_engine_serves_every_replay() -> None:
    """Each replay imports the engine; the engine imports nothing of the forge but `core`
    (nothing above it, nothing of the rebase it serves); and only the engine runs the
    three-way merge in memory and writes replayed commits in bulk (`merge-tree`,
    `fast-import`): no second copy of the replay anywhere else."""
    edges = graph()
    assert [m for m in REPLAYERS if ENGINE not in edges[m]] == []
    assert sorted(t for t in edges[ENGINE] if package(t) != "core") == []
    copies = [
        str(p.relative_to(SRC.parent))
        for p in sorted(SRC.rglob("*.py"))
        if _module_name(p, SRC) != ENGINE and _git_words(p) & {"merge-tree", "fast-import"}
    ]
    assert copies == []


def test_no_module_imports_another_modules_private_name() -> None:
    """A name with a leading underscore is its module's own (bump once imported
    `dryrun._check_report_path`): shared, it is public."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dgr_forge"):
                found += [
                    f"{_module_name(path, SRC)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_every_module_keeping_an_untyped_json_document_is_named_in_the_architecture() -> None:
    """docs/architecture.md lists the JSON documents that stay `dict[str, Any]`, with how
    many lines hold one: a module that gains one is named there, and the count is true."""
    doc = (SRC.parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    bullet = doc.split("* **The JSON documents that stay `dict[str, Any]`**", 1)[1]
    bullet = " ".join(bullet.split("\n* ", 1)[0].split())
    holding = {
        _module_name(p, SRC): sum(
            "dict[str, Any]" in line for line in p.read_text(encoding="utf-8").splitlines()
        )
        for p in SRC.rglob("*.py")
    }
    holding = {name: n for name, n in holding.items() if n}
    unnamed = [m for m in sorted(holding) if f"`{m.removeprefix('dgr_forge.')}" not in bullet]
    assert unnamed == []
    assert f"({sum(holding.values())} lines in `src/`" in bullet
