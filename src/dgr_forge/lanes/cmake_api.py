"""What CMake says: the File API (cmake-file-api(7)) what it will build (the codemodel,
the cache, the toolchains; artifacts come from here, never from globbing), and the
generated rules which launchers the Ninja rules really run (issue 20): the report names
those, never the one asked for (an upstream can set `RULE_LAUNCH_COMPILE` itself, as ggml
does to ccache; a toolchain file a compiler launcher)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TypeVar

import msgspec
from msgspec import Struct, field

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
    language: str = "?"
    path: str = ""
    id: str = ""
    version: str = ""


class Reply(Struct, frozen=True):
    cmake_version: str
    targets: tuple[Target, ...]
    cache: dict[str, str]
    compilers: tuple[Compiler, ...]


# -- the reply documents as cmake-file-api(7) writes them, the fields the forge reads


class _Response(Struct):
    kind: str = ""
    json_file: str | None = field(default=None, name="jsonFile")


class _Query(Struct):
    responses: list[_Response] = field(default_factory=list)


class _Client(Struct):
    query: _Query = field(default_factory=_Query, name="query.json")


class _Replies(Struct):
    client: _Client = field(default_factory=_Client, name=CLIENT)


class _Version(Struct):
    string: str = ""


class _CMake(Struct):
    version: _Version = field(default_factory=_Version)


class _Index(Struct):
    cmake: _CMake = field(default_factory=_CMake)
    reply: _Replies = field(default_factory=_Replies)


class Paths(Struct):
    source: str = "."
    build: str = "."


class _Ref(Struct):
    json_file: str = field(name="jsonFile")
    id: str = ""
    name: str = ""


class _Configuration(Struct):
    targets: list[_Ref] = field(default_factory=list)


class _Codemodel(Struct):
    paths: Paths
    configurations: list[_Configuration] = field(default_factory=list)


class Dependency(Struct):
    id: str = ""


class ArtifactPath(Struct):
    path: str


class Include(Struct):
    path: str
    backtrace: int | None = None


class CompileGroup(Struct):
    includes: list[Include] = field(default_factory=list)


class Source(Struct):
    compile_group: int | None = field(default=None, name="compileGroupIndex")


class Node(Struct):
    command: int | None = None


class BacktraceGraph(Struct):
    nodes: list[Node] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


class TargetDoc(Struct):
    name: str
    type: str
    paths: Paths = field(default_factory=Paths)
    artifacts: list[ArtifactPath] = field(default_factory=list)
    dependencies: list[Dependency] = field(default_factory=list)
    install: object = None
    compile_groups: list[CompileGroup] = field(default_factory=list, name="compileGroups")
    sources: list[Source] = field(default_factory=list)
    backtrace_graph: BacktraceGraph = field(default_factory=BacktraceGraph, name="backtraceGraph")


class _Entry(Struct):
    name: str
    value: str


class _Cache(Struct):
    entries: list[_Entry] = field(default_factory=list)


class _Toolchain(Struct):
    language: str = "?"
    compiler: Compiler = field(default_factory=Compiler)


class _Toolchains(Struct):
    toolchains: list[_Toolchain] = field(default_factory=list)


def write_query(build_dir: Path) -> None:
    """The stateful query (client query.json); written before configure, idempotent."""
    path = build_dir / ".cmake" / "api" / "v1" / "query" / CLIENT / "query.json"
    text = json.dumps({"requests": REQUESTS}, indent=2) + "\n"
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)


T = TypeVar("T", bound=Struct)


def _load(path: Path, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except (OSError, msgspec.DecodeError) as err:
        raise OperationFailed(
            f"{path}: unreadable CMake File API reply: {err}",
            hint="re-run the build; if it persists delete the lane's build directory",
        ) from None


def _codemodel(
    build_dir: Path,
) -> tuple[_Index, dict[str, Path], _Codemodel, list[tuple[_Ref, TargetDoc]]]:
    reply_dir = build_dir / ".cmake" / "api" / "v1" / "reply"
    if not (indexes := sorted(reply_dir.glob("index-*.json"))):
        raise OperationFailed(
            f"{reply_dir}: no CMake File API reply",
            hint="CMake 3.14+ writes it during configure; re-run the build",
        )
    index = _load(indexes[-1], _Index)  # names sort by time: the last is the newest
    responses = index.reply.client.query.responses
    files = {r.kind: reply_dir / r.json_file for r in responses if r.json_file is not None}
    if missing := [str(r["kind"]) for r in REQUESTS if r["kind"] not in files]:
        raise OperationFailed(
            f"CMake File API reply lacks {', '.join(missing)}",
            hint="the CMake in use is too old (3.20+ needed for toolchains-v1)",
        )
    model = _load(files["codemodel"], _Codemodel)
    refs = model.configurations[0].targets if model.configurations else []
    return index, files, model, [(ref, _load(reply_dir / ref.json_file, TargetDoc)) for ref in refs]


def read_reply(build_dir: Path) -> Reply:
    index, files, codemodel, docs = _codemodel(build_dir)
    source_build = Path(codemodel.paths.build)
    names = {ref.id: ref.name for ref, _ in docs}
    targets: list[Target] = []
    for _, data in docs:
        artifacts = [source_build / a.path for a in data.artifacts]  # an absolute one stays
        depends = tuple(names[d.id] for d in data.dependencies if d.id in names)
        installed = isinstance(data.install, dict)
        targets.append(Target(data.name, data.type, tuple(artifacts), depends, installed))
    cache = {e.name: e.value for e in _load(files["cache"], _Cache).entries}
    tcs = _load(files["toolchains"], _Toolchains).toolchains
    compilers = tuple(msgspec.structs.replace(tc.compiler, language=tc.language) for tc in tcs)
    return Reply(index.cmake.version.string, tuple(targets), cache, compilers)


def target_documents(build_dir: Path) -> tuple[Path, list[TargetDoc]]:
    _, _, model, docs = _codemodel(build_dir)
    return Path(model.paths.source), [doc for _, doc in docs]


def shipped_artifacts(
    reply: Reply, only: tuple[str, ...] = (), extra: tuple[str, ...] = ()
) -> list[tuple[Target, Path]]:
    """(target, file) for every shipped artifact on disk: the recipe's `targets` (else what
    upstream installs; else all), `extra` (certify's programs), and their libraries."""
    roots = set(only) or {t.name for t in reply.targets if t.installed and t.kind in SHIPPED}
    roots |= set(extra) if roots else set()
    # and every target they depend on, transitively: a requested target's shared libraries
    by_name = {t.name: t for t in reply.targets}
    wanted: set[str] = set()
    todo = [n for n in sorted(roots) if n in by_name]
    while todo:
        if (name := todo.pop()) not in wanted:
            wanted.add(name)
            todo += [d for d in by_name[name].depends if d in by_name]
    out: list[tuple[Target, Path]] = []
    for target in reply.targets:
        if target.kind not in SHIPPED or (roots and target.name not in wanted):
            continue
        if roots and target.name not in roots and target.kind == "EXECUTABLE":
            continue  # a tool its build runs (llama.cpp's llama-ui-embed) is not shipped
        out += [(target, path) for path in target.artifacts if path.is_file()]
    return out


def stale_siblings(reply: Reply, shipped: list[tuple[Target, Path]]) -> list[Path]:
    """Other versions of a shipped library (and links to them) that an earlier build left
    beside it: a rebase changes the version, the old files would otherwise ship."""
    produced = {p for t in reply.targets for p in t.artifacts}
    current = {path.resolve() for _, path in shipped}
    stale: set[Path] = set()
    for target, path in shipped:
        real = path.resolve()
        if target.kind not in ("SHARED_LIBRARY", "MODULE_LIBRARY") or ".so." not in real.name:
            continue  # not a library, or unversioned: a rebuild overwrites it in place
        stem = real.name.split(".so", 1)[0] + ".so."
        for entry in os.scandir(real.parent):
            p = Path(entry.path)
            if not entry.name.startswith(stem) or p in produced or p == real:
                continue
            if (entry.is_symlink() or entry.is_file(follow_symlinks=False)) and (
                not p.exists() or p.resolve() not in current
            ):
                stale.add(p)  # an old version, or a link to one (or dangling)
    return sorted(stale)


# ----------------------------------------------------------------------------- the rules

# patterns as strings: compiled (and cached by `re`) at first use, never on a no-op's start
_RULE = r"(?m)^rule (\S+)\n((?:[ \t]+.*\n?)*)"
_COMMAND = r"(?m)^\s+command = (.*)$"
_VAR = r"(?m)^\s+(LAUNCHER|CODE_CHECK) = (.*)$"
# CMakeCache.txt entries that name a program CMake resolved for the rules
_PROGRAM = (
    r"(?m)^(CMAKE_(?:\w+_)?(?:COMPILER|AR|RANLIB|LINKER|COMMAND|NM|OBJCOPY|OBJDUMP|STRIP|MT"
    r"|ADDR2LINE|DLLTOOL|READELF)):[A-Z]+=(.+)$"
)
_SKIP = ("$PRE_LINK", "$POST_BUILD", ":", "")


class Launchers(Struct):
    compile: set[str] = field(default_factory=set)  # around compiles
    link: set[str] = field(default_factory=set)  # around link / archive steps
    code_check: set[str] = field(default_factory=set)

    def problems(self, chosen: str | None) -> list[str]:
        """How this differs from the forge's choice (`chosen`, or None for no launcher)."""
        out = []
        if self.compile != ({chosen} if chosen else set()):
            found = ", ".join(sorted(self.compile)) or "none"
            out.append(f"compiles run through {found}, the forge chose {chosen or 'none'}")
        if self.link:
            out.append(f"link steps run through {', '.join(sorted(self.link))}")
        if self.code_check:
            out.append(f"compiles run a code check: {', '.join(sorted(self.code_check))}")
        return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise OperationFailed(
            f"{path}: unreadable after configure ({err.strerror})",
            hint="delete the lane's build directory and build again",
        ) from None


def programs(build_dir: Path) -> dict[str, str]:
    """CMakeCache.txt's program entries (CMAKE_C_COMPILER, CMAKE_AR, ...): name -> path."""
    text = _read(build_dir / "CMakeCache.txt")
    return {m[1]: path for m in re.finditer(_PROGRAM, text) if (path := m[2].strip())}


def read_launchers(build_dir: Path) -> Launchers:
    found = Launchers()
    rules = _read(build_dir / "CMakeFiles" / "rules.ninja")
    known = {p for p in programs(build_dir).values() if p.startswith("/")}
    for match in re.finditer(_RULE, rules):
        name, body = match.group(1), match.group(2)
        if (command := re.search(_COMMAND, body)) is None:
            continue
        text = command.group(1)
        if "_COMPILER__" in name:
            if "${LAUNCHER}" in text and (head := text.split("${LAUNCHER}", 1)[0].strip()):
                found.compile.add(head)
        elif "_LINKER__" in name:
            for step in text.split(" && "):
                step = step.replace("${LAUNCHER}", "").strip()
                if step in _SKIP:
                    continue
                at = [step.find(p) for p in known if step.find(p) >= 0]
                head = step[: min(at)].strip() if at else step.split(" ", 1)[0]
                if head:
                    found.link.add(head)
    for match in re.finditer(_VAR, _read(build_dir / "build.ninja")):
        if value := match.group(2).strip():
            (found.compile if match.group(1) == "LAUNCHER" else found.code_check).add(value)
    return found
