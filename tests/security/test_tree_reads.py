"""Files of a tree the forge did not write are read bounded (issue 33 #1): a tracked
`*.cmake` that is a link to /dev/zero (a pull request's patch or an upstream commit can
add one) is read as git stores it, the link text, never followed; a conflicted file is
likewise; a FIFO, device or a file over the bound is exit 2 naming it, never a
MemoryError. No module reads a file with an unbounded call but the ones listed in
tests/test_unbounded_reads.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.build import add_path_worker, make_patched_root
from support.cli import Result, run_forge
from support.git import Upstream, copy_upstream, sh_git

from dgr_forge.core import fsutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.host.cmake_options import declared_options
from dgr_forge.upstream.rebase.replay import _ours_ranges, has_markers

HANG = {"subprocess": True, "timeout": 60}


def _no_crash(res: Result) -> None:
    assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr, res


def _linked_upstream(tmp_path: Path, upstream: Upstream, links: dict[str, str]) -> Upstream:
    up = copy_upstream(upstream, tmp_path / "hostile-upstream")
    for rel, target in links.items():
        (up.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (up.path / rel).symlink_to(target)
    up.commit({}, "build: add a cmake module")
    return up


@pytest.mark.parametrize(
    "links",
    [
        {"cmake/evil.cmake": "/dev/zero"},
        # the variant: a subdirectory's CMakeLists.txt linked to a file of another user
        {"tools/CMakeLists.txt": "/dev/urandom"},
    ],
)
def test_check_and_build_read_a_linked_cmake_file_as_its_link_text(
    tmp_path: Path, upstream: Upstream, links: dict[str, str]
) -> None:
    up = _linked_upstream(tmp_path, upstream, links)
    root = make_patched_root(tmp_path / "forge", up)
    # the old code read the device until memory ran out: keep that finite here
    res = run_forge("--root", str(root), "--json", "check", **HANG)  # type: ignore[arg-type]
    _no_crash(res)
    assert res.code in (0, 1), res  # 1: the series' re-export differs on this upstream
    assert res.json["options_checked"] > 0, res
    # the scan itself, on a clone of the hostile tree: the link is its text, nothing else
    src = tmp_path / "clone"
    sh_git(tmp_path, "clone", "-q", up.url, str(src))
    names, _ = declared_options(src)
    assert "GGML_CUDA" in names, names


def test_read_tree_file_never_follows(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "zero.cmake").symlink_to("/dev/zero")
    assert fsutil.read_tree_file(tree, "zero.cmake", hint="h") == b"/dev/zero"
    os.mkfifo(tree / "fifo.cmake")
    with pytest.raises(BadInput, match=r"fifo.cmake: is not a regular file"):
        fsutil.read_tree_file(tree, "fifo.cmake", hint="h")
    (tree / "big.cmake").write_bytes(b"x" * 11)
    with pytest.raises(BadInput, match=r"big.cmake: is 11 bytes, over the 10-byte limit"):
        fsutil.read_tree_file(tree, "big.cmake", hint="h", limit=10)
    # a directory of the tree linked out of it: nothing beneath it is read
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.cmake").write_text("option(SECRET)")
    (tree / "linked").symlink_to(outside)
    with pytest.raises(BadInput, match=r"linked/secret.cmake: a directory above it is a symlink"):
        fsutil.read_tree_file(tree, "linked/secret.cmake", hint="h")
    assert fsutil.read_tree_file(tree, "missing.cmake", hint="h", missing_ok=True) is None


def test_conflict_scans_read_a_linked_or_fifo_file_bounded(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "llama.cpp").symlink_to("/dev/zero")
    assert has_markers(tree, "src/llama.cpp") is False
    assert _ours_ranges(tree, "src/llama.cpp", "x\n") == []
    # the variant: a FIFO where the conflicted file was (opened non-blocking, refused)
    os.mkfifo(tree / "src" / "ggml.c")
    for call in (lambda: has_markers(tree, "src/ggml.c"),
                 lambda: _ours_ranges(tree, "src/ggml.c", "")):  # fmt: skip
        with pytest.raises(BadInput, match=r"src/ggml.c: is not a regular file"):
            call()
    (tree / "src" / "real.c").write_text("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> x\n")
    assert has_markers(tree, "src/real.c") is True
    assert _ours_ranges(tree, "src/real.c", "a\nb\n") == [(2, 2)]


@pytest.mark.parametrize("kind", ["device-link", "fifo"])
def test_a_path_workers_files_are_hashed_as_git_stores_them(
    tmp_path: Path, upstream: Upstream, kind: str
) -> None:
    """A path worker is a tree the forge did not write: `lanes`, `status` and `build` hash
    its files (the worker's identity). A link to /dev/zero was followed and hashed forever;
    now it is its link text. The variant: a FIFO in the worker, exit 2 naming it, never an
    open that waits for a writer."""
    root, _ = _worker_with_odd_file(tmp_path, upstream, kind)
    res = run_forge("--root", str(root), "--json", "lanes", **HANG)  # type: ignore[arg-type]
    _no_crash(res)
    if kind == "fifo":
        assert res.code == 2 and "odd.h" in res.stderr, res
    else:
        assert res.code == 0, res


def _worker_root(tmp_path: Path, upstream: Upstream) -> Path:
    root = make_patched_root(tmp_path / "forge", upstream)
    add_path_worker(root)
    return root


def _worker_with_odd_file(tmp_path: Path, upstream: Upstream, kind: str) -> tuple[Path, Path]:
    """A root with a path worker holding `src/odd.h`: a FIFO, or a link to /dev/zero."""
    root = _worker_root(tmp_path, upstream)
    odd = root / "worker" / "src" / "odd.h"
    if kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.symlink_to("/dev/zero")
    return root, odd


def _build(root: Path) -> Result:
    return run_forge(  # type: ignore[call-arg]
        "--root", str(root), "--json", "build", "--jobs", "2", "--no-sign", **HANG
    )


def _input_stamps(root: Path) -> dict[str, list[object]]:
    import json

    state = json.loads((root / ".dgr" / "state.json").read_text())
    return state["lanes"]["cpu"]["input_stamps"]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_builds_input_snapshot_hashes_a_worker_link_as_its_text(
    tmp_path: Path, upstream: Upstream
) -> None:
    """`build` stamps every input file (lanes/stamps.stamp), the path worker's among them.
    A link in the worker to a file outside it was followed and its contents hashed: the
    build's inputs moved with a file that is no part of the worker as git stores it. Now
    the link's text is hashed, and the second build is a no-op."""
    root = _worker_root(tmp_path, upstream)
    outside = tmp_path / "elsewhere.h"
    outside.write_text("/* not the worker's */\n")
    (root / "worker" / "src" / "linked.h").symlink_to(outside)
    first = _build(root)
    assert first.code == 0, first
    key = str(root / "worker" / "src" / "linked.h")
    assert _input_stamps(root)[key][0] == fsutil.sha256_bytes(os.fsencode(outside)), first
    outside.write_text("/* changed, still not the worker's */\n")
    second = _build(root)
    assert second.code == 0, second
    assert second.json["lanes"][0]["status"] == "up-to-date", second


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["device-link", "fifo"])
def test_build_stamps_a_device_link_as_text_and_refuses_a_fifo(
    tmp_path: Path, upstream: Upstream, kind: str
) -> None:
    """A link to /dev/zero in the path worker is an input like any file: its text (the
    stamp skipped it, so retargeting it moved nothing). A FIFO is exit 2 naming it before
    anything is configured, never an open that waits for a writer."""
    root, odd = _worker_with_odd_file(tmp_path, upstream, kind)
    res = _build(root)
    _no_crash(res)
    if kind == "fifo":
        assert res.code == 2 and "odd.h" in res.stderr, res
        assert not (root / ".dgr" / "build" / "cpu" / "CMakeCache.txt").exists(), res
        return
    assert res.code == 0, res
    assert _input_stamps(root)[str(odd)][0] == fsutil.sha256_bytes(b"/dev/zero"), res
    odd.unlink()
    odd.symlink_to("/dev/null")
    again = _build(root)
    assert again.code == 0 and again.json["lanes"][0]["status"] != "up-to-date", again


def test_sha256_file_refuses_a_fifo_without_waiting(tmp_path: Path) -> None:
    """The stamp's isfile check and its open are two steps: a FIFO swapped in between
    blocked the open (no writer ever comes). The hash opens non-blocking and checks the
    descriptor: exit 2 naming the file. Run in a child so the old code's hang is a
    timeout here, not a stuck suite."""
    import subprocess
    import sys

    fifo = tmp_path / "swapped"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path; from dgr_forge.core import fsutil\n"
        "from dgr_forge.core.errors import BadInput\n"
        "try: fsutil.sha256_file(Path(sys.argv[1]))\n"
        "except BadInput as e: print(int(e.exit_code), e)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30
    )
    assert res.stdout.startswith("2 ") and str(fifo) in res.stdout, res


def _pretender(tmp_path: Path) -> Path:
    """A forge root that claims to be dgr-forge's own repository (src/dgr_forge/ is
    there): `ci render` reads its pyproject.toml, a file a pull request controls."""
    from test_ci import CPU, write_root

    root = write_root(tmp_path / "pretender", {"cpu": CPU})
    (root / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
    (root / "src" / "dgr_forge").mkdir(parents=True)
    (root / "src" / "dgr_forge" / "__init__.py").write_text("")
    return root


@pytest.mark.parametrize("kind", ["huge", "outside-link", "device-link", "fifo"])
def test_ci_render_reads_the_roots_pyproject_bounded_and_never_through_a_link(
    tmp_path: Path, kind: str
) -> None:
    """ci/install.is_tool_repository read pyproject.toml unbounded, following links: a
    64 MiB file was loaded whole, and a link to another checkout's pyproject.toml made the
    root "the tool's repository" (its jobs install the checkout). Now a regular file of at
    most 4 MiB, never a link: anything else is exit 2 naming it, because the root claims
    to be the tool (src/dgr_forge/ is there) and a silent other install mode would leave
    `ci render --check` reporting a drift with no pointer at the cause."""
    root = _pretender(tmp_path)
    pyproject = root / "pyproject.toml"
    if kind == "huge":
        pyproject.write_text('[project]\nname = "dgr-forge"\n')
        os.truncate(pyproject, 64 << 20)  # sparse: no disk, but 64 MiB to read
    elif kind == "outside-link":
        other = tmp_path / "other-checkout.toml"
        other.write_text('[project]\nname = "dgr-forge"\n')
        pyproject.symlink_to(other)
    elif kind == "device-link":
        pyproject.symlink_to("/dev/zero")
    else:
        os.mkfifo(pyproject)
    res = run_forge("--root", str(root), "ci", "render", **HANG)  # type: ignore[arg-type]
    _no_crash(res)
    assert res.code == 2 and "pyproject.toml" in res.stderr, res


@pytest.mark.parametrize(
    ("text", "tool"),
    [
        ("x = " + "[" * 5000 + "]" * 5000 + '\n[project]\nname = "dgr-forge"\n', False),
        (f'x = {"9" * 5000}\n[project]\nname = "dgr-forge"\n', False),
        ("[project]\nname = 3\n", False),
        ('project = "dgr-forge"\n', False),
        ('[project]\nname = "dgr_forge"\nversion = "1"\n[tool.x]\ny = 1\n', True),
    ],
)
def test_the_roots_pyproject_is_read_as_data_whatever_it_holds(
    tmp_path: Path, text: str, tool: bool
) -> None:
    """A pyproject.toml nested 5000 deep (tomllib recurses into a RecursionError), a
    5000-digit number (Python's int limit) or a name of another type: not the tool's
    project, never a crash; another tool's keys beside the name are its own business."""
    from dgr_forge.ci.install import is_tool_repository

    root = _pretender(tmp_path)
    (root / "pyproject.toml").write_text(text)
    assert is_tool_repository(root) is tool


def test_ci_render_reads_ci_requirements_without_waiting_on_a_fifo(tmp_path: Path) -> None:
    """ci/requirements.txt is read bounded with no link; a FIFO there is exit 2 naming it."""
    from test_ci import CPU, write_root

    root = write_root(tmp_path / "plain", {"cpu": CPU})
    (root / "ci").mkdir(exist_ok=True)
    (root / "ci" / "requirements.txt").unlink(missing_ok=True)
    os.mkfifo(root / "ci" / "requirements.txt")
    res = run_forge("--root", str(root), "ci", "render", **HANG)  # type: ignore[arg-type]
    _no_crash(res)
    assert res.code == 2 and "requirements.txt" in res.stderr, res


@pytest.mark.parametrize("kind", ["fifo", "outside-link"])
def test_export_force_saves_the_replaced_files_as_git_stores_them(
    tmp_path: Path, upstream: Upstream, kind: str
) -> None:
    """`export --force` saves patches/ and the manifest under logs/ first
    (series_base.save_replaced). shutil.copy2 followed a link (a link to /dev/zero was
    copied until the disk ran out; one to a file outside the root saved that file's
    contents) and a FIFO was a SpecialFileError traceback. Now a link is saved as a link,
    a regular file's bytes bounded, and a FIFO is exit 2 naming it before anything is
    replaced."""
    from support.rebase import load_manifest, make_series

    from dgr_forge.core.forge import Forge
    from dgr_forge.upstream import series_base

    s = make_series(tmp_path, upstream)
    forge = Forge.locate(s.root, None)
    m = load_manifest(s.root)
    # planted after the load (which refuses a file the series does not list): a swap, or
    # a teammate's pull, while export runs; only the save reads it
    stale = s.patches_dir / "0099-stale.patch"
    if kind == "fifo":
        os.mkfifo(stale)
    else:
        outside = tmp_path / "secret.txt"
        outside.write_text("another user's file\n")
        stale.symlink_to(outside)
    if kind == "fifo":
        with pytest.raises(BadInput) as err:
            series_base.save_replaced(forge, m)
        assert "0099-stale.patch" in str(err.value), err.value
        return
    saved = series_base.save_replaced(forge, m) / "patches" / stale.name
    assert saved.is_symlink() and os.readlink(saved) == str(outside)
    kept = saved.parent / s.files[0]
    assert kept.read_bytes() == (s.patches_dir / s.files[0]).read_bytes()


def test_the_series_journal_carries_a_subdirectory_over_without_reading_it(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Writing the series (export, rebase) stages patches/<name>/ anew and keeps what is not
    a patch file. A subdirectory was copied with shutil.copytree, reading every file in it:
    a FIFO there (a person's, or a pull request's) ended the write, exit 1, with "free
    some space". Now its files are hard links, never opened; the FIFO is still a FIFO."""
    import stat

    from support.rebase import make_series

    from dgr_forge.upstream import series_journal

    s = make_series(tmp_path, upstream)
    notes = s.patches_dir / "notes"
    notes.mkdir()
    os.mkfifo(notes / "pipe")
    (notes / "big.bin").write_bytes(b"x" * 1000)
    files = {name: (s.patches_dir / name).read_bytes() for name in s.files}
    files[s.files[0]] += b"\n"  # a change: the directory is staged and swapped
    series_journal.write(
        s.root, s.patches_dir, files, s.manifest, None, points="test", out=Reporter(quiet=True)
    )
    assert (s.patches_dir / s.files[0]).read_bytes() == files[s.files[0]]
    assert stat.S_ISFIFO(os.lstat(notes / "pipe").st_mode)
    assert (notes / "big.bin").read_bytes() == b"x" * 1000


@pytest.mark.parametrize("command", ["patch", "check"])
def test_a_patch_file_linked_out_of_the_root_is_never_followed(
    tmp_path: Path, upstream: Upstream, command: str
) -> None:
    """A patch file is the root's (a pull request writes patches/). The series loader
    followed a link: `patches/llama.cpp/0001-….patch -> ~/.ssh/id_ed25519` made `check`,
    the pull-request gate, hash the runner's file and print its sha256 ("sha256 is …,
    the manifest says …") into a public CI log. Now a link there is exit 2 naming it,
    never opened."""
    from support.rebase import make_series

    s = make_series(tmp_path, upstream)
    secret = tmp_path / "runner-secret"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot really\n")
    patch = s.patches_dir / s.files[0]
    patch.unlink()
    patch.symlink_to(secret)
    argv = ("check", "--offline") if command == "check" else ("patch",)
    res = run_forge("--root", str(s.root), *argv, **HANG)  # type: ignore[arg-type]
    _no_crash(res)
    assert res.code == 2 and s.files[0] in res.stderr and "symlink" in res.stderr, res
    assert fsutil.sha256_bytes(secret.read_bytes()) not in res.stdout + res.stderr, res
