"""Recipes name no program and make the build read no file (issue 20 #4): keys that pick a
program (launchers, archiver, linker, compilers, code checks, the upstream's own cache
switch) and flag values that read a file or run one (`@file`, `-wrapper`, `-specs=`, ...)
are exit 2 naming the key; programs belong in toolchains/, whose files are recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_recipes import recipe_text, refused

from dgr_forge.core.errors import BadInput
from dgr_forge.host import recipes


@pytest.mark.parametrize(
    "key",
    [
        "CMAKE_CXX_LINKER_LAUNCHER",
        "CMAKE_C_COMPILER_LAUNCHER",
        "MY_LAUNCHER",
        "CMAKE_AR",
        "CMAKE_LINKER",
        "CMAKE_RANLIB",
        "CMAKE_NM",
        "CMAKE_CXX_COMPILER_AR",
        "CMAKE_CXX_CLANG_TIDY",
        "CMAKE_C_INCLUDE_WHAT_YOU_USE",
        "CMAKE_LINKER_TYPE",
        "CMAKE_SYSROOT",
        "CMAKE_CROSSCOMPILING_EMULATOR",
        "CMAKE_PROGRAM_PATH",
        "GGML_CCACHE",
        "LLAMA_SCCACHE",
    ],
)
def test_keys_that_name_a_program_are_refused(tmp_path: Path, key: str) -> None:
    refused(tmp_path, recipe_text(f'{key} = "x"'), f"cmake.options.{key}", "toolchains/")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('"@/tmp/rsp"', "@/tmp/rsp"),
        ('["O2", "@rsp"]', "@rsp"),
        ('["x", "id"]', "one flag"),
    ],
)
@pytest.mark.parametrize(
    "key", ["CMAKE_CXX_FLAGS", "CMAKE_EXE_LINKER_FLAGS", "CMAKE_C_FLAGS_RELEASE"]
)
def test_flag_values_that_read_a_file_are_refused(
    tmp_path: Path, key: str, value: str, shown: str
) -> None:
    refused(tmp_path, recipe_text(f"{key} = {value}"), f"cmake.options.{key}", shown)


@pytest.mark.parametrize(
    "word",
    [
        "-wrapper",
        "-specs=/x",
        "--specs=/x",
        "-B/x",
        "-fplugin=/x.so",
        "--sysroot=/x",
        "-imacros",
        "-include",
        "@/x",
        "-Wl,@/x",
        "-fuse-ld=/x",
        "-Xlinker",
    ],
)
def test_the_flag_rule_itself(word: str) -> None:
    """Leading '-' is refused before this rule today; the rule still holds on its own."""
    with pytest.raises(BadInput) as err:
        recipes.check_flag_word("recipes/cpu.toml", "cmake.options.CMAKE_CXX_FLAGS", word)
    assert "CMAKE_CXX_FLAGS" in str(err.value)
    recipes.check_flag_word("recipes/cpu.toml", "cmake.options.CMAKE_CXX_FLAGS", "O2")


def test_rpath_at_values_still_load(tmp_path: Path) -> None:
    path = tmp_path / "metal.toml"
    path.write_text(recipe_text('CMAKE_BUILD_RPATH = "@loader_path"'))
    assert recipes.load(path).cmake_options == {"CMAKE_BUILD_RPATH": "@loader_path"}
