"""Statement hygiene (issue 13 #6): RFC 3986 URIs, no machine paths, no credentials."""

from __future__ import annotations

import re
from typing import Any

import pytest
from msgspec.structs import replace
from support.reports import lane_build

from dgr_forge.attest import provenance
from dgr_forge.attest.records import Tool, WorkerSource
from dgr_forge.core.forge import Forge

URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")


def deps(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in st["predicate"]["buildDefinition"]["resolvedDependencies"]}


def test_credentials_in_urls_never_reach_the_statement(forge: Forge) -> None:
    build = replace(
        lane_build(forge),
        upstream_url="https://user:s3cret@mirror.invalid/llama.cpp.git",
        worker=WorkerSource("https://bot:t0ken@git.invalid/w.git", "c" * 40, False),
    )
    st = provenance.statement(forge, build)
    text = repr(st)
    assert "s3cret" not in text and "t0ken" not in text
    for dep in deps(st).values():
        if "uri" in dep:
            assert URI.match(dep["uri"]), dep


def test_tool_paths_become_placeholders_and_package_urls(forge: Forge) -> None:
    build = replace(
        lane_build(forge),
        tools=[
            Tool("ninja", "/opt/tools/bin/ninja", "1.13.2"),
            Tool("c-compiler", "/x/cc", "GNU 12"),
        ],
        cmake_args=["-DCMAKE_MAKE_PROGRAM=/opt/tools/bin/ninja", "-DX=/opt/tools/bin/ninja2"],
        placeholders={"/opt/tools/bin/ninja": "${NINJA}"},
        toolchain_file="toolchains/gcc.cmake",
        toolchain_sha256="ab" * 32,
    )
    st = provenance.statement(forge, build)
    args = st["predicate"]["buildDefinition"]["internalParameters"]["cmakeArgs"]
    # a placeholder replaces the whole path, never a prefix of another one
    assert args == ["-DCMAKE_MAKE_PROGRAM=${NINJA}", "-DX=/opt/tools/bin/ninja2"]
    d = deps(st)
    assert d["ninja"]["uri"] == "pkg:generic/ninja@1.13.2"
    assert d["c-compiler"]["uri"] == "pkg:generic/c-compiler@GNU%2012"
    assert "path" not in d["ninja"]["annotations"]
    assert d["toolchains/gcc.cmake"] == {
        "name": "toolchains/gcc.cmake",
        "digest": {"sha256": "ab" * 32},
    }


@pytest.mark.parametrize(
    ("image", "uri", "digest"),
    [
        ("debian:12", "pkg:docker/debian@12", None),
        ("registry.local:5000/team/img", "pkg:docker/registry.local%3A5000/team/img", None),
        (
            "nvidia/cuda:12.4-devel@sha256:" + "0" * 64,
            "pkg:docker/nvidia/cuda@12.4-devel",
            "0" * 64,
        ),
    ],
)
def test_container_image_from_env(
    forge: Forge,
    monkeypatch: pytest.MonkeyPatch,
    image: str,
    uri: str,
    digest: str | None,
) -> None:
    monkeypatch.setenv("DGR_CONTAINER_IMAGE", image)
    d = deps(provenance.statement(forge, lane_build(forge)))["container-image"]
    assert d["uri"] == uri and URI.match(d["uri"])
    assert d.get("digest") == ({"sha256": digest} if digest else None)


@pytest.mark.parametrize("image", ["", "a b", "x\n--y", "i" * 600])
def test_hostile_container_image_is_left_out(
    forge: Forge, monkeypatch: pytest.MonkeyPatch, image: str
) -> None:
    monkeypatch.setenv("DGR_CONTAINER_IMAGE", image)
    assert "container-image" not in deps(provenance.statement(forge, lane_build(forge)))
