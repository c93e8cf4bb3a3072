"""The CMake File API (cmake-file-api(7)): what CMake itself says it will build.

A query written into the build directory before configure makes CMake write a reply:
the codemodel (targets and their on-disk artifacts), the cache and the toolchains
(compiler paths, ids and versions). Artifacts come from here, never from globbing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from msgspec import Struct

from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.fsutil import atomic_write_text

CLIENT = "client-dgr-forge"
REQUESTS = [
    {"kind": "codemodel", "version": 2},
    {"kind": "cache", "version": 2},
    {"kind": "toolchains", "version": 1},
]
# Artifact kinds a lane ships; static libraries are intermediate for a worker build.
SHIPPED = ("EXECUTABLE", "SHARED_LIBRARY", "MODULE_LIBRARY")


class Target(Struct, frozen=True):
    name: str
    kind: str  # EXECUTABLE, SHARED_LIBRARY, ...
    artifacts: tuple[Path, ...]  # absolute
    # the targets this one depends on (the codemodel's `dependencies`), by name
    depends: tuple[str, ...] = ()
    installed: bool = False  # upstream's own install() names it (the codemodel's `install`)


class Compiler(Struct, frozen=True):
    language: str
    path: str
    id: str
    version: str


class Reply(Struct, frozen=True):
    cmake_version: str
    targets: tuple[Target, ...]
    cache: dict[str, str]
    compilers: tuple[Compiler, ...]


def query_dir(build_dir: Path) -> Path:
    return build_dir / ".cmake" / "api" / "v1" / "query" / CLIENT


def write_query(build_dir: Path) -> None:
    """The stateful query (client query.json); written before configure, idempotent."""
    path = query_dir(build_dir) / "query.json"
    text = json.dumps({"requests": REQUESTS}, indent=2) + "\n"
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise OperationFailed(
            f"{path}: unreadable CMake File API reply: {err}",
            hint="re-run the build; if it persists delete the lane's build directory",
        ) from None


def read_reply(build_dir: Path) -> Reply:
    reply_dir = build_dir / ".cmake" / "api" / "v1" / "reply"
    indexes = sorted(reply_dir.glob("index-*.json"))  # names sort by time: last is newest
    if not indexes:
        raise OperationFailed(
            f"{reply_dir}: no CMake File API reply",
            hint="CMake 3.14+ writes it during configure; re-run the build",
        )
    index = _load(indexes[-1])
    responses = index.get("reply", {}).get(CLIENT, {}).get("query.json", {}).get("responses", [])
    files: dict[str, Path] = {}
    for response in responses:
        if "jsonFile" in response:
            files[response["kind"]] = reply_dir / response["jsonFile"]
    missing = [str(r["kind"]) for r in REQUESTS if r["kind"] not in files]
    if missing:
        raise OperationFailed(
            f"CMake File API reply lacks {', '.join(missing)}",
            hint="the CMake in use is too old (3.20+ needed for toolchains-v1)",
        )

    codemodel = _load(files["codemodel"])
    source_build = Path(codemodel["paths"]["build"])
    targets: list[Target] = []
    configs = codemodel.get("configurations", [])
    refs = configs[0].get("targets", []) if configs else []
    names = {ref.get("id"): ref.get("name") for ref in refs}
    for ref in refs:
        data = _load(reply_dir / ref["jsonFile"])
        artifacts = []
        for art in data.get("artifacts", []):
            p = Path(art["path"])
            artifacts.append(p if p.is_absolute() else source_build / p)
        depends = tuple(
            str(names[d["id"]]) for d in data.get("dependencies", []) if d.get("id") in names
        )
        installed = isinstance(data.get("install"), dict)
        targets.append(Target(data["name"], data["type"], tuple(artifacts), depends, installed))

    cache_data = _load(files["cache"])
    cache = {e["name"]: e["value"] for e in cache_data.get("entries", [])}

    toolchains = _load(files["toolchains"])
    compilers = []
    for tc in toolchains.get("toolchains", []):
        comp = tc.get("compiler", {})
        compilers.append(
            Compiler(
                language=tc.get("language", "?"),
                path=comp.get("path", ""),
                id=comp.get("id", ""),
                version=comp.get("version", ""),
            )
        )
    version = index.get("cmake", {}).get("version", {}).get("string", "")
    return Reply(version, tuple(targets), cache, tuple(compilers))


def target_documents(build_dir: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The codemodel's top source directory and each target's own reply document (its
    compile groups, include directories and their backtraces: `lanes.boundary`)."""
    reply_dir = build_dir / ".cmake" / "api" / "v1" / "reply"
    indexes = sorted(reply_dir.glob("index-*.json"))
    if not indexes:
        raise OperationFailed(f"{reply_dir}: no CMake File API reply", hint="re-run the build")
    responses = _load(indexes[-1]).get("reply", {}).get(CLIENT, {}).get("query.json", {})
    codemodel = next(
        (r for r in responses.get("responses", []) if r.get("kind") == "codemodel"), None
    )
    if codemodel is None or "jsonFile" not in codemodel:
        raise OperationFailed(f"{reply_dir}: the reply has no codemodel", hint="re-run the build")
    model = _load(reply_dir / codemodel["jsonFile"])
    configs = model.get("configurations", [])
    refs = configs[0].get("targets", []) if configs else []
    top = Path(model["paths"]["source"])
    return top, [_load(reply_dir / ref["jsonFile"]) for ref in refs]


def with_dependencies(reply: Reply, only: tuple[str, ...]) -> set[str]:
    """`only` and every target they depend on, transitively: the shared libraries a
    requested target loads at run time are shipped with it (libllama loads libggml,
    which loads libggml-base and libggml-cpu)."""
    by_name = {t.name: t for t in reply.targets}
    seen: set[str] = set()
    todo = [n for n in only if n in by_name]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [d for d in by_name[name].depends if d in by_name]
    return seen


def shipped_roots(reply: Reply, only: tuple[str, ...], extra: tuple[str, ...] = ()) -> set[str]:
    """The targets a lane ships, before their libraries: what the recipe's `targets` name
    (only those are built), else what upstream itself installs (its `install(TARGETS ...)`
    rules, as the File API reports them), plus `extra` (the certification suite's
    programs) either way. When the recipe names none and upstream installs nothing, every
    target built (the empty set here: no filter)."""
    if only:
        roots = set(only)
    else:
        roots = {t.name for t in reply.targets if t.installed and t.kind in SHIPPED}
        if not roots:
            return set()
    return roots | set(extra)


def shipped_artifacts(
    reply: Reply, only: tuple[str, ...] = (), extra: tuple[str, ...] = ()
) -> list[tuple[Target, Path]]:
    """(target, file) for every shipped artifact: the `shipped_roots` and the shared and
    module libraries they depend on. An executable that is not a root (a host tool a
    build runs, such as llama.cpp's llama-ui-embed, which it never installs) is not
    shipped.

    Targets that were not built (EXCLUDE_FROM_ALL upstream tools a worker does not link)
    have no file on disk and are left out.
    """
    roots = shipped_roots(reply, only, extra)
    wanted = with_dependencies(reply, tuple(sorted(roots))) if roots else set()
    out: list[tuple[Target, Path]] = []
    for target in reply.targets:
        if target.kind not in SHIPPED:
            continue
        if roots and target.name not in wanted:
            continue
        if roots and target.name not in roots and target.kind == "EXECUTABLE":
            continue  # a tool the target's build runs (a generator) is not shipped with it
        out += [(target, path) for path in target.artifacts if path.is_file()]
    return out


def stale_siblings(reply: Reply, shipped: list[tuple[Target, Path]]) -> list[Path]:
    """Files an earlier build of a shipped library left beside it: another version of the
    same versioned file (`libllama.so.0.0.101` beside this build's `libllama.so.0.0.102`),
    and links to one, that no target of this build produces. A rebase changes the
    version; the old files would otherwise lie in the directory that ships."""
    produced = {p for t in reply.targets for p in t.artifacts}
    current = {path.resolve() for _, path in shipped}
    stale: set[Path] = set()
    for target, path in shipped:
        if target.kind not in ("SHARED_LIBRARY", "MODULE_LIBRARY"):
            continue
        real = path.resolve()
        stem = real.name.split(".so", 1)[0] + ".so."
        if ".so." not in real.name:
            continue  # unversioned: a rebuild overwrites it in place
        for entry in os.scandir(real.parent):
            p = Path(entry.path)
            if not entry.name.startswith(stem) or p in produced or p == real:
                continue
            if entry.is_symlink():
                if not p.exists() or p.resolve() not in current:
                    stale.add(p)  # a link to an old version (or dangling)
            elif entry.is_file(follow_symlinks=False) and p.resolve() not in current:
                stale.add(p)
    return sorted(stale)
