"""A conflict, explained: the files, the upstream commits on those lines, the next commands."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import msgspec

from dgr_forge.core.errors import NeedsHuman
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.gitutil import git, out
from dgr_forge.upstream.rebase.gitops import ensure_history, subject_of
from dgr_forge.upstream.rebase.state import Conflict, PatchStep, RebaseState, UpstreamCommit

CONFLICT_HINT = (
    "resolve it in the checkout so it is a regular file (or the link git should store), "
    "or `dgr-forge rebase --abort`"
)


def _ours_ranges(
    src: Path, path: str, head_blob: str, data: bytes | None = None
) -> list[tuple[int, int]]:
    """Line ranges (1-based) in HEAD's blob of the "ours" side of each conflict region of
    the conflicted file (its bytes `data`, else the work tree's): located in HEAD's blob,
    so exact even where clean hunks of the same pick shifted lines in the merged file."""
    if data is None:
        data = read_tree_file(
            src, path, what="conflicted file", hint=CONFLICT_HINT, missing_ok=True
        )
    if data is None:
        return []
    merged = data.decode("utf-8", errors="replace").splitlines()
    head_lines = head_blob.splitlines()
    ranges: list[tuple[int, int]] = []
    region: list[str] | None = None
    in_ours = False
    for line in merged:
        if line.startswith("<<<<<<< "):
            region, in_ours = [], True
        elif line.startswith(("||||||| ", "=======")) and region is not None:
            in_ours = False
        elif line.startswith(">>>>>>> ") and region is not None:
            n = len(region)
            if n:
                for start in range(len(head_lines) - n + 1):
                    if head_lines[start : start + n] == region:
                        ranges.append((start + 1, start + n))
                        break
            region = None
        elif region is not None and in_ours:
            region.append(line)
    return ranges


def upstream_commits_for(
    src: Path, old: str, new: str, head: str, path: str, merged: bytes | None = None
) -> tuple[list[UpstreamCommit], bool]:
    """Upstream commits in old..new on the conflicted lines of `path` (`git log -L`; its
    bytes `merged`, else the work tree's), else every one that touched it; and whether
    they were found by line."""
    upstream = set(out(src, "rev-list", f"{old}..{new}").split())
    by_file = git(src, "log", "--format=%H%x09%s", f"{old}..{new}", "--", path, check=False)
    file_commits = _commits(by_file.stdout)
    blob = git(src, "show", f"{head}:{path}", check=False)
    ranges = _ours_ranges(src, path, blob.stdout, merged) if blob.returncode == 0 else []
    if not ranges:
        return file_commits, False
    seen: list[str] = []
    for a, b in ranges:
        proc = git(
            src, "log", "--format=%x00%H", f"-L{a},{b}:{path}", f"{old}..{head}", check=False
        )
        for line in proc.stdout.splitlines():
            if line.startswith("\x00"):
                sha = line[1:].strip()
                if sha in upstream and sha not in seen:
                    seen.append(sha)
    if not seen:
        return file_commits, False
    subjects = {c.commit: c.subject for c in file_commits}
    # (a subject asked of git only for a commit the file's log does not list)
    found = [UpstreamCommit(commit=c, subject=subjects.get(c) or subject_of(src, c)) for c in seen]
    return found, True


def explain(
    src: Path, old: str, new: str, head: str, files: list[str], merged: str | None = None
) -> Conflict:
    """The conflict in `files`, each named with its upstream commits (`upstream_commits_for`;
    the markers from the `merged` tree when given, else the work tree's files)."""
    found = Conflict(files=files)
    for path in files:
        data: bytes | None = None
        if merged is not None:
            blob = git(src, "cat-file", "blob", f"{merged}:{path}", check=False, text=False)
            data = cast(bytes, blob.stdout) if blob.returncode == 0 else None
        found.upstream[path], found.line_level[path] = upstream_commits_for(
            src, old, new, head, path, data
        )
    return found


def _commits(log: str) -> list[UpstreamCommit]:  # `git log --format=%H%x09%s`'s
    return [
        UpstreamCommit(commit=c, subject=s)
        for c, _, s in (ln.partition("\t") for ln in log.splitlines() if ln)
    ]


def _changed_lines(diff: str) -> dict[str, set[str]]:
    """The lines a diff removes ("-") and adds ("+"), without context or positions."""
    lines: dict[str, set[str]] = {"-": set(), "+": set()}
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            continue
        if line[:1] in lines and line[1:].strip():
            lines[line[:1]].add(line[1:].strip())
    return lines


def upstreamed_by(src: Path, state: RebaseState, step: PatchStep) -> list[UpstreamCommit]:
    """The upstream commits (old..new pin) that took a dropped patch: those whose diff
    removes and adds every line the patch does (context and positions aside), else every
    one that touched its files. Empty when the history cannot be fetched."""
    if not ensure_history(src, state.fetch_url, state.old_commit, state.new_commit):
        return []
    files = out(src, "diff-tree", "--no-commit-id", "--name-only", "-r", step.old_commit)
    span = f"{state.old_commit}..{state.new_commit}"
    paths = files.splitlines()
    proc = git(src, "log", "--format=%H%x09%s", span, "--", *paths, check=False)
    touching = _commits(proc.stdout)
    if len(touching) > 1:
        mine = _changed_lines(git(src, "show", "--format=", step.old_commit).stdout)
        log = git(src, "log", "-p", "--format=%x00%H", span, "--", *paths, check=False).stdout
        took: set[str] = set()
        for chunk in log.split("\0")[1:]:
            commit, _, diff = chunk.partition("\n")
            theirs = _changed_lines(diff)
            if mine["-"] <= theirs["-"] and mine["+"] <= theirs["+"]:
                took.add(commit.strip())
        exact = [c for c in touching if c.commit in took]
        if exact:
            return exact
    return touching


def conflict_error(forge: Forge, state: RebaseState) -> NeedsHuman:
    c = state.conflict or Conflict(files=[])
    src = Path(state.src_dir)
    files = c.files
    step = state.patches[state.next]
    lines = [f"patch {step.file} ({step.subject}) conflicts with {state.new_commit[:12]}:"]
    for f in files:
        lines.append(f"  conflict: {f}")
        for uc in c.upstream.get(f, []):
            lines.append(f"    upstream {uc.commit[:12]} {uc.subject}")
    if not c.upstream:
        lines.append(
            f"  (the upstream history between {state.old_commit[:12]} and "
            f"{state.new_commit[:12]} could not be fetched: see `git log` there yourself)"
        )
    lines += [
        "next:",
        f"  edit the files in {src} (conflict markers <<<<<<< ======= >>>>>>>),",
        f"  git -C {src} add {' '.join(files)}",
        "  dgr-forge rebase --continue",
        "or give up: dgr-forge rebase --abort",
    ]
    return NeedsHuman(
        "\n".join(lines),
        hint=f"resolve in {src}, `git add` the files, then `dgr-forge rebase --continue` "
        "(or `dgr-forge rebase --abort` to restore everything)",
        details={
            "patch": step.file,
            "subject": step.subject,
            "files": files,
            "upstream_commits": msgspec.to_builtins(c.upstream),
            "src_dir": str(src),
            "next_commands": [
                f"git -C {src} add {' '.join(files)}",
                "dgr-forge rebase --continue",
                "dgr-forge rebase --abort",
            ],
        },
    )
