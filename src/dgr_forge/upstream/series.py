"""The patch series as data: read and check the files, parse them, try them on a scratch
index (nothing in the workspace changes), and cache the trees they give.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, TypeVar, cast

import msgspec
from msgspec import Struct

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text, read_regular, sha256_bytes
from dgr_forge.core.gitutil import HEX40, c_quote, git, out
from dgr_forge.core.structs import d
from dgr_forge.upstream import patchfile
from dgr_forge.upstream.manifest import PatchEntry, UpstreamManifest, read_raw
from dgr_forge.upstream.series_journal import scratch_dir

SYMLINK_MODE = "120000"
TREE_CACHE = "dgr/trees.json"
MAX_CACHE_BYTES = 16 << 20  # 100,000 patches' entries fit in a tenth of it


class Conflict(Struct, frozen=True):
    """a file that did not apply"""

    file: Annotated[str, d("its path in the upstream tree")]
    hunks: Annotated[
        tuple[str, ...],
        d("the hunks that failed, `hunk 2/3 @@ -10,6 +10,7 @@` (or git's reason for the file)"),
    ]

    def __str__(self) -> str:
        return f"{self.file} ({', '.join(self.hunks)})"


class CheckResult(Struct, frozen=True):
    """a patch"""

    file: Annotated[str, d("the patch file")]
    status: Annotated[
        str,
        d(
            "`applies`, `conflict`, `tree-mismatch` (the first patch whose tree differs from "
            "the manifest's; the ones after it are `skipped`) or `skipped`"
        ),
    ]
    tree: Annotated[str | None, d("the tree it made")] = None
    conflicts: Annotated[tuple[Conflict, ...], d("the files that did not apply")] = ()
    expected_tree: Annotated[str | None, d("the manifest's tree")] = None
    changed_on_disk: Annotated[bool, d("its sha256 differs from the manifest")] = False


def read_series(m: UpstreamManifest, forge: Forge) -> list[bytes]:
    datas: list[bytes] = []
    for entry in m.series:
        data = read_patch(m, entry)
        if (actual := sha256_bytes(data)) != entry.sha256:
            shown = forge.rel(m.patch_path(entry))
            raise BadInput(
                f"{shown}: sha256 is {actual}, the manifest says {entry.sha256}",
                hint=f"restore the file (`git checkout -- {shown}`), or run `dgr-forge export` "
                "if you changed it on purpose",
                details={"file": shown, "actual_sha256": actual, "expected_sha256": entry.sha256},
            )
        datas.append(data)
    return datas


def read_patch(m: UpstreamManifest, entry: PatchEntry) -> bytes:
    """A patch file of the series, bounded; a link is exit 2, never followed (patches/ is a
    tree a pull request writes: a runner's file would be hashed and its sha256 printed)."""
    return read_regular(
        m.patch_path(entry),
        what="patch file",
        hint="restore the file, or remove its [[patches.series]] entry",
        limit=patchfile.MAX_PATCH_BYTES,
        shown=f"{m.patches_dir_rel}/{entry.file}",
        follow=False,
    )


def copy_inputs(m: UpstreamManifest, root: Path, manifest_rel: str) -> tuple[bytes, list[bytes]]:
    """The manifest and patch files copied into `root`, and their bytes, read bounded as the
    loaders read them (shutil.copyfile copied a link to /dev/zero until the disk ran out)."""
    pdir = root / m.patches_dir_rel
    pdir.mkdir(parents=True)
    datas = [read_patch(m, entry) for entry in m.series]
    for entry, data in zip(m.series, datas, strict=True):
        (pdir / entry.file).write_bytes(data)
    target = root / manifest_rel
    target.parent.mkdir(parents=True, exist_ok=True)
    raw = read_raw(m.path)
    target.write_bytes(raw)
    return raw, datas


def parse_series(m: UpstreamManifest, datas: Sequence[bytes]) -> list[patchfile.ParsedPatch]:
    parsed: list[patchfile.ParsedPatch] = []
    for entry, data in zip(m.series, datas, strict=True):
        shown = f"{m.patches_dir_rel}/{entry.file}"
        try:
            p = patchfile.parse(data)
        except patchfile.PatchSyntaxError as err:
            raise BadInput(
                f"{shown}: line {err.line}: {err.problem}",
                hint="regenerate the patch with `git format-patch` (or `dgr-forge export`); "
                'git quotes a path as "a/..." with three-digit octal escapes',
                details={"file": shown, "line": err.line},
            ) from None
        for line, path in p.absolute:
            raise BadInput(
                f"{shown}: line {line}: absolute path {path!r}",
                hint="a patch may only change files inside the upstream tree; diff headers "
                "name them relative to it (`--- a/<path>`, `+++ b/<path>`)",
                details={"file": shown, "line": line, "path": path},
            )
        if not p.files:
            raise BadInput(
                f"{shown}: contains no diff",
                hint="delete it and its [[patches.series]] entry, or re-export the series",
                details={"file": shown},
            )
        for header in ("From", "Date"):
            if header not in p.headers:
                raise BadInput(
                    f"{shown}: no '{header}:' header (needed for a reproducible commit)",
                    hint="patches must be `git format-patch` mails; regenerate them with "
                    "`dgr-forge export`",
                    details={"file": shown, "header": header},
                )
        for path in p.paths:
            if reason := patchfile.unsafe_reason(path):
                raise BadInput(
                    f"{shown}: refuses to touch {path!r}: {reason}",
                    hint="a patch may only change files inside the upstream tree; fix the "
                    "diff headers",
                    details={"file": shown, "path": path},
                )
        parsed.append(p)
    return parsed


def check_symlinks(
    m: UpstreamManifest, parsed: Sequence[patchfile.ParsedPatch], repo: Path
) -> None:
    """Refuse a patch writing through a symlink (of the pinned tree in `repo`, or the series)."""
    proc = git(repo, "ls-tree", "-r", "-z", "--full-tree", "--end-of-options", m.commit)
    links = {
        r.split("\t", 1)[1] for r in proc.stdout.split("\0") if r.startswith(SYMLINK_MODE + " ")
    }
    for entry, p in zip(m.series, parsed, strict=True):
        for path in p.paths:
            parts = path.split("/")
            for n in range(1, len(parts)):
                if (parent := "/".join(parts[:n])) in links:
                    shown = f"{m.patches_dir_rel}/{entry.file}"
                    raise BadInput(
                        f"{shown}: refuses to touch {path!r}: {parent!r} is a symlink, the "
                        "write could land outside the tree",
                        hint="patch the symlink's target path instead",
                        details={"file": shown, "path": path, "symlink": parent},
                    )
        for f in p.files:
            if f.new_path and f.new_mode == SYMLINK_MODE:
                links.add(f.new_path)
            elif f.new_path is None and f.old_path:
                links.discard(f.old_path)


@contextmanager
def scratch_index(repo: Path, rev: str, tmp_root: Path | None = None) -> Iterator[dict[str, str]]:
    """A temporary index (seeded from `rev`) and object directory, in `tmp_root` (default:
    the git dir's `dgr-tmp`); `repo`'s objects are read as alternates, nothing in it changes."""
    dot = repo / ".git"
    common = dot if dot.is_dir() else Path(
        out(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    )  # fmt: skip
    objects = common / "objects"
    alternates = [str(objects)]
    if (info := objects / "info" / "alternates").is_file():
        for line in info.read_bytes().splitlines():
            if line.strip() and not line.startswith(b"#"):
                # C-quoted when it starts with `"` (else, or when the quoting is bad, as it is)
                line = line.strip()
                with suppress(patchfile.PatchSyntaxError):
                    line = patchfile.unquote(line)
                alt = Path(os.fsdecode(line))
                alternates.append(str(alt if alt.is_absolute() else (objects / alt).resolve()))
    with scratch_dir(tmp_root or common / "dgr-tmp", "dgr-scratch-") as tmp:
        (tmp / "objects").mkdir()
        env = {
            "GIT_INDEX_FILE": str(tmp / "index"),
            "GIT_OBJECT_DIRECTORY": str(tmp / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(map(_c_quoted, alternates)),
        }
        git(repo, "read-tree", "--end-of-options", rev, env=env)
        yield env


def _c_quoted(path: str) -> str:
    """An entry of git's object-directory list: git splits the list at `:` and reads an
    entry that starts with `"` C-quoted, so a path with a colon (or a quote) is quoted."""
    if os.pathsep not in path and not path.startswith('"'):
        return path
    return c_quote(os.fsencode(path)).decode("ascii")


def index_tree(repo: Path, env: dict[str, str], *args: str, input: bytes = b"") -> str | None:
    """The scratch index's tree after `git apply --cached` (None: it does not apply)."""
    proc = git(repo, "apply", "--cached", *args, input=input, env=env, text=False, check=False)
    return out(repo, "write-tree", env=env) if proc.returncode == 0 else None


def conflicting_hunks(
    repo: Path, p: patchfile.ParsedPatch, env: dict[str, str] | None = None
) -> list[Conflict]:
    result: list[Conflict] = []
    for f in p.files:
        bad: list[str] = []
        for i in range(len(f.hunks)) if f.hunks else [None]:  # a hunkless diff: as a whole
            text = b"".join(f.header) + (b"".join(f.hunks[i].lines) if i is not None else b"")
            proc = git(
                repo, "apply", "--cached", "--check", "-", input=text, env=env, text=False,
                check=False
            )  # fmt: skip
            if proc.returncode != 0:
                if i is None:
                    msg = cast(bytes, proc.stderr).decode("utf-8", "replace")
                    bad.append((msg.strip().splitlines() or ["does not apply"])[-1])
                else:
                    bad.append(f"hunk {i + 1}/{len(f.hunks)} {f.hunks[i].header}")
        if bad:
            result.append(Conflict(f.path, tuple(bad)))
    return result


def check_series(
    repo: Path,
    m: UpstreamManifest,
    datas: Sequence[bytes],
    parsed: Sequence[patchfile.ParsedPatch],
    *,
    compare_trees: bool = True,
    tmp_root: Path | None = None,
) -> list[CheckResult]:
    results: list[CheckResult] = []
    with scratch_index(repo, m.commit, tmp_root) as env:
        for entry, data, p in zip(m.series, datas, parsed, strict=True):
            if results and results[-1].status != "applies":  # the ones after a failure
                results.append(CheckResult(entry.file, "skipped"))
                continue
            flagged = sha256_bytes(data) != entry.sha256  # edited since the manifest was written
            tree = index_tree(repo, env, "-", input=data)
            conflicts: tuple[Conflict, ...] = ()
            status = "applies"
            if tree is None:
                conflicts, status = tuple(conflicting_hunks(repo, p, env)), "conflict"
            # the first patch whose result differs is the one reported (an edited file,
            # say); the ones after it cannot be judged against the manifest
            elif compare_trees and entry.tree is not None and tree != entry.tree:
                status = "tree-mismatch"
            results.append(CheckResult(entry.file, status, tree, conflicts, entry.tree, flagged))
    return results


# Per-patch trees the manifest does not record, computed once (a scratch apply costs two
# git calls a patch) and kept in `.git/dgr/trees.json`, each keyed by the pin and the
# sha256 of every patch up to it: a changed pin or byte misses, never reads a stale tree.
# The workspace is scratch space: a missing or unreadable cache is recomputed.


class ScratchCache(msgspec.Struct):
    """A cache kept in the workspace's git dir (`.git/dgr/…`), schema 1."""

    schema: int


_Cache = TypeVar("_Cache", bound=ScratchCache)


def read_cache(
    src: Path, name: str, kind: type[_Cache], limit: int = MAX_CACHE_BYTES
) -> _Cache | None:
    """The cache `name`; None when it is missing, over `limit`, unreadable or another
    schema (the caller computes again)."""
    path = src / ".git" / name
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None  # a FIFO is never waited on; a series never needs this much
        cache = msgspec.json.decode(path.read_bytes(), type=kind)
    except (OSError, ValueError):  # msgspec's DecodeError is one
        return None
    return cache if cache.schema == 1 else None


def write_cache(src: Path, name: str, cache: ScratchCache) -> None:
    if not (src / ".git").is_dir():
        return
    path = src / ".git" / name
    with suppress(OSError):  # a cache: a read-only workspace computes it again next time
        path.parent.mkdir(exist_ok=True)
        text = msgspec.json.format(msgspec.json.encode(cache), indent=1)
        atomic_write_text(path, text.decode() + "\n")


class _TreeCache(ScratchCache):
    trees: dict[str, str]


def _cache_keys(pin: str, datas: Sequence[bytes]) -> list[str]:
    chain = hashlib.sha256(f"dgr-trees\0{pin}".encode())
    keys: list[str] = []
    for data in datas:
        chain.update(b"\0" + hashlib.sha256(data).digest())
        keys.append(chain.copy().hexdigest())
    return keys


def cached_trees(src: Path, pin: str, datas: Sequence[bytes]) -> list[str | None]:
    cache = read_cache(src, TREE_CACHE, _TreeCache)
    trees = cache.trees if cache else {}
    return [t if HEX40.fullmatch(t := trees.get(k, "")) else None for k in _cache_keys(pin, datas)]


def cache_trees(src: Path, pin: str, datas: Sequence[bytes], trees: Sequence[str | None]) -> None:
    """Keep the known trees of this series (`trees[i]` after patch i; None: unknown)."""
    keys = _cache_keys(pin, datas)
    if entries := {k: t for k, t in zip(keys, trees, strict=False) if t and HEX40.fullmatch(t)}:
        write_cache(src, TREE_CACHE, _TreeCache(1, entries))


# The series' footprint: the lines it adds and removes in files upstream already has (files
# the series adds are counted apart), for `[patches] budget`. Read from the patch files
# alone: no git call (`status` stays a two-call no-op), and no diff library (unidiff would
# add ~10 ms to every `status`).


class PatchFootprint(Struct, frozen=True):
    """one patch's footprint"""

    file: Annotated[str, d("the patch file")]
    added: Annotated[int, d("lines added to files upstream already has")]
    removed: Annotated[int, d("lines removed from files upstream already has")]
    new_files: Annotated[list[str], d("files this patch adds (the series' own)")]
    new_lines: Annotated[int, d("lines in files the series added (counted apart)")]


class Footprint(Struct, frozen=True):
    """the series' footprint in upstream's own files, per patch and in total"""

    patches: Annotated[list[PatchFootprint], d("per patch, in order")]
    added: Annotated[int, d("lines the series adds to files upstream already has")]
    removed: Annotated[int, d("lines the series removes from them")]
    upstream_lines: Annotated[int, d("`added` + `removed`: what the budget counts")]
    new_files: Annotated[int, d("files the series adds (counted apart)")]
    new_lines: Annotated[int, d("lines in them")]
    budget: Annotated[int | None, d("`[patches] budget.upstream_lines` (null: none set)")]
    over_budget: Annotated[bool, d("`upstream_lines` passes the budget")]
    grew: Annotated[
        list[str], d("over budget: the patches that grew it (those with upstream lines)")
    ]


def _count(text: bytes, own: set[str]) -> tuple[int, int, list[str], int]:
    added = removed = new_lines = 0
    created: list[str] = []
    try:
        files = patchfile.parse(text).files
    except patchfile.PatchSyntaxError:  # `check` and `patch` name what is wrong with it
        files = []
    for f in files:
        if f.old_path is None and f.new_path is not None:  # the series' own from now on
            own.add(f.new_path)
            created.append(f.new_path)
        tags = [line[:1] for hunk in f.hunks for line in hunk.lines[1:]]
        plus, minus = tags.count(b"+"), tags.count(b"-")
        if f.path in own:
            new_lines += plus + minus
        else:
            added, removed = added + plus, removed + minus
    return added, removed, created, new_lines


def footprint(m: UpstreamManifest) -> Footprint:
    own: set[str] = set()
    rows = [PatchFootprint(e.file, *_count(read_patch(m, e), own)) for e in m.series]
    added = sum(r.added for r in rows)
    removed = sum(r.removed for r in rows)
    total = added + removed
    budget = m.patches.budget.upstream_lines if m.patches.budget else None
    over = budget is not None and total > budget
    return Footprint(
        patches=rows,
        added=added,
        removed=removed,
        upstream_lines=total,
        new_files=sum(len(r.new_files) for r in rows),
        new_lines=sum(r.new_lines for r in rows),
        budget=budget,
        over_budget=over,
        grew=[r.file for r in rows if r.added or r.removed] if over else [],
    )


def footprint_lines(fp: Footprint) -> list[str]:
    out = [
        f"  {r.file}: +{r.added} -{r.removed} in upstream's files"
        + (f"; {len(r.new_files)} new file(s), {r.new_lines} line(s)" if r.new_files else "")
        for r in fp.patches
    ]
    budget = f" (budget {fp.budget})" if fp.budget is not None else " (no budget set)"
    out.append(
        f"footprint: +{fp.added} -{fp.removed} = {fp.upstream_lines} line(s) in upstream's "
        f"files{budget}; {fp.new_files} file(s) the series adds, {fp.new_lines} line(s)"
    )
    return out
