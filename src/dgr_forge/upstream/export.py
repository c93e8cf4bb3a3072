"""`export`: the workspace's commits on top of the pin become the canonical patch series
(docs/design.md, "Patch files are canonical"), written through the one crash-safe journal
(`series_journal`) under the root lock; unchanged patches keep their bytes, inode and mtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

from msgspec.structs import replace

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.gitutil import FORGE_IDENTITY
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.upstream import manifest, patches, patchfile, series_base, series_journal
from dgr_forge.upstream import series as series_mod
from dgr_forge.upstream.manifest import PatchEntry, UpstreamManifest
from dgr_forge.upstream.replay import git_bytes
from dgr_forge.upstream.series_journal import scratch_dir
from dgr_forge.upstream.workspace import inspect, operation_in_progress, read_status

FORMAT_PATCH = (
    "format-patch", "--zero-commit", "--no-signature", "--full-index", "--no-numbered",
    "--keep-subject", "--no-stat", "--no-attach", "--no-thread", "--no-cover-letter",
    "--no-signoff", "--no-base", "--no-notes", "--no-color", "--no-ext-diff", "--no-renames",
    "--unified=3", "--diff-algorithm=myers"
)  # fmt: skip
SLUG_MAX = 52


class PatchFile(PatchEntry, frozen=True, kw_only=True):
    """a patch"""

    tree: Annotated[str, d("the tree of the commit it came from")]
    subject: Annotated[str, d("its subject")]


class ExportedPatch(PatchFile, frozen=True, kw_only=True):
    data: bytes
    commit: str


class Export(Form, kw_only=True):
    """`export`'s result (its `--json` object)."""

    title = "export [--force]"
    note = (
        "a stale workspace is exit 3 with `drift` and `manifest`; a message line `git am` "
        "would cut is exit 2 with `commit`, `line`, `text`"
    )

    upstream: Annotated[str, d("the upstream's name")]
    patches: Annotated[list[PatchFile], d("the series written")]
    result_tree: Annotated[str, d("the tree of the whole series")]
    written: Annotated[list[str], d("patch files (re)written")]
    unchanged: Annotated[list[str], d("patch files already identical")]
    removed: Annotated[list[str], d("patch files removed")]
    manifest_changed: Annotated[bool, d("the manifest was rewritten")]
    changed: Annotated[bool, d("anything changed")]
    replaced_saved: Annotated[
        str | None, d("with `--force`: where the overwritten patch files and manifest were saved")
    ] = None


def slug(subject: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return text[:SLUG_MAX].rstrip("-") or "patch"


def series_commits(repo: Path, base: str, head: str) -> list[tuple[str, str, str, str]]:
    """(commit, tree, subject, message) for base..head, oldest first; linear only.
    One `git log` when the series is a chain on `base`; the calls that name what is wrong
    run only when it is not."""
    proc = gitutil.git(
        repo, "log", "--reverse", "--topo-order", "--boundary",
        "--format=%m%H %T %P%x00%s%x00%B%x01", f"{base}..{head}", check=False
    )  # fmt: skip
    listed: list[tuple[str, str, str, list[str], str, str]] = []  # mark, id, tree, parents, ..
    for record in proc.stdout.split("\x01") if proc.returncode == 0 else []:
        ids, _, rest = record.strip("\n").partition("\0")
        subject, _, message = rest.partition("\0")
        if ids:
            commit, tree, *parents = ids[1:].split()
            listed.append((ids[0], commit, tree, parents, subject, message))
    commits = [e for e in listed if e[0] != "-"]
    if not (commits and all(len(e[3]) == 1 for e in commits) and commits[0][3][0] == base):
        if gitutil.rev_parse(repo, head) is None:
            raise BadInput(f"{repo}: nothing checked out", hint="run `dgr-forge patch` first")
        if gitutil.git(repo, "merge-base", "--is-ancestor", base, head, check=False).returncode:
            raise NeedsHuman(
                f"{repo}: HEAD is not based on the pinned commit {base}",
                hint="rebase your commits onto the pin (`git rebase --onto "
                f"{base[:12]} <old base>`), or move the pin with `dgr-forge rebase`",
                details={"base": base},
            )
        if proc.returncode != 0:
            raise OperationFailed(f"git log {base[:12]}..{head} failed: {proc.stderr.strip()}")
        for _, commit, _, parents, subject, _ in commits:
            if len(parents) != 1:
                raise NeedsHuman(
                    f"{repo}: commit {commit[:12]} ({subject}) is a merge; a patch series is "
                    "linear",
                    hint="linearize the history with `git rebase` onto the pin",
                    details={"commit": commit},
                )
        if commits:
            raise NeedsHuman(f"{repo}: history between the pin and HEAD is not a single chain")
        return []  # head is base
    base_tree = next((e[2] for e in listed if e[0] == "-" and e[1] == base), None)
    prev_tree = base_tree or gitutil.tree_of(repo, base)
    for _, commit, tree, _, subject, _ in commits:
        if tree == prev_tree:
            raise NeedsHuman(
                f"{repo}: commit {commit[:12]} ({subject}) changes nothing; an empty patch "
                "cannot be applied",
                hint="drop it (`git rebase -i` and delete its line), then export again",
                details={"commit": commit},
            )
        prev_tree = tree
    return [(c, tree, subject, msg) for _, c, tree, _, subject, msg in commits]


# mailinfo's in-body headers: at the start of the body they replace the mail's own
_INBODY_HEADER = re.compile(r"^(from|subject|date):", re.IGNORECASE)


def refuse_unsafe_messages(repo: Path, base: str, messages: Sequence[tuple[str, str]]) -> None:
    """Exit 2 naming the commit and the line `git am` would not give back exactly."""
    for commit, message in messages:
        lines = message.split("\n")
        # the subject is safe: it becomes `Subject:`; the body starts after the blank line
        first = next((n for n in range(1, len(lines)) if lines[n].strip()), None)
        for n, line in enumerate(lines[1:], start=2):
            why = patchfile.message_break(line)
            if why is None and n - 1 == first and _INBODY_HEADER.match(line):
                why = "at the start of the body `git am` reads it as a mail header"
            if why is not None:
                raise BadInput(
                    f"commit {commit[:12]}: message line {n} {line[:60]!r} would not survive "
                    f"`git am`: {why}; the patch would not reproduce the message",
                    hint=f"reword that line (e.g. indent it): `git -C {repo} rebase -i "
                    f"{base[:12]}` and `reword` the commit, then export again",
                    details={"commit": commit, "line": n, "text": line},
                )


def compute_series(
    repo: Path,
    base: str,
    dest: Path | None = None,
    *,
    head: str = "HEAD",
    tmp_root: Path | None = None,
) -> list[ExportedPatch]:
    """The canonical series for base..head of `repo` (written to `dest` when given); touches
    neither its work tree nor any patches/ directory."""
    commits = series_commits(repo, base, head)
    refuse_unsafe_messages(repo, base, [(c[0], c[3]) for c in commits])
    result: list[ExportedPatch] = []
    if commits:
        with scratch_dir(tmp_root, "dgr-export-") as tmp:
            # files 1, 2, ...: not the names it prints, a line each (a path may hold a newline)
            gitutil.git(repo, *FORMAT_PATCH, "--numbered-files", "-o", str(tmp), f"{base}..{head}")
            if (wrote := len(list(tmp.iterdir()))) != len(commits):
                raise OperationFailed(
                    f"git format-patch wrote {wrote} files for {len(commits)} commits"
                )
            for n, (commit, tree, subject, _) in enumerate(commits, start=1):
                data = (tmp / str(n)).read_bytes()
                file = f"{n:04d}-{slug(subject)}.patch"
                if len(data) > patchfile.MAX_PATCH_BYTES:  # `patch` and `check` would refuse it
                    raise BadInput(
                        f"commit {commit[:12]} ({subject[:60]!r}): its patch {file} is "
                        f"{len(data)} bytes, over the {patchfile.MAX_PATCH_BYTES}-byte limit "
                        "of a patch file",
                        hint="split the commit into smaller ones, or keep large generated "
                        "files out of the series",
                        details={"commit": commit, "file": file},
                    )
                sha = sha256_bytes(data)
                result.append(
                    ExportedPatch(
                        file=file, sha256=sha, tree=tree, subject=subject, data=data, commit=commit
                    )
                )
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        for p in result:
            (dest / p.file).write_bytes(p.data)
    return result


def verify_round_trip(repo: Path, base: str, series: Sequence[ExportedPatch]) -> None:
    """Each exported file, applied on a scratch index, must give its commit's tree exactly,
    or `dgr-forge patch` could never reproduce the series (exit 1). One `git apply` per run
    of disjoint patches: docs/architecture.md, "The export's round trip"."""
    if not series:
        return
    parts = _parts(_disjoint_runs(repo, series), _VERIFY_WORKERS)
    starts = [base] + [part[-1][-1].tree for part in parts[:-1]]
    with ThreadPoolExecutor(len(parts)) as pool:
        found = list(pool.map(lambda part, start: _verify_runs(repo, start, part), parts, starts))
    if failure := next((f for f in found if f is not None), None):
        raise failure


# threads, each with its git processes: enough to use the cores a workstation has
_VERIFY_WORKERS = max(1, min(4, os.cpu_count() or 1))
_PART_MIN = 8  # runs: fewer are checked in one part (a part costs a scratch index)


def _parts(runs: list[list[ExportedPatch]], workers: int) -> list[list[list[ExportedPatch]]]:
    count = max(1, min(workers, len(runs) // _PART_MIN))
    size = -(-len(runs) // count)
    return [runs[k : k + size] for k in range(0, len(runs), size)]


def _verify_runs(
    repo: Path, start: str, runs: Sequence[Sequence[ExportedPatch]]
) -> OperationFailed | None:
    """The error for the first patch of `runs` not giving its commit's tree from `start`."""
    with series_mod.scratch_index(repo, start) as env:
        scratch = Path(env["GIT_INDEX_FILE"]).parent
        for run in runs:
            if len(run) == 1 or _apply(repo, env, run, scratch) != run[-1].tree:
                if len(run) > 1:  # the index may hold what the run made: back to its start
                    gitutil.git(repo, "read-tree", "--end-of-options", start, env=env)
                for p in run:
                    if (tree := _apply(repo, env, [p], scratch)) != p.tree:
                        return OperationFailed(
                            f"{p.file} (from commit {p.commit[:12]}) does not reproduce its "
                            f"commit when applied (tree {tree or 'conflict'}, commit has {p.tree})",
                            hint="git cannot represent this change as a patch exactly (e.g. a "
                            "file mode or submodule change); split or simplify the commit",
                            details={"file": p.file, "commit": p.commit},
                        )
            start = run[-1].tree
    return None


def _disjoint_runs(repo: Path, series: Sequence[ExportedPatch]) -> list[list[ExportedPatch]]:
    """The series cut where a patch touches a path (in its file or its commit) an earlier
    patch of the run touches; a file the parser cannot read is a run of its own."""
    changed = gitutil.tree_changes(repo, [p.commit for p in series])
    runs: list[list[ExportedPatch]] = []
    seen: set[str] | None = None  # the paths of the run being built; None: none to join
    for p, changes in zip(series, changed, strict=True):
        try:
            paths: set[str] | None = set(patchfile.parse(p.data).paths)
        except patchfile.PatchSyntaxError:
            paths = None
        if paths is not None:
            paths |= {c.path.decode("utf-8", "surrogateescape") for c in changes}
        if paths is None or seen is None or paths & seen:
            runs.append([p])
            seen = paths
        else:
            runs[-1].append(p)
            seen |= paths
    return runs


def _apply(
    repo: Path, env: dict[str, str], run: Sequence[ExportedPatch], scratch: Path
) -> str | None:
    if len(run) == 1:
        return series_mod.index_tree(repo, env, "-", input=run[0].data)
    files = [scratch / f"run-{n:06d}.patch" for n in range(len(run))]
    for f, p in zip(files, run, strict=True):
        f.write_bytes(p.data)
    return series_mod.index_tree(repo, env, "--", *map(str, files))


# The commits canonical_commits made, each keyed by its parent, tree and patch bytes (what
# alone decides it): `.git/dgr/canonical.json`. A commit of HEAD's series that this cache
# names for its parent and bytes is the one mailinfo + commit-tree would make again (two
# git calls a patch an export, saved); anything else (no cache, another id) is made.
CANONICAL_CACHE = "dgr/canonical.json"
_CANONICAL_CACHE_MAX = 4 << 20


class _CanonicalCache(series_mod.ScratchCache):
    commits: dict[str, str]


def canonical_commits(
    repo: Path, base: str, series: Sequence[ExportedPatch], tmp_root: Path | None = None
) -> tuple[str, ...]:
    """The commits `dgr-forge patch`'s `git am` makes from `series` on `base`, oldest first
    (the forge's own commits of the series, as a first-parent `rev-list` of the last would
    list them), built from the known trees (mailinfo + commit-tree): nothing in the work
    tree moves. A commit HEAD already has is taken from CANONICAL_CACHE."""
    cache = series_mod.read_cache(repo, CANONICAL_CACHE, _CanonicalCache, _CANONICAL_CACHE_MAX)
    known = cache.commits if cache else {}
    parent = base
    keys: dict[str, str] = {}  # in series order: each key names its parent, so none repeats
    with scratch_dir(tmp_root, "dgr-canon-") as tmp:
        msg, diff = tmp / "msg", tmp / "patch"
        for p in series:
            key = sha256_bytes(f"dgr-canonical\0{parent}\0{p.tree}\0".encode() + p.data)
            if known.get(key) == p.commit:  # HEAD's own commit k, made from these inputs
                parent = keys[key] = p.commit
                continue
            text = git_bytes(
                repo, "mailinfo", "-b", "-u", "--no-scissors", str(msg), str(diff), input=p.data
            ).decode("utf-8")
            info = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
            body = msg.read_text(encoding="utf-8")
            message = patchfile.stripspace(info.get("Subject", "") + "\n\n" + body)
            date = info.get("Date", "")
            env = {
                "GIT_AUTHOR_NAME": info.get("Author", ""),
                "GIT_AUTHOR_EMAIL": info.get("Email", ""),
                "GIT_AUTHOR_DATE": date,
                **FORGE_IDENTITY,
                "GIT_COMMITTER_DATE": date,
            }
            parent = keys[key] = gitutil.out(
                repo, "commit-tree", "--no-gpg-sign", p.tree, "-p", parent, input=message, env=env
            )
    if keys != known:  # the current chain's only: the cache never grows past the series
        series_mod.write_cache(repo, CANONICAL_CACHE, _CanonicalCache(1, keys))
    return tuple(keys.values())


def write_series(
    forge: Forge,
    m: UpstreamManifest,
    series: Sequence[ExportedPatch],
    result_tree: str,
    out: Reporter,
) -> Export:
    """patches/ and the manifest made to hold `series` (the caller holds the root lock)."""
    pdir = m.patches_dir
    on_disk = {f.name for f in pdir.glob("*.patch")} if pdir.is_dir() else set()
    written = tuple(
        p.file
        for p in series
        if p.file not in on_disk or series_journal.patch_bytes(pdir, p.file) != p.data
    )
    unchanged = tuple(p.file for p in series if p.file not in written)
    removed = tuple(sorted(on_disk - {p.file for p in series}))

    from dgr_forge.upstream import manifest_edit  # tomlkit: only an export writes it

    old_text = manifest.read_raw(m.path).decode("utf-8")  # bounded, as it was loaded
    new_text = manifest_edit.updated_text(old_text, series, result_tree)
    manifest_changed = new_text != old_text
    changed = bool(written or removed or manifest_changed)
    if changed:
        new_bytes = new_text.encode("utf-8") if manifest_changed else None
        files = {p.file: p.data for p in series}
        series_journal.write(forge.root, pdir, files, m.path, new_bytes, points="export", out=out)
    for verb, names in (("wrote  ", written), ("removed", removed)):
        for name in names:
            out.answer(f"{verb} {m.patches_dir_rel}/{name}")
    if manifest_changed:
        out.answer(f"updated {forge.rel(m.path)}")
    rows = [PatchFile(file=p.file, sha256=p.sha256, tree=p.tree, subject=p.subject) for p in series]
    return Export(
        upstream=m.name,
        patches=rows,
        result_tree=result_tree,
        written=list(written),
        unchanged=list(unchanged),
        removed=list(removed),
        manifest_changed=manifest_changed,
        changed=changed,
    )


def export_workspace(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    before: bytes | None = None,
    force: bool = False,
) -> Export:
    """The `export` command, under the workspace and root locks (`before`: the manifest's
    bytes from before the root lock was waited for). A fast-forward of the series on disk
    (series_base): changes made there since this workspace was patched stop it (exit 3)
    unless `force`, which saves the replaced files under logs/ first."""
    waited = before is not None and before != manifest.read_raw(m.path)
    src = forge.src_dir(m.name)
    if not (src / ".git").exists():
        raise BadInput(
            f"{forge.rel(src)}: no workspace to export from",
            hint="run `dgr-forge patch`, commit your changes in the workspace, then export",
        )
    if op := operation_in_progress(src):
        raise NeedsHuman(
            f"{forge.rel(src)}: a {op} is in progress", hint="finish or abort it before exporting"
        )
    edited = [e.file for e in m.series if sha256_bytes(series_mod.read_patch(m, e)) != e.sha256]
    if edited:
        # patch files edited by hand: they are the intended series, unless the
        # workspace has its own new commits too (then a person must choose)
        ws = inspect(src, m.commit, len(m.series))
        if ws.has_local_edits:
            raise NeedsHuman(
                f"both changed: {', '.join(edited)} differ from the manifest, and "
                f"{forge.rel(src)} has local edits; exporting would overwrite one of them",
                hint="keep one side: restore the patch files (`git checkout -- "
                f"{m.patches_dir_rel}`) and export, or discard the workspace edits and "
                "export again",
                details={"edited": edited},
            )
        out.info(f"patch files edited by hand ({', '.join(edited)}): applying them as they are")
        patches.ensure_patched(forge, m, out, trust_files=True)
    # the workspace measured once (one `git status`, one walk): HEAD, the series' trees
    # and the uncommitted edits below all come from it; nothing here moves HEAD until the
    # commits are made at the end
    ws = inspect(src, m.commit, len(m.series))
    head = ws.head if ws.exists else gitutil.rev_parse(src, "HEAD")
    if not edited and m.series and head == m.commit:
        # most likely the series was never applied here: exporting would delete it
        raise NeedsHuman(
            f"{forge.rel(src)} is at the bare pin: exporting it would delete all "
            f"{len(m.series)} patches",
            hint="run `dgr-forge patch` first and commit on top of the series; to drop "
            "every patch on purpose, delete the files and their [[patches.series]] entries",
        )
    base = series_base.load(src)
    if base is not None and (moved := series_base.drift(base, m)).pin_moved is not None:
        # a teammate's rebase moved the pin: the commits here sit on the old one
        raise series_base.stale_error(forge, m, moved, waited=waited)
    if dirty := ws.dirty if ws.exists else read_status(src)[2]:  # "XY path" lines
        raise NeedsHuman(
            f"{forge.rel(src)} has uncommitted edits ({len(dirty)} paths: "
            + ", ".join(line[3:] for line in dirty[:10])
            + "); export writes commits only",
            hint="commit them (`git commit`, or `git commit --amend` / `git rebase -i` to "
            "change an existing patch) or discard them, then export again",
            details={"dirty": dirty},
        )
    series = compute_series(src, m.commit, tmp_root=forge.tmp_dir)
    verify_round_trip(src, m.commit, series)
    # compared and written under the one root lock the caller holds
    entries = tuple((p.file, p.sha256) for p in series)
    harm = series_base.harmful(base, m, entries, [c.tree for c in ws.series])
    saved = None
    if harm:
        if not force:
            raise series_base.stale_error(forge, m, harm, waited=waited)
        saved = series_base.save_replaced(forge, m)
        out.info(f"--force: {harm.describe()}; the replaced files are saved in {saved}")
    result_tree = series[-1].tree if series else gitutil.tree_of(src, m.commit)
    fault.point("export.computed")
    result = write_series(forge, m, series, result_tree, out)
    # HEAD becomes the commits `dgr-forge patch` makes from these files (same trees), so
    # "already applied" holds and a person's next commit stands out as a local edit
    own = canonical_commits(src, m.commit, series, forge.tmp_dir)
    canonical = own[-1] if own else m.commit
    record = series_base.SeriesBase(m.commit, entries, tuple(p.tree for p in series), own)
    series_base.record(src, record)
    if head != canonical:
        gitutil.git(src, "update-ref", "--no-deref", "-m", "dgr-forge export", "HEAD", canonical)
    return replace(result, replaced_saved=str(saved)) if saved else result
