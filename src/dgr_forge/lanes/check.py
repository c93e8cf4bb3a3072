"""`check`: the CI gate for changes to the pin or the series (docs/design.md, `check`).

A fresh apply + re-export must give `patches/` and the manifest byte for byte, so a
hand-edited patch or a stale hash cannot be merged; every option a recipe passes must
still be declared upstream (CMake would silently ignore a rename).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated

import tomlkit
from msgspec import Struct, field

from dgr_forge.core.errors import ExitCode, NeedsHuman, OperationFailed
from dgr_forge.core.forge import UPSTREAM_MANIFEST, Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.host.cmake_options import OptionProblem, check_options
from dgr_forge.host.recipes import Recipe
from dgr_forge.upstream import export, manifest, manifest_edit, series, series_journal
from dgr_forge.upstream.patches import ensure_patched


class Difference(Struct, kw_only=True):
    """a difference"""

    path: Annotated[str, d("the file")]
    diff: Annotated[str, d("unified diff")]
    what: Annotated[str, d("`message`, `diff`, `file` or `manifest`")]


class Check(Form, kw_only=True):
    """`check`'s result (its `--json` object)."""

    title = "check"
    may_fail = True
    note = (
        "exit 1 when not clean, or when the series' footprint in upstream's files passes "
        "`[patches] budget` (`footprint.grew` names the patches); 2 when only recipe options "
        "are wrong and one is a deprecated alias upstream"
    )

    commit: Annotated[str, d("the pin")]
    result_tree: Annotated[str | None, d("the tree of the applied series")] = None
    series_reproduced: Annotated[
        bool, d("fetch + apply + export gave patches/ and the manifest")
    ] = False
    apply_error: Annotated[str | None, d("why the series did not apply")] = None
    differences: Annotated[list[Difference], d("what the round trip changed")] = field(
        default_factory=list
    )
    options_checked: Annotated[int, d("CMake options the recipes pass that were checked")] = 0
    option_problems: Annotated[list[OptionProblem], d("problems")] = field(default_factory=list)
    footprint: Annotated[
        series.Footprint | None, d("the series in upstream's own files (exit 1 over its budget)")
    ] = None

    @property
    def ok(self) -> bool:
        over = self.footprint is not None and self.footprint.over_budget
        return self.series_reproduced and not self.option_problems and not over

    @property
    def exit_code(self) -> ExitCode:
        """2 when the series reproduces and a recipe passes a deprecated alias."""
        if self.ok:
            return ExitCode.OK
        deprecated = any(p.deprecated for p in self.option_problems)
        return ExitCode.BAD_INPUT if self.series_reproduced and deprecated else ExitCode.FAILED


def _scratch_root(forge: Forge, m: manifest.UpstreamManifest, tmp: Path) -> Path:
    """The inputs, their manifest taking the patch files as they are (no trees to stop at)."""
    root = tmp / "root"
    # read bounded, each once: the hashes written are of the bytes copied
    raw, datas = series.copy_inputs(m, root, UPSTREAM_MANIFEST)
    doc = tomlkit.parse(raw.decode("utf-8"))
    if (patches := doc.get("patches")) is not None:
        for item, data in zip(patches.get("series", []), datas, strict=True):
            item["sha256"] = sha256_bytes(data)
            item.pop("tree", None)
        patches.pop("result", None)
    (root / UPSTREAM_MANIFEST).write_text(tomlkit.dumps(doc), encoding="utf-8")
    return root


def _difference(path: str, old: bytes, new: bytes, what: str) -> Difference:
    lines = difflib.unified_diff(
        old.decode("utf-8", "replace").splitlines(keepends=True),
        new.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=f"a/{path} (committed)",
        tofile=f"b/{path} (fresh re-export)",
    )
    diff = "".join(line if line.endswith("\n") else line + "\n\\ No newline\n" for line in lines)
    return Difference(path=path, diff=diff, what=what)


def check(
    forge: Forge,
    out: Reporter,
    m: manifest.UpstreamManifest,
    recipes: dict[str, Recipe],
    *,
    mirror: str | None = None,
    offline: bool = False,
) -> Check:
    """The CI gate on the loaded manifest `m` and the options `recipes` pass."""
    fp = series.footprint(m)
    result = Check(commit=m.commit, footprint=fp)
    for line in series.footprint_lines(fp):
        out.answer(line)
    if fp.over_budget:
        out.error(
            f"check: the series changes {fp.upstream_lines} line(s) of upstream's files, over "
            f"its budget of {fp.budget} ([patches] budget.upstream_lines in "
            f"{forge.rel(m.path)}); grown by {', '.join(fp.grew)}"
        )
    with series_journal.scratch_dir(forge.tmp_dir, "dgr-check-") as tmp:
        scratch = Forge(root=_scratch_root(forge, m, tmp), workspace=tmp / "workspace")
        # the copy this run just made: its paths resolve against the scratch root
        sm = manifest.load(scratch.upstream_manifest, scratch.root)
        out.step(f"check: fresh workspace, {m.name} at {m.commit[:12]}, {len(m.series)} patches")
        if offline:
            series_journal.borrow_objects(forge.src_dir(m.name), scratch.src_dir(m.name), out)
        try:
            patched = ensure_patched(scratch, sm, out, mirror=mirror, offline=offline)
        except (NeedsHuman, OperationFailed) as err:
            # a patch that no longer applies, or a pin that cannot be fetched/verified
            result.apply_error = str(err)
            out.error(f"check: {err}")
            return result
        src = patched.src_dir
        result.result_tree = patched.result_tree

        rendered = export.compute_series(src, m.commit, tmp_root=forge.tmp_dir)
        # the root's patches/ is a tree a pull request writes: a planted link is its text
        on_disk = {
            p.name: series_journal.patch_bytes(m.patches_dir, p.name) or b""
            for p in m.patches_dir.glob("*.patch")
        }
        fresh = {p.file: p.data for p in rendered}
        for name in sorted(set(on_disk) | set(fresh)):
            rel = f"{m.patches_dir_rel}/{name}"
            old, new = on_disk.get(name, b""), fresh.get(name, b"")
            if old != new:
                # "message" when the header and message part differ (what `git am` made of
                # the commit message is not what the file says); "file" for a missing one
                heads = {data.split(b"\ndiff --git ", 1)[0] for data in (old, new)}
                what = "file" if not old or not new else "message" if len(heads) > 1 else "diff"
                result.differences.append(_difference(rel, old, new, what))

        # exactly what `dgr-forge export` would write over the committed manifest
        committed = manifest.read_raw(m.path)  # bounded, as it was loaded
        text = manifest_edit.updated_text(committed.decode("utf-8"), rendered, patched.result_tree)
        if (regenerated := text.encode("utf-8")) != committed:
            rel = forge.rel(m.path)
            result.differences.append(_difference(rel, committed, regenerated, "manifest"))

        result.options_checked, result.option_problems = check_options(
            forge, src, m.commit, recipes
        )

    result.series_reproduced = not result.differences and not result.apply_error
    for found in result.differences:
        what = {"message": " (its commit message)", "diff": " (its diff)"}.get(found.what, "")
        out.error(f"check: {found.path} differs from a fresh apply + re-export{what}")
        out.info(found.diff.rstrip("\n"))
    for p in result.option_problems:
        out.error(f"check: recipe {p.recipe}: {p.message}")
    if result.ok:
        out.answer(
            f"check: ok: {len(m.series)} patches reproduce byte for byte on {m.commit[:12]} "
            f"(result tree {result.result_tree}); {result.options_checked} recipe options "
            "declared upstream"
        )
    elif result.differences:
        out.info(
            "fix: if the change is intended, run `dgr-forge patch` and `dgr-forge export` and "
            "commit the result; otherwise restore the files from git"
        )
    return result
