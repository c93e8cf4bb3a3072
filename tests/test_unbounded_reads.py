"""No file of a tree the forge did not write is read with an unbounded call (issue 33
#1): `Path.read_text`, `Path.read_bytes`, `Path.open` and `open` appear only in the
functions listed here, each reading a file the forge itself wrote (state, journals,
stamps, logs, format-patch output) or a fixed system file. A tree file (upstream, the
patched tree, a worker, a conflicted file) goes through `fsutil.read_tree_file`; a file
a user names through `fsutil.read_regular`. Read from the source with `ast`, like
tests/test_imports.py: a new unbounded call fails here until it is one or the other."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "dgr_forge"
UNBOUNDED = {"read_text", "read_bytes", "open"}

# module (relative to dgr_forge/) -> the functions that may read unbounded, and why
ALLOWED: dict[str, set[str]] = {
    # fixed system files (/proc) and the package's own templates
    "attest/certify.py": {"_cpu_model"},
    "attest/hardware.py": {"_read_proc"},  # /proc/cpuinfo, /proc/meminfo, os-release: bounded
    "models/download.py": {"_umask"},
    "ci/render.py": {"_template_source"},
    # the forge's own recipes/toolchains/cmake shipped in the wheel, copied into a new root
    "core/product.py": {"_copy"},
    # the installed dgr-forge's own metadata (direct_url.json), not the root's files
    "ci/install.py": {"_direct_pin"},
    "cli/schemas.py": {"main"},
    # files the forge wrote: workspace state, journals, stamps, logs, caches, its git dir
    "cli/cmd_artifacts.py": {"body", "make_manifest"},
    "cli/context.py": {"open_session", "waiting"},
    "core/fsutil.py": {"read_json", "sha256_file"},
    "core/lock.py": {"describe_holder"},
    "core/proc.py": {"spawn"},
    "lanes/lane_build.py": {"run"},  # opens its own build log for writing
    "lanes/certrun.py": {"run_steps"},  # a certify step's log, created here (mode "xb")
    "cache/select.py": {"_sccache_config"},
    "cache/session.py": {"_tail"},
    "lanes/cmake_api.py": {"_load", "write_query"},
    "lanes/genbuild.py": {"_read"},
    "lanes/gitview.py": {"write_view"},
    "lanes/presets.py": {"exclude_from_git"},
    "lanes/signing.py": {"_file_fingerprint"},
    "lanes/stamps.py": {"load_host", "load_host_probes"},
    "upstream/patches.py": {"_am_stopped_at", "recover_interrupted"},
    "upstream/local_replay.py": {"load_replay_state"},
    "upstream/series.py": {"scratch_index"},
    "upstream/series_base.py": {"load", "record", "text_of"},
    "upstream/series_journal.py": {"_digest", "_fsync_write", "_recover_one", "write"},
    "upstream/tree_cache.py": {"lookup"},
    "upstream/trees.py": {"forge_presets"},
    "upstream/workspace.py": {"refuse_during_replay", "remove_git_leftovers"},
    "upstream/rebase/bump.py": {"_verify"},
    "upstream/rebase/commits.py": {"write"},
    "upstream/rebase/finish.py": {"inputs_digest", "stage", "staged_patches_dir", "write_side"},
    "upstream/export.py": {
        "canonical_commits",
        "compute_series",
        "export_workspace",
        "write_series",
    },
    # a model manifest it rewrites, compared as text (loaded bounded before)
    "models/map_headers.py": {"map_manifest"},
    # the root's manifest and patches/, already loaded bounded by the series loader
    "lanes/check.py": {"_scratch_root", "check"},  # manifest only
    "upstream/build_number.py": {"record"},  # the manifest it rewrites
}
# never: these read trees the forge did not write
TREE_READERS = {
    "host/cmake_options.py",
    "upstream/rebase/conflicts.py",
    "upstream/rebase/replay.py",
}


def unbounded_calls(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the names of the functions holding an unbounded read call."""
    found: dict[str, set[str]] = {}
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(src).as_posix()
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Attribute):  # p.read_text(), p.open(), not os.open()
                    hit = f.attr in UNBOUNDED and getattr(f.value, "id", "") != "os"
                else:  # the builtin open() of a path (open(1, ...) is a descriptor);
                    # tomlcheck's read_bytes() is bounded
                    first = node.args[0] if node.args else None
                    fd = isinstance(first, ast.Constant) and isinstance(first.value, int)
                    hit = getattr(f, "id", None) == "open" and not fd
                if hit:
                    found.setdefault(rel, set()).add(fn.name)
    return found


def test_no_tree_file_is_read_unbounded() -> None:
    found = unbounded_calls()
    for module in TREE_READERS:
        assert module not in found, f"{module}: unbounded read in {sorted(found[module])}"
    extra = {m: sorted(fns - ALLOWED.get(m, set())) for m, fns in found.items()}
    extra = {m: fns for m, fns in extra.items() if fns}
    assert not extra, f"unbounded reads outside the list (use fsutil.read_tree_file): {extra}"


def test_the_scan_finds_a_read(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(p):\n    return p.read_text()\n")
    assert unbounded_calls(tmp_path) == {"m.py": {"f"}}
