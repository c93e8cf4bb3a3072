"""No file of a tree the forge did not write is read with an unbounded call (issue 33
#1). The unbounded calls: `Path.read_text`, `Path.read_bytes`, `Path.open` and `open`;
`fsutil.sha256_file` (any size, links followed: a worker file linked to /dev/zero hung
`lanes` and `build`); `shutil.copyfile`, `copy`, `copy2`, `copyfileobj` and `copytree`
(they read what they copy, following links); `json.load`, `tomllib.load` and
`tomlkit.load` of an open file. They appear only in the functions listed here, each
reading a file the forge itself wrote (state, journals, stamps, logs, format-patch
output), an artifact it built, a host program, or a fixed system file. A tree file
(upstream, the patched tree, a worker, a conflicted file, the root's manifest and
patches/, a pull request's files) goes through `fsutil.read_tree_file`; a file a user
names through `fsutil.read_regular` (or a loader built on it). Read from the source
with `ast`, like tests/test_imports.py: a new unbounded call fails here until it is one
or the other, and an entry no call needs any more fails too (a stale entry would let a
tree reader in under another's reason)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "dgr_forge"
UNBOUNDED = {"read_text", "read_bytes", "open"}
# called by any name: hashes whatever the path names now, links followed, any size
FOLLOWERS = {"sha256_file"}
# module -> its functions that read a file whole (called as module.name, or imported)
MODULE_READS = {
    "shutil": {"copyfile", "copy", "copy2", "copyfileobj", "copytree"},
    "json": {"load"},
    "tomllib": {"load"},
    "tomlkit": {"load"},
}

# module (relative to dgr_forge/) -> the functions that may read unbounded, and why
ALLOWED: dict[str, set[str]] = {
    # fixed system files (/proc) and the package's own templates
    "certify/hardware.py": {"_read_proc"},  # /proc/cpuinfo, /proc/meminfo, os-release: bounded
    "core/proc.py": {"spawn"},
    "models/download.py": {"_umask"},
    "ci/render.py": {"_template_source"},
    "demo/sources.py": {"text"},  # the demo upstream's and worker's sources
    # the forge's own recipes/toolchains/cmake shipped in the wheel, copied into a new root
    "core/product.py": {"_copy"},
    # the installed dgr-forge's own metadata (direct_url.json), not the root's files
    "ci/install.py": {"_direct_pin"},
    "cli/schemas.py": {"main"},
    # files the forge wrote: workspace state, journals, stamps, logs, caches, its git dir
    "core/fsutil.py": {"read_json"},
    # opens its own build log for writing; hashes the report, log and CMakeCache it wrote
    "lanes/lane_build.py": {"run", "_collect"},
    "cache/select.py": {"sccache_config"},
    "cache/session.py": {"_tail"},
    "lanes/cmake_api.py": {"_load", "write_query", "_read"},
    # the deps log's 12-byte signature; objects the build wrote, size-checked first
    "lanes/boundary.py": {"read_deps", "_elf_symbols"},
    "lanes/presets.py": {"exclude_from_git"},
    "lanes/signing.py": {"_file_fingerprint"},
    # the host-program stamp cache; `stamp` hashes host programs, artifacts and the root's
    # files its loaders read bounded first (a worker's go through `worker_file`)
    "lanes/stamps.py": {"_load", "stamp"},
    # the git view file it wrote
    "lanes/steps.py": {"write_git_view"},
    "lanes/decision.py": {"report_true"},  # the report and the byproducts it wrote
    "upstream/patches.py": {"_am_failure", "recover_interrupted"},  # rebase-apply/next
    "upstream/local_replay.py": {"load_replay_state"},
    "upstream/series.py": {"scratch_index", "read_cache"},  # its caches: regular files only
    "upstream/series_base.py": {"load", "text_of", "save_changes"},  # + its index
    # its journal files; `write` copytrees a subdirectory of patches/ by hard links
    # (copy_function: os.link): no byte of it is read
    # ...and `borrow_objects` copies the workspace's own .git/shallow
    "upstream/series_journal.py": {"_recover_one", "write", "borrow_objects"},
    "upstream/workspace.py": {"refuse_during_replay", "remove_git_leftovers"},
    "upstream/rebase/bump.py": {"_verify"},
    "upstream/replay.py": {"write"},
    "upstream/rebase/finish.py": {"staged_patches_dir", "write_side"},  # the rebase journal
    "upstream/export.py": {"canonical_commits", "compute_series"},  # format-patch output
    # artifacts the build made (the File API's), a certify step's program (an artifact or
    # a host program) and its log, created here (mode "xb"); the host tools a report names
    # and a byproduct the build wrote; a report the loader read bounded, and the artifacts
    # a report names (resolved inside the workspace): sha256_file opens non-blocking and
    # refuses what is not a regular file, with no size bound (an artifact may be GBs)
    "lanes/collect.py": {"collect_artifacts"},
    # ...and the pin-tree stamp it wrote; the parity reference's log (written), program (built)
    "certify/run.py": {"programs", "run_steps", "_keep_log", "_stamp", "references"},
    # a model file copied into the steps' view when it cannot be linked; verified after
    "certify/model.py": {"_private_view"},  # _keep_log writes the log
    "attest/provenance.py": {"_tool", "_byproduct"},
    # prune: a report the forge wrote in its own reports/, lstat'ed as a plain file first
    "attest/reports.py": {"sha256", "_check_artifacts", "prune"},
    # the demo's public key, written a line before by keygen into the new DIR
    "demo/generate.py": {"generate"},
}
# never: these read trees the forge did not write
TREE_READERS = {
    "host/cmake_options.py",
    "upstream/rebase/replay.py",
    "lanes/check.py",
    "lanes/inputs.py",
    "upstream/build_number.py",
    "models/make_manifest.py",
}


def _bare_names(tree: ast.Module) -> set[str]:
    """The unbounded readers a module can call by a bare name: FOLLOWERS, and what it
    imports from MODULE_READS's modules (`from shutil import copyfile`)."""
    names = set(FOLLOWERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in MODULE_READS:
            wanted = MODULE_READS[node.module]
            names |= {a.asname or a.name for a in node.names if a.name in wanted}
    return names


def _is_unbounded(node: ast.Call, bare: set[str]) -> bool:
    f = node.func
    if isinstance(f, ast.Attribute):  # p.read_text(), p.open(), not os.open()
        owner = getattr(f.value, "id", "")
        return (
            (f.attr in UNBOUNDED and owner != "os")
            or f.attr in FOLLOWERS  # fsutil.sha256_file(p)
            or f.attr in MODULE_READS.get(owner, ())  # shutil.copy2(), json.load()
        )
    name = getattr(f, "id", None)
    if name == "open":  # the builtin open() of a path (open(1, ...) is a descriptor)
        first = node.args[0] if node.args else None
        return not (isinstance(first, ast.Constant) and isinstance(first.value, int))
    return name in bare  # a bounded reader: a bare name, not listed


@functools.cache  # two tests read src/ as it is (0.8 s to parse); a tmp_path is new each time
def unbounded_calls(src: Path = SRC) -> dict[str, frozenset[str]]:
    """module -> the names of the functions holding an unbounded read call."""
    found: dict[str, set[str]] = {}
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(src).as_posix()
        bare = _bare_names(tree)
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if any(isinstance(n, ast.Call) and _is_unbounded(n, bare) for n in ast.walk(fn)):
                found.setdefault(rel, set()).add(fn.name)
    return {rel: frozenset(names) for rel, names in found.items()}


def test_no_tree_file_is_read_unbounded() -> None:
    found = unbounded_calls()
    for module in TREE_READERS:
        assert module not in found, f"{module}: unbounded read in {sorted(found[module])}"
    extra = {m: sorted(fns - ALLOWED.get(m, set())) for m, fns in found.items()}
    extra = {m: fns for m, fns in extra.items() if fns}
    assert not extra, f"unbounded reads outside the list (use fsutil.read_tree_file): {extra}"


def test_every_allowed_entry_is_still_needed() -> None:
    """A function that no longer reads unbounded leaves the list: its reason would
    otherwise cover whatever read is added there next."""
    found = unbounded_calls()
    stale = {m: sorted(fns - found.get(m, set())) for m, fns in ALLOWED.items()}
    stale = {m: fns for m, fns in stale.items() if fns}
    assert not stale, f"allowed but reading nothing unbounded now: {stale}"


def test_the_scan_finds_a_read(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(p):\n    return p.read_text()\n")
    assert unbounded_calls(tmp_path) == {"m.py": {"f"}}


def test_the_scan_finds_hashes_copies_and_loads(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import json, shutil, tomllib\n"
        "from shutil import copy2 as cp\n"
        "from dgr_forge.core import fsutil\n"
        "from dgr_forge.core.fsutil import sha256_file\n"
        "def a(p): return sha256_file(p)\n"
        "def b(p): return fsutil.sha256_file(p)\n"
        "def c(p, q): shutil.copyfile(p, q)\n"
        "def d(p, q): cp(p, q)\n"
        "def e(f): return json.load(f)\n"
        "def g(f): return tomllib.load(f)\n"
        "def h(p, q): shutil.copytree(p, q)\n"
        # bounded, or no file read: not found
        "def ok(d, s): return d.copy(), json.loads(s), tomllib.loads(s), open(1)\n"
    )
    assert unbounded_calls(tmp_path) == {"m.py": {"a", "b", "c", "d", "e", "g", "h"}}
