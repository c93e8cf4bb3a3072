"""`artifacts provision`: every file of a model into its destination, exactly.

Refusals (a bad environment number, a bad mirror, a destination under /home or without
room, a planted non-file where a model file belongs) raise BadInput before any byte is
written. Files run in parallel (see `download` for one file); the split headers of the
files that arrived are checked last.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated

from dgr_forge.core import fault
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.models import gguf_split, layermap, subset
from dgr_forge.models.dest import DestDir, check_destination, check_space, dest_lock, missing_bytes
from dgr_forge.models.download import Downloader, FileOutcome, RetryPolicy
from dgr_forge.models.hashing import Progress, VerifiedCache, human, in_daemon_threads
from dgr_forge.models.manifest import ModelManifest
from dgr_forge.models.sources import check_file_sources, check_mirror, file_roots, source_url


class ArtifactsProvision(Form, kw_only=True):
    """`artifacts provision`'s result (its `--json` object)."""

    title = "artifacts provision"
    may_fail = True
    note = (
        "exit 1 when a file fails; a busy provision lock adds `lock` and `holder` to the "
        "error, a bad `DGR_ARTIFACTS_*` number `variable` and `value`"
    )

    model: Annotated[str, d("the model's name")]
    dest: Annotated[Path, d("the `--dest` directory")]
    files: Annotated[list[FileOutcome], d("per file")]
    downloaded_bytes: Annotated[int, d("total downloaded this run")]
    seconds: Annotated[float, d("time taken")]
    failed: Annotated[list[str], d("the files that failed")]
    split_problems: Annotated[
        dict[str, list[str]],
        d("GGUF split problems per file, and headers contradicting the layer map"),
    ]
    layers: subset.Layers | None
    bytes: Annotated[int, d("the size of the files listed (the subset with `--layers`)")]
    model_bytes: Annotated[int, d("the size of the whole model")]
    missing_bytes: Annotated[int, d("what was still to download when the run began")]
    dry_run: Annotated[bool, d("`--dry-run`: nothing was written, every file is `planned`")]
    provisioned: subset.Provisioned | None

    @property
    def ok(self) -> bool:
        return not self.failed and not self.split_problems


def provision(
    m: ModelManifest,
    dest: Path,
    out: Reporter,
    *,
    mirror: str | None = None,
    jobs: int = 4,
    selection: subset.Selection | None = None,
    dry_run: bool = False,
) -> ArtifactsProvision:
    started = time.monotonic()
    policy = RetryPolicy.from_env()
    mirror = check_mirror(mirror)
    chosen = selection.files if selection is not None else m.files
    check_file_sources(chosen, mirror, m.shown)
    target = check_destination(dest)
    size = sum(f.size for f in chosen)
    what = f"{len(chosen)} files, {human(size)}"
    if selection is not None:
        layers = layermap.format_ranges(selection.ranges) or "none"
        ends = " + embeddings" if selection.first else ""
        ends += " + output head" if selection.last else ""
        what = f"layers {layers}{ends}: {len(chosen)} of {len(m.files)} files, {human(size)} of "
        what += human(m.total_size)
    if dry_run:  # which files, how many bytes against the whole model: nothing created or locked
        need = missing_bytes(target, chosen) if target.is_dir() else size
        out.table(
            f"{m.name} (dry run): {what}, {human(need)} to download into {target}",
            ["file", "size", "layers", "tensors"],
            [
                [
                    f.name,
                    human(f.size),
                    layermap.format_ranges(f.ranges or ()) or "-",
                    ",".join(f.tensors or ()) or "-",
                ]
                for f in chosen
            ],
        )
        files = [
            FileOutcome(name=f.name, size=f.size, status="planned", sha256=f.sha256) for f in chosen
        ]
        split_problems: dict[str, list[str]] = {}
        record = None
    else:
        need, _ = check_space(target, chosen)
        target.mkdir(parents=True, exist_ok=True)
        stop = threading.Event()
        with DestDir(target) as held, dest_lock(held, out):
            held.refuse_planted(chosen)
            out.step(f"provisioning {m.name}: {what}, {human(need)} to download, into {target}")
            cache = VerifiedCache(target, held.fd)  # saved through the held descriptor
            try:
                with out.progress(transfer=True) as sink:
                    progress = Progress(sink, size, "total")
                    dl = Downloader(held, out, cache, progress, policy, stop, file_roots(mirror))
                    todo = [(f, source_url(f, mirror)) for f in chosen]
                    files = in_daemon_threads(lambda t: dl.run(*t), todo, jobs, stop)  # in order
            finally:
                cache.save()
            for o in files:
                if o.status == "failed":
                    out.error(o.error or f"{o.name}: failed")
            ok_files = [f for f, o in zip(chosen, files, strict=True) if o.status != "failed"]
            split_problems = gguf_split.header_problems(target, ok_files, m.layer_map)
            for name, problems in split_problems.items():
                for problem in problems:
                    out.error(f"{name}: {problem}")
            # with a layer map: the ranges the destination held, with these once all are ready
            record = None if m.layer_map is None else subset.read_record(held.fd, m.name)
            if m.layer_map is not None and len(ok_files) == len(chosen) and not split_problems:
                every = ((0, m.layer_map.block_count - 1),)
                sel = selection if selection is not None else subset.select(m, every, True, True)
                empty = subset.Provisioned(model=m.name, layers="", first=False, last=False)
                record = (record or empty).union(sel)
                fault.point("provision.record", m.name)  # every file in place, the record not yet
                subset.write_record(held.fd, record)
                held.fsync()
    result = ArtifactsProvision(
        model=m.name,
        dest=target,
        files=files,
        downloaded_bytes=sum(f.downloaded_bytes for f in files),
        seconds=round(time.monotonic() - started, 3),
        failed=[f.name for f in files if f.status == "failed"],
        split_problems=split_problems,
        layers=selection.shown() if selection else None,
        bytes=size,
        model_bytes=m.total_size,
        missing_bytes=need,
        dry_run=dry_run,
        provisioned=record,
    )
    if dry_run:
        return result
    present = sum(1 for o in files if o.status == "present")
    # the verdict is the answer (stdout), as `report verify`'s: a pipe or `2>/dev/null`
    # still says whether the model is ready; each file's problem went to stderr above
    unready = sorted(set(result.failed) | set(split_problems))
    out.answer(
        f"{m.name}: FAILED: {len(unready)} of {len(files)} files not ready in {target} "
        f"({', '.join(unready)})"
        if unready
        else f"{m.name}: {len(files)}/{len(files)} files ready in {target} "
        f"({present} already present, {human(result.downloaded_bytes)} downloaded in "
        f"{result.seconds:.1f}s)"
    )
    if record is not None:
        out.answer(f"{target} holds layers {record.layers}")
    return result
