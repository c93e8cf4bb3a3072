"""A conflict, explained: the files, the upstream commits on those lines, the next commands."""

from __future__ import annotations

from pathlib import Path

from dgr_forge.core.errors import NeedsHuman
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_tree_file
from dgr_forge.core.gitutil import git, out
from dgr_forge.upstream.rebase.gitops import subject_of
from dgr_forge.upstream.rebase.state import RebaseState

# ----------------------------------------------------------------------------- conflicts

CONFLICT_HINT = (
    "resolve it in the checkout so it is a regular file (or the link git should store), "
    "or `dgr-forge rebase --abort`"
)


def _ours_ranges(
    src: Path, path: str, head_blob: str, data: bytes | None = None
) -> list[tuple[int, int]]:
    """Line ranges (1-based, in HEAD's version) of the "ours" side of each conflict region
    of the conflicted file: its bytes `data`, else the work tree's.

    The ours-side text of a region is located in HEAD's blob, so the ranges are exact
    even when clean hunks of the same pick shifted lines in the merged work file.
    """
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
) -> tuple[list[dict[str, str]], bool]:
    """Upstream commits in old..new that touched `path`: those on the conflicted lines when
    they can be located (`git log -L`), else every one that touched the file. The
    conflicted file is `merged` (its bytes with the markers), else the work tree's.
    Returns (commits, line_level)."""
    upstream = set(out(src, "rev-list", f"{old}..{new}").split())
    by_file = git(src, "log", "--format=%H%x09%s", f"{old}..{new}", "--", path, check=False)
    file_commits = [
        {"commit": c, "subject": s}
        for c, _, s in (ln.partition("\t") for ln in by_file.stdout.splitlines() if ln)
    ]
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
    subjects = {c["commit"]: c["subject"] for c in file_commits}
    # (a subject asked of git only for a commit the file's log does not list)
    found = [{"commit": c, "subject": subjects.get(c) or subject_of(src, c)} for c in seen]
    return found, True


def conflict_error(forge: Forge, state: RebaseState) -> NeedsHuman:
    c = state.conflict or {}
    src = Path(state.src_dir)
    files: list[str] = c.get("files", [])
    step = state.patches[state.next]
    lines = [f"patch {step.file} ({step.subject}) conflicts with {state.new_commit[:12]}:"]
    for f in files:
        lines.append(f"  conflict: {f}")
        for uc in c.get("upstream", {}).get(f, []):
            lines.append(f"    upstream {uc['commit'][:12]} {uc['subject']}")
    if not c.get("upstream"):
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
            "upstream_commits": c.get("upstream", {}),
            "src_dir": str(src),
            "next_commands": [
                f"git -C {src} add {' '.join(files)}",
                "dgr-forge rebase --continue",
                "dgr-forge rebase --abort",
            ],
        },
    )
