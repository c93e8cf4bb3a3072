"""`toolchain install cuda`: the toolkit a root pins by sha256, from a wheelhouse the test
builds (no network); `doctor` finding NVIDIA's wheel layout; the CUDA link stub's inputs.

The wheels are stand-ins with NVIDIA's `nvidia/cu13` layout (files only: a `nvcc` that
prints its version, headers, versioned libraries), installed by the real pip.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from support.build import path_without
from support.cli import run_forge
from support.git import Upstream
from support.roots import copy_product, make_forge_root
from support.wheelhouse import make_wheel

from dgr_forge.core.errors import BadInput
from dgr_forge.host import cudakit, toolkit

NVCC = b'#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n'
PROFILE = b'LIBRARIES =+ "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"\n'  # as the wheel's
CUDA_H = b"typedef int CUresult;\n#define CUDAAPI\nCUresult CUDAAPI cuInit(unsigned int Flags);\n"
WHEELS = {  # name, version -> files (path -> bytes, mode)
    ("nvidia-cuda-nvcc", "13.0.88"): {
        "nvidia/cu13/bin/nvcc": (NVCC, 0o755),
        "nvidia/cu13/bin/nvcc.profile": (PROFILE, 0o644),
    },
    ("nvidia-cuda-runtime", "13.0.96"): {
        "nvidia/cu13/include/cuda_runtime.h": (b"/* cudart */\n", 0o644),
        "nvidia/cu13/include/cuda.h": (CUDA_H, 0o644),
        "nvidia/cu13/lib/libcudart.so.13": (b"\x7fELF not really\n", 0o644),
    },
    ("nvidia-cublas", "13.1.0.3"): {
        "nvidia/cu13/include/cublas_v2.h": (b"/* cublas */\n", 0o644),
        "nvidia/cu13/lib/libcublas.so.13": (b"\x7fELF not really\n", 0o644),
    },
}


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel files and the lock naming them by sha256."""
    dest = tmp_path_factory.mktemp("wheelhouse")
    lines = ["schema = 1", 'toolkit = "cuda"', 'version = "13.0.2"']
    for (name, version), files in WHEELS.items():
        wheel = make_wheel(dest, name, version, files)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines += [
            "",
            "[[wheel]]",
            f'name = "{name}"',
            f'version = "{version}"',
            f'sha256 = "{sha}"',
        ]
    return dest, "\n".join(lines) + "\n"


def _root(tmp_path: Path, upstream: Upstream, lock: str) -> Path:
    root = make_forge_root(tmp_path / "forge", upstream)
    copy_product(root)
    (root / "toolchains" / "cuda.lock").write_text(lock)
    return root


def _env(home: Path) -> dict[str, str]:
    """No other CUDA: not on PATH, no $CUDA_PATH; the toolchains home under the test."""
    return {
        "DGR_TOOLCHAINS_DIR": str(home),
        "PATH": path_without("nvcc"),
        "CUDA_PATH": "",
        "CUDA_HOME": "",
    }


def test_install_from_a_wheelhouse_then_doctor_finds_it(
    tmp_path: Path,
    upstream: Upstream,
    wheelhouse: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    house, lock = wheelhouse
    root = _root(tmp_path, upstream, lock)
    home = tmp_path / "toolchains"
    env = _env(home)
    args = ("--root", str(root), "--json", "toolchain", "install", "cuda", "--offline")
    res = run_forge(*args, "--wheelhouse", str(house), env=env)
    assert res.code == 0, res
    digest = hashlib.sha256(lock.encode()).hexdigest()
    prefix = home / f"cuda-{digest[:16]}"
    assert res.json["installed"] is True and res.json["prefix"] == str(prefix)
    assert res.json["lock_sha256"] == digest
    assert {w["name"]: w["version"] for w in res.json["wheels"]} == {n: v for n, v in WHEELS}
    site = prefix / "site"
    assert (site / "nvidia" / "cu13" / "bin" / "nvcc").stat().st_mode & 0o111
    assert not (root / ".dgr").exists() or not list((root / ".dgr").rglob("nvcc"))

    # doctor: the pinned toolkit's nvcc, cudart and cuBLAS (versioned-only libraries)
    doc = run_forge("--root", str(root), "--json", "doctor", env=env)
    tools = {t["name"]: t for t in doc.json["tools"]}
    libs = {lib["name"]: lib for lib in doc.json["libraries"]}
    assert tools["nvcc"]["path"] == str(site / "nvidia" / "cu13" / "bin" / "nvcc")
    assert tools["nvcc"]["version"] == "13.0.88"
    assert libs["cudart"]["path"] == str(site / "nvidia" / "cu13" / "lib" / "libcudart.so.13")
    assert libs["cublas"]["path"] == str(site / "nvidia" / "cu13" / "lib" / "libcublas.so.13")
    cuda = next(lane for lane in doc.json["lanes"] if lane["lane"] == "cuda")
    assert cuda["buildable"] is True, cuda
    assert tools["nvcc"]["packages"]["forge"] == ["toolchain install cuda"]
    (root / "toolchains" / "cuda.lock").rename(tmp_path / "cuda.lock")  # a root pinning none
    bare = run_forge("--root", str(root), "--json", "doctor", env=env)
    nvcc = next(t for t in bare.json["tools"] if t["name"] == "nvcc")
    assert "forge" not in nvcc["packages"] and "pip" in nvcc["packages"]
    assert "toolchain install" not in bare.stderr
    (tmp_path / "cuda.lock").rename(root / "toolchains" / "cuda.lock")
    monkeypatch.setenv("DGR_TOOLCHAINS_DIR", str(home))
    assert toolkit.identity(root / "toolchains" / "cuda.lock", tools["nvcc"]["path"]) == {
        "toolkit": "cuda",
        "version": "13.0.2",
        "lock_sha256": digest,
        "wheels": {n: v for n, v in WHEELS},
    }

    # the unversioned links FindCUDAToolkit needs: in the lane's build dir, not the wheels'
    lib_dir = str(site / "nvidia" / "cu13" / "lib")
    cu13 = site / "nvidia" / "cu13"
    link = cudakit.plan(
        str(cu13 / "include"), (lib_dir,), tmp_path / "b", None, tools["nvcc"]["path"]
    )
    # nvcc's profile says -L$(TOP)/lib64; the wheel has lib/ only: nvcc is told where
    assert link.cuda_flags() == f"-L{lib_dir}"
    for d in ("tk/bin", "tk/lib", "tk/lib64", "wrap/bin", "wrap/lib"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "tk" / "bin" / "nvcc.profile").write_bytes(PROFILE)
    nvcc = str(tmp_path / "tk" / "bin" / "nvcc")  # a classic toolkit: its profile is right
    assert cudakit.plan(str(cu13 / "include"), (), tmp_path, None, nvcc).cuda_flags() == ""
    wrapper = str(tmp_path / "wrap" / "bin" / "nvcc")  # /usr/local/bin/nvcc: `exec` elsewhere
    assert cudakit.plan(str(cu13 / "include"), (), tmp_path, None, wrapper).cuda_flags() == ""
    assert dict(link.links) == {
        "libcublas.so": f"{lib_dir}/libcublas.so.13",
        "libcudart.so": f"{lib_dir}/libcudart.so.13",
    }
    assert f"-DCMAKE_LIBRARY_PATH={tmp_path / 'b' / 'dgr-cuda' / 'lib'}" in link.cmake_args()
    cudakit.prepare(link, "gcc")
    assert os.readlink(tmp_path / "b" / "dgr-cuda" / "lib" / "libcudart.so") == link.links[1][1]
    assert sorted(p.name for p in Path(lib_dir).iterdir()) == ["libcublas.so.13", "libcudart.so.13"]

    # a re-run is a no-op: no pip
    again = run_forge(*args, env={**env, "PATH": "/nonexistent"})
    assert again.code == 0, again
    assert again.json["installed"] is False and "already installed" in again.stderr


def test_a_hash_mismatch_installs_nothing(
    tmp_path: Path, upstream: Upstream, wheelhouse: tuple[Path, str]
) -> None:
    house, lock = wheelhouse
    first = lock.index('sha256 = "') + len('sha256 = "')
    wrong = lock[:first] + ("0" if lock[first] != "0" else "1") + lock[first + 1 :]
    root = _root(tmp_path, upstream, wrong)
    home = tmp_path / "toolchains"
    args = ("--root", str(root), "--json", "toolchain", "install", "cuda", "--offline")
    res = run_forge(*args, "--wheelhouse", str(house), env=_env(home))
    assert res.code == 1, res
    assert "does not match the lock's sha256; nothing was installed" in res.stderr
    assert [p.name for p in home.iterdir()] == [".lock"]  # no prefix, no scratch left
    doc = run_forge("--root", str(root), "--json", "doctor", env=_env(home))
    cuda = next(r for r in doc.json["lanes"] if r["lane"] == "cuda")
    assert "nvcc" in [m["name"] for m in cuda["missing"]]  # nothing of the lock was taken


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('name = "https://evil.example/nvcc.whl"', "wheel[0].name: 'https://evil.example/"),
        ('name = "./nvcc-13.0.88-py3-none-any.whl"', "is not a project name on the index"),
        ('name = "/tmp/nvcc.whl"', "never names a URL, a path or a file"),
        ('name = "nvcc @ file:///tmp/x.whl"', "is not a project name on the index"),
        ('name = "--index-url=http://evil"', "is not a project name on the index"),
        ('version = ">=13"', "wheel[0].version: '>=13' is not an exact version"),
        ('sha256 = "abc"', "wheel[0].sha256: is not 64 lowercase hex digits"),
    ],
)
def test_a_lock_names_index_wheels_only(
    tmp_path: Path, upstream: Upstream, wheelhouse: tuple[Path, str], line: str, message: str
) -> None:
    house, lock = wheelhouse
    key = line.split(" = ")[0]
    at = lock.index(f"\n{key} = ", lock.index("[[wheel]]")) + 1
    end = lock.index("\n", at)
    root = _root(tmp_path, upstream, lock[:at] + line + lock[end:])
    home = tmp_path / "toolchains"
    res = run_forge("--root", str(root), "--json", "toolchain", "install", "cuda", "--offline",
                    "--wheelhouse", str(house), env=_env(home))  # fmt: skip
    assert res.code == 2, res
    assert "toolchains/cuda.lock: " in res.stderr and message in res.stderr
    assert not home.exists()  # nothing installed, nothing created


def test_toolchains_home_linked_into_the_root_is_refused(
    tmp_path: Path, upstream: Upstream, wheelhouse: tuple[Path, str]
) -> None:
    house, lock = wheelhouse
    root = _root(tmp_path, upstream, lock)
    inside = root / "cache"
    inside.mkdir()
    (tmp_path / "home").symlink_to(inside)
    res = run_forge("--root", str(root), "--json", "toolchain", "install", "cuda", "--offline",
                    "--wheelhouse", str(house), env=_env(tmp_path / "home" / "tc"))  # fmt: skip
    assert res.code == 2, res
    assert "is never installed into the root or the workspace" in res.stderr
    assert list(inside.iterdir()) == []


def test_doctor_never_takes_a_toolkit_linked_into_the_root(
    tmp_path: Path, upstream: Upstream, wheelhouse: tuple[Path, str]
) -> None:
    """$CUDA_PATH pointing into the checkout (a pull request's files): never searched."""
    _, lock = wheelhouse
    root = _root(tmp_path, upstream, lock)
    planted = root / "vendor" / "cuda"
    for rel, (data, mode) in {**WHEELS[("nvidia-cuda-nvcc", "13.0.88")],
                              **WHEELS[("nvidia-cuda-runtime", "13.0.96")]}.items():  # fmt: skip
        path = planted / rel.replace("nvidia/cu13/", "")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    (tmp_path / "cuda").symlink_to(planted)
    env = {**_env(tmp_path / "toolchains"), "CUDA_PATH": str(tmp_path / "cuda")}
    doc = run_forge("--root", str(root), "--json", "doctor", env=env)
    assert doc.code == 0, doc
    tools = {t["name"]: t for t in doc.json["tools"]}
    libs = {lib["name"]: lib for lib in doc.json["libraries"]}
    assert not tools["nvcc"]["found"]
    for found in (tools["nvcc"]["path"], libs["cudart"]["path"]):
        assert found is None or not Path(found).resolve().is_relative_to(root.resolve())


# ----------------------------------------------------------------------------- the stub


def test_cuda_h_with_a_non_identifier_or_a_million_declarations(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as err:
        cudakit.stub_functions(b"CUresult CUDAAPI cu$Init(void);\n", "cuda.h")
    assert err.value.exit_code == 2
    assert "cuda.h: declares a function named 'cu$Init', not a CUDA identifier" in str(err.value)
    with pytest.raises(BadInput, match="declares a function named 'system', not a CUDA"):
        cudakit.stub_functions(b'CUresult CUDAAPI system("rm(void);\n', "cuda.h")
    million = b"".join(b"CUresult CUDAAPI cuF%d(void);\n" % i for i in range(1_000_000))
    with pytest.raises(BadInput, match="declares more than 20000 functions"):
        cudakit.stub_functions(million, "cuda.h")
    with pytest.raises(BadInput, match="declares no CUDA driver function"):
        cudakit.stub_functions(b"int main;\n", "cuda.h")
    # through the lane's preparation: the file is bounded before it is parsed
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda.h").write_bytes(million)
    link = cudakit.plan(str(include), (), tmp_path / "build", None)
    with pytest.raises(BadInput, match="limit for a CUDA header"):
        cudakit.prepare(link, "gcc")
    assert not (tmp_path / "build" / "dgr-cuda" / "stubs" / "libcuda.so").exists()


def test_versioned_and_per_thread_names_are_exported() -> None:
    text = (
        b"CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n);\n"
        b"#define cuMemAlloc cuMemAlloc_v2\n"
        b"#define cuMemcpy __CUDA_API_PTDS(cuMemcpy)\n"
        b"#define cuStreamQuery __CUDA_API_PTSZ(cuStreamQuery)\n"
    )
    assert cudakit.stub_functions(text, "cuda.h") == [
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemcpy_ptds",
        "cuStreamQuery_ptsz",
    ]


def test_no_stub_where_a_driver_library_is_present(tmp_path: Path) -> None:
    lib = tmp_path / "lib64"
    (lib / "stubs").mkdir(parents=True)
    assert cudakit.find_driver((str(lib),), system=()) is None
    (lib / "stubs" / "libcuda.so").write_bytes(b"\x7fELF")  # a toolkit's own stub
    assert cudakit.find_driver((str(lib),), system=()) == str(lib / "stubs" / "libcuda.so")
    system = tmp_path / "usr-lib"
    system.mkdir()
    (system / "libcuda.so.1").write_bytes(b"\x7fELF")  # the driver's, no dev link
    assert cudakit.find_driver((), system=(str(system),)) == str(system / "libcuda.so.1")
    link = cudakit.plan(str(tmp_path), (), tmp_path / "build", str(system / "libcuda.so.1"))
    assert link.stub is None and "stubs" not in link.link_flags()
    assert link.cmake_args() == (f"-DCUDA_cuda_driver_LIBRARY={system / 'libcuda.so.1'}",)
    cudakit.prepare(link, "gcc")
    assert not (tmp_path / "build" / "dgr-cuda" / "stubs").exists()
    assert cudakit.recorded(link) == []
