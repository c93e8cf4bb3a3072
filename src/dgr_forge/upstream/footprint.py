"""The series' footprint: the lines it adds and removes in files upstream already has
(files the series adds are counted apart), for `[patches] budget`. Read from the patch
files alone (`patchfile`): no git call (`status` stays a two-call no-op), and no diff
library (unidiff would add ~10 ms to every `status`).
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Struct

from dgr_forge.core.structs import d
from dgr_forge.upstream import patchfile
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.series import read_patch


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
    grew = [r.file for r in rows if r.added or r.removed] if over else []
    new_files, new_lines = sum(len(r.new_files) for r in rows), sum(r.new_lines for r in rows)
    return Footprint(
        patches=rows, added=added, removed=removed, upstream_lines=total, new_files=new_files,
        new_lines=new_lines, budget=budget, over_budget=over, grew=grew,
    )  # fmt: skip


def lines(fp: Footprint) -> list[str]:
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
