"""A shipped binary never searches the directory it is started from (CWE-426).

CMake pads the build-tree RPATH of every target that has an `install()` rule with at least
one trailing `:` (room for its built-in chrpath to write the install RPATH in place), and
the dynamic loader reads an empty RUNPATH element as the current directory: on the real
llama.cpp 71 of 74 link lines carry `-Wl,-rpath,"$ORIGIN:"`. So `llama-cli` started in a
directory holding a planted `libcuda.so.1` (or any library not beside it) loads it. The
forge's subjects carry no empty element (a built lane's: tests/test_llamalike_ship.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dgr_forge.lanes.collect import strip_empty_runpath

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this host")


def _runpath(path: Path) -> list[str]:
    """The RUNPATH and RPATH strings of an ELF file, as readelf prints them."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return re.findall(r"\((?:RUNPATH|RPATH)\)\s+[^\[]*\[([^\]]*)\]", out.stdout)


def _planted(tmp_path: Path, rpath: str) -> tuple[Path, Path]:
    """`bin/app` linked with RUNPATH `rpath`, needing `libplanted.so` that lies only in
    `cwd/`: it starts there only through an element that means the current directory."""
    cwd, bin_dir = tmp_path / "cwd", tmp_path / "bin"
    cwd.mkdir()
    bin_dir.mkdir()
    (tmp_path / "p.c").write_text('#include <stdio.h>\nvoid planted(void){puts("PLANTED");}\n')
    (tmp_path / "m.c").write_text("void planted(void);\nint main(void){planted();return 0;}\n")
    cc = ["cc", "-o"]
    subprocess.run(
        [*cc, str(cwd / "libplanted.so"), "-shared", "-fPIC", str(tmp_path / "p.c")], check=True
    )
    subprocess.run(
        [
            *cc,
            str(bin_dir / "app"),
            str(tmp_path / "m.c"),
            f"-L{cwd}",
            "-lplanted",
            f"-Wl,-rpath,{rpath}",
            "-Wl,--enable-new-dtags",
        ],
        check=True,
    )
    return bin_dir / "app", cwd


def _starts_from(app: Path, cwd: Path) -> bool:
    run = subprocess.run(
        [str(app)], cwd=cwd, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    return run.returncode == 0 and "PLANTED" in run.stdout


@needs_cc
@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("$ORIGIN:", "$ORIGIN"),  # CMake's one trailing separator
        ("$ORIGIN:::::::", "$ORIGIN"),  # and its padding to the install RPATH's length
        ("/opt/x::$ORIGIN/../lib:", "/opt/x:$ORIGIN/../lib"),
        (":", ""),
    ],
)
def test_an_empty_runpath_element_is_the_cwd_and_is_taken_out(
    tmp_path: Path, given: str, kept: str
) -> None:
    app, cwd = _planted(tmp_path, given)
    assert _starts_from(app, cwd), "the loader read the empty element as the cwd"
    before = app.stat()
    assert strip_empty_runpath(app) is True
    assert _runpath(app) == [kept]
    assert app.stat().st_size == before.st_size  # the string rewritten in place, NUL-padded
    assert app.stat().st_mtime_ns == before.st_mtime_ns  # what Ninja recorded: no relink
    assert not _starts_from(app, cwd)
    assert strip_empty_runpath(app) is False  # nothing left to do: the file is untouched


@needs_cc
def test_a_runpath_with_no_empty_element_is_left_byte_for_byte(tmp_path: Path) -> None:
    app, _ = _planted(tmp_path, "$ORIGIN")
    before = app.read_bytes()
    assert strip_empty_runpath(app) is False
    assert app.read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"#!/bin/sh\necho hi\n", b"\x7fELF" + b"\0" * 12])
def test_what_is_not_a_linked_elf_file_is_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "not-elf"
    path.write_bytes(content)
    assert strip_empty_runpath(path) is False
    assert path.read_bytes() == content
