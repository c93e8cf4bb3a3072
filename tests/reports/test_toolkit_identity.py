"""A CUDA lane's report: the pinned toolkit's identity (the lock's digest and every
wheel's version) and the driver link stub as inputs, never as subjects."""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace
from support.reports import lane_build

from dgr_forge.attest import provenance
from dgr_forge.attest.records import LinkInput
from dgr_forge.core.forge import Forge

LOCK = {
    "toolkit": "cuda",
    "version": "13.0.2",
    "lock_sha256": "9" * 64,
    "wheels": {"nvidia-cuda-nvcc": "13.0.88", "nvidia-cublas": "13.1.0.3"},
    "lock": "toolchains/cuda.lock",
}


def _deps(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}


def test_the_toolkit_and_the_stub_are_inputs(forge: Forge) -> None:
    build = lane_build(forge)
    stub = build.build_dir / "dgr-cuda" / "stubs" / "libcuda.so"  # as a cuda lane has it
    one = replace(
        build,
        toolkit=LOCK,
        link_inputs=[LinkInput(path=stub, sha256="5" * 64, note="link stub, not shipped")],
    )
    st = provenance.statement(forge, one)
    deps = _deps(st)
    toolkit = deps["cuda-toolkit"]
    assert toolkit["uri"] == "pkg:generic/cuda-toolkit@13.0.2"
    assert toolkit["digest"] == {"sha256": "9" * 64}
    assert toolkit["annotations"] == {"lock": "toolchains/cuda.lock", "wheels": LOCK["wheels"]}
    assert deps["build/cpu/dgr-cuda/stubs/libcuda.so"] == {
        "name": "build/cpu/dgr-cuda/stubs/libcuda.so",
        "digest": {"sha256": "5" * 64},
        "annotations": {"note": "link stub, not shipped"},
    }
    assert not any("libcuda" in s["name"] for s in st["subject"])
    # two builds with one lock show one toolchain
    other = provenance.statement(forge, replace(one, started_on=build.finished_on))
    assert _deps(other)["cuda-toolkit"] == toolkit
    assert "cuda-toolkit" not in _deps(provenance.statement(forge, build))  # no lock: none
