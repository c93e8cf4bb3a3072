"""Recipes say only what they mean (issue 12 #5): no smuggled CMake arguments, no
forge-owned keys, no toolchain from outside the root. Every refusal is exit 2 naming the
file, the key and the fix; the CLI is run for real (`ci matrix` and `doctor` read recipes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import run_forge
from support.roots import manifest_text

from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.host import recipes

PIN = "0123456789abcdef0123456789abcdef01234567"

BASE = """\
schema = 1
[lane]
backend = "CPU"
{lane}
[cmake]
options = {{ {options} }}
"""


def recipe_text(options: str = 'GGML_NATIVE = "OFF"', lane: str = "") -> str:
    return BASE.format(options=options, lane=lane)


def forge(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "forge"
    (root / "manifests").mkdir(parents=True)
    (root / "patches" / "llama.cpp").mkdir(parents=True)
    (root / "recipes").mkdir()
    (root / "toolchains").mkdir()
    (root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text("https://example.invalid/llama.cpp.git", PIN)
    )
    (root / "toolchains" / "gcc.cmake").write_text("set(CMAKE_C_COMPILER gcc)\n")
    (root / "recipes" / "cpu.toml").write_text(text)
    return root


def refused(tmp_path: Path, text: str, key: str, *needles: str) -> None:
    """The CLI refuses the recipe: exit 2, the file, the key and a fix, no traceback."""
    root = forge(tmp_path, text)
    result = run_forge("--root", str(root), "ci", "matrix", "--json")
    assert result.code == 2, result
    assert "Traceback" not in result.stderr
    assert "recipes/cpu.toml" in result.stderr and key in result.stderr, result.stderr
    assert "fix:" in result.stderr
    assert result.json["ok"] is False and result.json["exit_code"] == 2
    for needle in needles:
        assert needle in result.stderr, result.stderr


SMUGGLED_VALUES = [
    ('"OFF;-DCMAKE_TOOLCHAIN_FILE=/tmp/evil.cmake"', "';'"),
    ('"OFF -DCMAKE_C_COMPILER=/tmp/cc"', "whitespace"),
    ('"OFF\\n-DX=1"', "whitespace"),
    ('"OFF\\tX"', "whitespace"),
    ('"$<IF:1,ON,OFF>"', "'$'"),
    ('"${HOME}"', "'$'"),
    ('"OFF\\u0000"', "control"),
    ('"-DCMAKE_TOOLCHAIN_FILE=/tmp/evil"', "leading '-'"),
    ('"O\\"FF"', "'\"'"),
    ('"OFF\\\\"', "'\\\\'"),
]


@pytest.mark.parametrize(("value", "why"), SMUGGLED_VALUES)
def test_option_values_outside_the_safe_set_are_refused(
    tmp_path: Path, value: str, why: str
) -> None:
    refused(
        tmp_path,
        recipe_text(f"GGML_NATIVE = {value}"),
        "cmake.options.GGML_NATIVE",
        why,
        "TOML array",
    )


@pytest.mark.parametrize(
    "key",
    [
        "CMAKE_TOOLCHAIN_FILE",
        "CMAKE_MAKE_PROGRAM",
        "CMAKE_C_COMPILER_LAUNCHER",
        "CMAKE_CXX_COMPILER_LAUNCHER",
        "CMAKE_CUDA_COMPILER_LAUNCHER",
        "CMAKE_C_COMPILER",
        "CMAKE_CUDA_HOST_COMPILER",
        "CMAKE_MODULE_PATH",
        "CMAKE_PROJECT_INCLUDE",
        "CMAKE_PROJECT_TOP_LEVEL_INCLUDES",
        "CMAKE_USER_MAKE_RULES_OVERRIDE",
        "DGR_LANE",
        "DGR_UPSTREAM_SOURCE_DIR",
    ],
)
def test_keys_the_forge_sets_are_refused(tmp_path: Path, key: str) -> None:
    refused(
        tmp_path,
        recipe_text(f'{key} = "x"'),
        f"cmake.options.{key}",
        "the forge sets",
    )


def test_a_list_is_a_toml_array_joined_by_the_forge(tmp_path: Path) -> None:
    text = recipe_text('CMAKE_CUDA_ARCHITECTURES = ["75-virtual", "86-real", 89]')
    path = tmp_path / "cpu.toml"
    path.write_text(text)
    recipe = recipes.load(path, "recipes/cpu.toml")
    assert recipe.cmake_options["CMAKE_CUDA_ARCHITECTURES"] == "75-virtual;86-real;89"
    assert "-DCMAKE_CUDA_ARCHITECTURES=75-virtual;86-real;89" in recipe.cmake_args()
    # each element obeys the same rule, and a list may not hide a list
    for bad, why in (
        ('["86-real", "x;y"]', "';'"),
        ('["86-real", ""]', "empty"),
        ('["-D", "x"]', "leading '-'"),
        ('[["a"]]', "string, integer or boolean"),
        ("[]", "empty"),
    ):
        path.write_text(recipe_text(f"CMAKE_CUDA_ARCHITECTURES = {bad}"))
        with pytest.raises(BadInput) as err:
            recipes.load(path, "recipes/cpu.toml")
        assert err.value.exit_code == ExitCode.BAD_INPUT
        assert "cmake.options.CMAKE_CUDA_ARCHITECTURES" in str(err.value)
        assert why in str(err.value), str(err.value)


def test_plain_values_still_load(tmp_path: Path) -> None:
    path = tmp_path / "metal.toml"
    path.write_text(
        recipe_text(
            'CMAKE_BUILD_TYPE = "Release", GGML_NATIVE = false, N = 3, '
            'CMAKE_BUILD_RPATH = "@loader_path", EMPTY = ""'
        )
    )
    options = recipes.load(path).cmake_options
    assert options == {
        "CMAKE_BUILD_TYPE": "Release",
        "GGML_NATIVE": "OFF",
        "N": "3",
        "CMAKE_BUILD_RPATH": "@loader_path",
        "EMPTY": "",
    }


def test_huge_value_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, recipe_text(f'GGML_X = "{"A" * 5000}"'), "cmake.options.GGML_X", "long")


@pytest.mark.parametrize(
    ("toolchain", "why"),
    [
        ("/tmp/evil", "a file name in toolchains/"),
        ("../..", "a file name in toolchains/"),
        ("..", "a file name in toolchains/"),
        ("sub/gcc", "a file name in toolchains/"),
        ("-gcc", "a file name in toolchains/"),
        ("gcc\\u0000", "NUL byte"),  # the shared TOML reader refuses it first
        ("", "a file name in toolchains/"),
    ],
)
def test_toolchain_names_a_file_in_toolchains(tmp_path: Path, toolchain: str, why: str) -> None:
    refused(
        tmp_path,
        recipe_text(lane=f'toolchain = "{toolchain}"'),
        "lane.toolchain",
        why,
    )


def test_toolchain_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "evil.cmake"
    evil.write_text('file(WRITE /tmp/pwned "x")\n')
    root = forge(tmp_path, recipe_text(lane='toolchain = "evil"'))
    os.symlink(evil, root / "toolchains" / "evil.cmake")
    result = run_forge("--root", str(root), "ci", "matrix", "--json")
    assert result.code == 2, result
    assert "recipes/cpu.toml" in result.stderr and "lane.toolchain" in result.stderr
    assert "outside the forge root" in result.stderr

    # a symlink that stays inside the root is fine (e.g. clang.cmake -> gcc.cmake)
    (root / "toolchains" / "evil.cmake").unlink()
    os.symlink("gcc.cmake", root / "toolchains" / "evil.cmake")
    assert run_forge("--root", str(root), "ci", "matrix").code == 0


def test_the_committed_recipes_obey_the_rules() -> None:
    repo = Path(__file__).resolve().parents[2]
    loaded = recipes.load_all(repo / "recipes", repo)
    assert {"cpu", "cuda", "rocm", "vulkan", "metal"} <= set(loaded)
    assert ";" in loaded["cuda"].cmake_options["CMAKE_CUDA_ARCHITECTURES"]
