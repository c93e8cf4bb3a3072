"""The forge's CMake presets: one configure + build preset per lane (the lane plan `build`
runs), so IDEs build what the forge builds.

CMake reserves `CMakeUserPresets.json` for the person: the forge writes its own file and
adds one `include` entry naming it there (as Conan does), every other byte kept. In the
patched upstream tree they are listed in `.git/info/exclude`: `build` sees a clean tree.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from msgspec import UNSET, UnsetType

from dgr_forge.cache import select as cache_mod
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, atomic_write_text, read_regular
from dgr_forge.core.structs import Form, d
from dgr_forge.host import worker
from dgr_forge.host.cmake_options import taken_as_given
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.recipes import Recipe, select
from dgr_forge.lanes.plan import (
    configure_args,
    launcher_switches,
    plan_lane,
    refuse_unbuildable_tree,
)
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.workspace import OWN_PRESETS, USER_PRESETS, USER_PRESETS_STUB

_MAX_USER = 1 << 20  # bytes of a CMakeUserPresets.json the forge reads
_FIX = (
    "fix or remove the file by hand (CMake would not read it either), or pass --out DIR to "
    "write the forge's presets elsewhere"
)


class Presets(Form, kw_only=True):
    """`presets`' result (its `--json` object)."""

    title = "presets"

    path: Annotated[
        str | None,
        d(
            "the forge's presets file, `dgr-forge.presets.json` (null with `--print` and "
            "`--remove`)"
        ),
    ]
    presets: Annotated[list[str], d("the preset names (none with `--remove`)")]
    content: Annotated[dict[str, Any] | UnsetType, d("with `--print`: the presets file")] = UNSET
    user_presets: Annotated[str | UnsetType, d("the `CMakeUserPresets.json` that includes it")] = (
        UNSET
    )
    user_presets_change: Annotated[
        str | UnsetType,
        d(
            "what happens to it: `created`, `changed` (the include entry added or removed; a "
            "`version` under 4 raised to 4), `unchanged`, `deleted` (the one the forge created, "
            "by `--remove`)"
        ),
    ] = UNSET
    diff: Annotated[str | UnsetType, d('the change to it as a unified diff (`""`: none)')] = UNSET
    dry_run: Annotated[bool | UnsetType, d("`--dry-run`: nothing was written")] = UNSET


def _cache_variables(args: list[str]) -> dict[str, str]:
    pairs = (a[2:].split("=", 1) for a in args if a.startswith("-D") and "=" in a)
    return {n: v for n, v in pairs if n not in ("CMAKE_TOOLCHAIN_FILE", "CMAKE_MAKE_PROGRAM")}


def render(
    forge: Forge,
    m: UpstreamManifest,
    all_recipes: dict[str, Recipe],
    doctor: Doctor,
    spec: worker.WorkerSpec | None,
    lanes: list[str],
) -> dict[str, Any]:
    """The presets of `lanes` (all when empty), with the cache DGR_CACHE names, else auto."""
    recipes = select(all_recipes, lanes)
    refuse_unbuildable_tree(forge, spec)  # presets that could never build
    cache = os.environ.get("DGR_CACHE") or "auto"
    choice = cache if cache in cache_mod.CHOICES else "auto"
    tree = worker.path_tree(spec)
    try:
        setup = cache_mod.select(
            doctor, choice, "rw", workspace=forge.workspace, root=forge.root, worker=tree
        )
    except BadInput:
        setup = cache_mod.OFF  # a tool named but missing: presets still render
    configure: list[dict[str, Any]] = []
    build: list[dict[str, Any]] = []
    src = forge.src_dir(m.name)
    # the upstream's launcher auto-detection, pinned as `build` pins it (once patched)
    switches = launcher_switches(src) if (src / ".git").exists() else ()
    given = taken_as_given(src) if (src / ".git").exists() else ()
    for recipe in recipes:
        plan = plan_lane(forge, m, recipe, doctor, spec, setup)
        args, name = configure_args(forge, m, plan, switches, given), f"dgr-{recipe.name}"
        preset: dict[str, Any] = {
            "name": name,
            "displayName": f"dgr-forge {recipe.name} ({recipe.lane.backend})",
            "description": recipe.lane.description or f"{recipe.lane.backend} lane",
            "generator": "Ninja",
            "binaryDir": str(plan.build_dir),
            "cacheVariables": _cache_variables(args),
        }
        if plan.toolchain_file:
            preset["toolchainFile"] = str(plan.toolchain_file)
        if doctor.tool("ninja").found:
            preset["cacheVariables"]["CMAKE_MAKE_PROGRAM"] = str(doctor.tool("ninja").path)
        configure.append(preset)
        step: dict[str, Any] = {"name": name, "configurePreset": name}
        if recipe.cmake.targets:
            step["targets"] = list(recipe.cmake.targets)
        build.append(step)
    return {
        "version": 3,
        "cmakeMinimumRequired": {"major": 3, "minor": 21, "patch": 0},
        "configurePresets": configure,
        "buildPresets": build,
    }


def _inside(path: Path, *bases: Path) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(os.path.realpath(b)) for b in bases)


def _linked_out(forge: Forge, path: Path, spec: worker.WorkerSpec | None) -> bool:
    """Whether the manifest's worker `path` is reached through a symlink that leaves the
    root and workspace (an explicit "../worker" in the manifest is not: reviewers see it)."""
    if spec is None or spec.url is not None:
        return False
    lexical = Path(os.path.normpath(Path(os.path.realpath(forge.root)) / spec.location))
    return Path(os.path.realpath(lexical)) != lexical and not _inside(
        path, forge.root, forge.workspace
    )


def exclude_from_git(path: Path, forge: Forge) -> None:
    """List `path` in its repository's `.git/info/exclude` (once), so `patch` and `build`
    do not count a file the forge wrote as a local change; never another repository's
    `.git/` (only one in the forge root or workspace, or the checkout holding the root)."""
    top = gitutil.git(path.parent, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        return
    root = Path(top.stdout.strip())
    if not (_inside(root, forge.root, forge.workspace) or _inside(forge.root, root)):
        return  # another repository: its .git/ is not ours to edit
    common = gitutil.git(root, "rev-parse", "--git-common-dir").stdout.strip()
    exclude = (root / common) / "info" / "exclude"
    rel = "/" + path.resolve().relative_to(root.resolve()).as_posix()
    lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    if rel not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(exclude, "\n".join([*lines, rel]) + "\n")


def _bad(path: Path, problem: str) -> BadInput:
    return BadInput(f"{path}: {problem}; the forge left it unchanged", hint=_FIX,
                    details={"file": str(path)})  # fmt: skip


def _ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _spans(text: str, at: int) -> list[tuple[Any, int, int, int]]:
    """(key, start, value start, value end) of each member of the JSON object or array
    whose bracket is at `at` (an array's elements: no key, they start with their value)."""
    decoder, out = json.JSONDecoder(), []
    i = _ws(text, at + 1)
    while text[i] not in "]}":
        start, key = i, None
        if text[at] == "{":
            key, i = decoder.raw_decode(text, i)
            i = _ws(text, _ws(text, i) + 1)  # past the ':'
        _, end = decoder.raw_decode(text, i)
        out.append((key, start, i, end))
        i = _ws(text, end)
        if text[i] == ",":
            i = _ws(text, i + 1)
    return out


def _checked(path: Path, text: str) -> tuple[int, dict[str, tuple[int, int, int]], list[Any], int]:
    """The index of the top-level object's `{`, per key where the key starts and its value's
    span (start, end), its `include` and `version`; exit 2 on anything CMake would not read."""
    try:
        data = json.loads(text)  # the whole file is JSON (_spans walks its spans)
    except ValueError as err:
        raise _bad(path, f"is not valid JSON ({err})") from None
    start = _ws(text, 0)
    if text[start : start + 1] != "{":
        raise _bad(path, "is not a JSON object")
    include = data.get("include", [])
    if not isinstance(include, list) or not all(isinstance(e, str) for e in include):
        raise _bad(path, "its `include` is not a list of file names")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(path, "its `version` is not a presets format version (a number)")
    return start, {key: (at, lo, hi) for key, at, lo, hi in _spans(text, start)}, include, version


def with_include(path: Path, text: str, entry: str = OWN_PRESETS) -> str:
    """`text` with `entry` in its `include` list: inserted, every other byte kept."""
    start, members, include, version = _checked(path, text)
    if entry in include:
        return text
    edits: list[tuple[int, int, str]] = []  # (from, to, new text), applied back to front
    if version < 4:
        edits.append((*members["version"][1:], "4"))  # `include` needs presets version 4
    if "include" in members:
        elements = _spans(text, members["include"][1])
        at = elements[-1][3] if elements else members["include"][1] + 1
        edits.append((at, at, f", {json.dumps(entry)}" if elements else json.dumps(entry)))
    else:  # a member after the last one, on a line of its own when the first has one
        first = min(k for k, _, _ in members.values())
        last = max(e for _, _, e in members.values())
        line = text.rfind("\n", start, first) + 1
        indent = text[line:first] if line and not text[line:first].strip() else None
        sep = ", " if indent is None else f",\n{indent}"
        edits.append((last, last, f'{sep}"include": [{json.dumps(entry)}]'))
    for lo, hi, new in sorted(edits, reverse=True):
        text = text[:lo] + new + text[hi:]
    return text


def without_include(path: Path, text: str, entry: str = OWN_PRESETS) -> str | None:
    """`text` without `entry` in `include`; None when what is left is the forge's stub."""
    if text == USER_PRESETS_STUB:
        return None
    _, members, include, _ = _checked(path, text)
    if entry not in include:
        return text
    elements = [(lo, hi) for _, lo, _, hi in _spans(text, members["include"][1])]
    if include == [entry]:  # the member the forge added: all of it goes
        key, _, end = members["include"]
        before = [e for _, _, e in members.values() if e <= key]
        after = [k for k, _, _ in members.values() if k > key]
        if before:
            return text[: max(before)] + text[end:]
        return text[:key] + text[min(after) if after else _ws(text, end) :]
    k = include.index(entry)
    lo, hi = elements[k]
    if k + 1 < len(elements):
        hi = elements[k + 1][0]  # the entry, its comma and the space up to the next one
    elif k > 0:
        lo = elements[k - 1][1]  # the comma before the last entry
    return text[:lo] + text[hi:]


@dataclass(frozen=True)
class Change:
    """What `presets` does to the forge's own file and to the user's include."""

    own: Path
    own_content: bytes | None  # None: delete it
    user: Path
    before: bytes | None  # CMakeUserPresets.json now (None: absent)
    after: bytes | None  # what it will be (None: absent / deleted)

    def diff(self) -> str:
        def lines(data: bytes | None) -> list[str]:
            return [] if data is None else data.decode("utf-8").splitlines(keepends=True)

        name = str(self.user)
        return "".join(
            difflib.unified_diff(
                lines(self.before),
                lines(self.after),
                "/dev/null" if self.before is None else f"a/{name}",
                "/dev/null" if self.after is None else f"b/{name}",
            )
        )

    def kind(self) -> str:
        if self.before == self.after:
            return "unchanged"
        return "created" if self.before is None else "deleted" if self.after is None else "changed"

    def apply(self, forge: Forge) -> None:
        if self.own_content is None:
            self.own.unlink(missing_ok=True)
        else:
            if not self.own.exists():
                exclude_from_git(self.own, forge)  # before it appears: never a dirty tree
            atomic_write_bytes(self.own, self.own_content)
        if self.after == self.before:
            return
        if self.after is None:
            self.user.unlink(missing_ok=True)
            return
        if self.before is None:
            exclude_from_git(self.user, forge)  # the forge's stub, not the user's file
        atomic_write_bytes(self.user, self.after)


def plan_change(
    forge: Forge,
    presets: dict[str, Any] | None,
    dest: Path | None,
    m: UpstreamManifest,
    spec: worker.WorkerSpec | None,
    *,
    worker_override: bool = False,
) -> Change:
    """The forge's presets file and its include (`presets` None: both taken out again);
    `worker_override`: the worker is the person's --worker, not one a checkout committed."""
    path = dest or (spec.source_dir if spec is not None else forge.src_dir(m.name))
    if dest is None and spec is None and not (path / "CMakeLists.txt").is_file():
        raise BadInput(
            f"{forge.rel(path)}: no upstream tree to write {USER_PRESETS} into",
            hint="run `dgr-forge patch` (or `build`) first, configure a worker, or pass --out",
        )
    if dest is None and not worker_override and _linked_out(forge, path, spec):
        # a committed symlink on the worker path leads out of the root: a checkout must
        # not make the forge write into another directory or repository
        raise BadInput(
            f"{path}: the worker directory named in manifests/shard-worker.toml leads out of "
            f"the forge root ({forge.root}) through a symlink; presets are not written there",
            hint="pass --out PATH (or --worker DIR) to write there on purpose, or point "
            "[worker] path at a directory inside the root",
            details={"path": str(path)},
        )
    user = path / USER_PRESETS if path.is_dir() and not path.is_symlink() else path
    own = user.parent / OWN_PRESETS
    if os.path.lexists(own) and (own.is_symlink() or not own.is_file()):
        raise _bad(own, "is a symlink or not a regular file; the forge does not write through it")
    before = text = None
    if os.path.lexists(user):
        if user.is_symlink():
            raise _bad(user, "is a symlink; the forge does not write through it")
        what = "CMake user presets file"
        before = read_regular(user, what=what, hint=_FIX, limit=_MAX_USER, follow=False)
        try:
            text = before.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad(user, "is not UTF-8 text") from None
    if presets is None:
        after = None if text is None else without_include(user, text)
        return Change(own, None, user, before, None if after is None else after.encode("utf-8"))
    new = USER_PRESETS_STUB if text is None else with_include(user, text)
    content = (json.dumps(presets, indent=2) + "\n").encode()
    return Change(own, content, user, before, new.encode("utf-8"))
