"""The GPU lanes compile on an ordinary host: CUDA with the driver link stub the forge
generates from the toolkit's cuda.h, Vulkan from the distribution's packages.

Each lane is built once per module (nvcc is slow): a test upstream imitating ggml's
shape (a shared `ggml` with the backend's code, an executable linking it) and the forge's
own recipe machinery. Hosts without the toolchain skip, saying what is absent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.build import TEST_CUDA_RECIPE, USER_TOOLCHAINS, nvcc_path
from support.cli import run_forge
from support.git import Upstream, make_upstream
from support.roots import make_root

from dgr_forge.host import cudakit

_OPTIONS = """\
option(GGML_NATIVE "optimize for the build host" ON)
option(GGML_CUDA "use CUDA" OFF)
option(GGML_VULKAN "use Vulkan" OFF)
"""

# the project: llama.cpp's switches, a shared `ggml` holding the backend, a program on it
_TOP = (
    "cmake_minimum_required(VERSION 3.18)\nproject(llama C CXX)\n"
    + _OPTIONS
    + "add_subdirectory(ggml)\nadd_executable(llama-cli tools/main.c)\n"
    + "target_link_libraries(llama-cli PRIVATE ggml)\n"
)

CUDA_FILES = {
    "CMakeLists.txt": _TOP,
    # as ggml-cuda: the runtime and the driver API (CUDA::cuda_driver: libcuda)
    "ggml/CMakeLists.txt": textwrap.dedent(
        """\
        enable_language(CUDA)
        find_package(CUDAToolkit REQUIRED)
        add_library(ggml SHARED src/ggml.c src/ggml-cuda.cu)
        target_include_directories(ggml PUBLIC include)
        target_link_libraries(ggml PRIVATE CUDA::cudart CUDA::cuda_driver)
        """
    ),
    "ggml/include/ggml.h": "#pragma once\nint ggml_backend_count(void);\n",
    "ggml/src/ggml.c": textwrap.dedent(
        """\
        #include "ggml.h"
        int ggml_cuda_devices(void);
        int ggml_backend_count(void) { return 1 + (ggml_cuda_devices() > 0); }
        """
    ),
    "ggml/src/ggml-cuda.cu": textwrap.dedent(
        """\
        #include <cuda.h>
        #include <cuda_runtime.h>
        __global__ void ggml_cuda_fill(int * x) { *x = 1; }
        extern "C" int ggml_cuda_devices(void) {
            if (cuInit(0) != CUDA_SUCCESS) { return -1; }
            int n = 0;
            if (cudaGetDeviceCount(&n) != cudaSuccess) { return -1; }
            ggml_cuda_fill<<<1, 1>>>(nullptr);
            return n;
        }
        """
    ),
    "tools/main.c": textwrap.dedent(
        """\
        #include <stdio.h>
        #include "ggml.h"
        int main(void) { printf("backends=%d\\n", ggml_backend_count()); return 0; }
        """
    ),
}

VULKAN_FILES = {
    "CMakeLists.txt": _TOP,
    # as ggml-vulkan: shaders compiled by glslc at build time, embedded, the loader linked
    "ggml/CMakeLists.txt": textwrap.dedent(
        """\
        find_package(Vulkan COMPONENTS glslc REQUIRED)
        set(spv ${CMAKE_CURRENT_BINARY_DIR}/fill.spv)
        add_custom_command(OUTPUT ${spv}
            COMMAND ${Vulkan_GLSLC_EXECUTABLE} -fshader-stage=compute --target-env=vulkan1.2
                    -o ${spv} ${CMAKE_CURRENT_SOURCE_DIR}/src/fill.comp
            DEPENDS src/fill.comp VERBATIM)
        set(gen ${CMAKE_CURRENT_BINARY_DIR}/fill-spv.c)
        add_custom_command(OUTPUT ${gen}
            COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DOUT=${gen}
                    -P ${CMAKE_CURRENT_SOURCE_DIR}/embed.cmake
            DEPENDS ${spv} embed.cmake VERBATIM)
        add_library(ggml SHARED src/ggml.c ${gen})
        target_include_directories(ggml PUBLIC include)
        target_link_libraries(ggml PRIVATE Vulkan::Vulkan)
        """
    ),
    "ggml/embed.cmake": textwrap.dedent(
        """\
        file(READ ${SPV} hex HEX)
        string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\\\1," bytes "${hex}")
        file(WRITE ${OUT} "const unsigned char ggml_fill_spv[] = {${bytes}};\\n")
        file(APPEND ${OUT} "const unsigned long ggml_fill_spv_len = sizeof(ggml_fill_spv);\\n")
        """
    ),
    "ggml/src/fill.comp": textwrap.dedent(
        """\
        #version 450
        layout(local_size_x = 64) in;
        layout(std430, binding = 0) buffer Out { uint data[]; };
        void main() { data[gl_GlobalInvocationID.x] = gl_GlobalInvocationID.x; }
        """
    ),
    "ggml/include/ggml.h": "#pragma once\nint ggml_backend_count(void);\n",
    "ggml/src/ggml.c": textwrap.dedent(
        """\
        #include <vulkan/vulkan.h>
        #include "ggml.h"
        extern const unsigned long ggml_fill_spv_len;
        int ggml_backend_count(void) {
            uint32_t version = 0;
            if (vkEnumerateInstanceVersion(&version) != VK_SUCCESS) { return 1; }
            return ggml_fill_spv_len > 0 ? 2 : 1;
        }
        """
    ),
    "tools/main.c": CUDA_FILES["tools/main.c"],
}

VULKAN_RECIPE = textwrap.dedent(
    """\
    schema = 1
    [lane]
    backend = "Vulkan"
    host_os = ["linux"]
    toolchain = "gcc"
    [cmake]
    options = { GGML_VULKAN = "ON", GGML_NATIVE = "OFF" }
    [requires]
    tools = ["cmake", "ninja", "gcc", "g++", "glslc"]
    libraries = ["vulkan-headers", "vulkan-loader"]
    """
)


@dataclass(frozen=True)
class Built:
    root: Path
    lane: str
    statement: dict[str, Any]  # the report's in-toto statement
    env: dict[str, str] | None = None  # what the build ran with beyond the suite's own

    @property
    def build_dir(self) -> Path:
        return self.root / ".dgr" / "build" / self.lane


def _upstream(path: Path, files: dict[str, str]) -> Upstream:
    up = make_upstream(path, extra_commits=0)
    up.commit({**{k: None for k in ("src/llama.cpp", "include/llama.h", "tools/main.cpp")},
               **files}, "the backend's shape")  # fmt: skip
    return up


def _build(
    factory: pytest.TempPathFactory,
    lane: str,
    files: dict[str, str],
    recipe: str,
    absent: str | None,
    env: dict[str, str] | None = None,
) -> Built:
    """The lane built once from a test upstream of `files`; skipped, saying what the host
    lacks, when `absent` says so."""
    if absent:
        pytest.skip(absent)
    base = factory.mktemp(lane)
    up = _upstream(base / "upstream", files)
    root = make_root(base / "forge", up, product=True).root
    (root / "recipes" / f"{lane}.toml").write_text(recipe)
    res = run_forge("--root", str(root), "--json", "build", "--lane", lane, "--no-sign", env=env)
    assert res.code == 0, res
    report = Path(res.json["lanes"][0]["report"])
    envelope = json.loads(report.read_text().splitlines()[0])
    statement = json.loads(base64.b64decode(envelope["payload"]))
    return Built(root, lane, statement, env)


_DYNAMIC = re.compile(r"\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+[^\[]*\[([^\]]*)\]")


def _dynamic(path: Path) -> dict[str, list[str]]:
    """NEEDED, RUNPATH, RPATH, SONAME of an ELF file, as readelf prints them."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    found: dict[str, list[str]] = {}
    for tag, value in re.findall(
        r"\((NEEDED|RUNPATH|RPATH|SONAME)\)\s+[^\[]*\[([^\]]*)\]", out.stdout
    ):
        found.setdefault(tag, []).append(value)
    return found


def _cuda_h() -> Path:
    """The toolkit's cuda.h, where doctor's cudart probe finds it on this host."""
    from dgr_forge.cli.app import load_doctor
    from dgr_forge.core.forge import Forge

    repo = Path(__file__).resolve().parent.parent
    doctor = load_doctor(Forge(root=repo, workspace=repo / ".dgr"))
    include = doctor.library("cudart").include_dir
    assert include is not None
    return Path(include) / "cuda.h"


def _nvcc_missing() -> str | None:
    if nvcc_path() is None:
        return "no nvcc on this host (CUDA toolkit absent: nvcc, cudart)"
    if shutil.which("readelf") is None:
        return "no readelf on this host (binutils)"
    return None


@pytest.fixture(scope="module", params=["host", "pinned"])
def cuda_lane(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Built:
    """The host's toolkit, and the pinned wheel toolkit where the user installed it: its
    libraries lie outside every implicit link directory (a RUNPATH would name them)."""
    if request.param == "host":
        return _build(tmp_path_factory, "cuda", CUDA_FILES, TEST_CUDA_RECIPE, _nvcc_missing())
    if not any(USER_TOOLCHAINS.glob("cuda-*/site/nvidia/cu*/bin/nvcc")):
        pytest.skip(
            f"no pinned CUDA toolkit in {USER_TOOLCHAINS} (`dgr-forge toolchain install cuda`)"
        )
    env = {"DGR_TOOLCHAINS_DIR": str(USER_TOOLCHAINS)}
    return _build(tmp_path_factory, "cuda", CUDA_FILES, TEST_CUDA_RECIPE, _nvcc_missing(), env)


def test_cuda_lane_links_against_the_generated_stub(cuda_lane: Built) -> None:
    subjects = {s["name"]: s for s in cuda_lane.statement["subject"]}
    assert {Path(n).name for n in subjects} >= {"llama-cli", "libggml.so"}
    assert not any("libcuda" in n or "dgr-cuda" in n for n in subjects)  # never a subject
    deps = cuda_lane.statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    stubs = [d for d in deps if d.get("annotations", {}).get("note") == "link stub, not shipped"]
    assert [d["name"] for d in stubs] == ["build/cuda/dgr-cuda/stubs/libcuda.so"]
    stub = cuda_lane.build_dir / "dgr-cuda" / "stubs" / "libcuda.so"
    assert stubs[0]["digest"]["sha256"] == hashlib.sha256(stub.read_bytes()).hexdigest()
    assert _dynamic(stub)["SONAME"] == ["libcuda.so.1"]
    assert (stub.parent / "libcuda.so.1").exists()
    # the binaries need the driver by its soname, and no RUNPATH names the build machine's
    # stub or toolkit
    lib = next(cuda_lane.build_dir.rglob("libggml.so"))
    exe = next(p for p in cuda_lane.build_dir.rglob("llama-cli") if p.is_file())
    needed = _dynamic(lib)
    assert "libcuda.so.1" in needed["NEEDED"], needed
    assert any(n.startswith("libcudart.so.") for n in needed["NEEDED"]), needed
    for binary in (lib, exe):
        paths = [*_dynamic(binary).get("RUNPATH", []), *_dynamic(binary).get("RPATH", [])]
        assert not any("dgr-cuda" in p or "cuda" in p for p in paths), (binary, paths)
    # CUDA enabled in a subdirectory, as ggml-cuda does (its CMakeLists.txt:59): CMake's
    # File API names no id or version for it, so the report's comes from nvcc itself, the
    # line with the release, never its banner ("nvcc: NVIDIA (R) Cuda compiler driver")
    nvcc = next(d for d in deps if d["name"] == "cuda-compiler")
    assert re.search(r"\d+\.\d+", nvcc["annotations"]["version"]), nvcc
    cache = (cuda_lane.build_dir / "CMakeCache.txt").read_text()
    assert f"CUDA_cuda_driver_LIBRARY:FILEPATH={stub}" in cache
    assert "-Wl,-rpath-link," in cache and "allow-shlib-undefined" not in cache


def test_nvcc_compiles_cu_file_in_cuda_lane(cuda_lane: Built) -> None:
    """The lane's nvcc compiled the .cu file (on this module's build: one CUDA configure
    for the suite, not two)."""
    commands = json.loads((cuda_lane.build_dir / "compile_commands.json").read_text())
    cu = [c for c in commands if c["file"].endswith("ggml-cuda.cu")]
    assert cu and "nvcc" in cu[0]["command"]
    assert "ggml-cuda.cu.o" in (cuda_lane.root / ".dgr" / "logs" / "build-cuda.log").read_text()
    objects = list(cuda_lane.build_dir.rglob("ggml-cuda.cu.o"))
    assert objects and objects[0].stat().st_size > 0
    cache = (cuda_lane.build_dir / "CMakeCache.txt").read_text()
    # the lane's nvcc, by whatever path CMake recorded it (it may resolve a symlink)
    entry = re.search(r"^CMAKE_CUDA_COMPILER:\w+=(.+)$", cache, re.MULTILINE)
    assert entry is not None, cache
    pinned = USER_TOOLCHAINS.glob("cuda-*/site/nvidia/cu*/bin/nvcc")
    nvcc = nvcc_path() if cuda_lane.env is None else str(next(pinned))
    assert nvcc is not None and Path(entry.group(1)).resolve() == Path(nvcc).resolve()


def test_cuda_stub_answers_stub_library(cuda_lane: Built, tmp_path: Path) -> None:
    """Each function the stub exports returns CUDA_ERROR_STUB_LIBRARY (34), as NVIDIA's."""
    stub = cuda_lane.build_dir / "dgr-cuda" / "stubs" / "libcuda.so"
    import ctypes

    lib = ctypes.CDLL(str(stub))
    assert lib.cuInit(0) == 34
    assert lib.cuMemAlloc_v2(None, 0) == 34  # the versioned name cuda.h's macros call
    # made at another path from the same cuda.h: the same bytes
    source = (stub.parent / "libcuda-stub.c").read_text()
    names = re.findall(r"^int (cu\w+)\(void\)", source, re.MULTILINE)
    assert len(names) > 500 and "cuCtxCreate_v4" in names
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda.h").write_bytes(_cuda_h().read_bytes())
    again = cudakit.plan(str(include), (), tmp_path / "elsewhere", None)
    cudakit.prepare(again, "gcc")
    assert again.stub is not None and again.stub.read_bytes() == stub.read_bytes()


def test_cuda_lane_rebuild_is_a_noop(cuda_lane: Built) -> None:
    res = run_forge(
        "--root", str(cuda_lane.root), "--json", "build", "--lane", "cuda", "--no-sign",
        env=cuda_lane.env,
    )  # fmt: skip
    assert res.code == 0, res
    assert res.json["lanes"][0]["status"] == "up-to-date"


# ----------------------------------------------------------------------------- vulkan


def _vulkan_missing() -> str | None:
    if shutil.which("glslc") is None:
        return "no glslc on this host (Debian: apt-get install glslc)"
    if not Path("/usr/include/vulkan/vulkan.h").is_file():
        return "no Vulkan headers/loader on this host (Debian: apt-get install libvulkan-dev)"
    return None


@pytest.fixture(scope="module")
def vulkan_lane(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build(tmp_path_factory, "vulkan", VULKAN_FILES, VULKAN_RECIPE, _vulkan_missing())


def test_vulkan_lane_compiles_a_shader_and_links_the_loader(vulkan_lane: Built) -> None:
    lib = next(vulkan_lane.build_dir.rglob("libggml.so"))
    assert "libvulkan.so.1" in _dynamic(lib)["NEEDED"]
    spv = next(vulkan_lane.build_dir.rglob("fill.spv")).read_bytes()
    assert spv[:4] == bytes.fromhex("03022307")  # SPIR-V magic, little-endian
    exe = next(p for p in vulkan_lane.build_dir.rglob("llama-cli") if p.is_file())
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent)}
    ran = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0 and ran.stdout.startswith("backends="), ran


VULKAN_PACKAGES = {"glslc", "libvulkan-dev", "glslang-tools", "spirv-headers"}  # Debian's


def test_rendered_vulkan_jobs_install_the_distributions_packages() -> None:
    """The vulkan lane's CI job installs Debian/Ubuntu's Vulkan packages, and every package
    `doctor` names for what the lane requires is among them."""
    import tomllib

    from support.actions import load_yaml

    from dgr_forge.host.probes import load_probes

    repo = Path(__file__).resolve().parent.parent
    recipe = tomllib.loads((repo / "recipes" / "vulkan.toml").read_text())
    cpu = tomllib.loads((repo / "recipes" / "cpu.toml").read_text())["requires"]["tools"]
    probes = load_probes(repo / "toolchains" / "probes.toml")
    hinted = {  # what the lane needs beyond the cpu lane's tools (cmake, ninja: from pip)
        name
        for probe in (
            *(probes.tools[t] for t in recipe["requires"]["tools"] if t not in cpu),
            *(probes.libraries[lib] for lib in recipe["requires"]["libraries"]),
        )
        for name in probe.packages.get("debian", ())
    }
    assert hinted >= {"glslc", "libvulkan-dev", "spirv-headers"}
    matrix = run_forge("--root", str(repo), "ci", "matrix").json
    row = next(e for e in matrix["include"] if e["lane"] == "vulkan")
    assert set(row["packages"]) >= VULKAN_PACKAGES and hinted <= set(row["packages"]), row
    gitlab = run_forge("--root", str(repo), "ci", "render", "--provider", "gitlab")
    assert gitlab.code == 0, gitlab
    job = load_yaml(gitlab.stdout)["lane:vulkan"]
    assert set(job["variables"]["DGR_PACKAGES"].split()) >= VULKAN_PACKAGES
    github = run_forge("--root", str(repo), "ci", "render", "--provider", "github")
    lane = load_yaml(github.stdout)["jobs"]["lane"]
    rows = {r["lane"]: r for r in lane["strategy"]["matrix"]["include"]}
    assert set(rows["vulkan"]["packages"]) >= VULKAN_PACKAGES
    script = "\n".join(str(step.get("run", "")) for step in lane["steps"])
    assert "apt-get install" in script and "$DGR_PACKAGES" in script
