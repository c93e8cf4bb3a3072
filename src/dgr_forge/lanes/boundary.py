"""The worker boundary, proven after each worker build (docs/build-and-reports.md, 'The worker
boundary'): every upstream file a worker object read and every upstream symbol it imports
lies in the boundary; a missing or stale deps log is an error, never a pass. A leak fails
the lane (exit 1) before anything is signed; the surface goes into the report.
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
from pathlib import Path
from typing import Annotated, Any

from msgspec import Struct

from dgr_forge.core import proc
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.structs import d
from dgr_forge.core.tominput import shown_value
from dgr_forge.core.urls import one_line
from dgr_forge.lanes.state import lane_states
from dgr_forge.upstream import surface as surface_mod
from dgr_forge.upstream.surface import MAX_HEADER_BYTES, Surface

MAX_DEPS_OUTPUT = 256 * 1024 * 1024  # `ninja -t deps` of llama.cpp's cpu lane: ~9 MB
MAX_OBJECT_BYTES = 1024 * 1024 * 1024
MAX_SYMBOLS = 1_000_000  # per object; llama.cpp's largest cpu-lane object has ~20,000
DEPS_SIGNATURE = b"# ninjadeps\n"
_REBUILD = "delete the lane's build directory and build again"


class IncludeLeak(Struct, frozen=True):
    """A file of the upstream tree that a worker object read outside the boundary."""

    source: Annotated[str, d("the worker source whose object read it")]
    header: Annotated[str, d("the header, by its path in the upstream tree (links resolved)")]
    boundary: Annotated[list[str], d("the boundary directories, in the upstream tree")]


class SymbolLeak(Struct, frozen=True):
    """An upstream symbol the worker imports that no boundary header it read declares."""

    name: Annotated[str, d("the symbol: a C name, or a C++ name demangled")]
    symbol: Annotated[str, d("the linker's name (mangled for C++)")]
    library: Annotated[str, d("the upstream library that defines it")]


class Leaks(Struct, frozen=True):
    """what crossed the worker boundary (the lane fails, nothing is signed)"""

    includes: Annotated[list[IncludeLeak], d("upstream files read outside the boundary")]
    symbols: Annotated[list[SymbolLeak], d("upstream symbols imported, declared nowhere public")]
    boundary: Annotated[list[str], d("the boundary directories, in the upstream tree")]


class Checked(Struct, frozen=True):
    leaks: Leaks
    surface: Surface

    @property
    def ok(self) -> bool:
        return not self.leaks.includes and not self.leaks.symbols

    def messages(self) -> list[str]:
        return [
            f"{one_line(leak.source)}: reads {one_line(leak.header)}, outside the boundary "
            f"({', '.join(leak.boundary) or 'none'})"
            for leak in self.leaks.includes
        ] + [
            f"{leak.name} ({leak.library}): imported from upstream but declared in no "
            "boundary header the worker read"
            for leak in self.leaks.symbols
        ]


class _Target(Struct, frozen=True):
    name: str
    source: Path  # resolved
    objects: str  # the Ninja object directory, relative to the build directory
    compiled: int  # sources with a compile group
    includes: tuple[tuple[Path, str], ...]  # (resolved dir, the command that added it)
    depends: tuple[str, ...]
    artifact: str  # the first artifact's file name ("" for an object library)


def _targets(build_dir: Path) -> list[_Target]:
    from dgr_forge.lanes import cmake_api

    top, docs = cmake_api.target_documents(build_dir)
    out = []
    for doc in docs:
        nodes, commands = doc.backtrace_graph.nodes, doc.backtrace_graph.commands
        includes = []
        for group in doc.compile_groups:
            for inc in group.includes:
                cmd = nodes[inc.backtrace].command if inc.backtrace is not None else None
                by = commands[cmd] if cmd is not None and cmd < len(commands) else ""
                includes.append((Path(os.path.realpath(inc.path)), by))
        bld = doc.paths.build
        objects = "CMakeFiles" if bld == "." else f"{bld}/CMakeFiles"
        out.append(
            _Target(
                name=doc.name,
                source=Path(os.path.realpath(top / doc.paths.source)),
                objects=f"{objects}/{doc.name}.dir/",
                compiled=sum(1 for s in doc.sources if s.compile_group is not None),
                includes=tuple(includes),
                depends=tuple(x.id.split("::")[0] for x in doc.dependencies),
                artifact=Path(doc.artifacts[0].path).name if doc.artifacts else "",
            )
        )
    return out


def _failed(path: Path, problem: str, hint: str = _REBUILD) -> OperationFailed:
    return OperationFailed(f"{path}: {problem}", hint=hint, details={"file": str(path)})


def _bad_log(log: Path, problem: str) -> OperationFailed:
    fix = f"delete {log.parent} and build again: Ninja writes the log as it compiles"
    return _failed(log, problem, fix)


def read_deps(ninja: str, build_dir: Path) -> dict[str, list[str]]:
    """Object -> the files it read (the source first); a bad log is an error, never a pass."""
    log = build_dir / ".ninja_deps"
    try:
        st = os.lstat(log)
        with open(log, "rb") as f:
            sig = f.read(len(DEPS_SIGNATURE))
    except OSError as err:
        raise _bad_log(
            log,
            f"ninja's deps log is missing ({err.strerror}): the headers the worker read "
            "cannot be checked, and an unchecked boundary is never a pass",
        ) from None
    if not os.path.isfile(log) or os.path.islink(log) or sig != DEPS_SIGNATURE or st.st_size < 16:
        raise _bad_log(
            log,
            "not a ninja deps log (a link, or no `# ninjadeps` signature): the headers the "
            "worker read cannot be checked",
        )
    ran = proc.capture([ninja, "-C", str(build_dir), "-t", "deps"], timeout=600)
    text = ran.stdout
    if ran.returncode != 0 or ran.stderr.strip() or len(text) > MAX_DEPS_OUTPUT:
        raise _bad_log(
            log,
            f"ninja could not read its deps log (exit {ran.returncode}): "
            f"{ran.stderr.strip()[-500:] or 'output too large'}",
        )
    deps: dict[str, list[str]] = {}
    lines = enumerate(text.split("\n"), 1)
    for i, line in lines:
        if not line:
            continue
        head, sep, rest = line.rpartition(": #deps ")
        count, _, tail = rest.partition(", deps mtime ")
        if not sep or not count.isdigit() or not tail.endswith(("(VALID)", "(STALE)")):
            raise _bad_log(
                log, f"unreadable line {i} of `ninja -t deps`: {shown_value(line[:200])}"
            )
        if tail.endswith("(STALE)"):
            raise _bad_log(
                log,
                f"the record of {shown_value(head)} is stale (the object is newer than what "
                "ninja recorded it read)",
            )
        n = int(count)
        block = [x for _, x in itertools.islice(lines, n)]
        if len(block) != n or not all(x.startswith("    ") for x in block):
            raise _bad_log(
                log,
                f"the record of {shown_value(head)} does not hold the {n} paths it announces "
                "(a path with a newline?)",
            )
        deps[head] = [x[4:] for x in block]
    return deps


class _Symbols(Struct):
    undefined: set[str]
    defined: set[str]  # global or weak
    strong: set[str]  # global, not weak


def preload() -> None:
    """Import pyelftools in a thread while Ninja compiles (the build frees the GIL)."""
    import contextlib
    import threading

    def quietly() -> None:
        with contextlib.suppress(Exception):  # the check imports it again, and says why
            import elftools.elf.elffile  # noqa: F401  (~0.1 s: its DWARF modules come with it)

    threading.Thread(target=quietly, name="dgr-elf-import", daemon=True).start()


def _elf_symbols(path: Path) -> _Symbols | None:
    """None when it is not ELF; pyelftools locates the tables, the entries unpack in bulk."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return None
        if size > MAX_OBJECT_BYTES:
            raise _too_big(path, f"{size} bytes (limit {MAX_OBJECT_BYTES})")
        f.seek(0)
        try:
            elf = ELFFile(f)
            found = _Symbols(set(), set(), set())
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_SYMTAB":
                    _read_table(path, elf, sec, size, found)
            return found
        except (ELFError, struct.error, ValueError, IndexError) as err:
            problem = f"unreadable ELF object ({err}): its symbols cannot be checked"
            raise _failed(path, problem) from None


def _read_table(path: Path, elf: Any, sec: Any, size: int, found: _Symbols) -> None:
    entsize = 24 if elf.elfclass == 64 else 16
    off, length = sec["sh_offset"], sec["sh_size"]
    count = length // entsize if sec["sh_entsize"] == entsize else -1
    if count < 0 or off + length > size:
        raise _failed(
            path,
            f"damaged symbol table (entries of {sec['sh_entsize']} bytes, {length} bytes at "
            f"{off} of a {size}-byte file)",
        )
    if count > MAX_SYMBOLS:
        raise _too_big(path, f"a symbol table of {count} entries (limit {MAX_SYMBOLS})")
    names = elf.get_section(sec["sh_link"]).data()
    end = "<" if elf.little_endian else ">"
    # st_name, st_info, st_shndx; ELF64: I B B H Q Q, ELF32: I I I B B H
    fmt, name_i, info_i, shndx_i = (
        (end + "IBBHQQ", 0, 1, 3) if elf.elfclass == 64 else (end + "IIIBBH", 0, 3, 5)
    )
    elf.stream.seek(off)
    for entry in struct.iter_unpack(fmt, elf.stream.read(length)):
        info, shndx = entry[info_i], entry[shndx_i]
        bind = info >> 4  # 1 GLOBAL, 2 WEAK, 10 GNU_UNIQUE
        if bind not in (1, 2, 10) or (info & 0xF) in (3, 4):  # no SECTION / FILE symbols
            continue
        start = entry[name_i]
        stop = names.find(b"\0", start)
        name = names[start : stop if stop >= 0 else len(names)].decode("utf-8", "replace")
        if not name:
            continue
        if shndx == 0:
            found.undefined.add(name)
        else:
            found.defined.add(name)
            if bind != 2:
                found.strong.add(name)


def _too_big(path: Path, what: str) -> OperationFailed:
    hint = f"a worker object this large is not a build output; {_REBUILD}"
    return _failed(path, f"{what}: too large to check its symbols", hint)


def check(ninja: str, build_dir: Path, upstream_dir: Path, worker_dir: Path) -> Checked:
    """The include and symbol checks of one worker build, and the surface it used."""
    up = Path(os.path.realpath(upstream_dir))
    targets = _targets(build_dir)
    by_name = {t.name: t for t in targets}
    upstream = [t for t in targets if t.source.is_relative_to(up)]
    own = [t for t in targets if not t.source.is_relative_to(up)]
    linked = {n for t in own for n in t.depends if n in by_name and by_name[n] in upstream}
    upstream_dirs = {p for n in linked for p, _ in by_name[n].includes if p.is_relative_to(up)}
    via_link = {p for t in own for p, by in t.includes if by == "target_link_libraries"}
    boundary = sorted(p for p in via_link if p.is_relative_to(up) and p in upstream_dirs)
    shown_boundary = [str(p.relative_to(up)) for p in boundary]
    deps = read_deps(ninja, build_dir)

    include_leaks: list[IncludeLeak] = []
    read: set[Path] = set()
    worker_objects: list[Path] = []
    worker_bases = (worker_dir, Path(os.path.realpath(worker_dir)))
    for t in own:
        objects = sorted(o for o in deps if o.startswith(t.objects))
        if len(objects) < t.compiled:
            raise _failed(
                build_dir / ".ninja_deps",
                f"no record of {t.compiled - len(objects)} of the {t.compiled} object(s) of "
                f"worker target {t.name}: the log is damaged or was replaced",
                f"delete {build_dir} and build again",
            )
        for obj in objects:
            worker_objects.append(build_dir / obj)
            files = deps[obj]
            source = Path(os.path.normpath(build_dir / files[0]) if files else obj)
            # named by its path in the worker's tree
            base = next((b for b in worker_bases if source.is_relative_to(b)), None)
            shown_source = str(source if base is None else source.relative_to(base))
            for dep in files:
                real = Path(os.path.realpath(build_dir / dep))
                if any(real.is_relative_to(b) for b in boundary):  # each inside `up`
                    read.add(real)
                elif real.is_relative_to(up):
                    leak = IncludeLeak(shown_source, str(real.relative_to(up)), shown_boundary)
                    if leak not in include_leaks:
                        include_leaks.append(leak)

    # symbols: what the worker's objects ask for that an upstream object defines
    libs: dict[str, str] = {}
    checked = True
    wanted: set[str] = set()
    defined: set[str] = set()
    for path in worker_objects:
        if (syms := _elf_symbols(path)) is None:
            checked = False
            break
        wanted |= syms.undefined
        defined |= syms.defined
    wanted -= defined
    if checked:
        for t in [t for t in upstream if t.name in linked]:
            for obj in sorted(o for o in deps if o.startswith(t.objects)):
                if (syms := _elf_symbols(build_dir / obj)) is None:
                    checked = False
                    break
                for name in syms.strong & wanted:
                    libs.setdefault(name, t.artifact or t.name)
    headers = sorted(read)
    decls: dict[str, str] = {}  # qualified name -> declaring header (the first, by path)
    for h in headers:
        rel = str(h.relative_to(up))
        hint = "a header is not this large"
        data = read_tree_file(up, rel, what="boundary header", hint=hint, limit=MAX_HEADER_BYTES)
        for name in surface_mod.declarations((data or b"").decode("utf-8", "replace")):
            decls.setdefault(name, rel)
    # mangled C++ name -> demangled, by one bounded c++filt call
    names: dict[str, str] = {}
    todo = sorted(n for n in libs if n.startswith("_Z") and n.isprintable() and " " not in n)
    if checked and todo:
        if (tool := shutil.which("c++filt")) is None:
            raise OperationFailed(
                "c++filt (binutils) not found: the worker's C++ symbols cannot be checked",
                hint="install binutils (Debian: apt-get install binutils)",
            )
        ran = proc.capture([tool], input="\n".join(todo) + "\n", timeout=120)
        shown = ran.stdout.split("\n")[: len(todo)]
        if ran.returncode != 0 or len(shown) != len(todo):
            raise OperationFailed(
                f"c++filt failed (exit {ran.returncode}): {ran.stderr.strip()[-300:]}",
                hint="check the binutils installation",
            )
        names = dict(zip(todo, shown, strict=True))
    symbols, symbol_leaks = [], []
    for sym in sorted(libs):
        shown_name = names.get(sym, sym)
        qual = surface_mod.qualified_name(shown_name) if sym in names else sym
        if (header := decls.get(qual)) is None:
            symbol_leaks.append(SymbolLeak(shown_name, sym, libs[sym]))
        else:
            symbols.append(surface_mod.SurfaceSymbol(qual, header, sym, libs[sym]))
    surface = Surface(tuple(str(h.relative_to(up)) for h in headers), tuple(symbols), checked)
    return Checked(Leaks(include_leaks, symbol_leaks, shown_boundary), surface)


def recorded_surface(forge: Forge) -> surface_mod.Recorded:
    """The worker's surface all lanes' last reports recorded; None when none records one."""
    found: dict[tuple[str, str], surface_mod.SurfaceSymbol] = {}
    known = False
    for loaded in lane_states(forge).values():
        last = loaded.state.last_build
        if loaded.elsewhere or last is None or not last.report or not Path(last.report).is_file():
            continue
        from dgr_forge.attest import reports  # (signed reports: only when there is one)

        facts = reports.surface_of(reports.load(Path(last.report)).statement or {})
        if facts is None:
            continue
        known = True
        for sym in facts.symbols:
            found.setdefault((sym.name, sym.header), sym)
    return surface_mod.Recorded(tuple(found[k] for k in sorted(found)) if known else None)
