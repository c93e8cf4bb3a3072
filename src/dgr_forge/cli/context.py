"""The command context: every command declares what it needs and gets it loaded once.

The way west hands a command its manifest. A command body asks `Env.session(...)` for
its needs; the context then, in this order:

1. takes the workspace lock (`lock`) and the root lock (`root_lock`), before any input is
   read, so a waiting run sees what the run it waited for wrote;
2. for commands that write (`recover`), finishes or undoes what a killed export or rebase
   left half-written (`series_journal.recover`), under those locks: the only place
   recovery runs, since loaders are pure;
3. refuses during a rebase (`refuse_rebase`);
4. loads each input once: the upstream manifest (`manifest`), recipes (`recipes`), host
   probes (`probes`, as a `Doctor`), the worker (`worker`, with the command's override).

Library functions take these loaded values; none loads or locks on its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter

if TYPE_CHECKING:
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.recipes import Recipe
    from dgr_forge.host.worker import WorkerSpec
    from dgr_forge.upstream.manifest import UpstreamManifest

PROBES = "toolchains/probes.toml"


@dataclass(frozen=True)
class Needs:
    """What a command needs before its body runs (see the module docstring)."""

    lock: bool = False
    root_lock: bool = False
    recover: bool = False
    refuse_rebase: bool = False
    manifest: bool = True
    # a manifest that does not load is None rather than an error (`rebase --continue`
    # reports it as changed since the rebase started)
    manifest_may_fail: bool = False
    recipes: bool = False
    probes: bool = False
    worker: bool = False
    worker_override: Path | None = None


@dataclass(frozen=True)
class Session:
    """What a command works on once its boundary is passed: inputs loaded under the lock."""

    forge: Forge
    out: Reporter
    _manifest: UpstreamManifest | None = None
    _recipes: dict[str, Recipe] | None = None
    _doctor: Doctor | None = None
    worker: WorkerSpec | None = None
    # the manifest's bytes before the root lock was waited for (None: not asked, or no
    # file): a writer compares them with what it loaded, to see another run's write
    manifest_before: bytes | None = None

    @property
    def manifest(self) -> UpstreamManifest:
        assert self._manifest is not None, "declare Needs(manifest=True)"
        return self._manifest

    @property
    def manifest_or_none(self) -> UpstreamManifest | None:
        return self._manifest

    @property
    def recipes(self) -> dict[str, Recipe]:
        assert self._recipes is not None, "declare Needs(recipes=True)"
        return self._recipes

    @property
    def doctor(self) -> Doctor:
        assert self._doctor is not None, "declare Needs(probes=True)"
        return self._doctor


def load_doctor(forge: Forge) -> Doctor:
    """Host probes from toolchains/probes.toml: the one place they are read."""
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.probes import load_probes
    from dgr_forge.host.toolkit import LOCK_NAME, installed_site

    probes = load_probes(forge.toolchains_dir / "probes.toml", PROBES, root=forge.root)
    lock = forge.toolchains_dir / LOCK_NAME
    site = installed_site(lock)  # the pinned toolkit, first
    fenced = (forge.root, forge.workspace)
    return Doctor(probes, fenced=fenced, sites=(site,) if site else (), pinned=lock.is_file())


def _load_manifest(forge: Forge, out: Reporter, *, recover: bool) -> UpstreamManifest:
    """The manifest, once. For a writer, after recovery: a series kept outside `patches/`
    has its journal next to its own directory, known only once the manifest names it
    (then it is finished and the manifest read again)."""
    from dgr_forge.core.errors import BadInput
    from dgr_forge.upstream import manifest, series_journal

    try:
        m = manifest.load(forge.upstream_manifest, forge.root)
        pdir = m.patches_dir
    except BadInput as err:  # perhaps the half-written series: the error says where it is
        where = err.details.get("patches_dir")
        if not (recover and where and series_journal.pending(Path(str(where)))):
            raise
        pdir = Path(str(where))
    if recover and series_journal.pending(pdir):
        series_journal.recover(forge.root, out, pdir=pdir)
        m = manifest.load(forge.upstream_manifest, forge.root)
    return m


def _refuse_interrupted(forge: Forge, pdir: Path | None, err: Exception | None) -> None:
    """A command that does not write never finishes a killed export's or rebase's write
    of patches/ and the manifest: it says so (exit 3) rather than read a half-written
    series."""
    from dgr_forge.core.errors import NeedsHuman
    from dgr_forge.upstream import series_journal

    journals = series_journal.interrupted(forge.root, pdir)
    if not journals:
        return
    raise NeedsHuman(
        "an export or rebase was interrupted while writing patches/ and the manifest "
        f"({', '.join(forge.rel(j) for j in journals)})",
        hint="run it again (`dgr-forge export`, or `dgr-forge rebase --continue` during a "
        "rebase); any command that writes, e.g. `dgr-forge patch`, finishes the write first",
        details={
            "journals": [str(j) for j in journals],
            **({"manifest_error": str(err)} if err else {}),
        },
    ) from err


def _load_inputs(
    forge: Forge, out: Reporter, needs: Needs
) -> tuple[UpstreamManifest | None, dict[str, Recipe] | None, Doctor | None, WorkerSpec | None]:
    """Each declared input, loaded once (step 4 of the module doc)."""
    m = None
    if needs.manifest:
        try:
            m = _load_manifest(forge, out, recover=needs.recover)
        except BadInput as err:
            if not needs.recover:
                where = err.details.get("patches_dir")
                _refuse_interrupted(forge, Path(str(where)) if where else None, err)
            if not needs.manifest_may_fail:
                raise
        if m is not None and not needs.recover:
            _refuse_interrupted(forge, m.patches_dir, None)
    recipes = None
    if needs.recipes:
        from dgr_forge.host.recipes import load_all

        recipes = load_all(forge.recipes_dir, forge.root)
        from dgr_forge.certify import suite

        for recipe in recipes.values():  # a hostile [certify] is exit 2 for every command
            suite.load(recipe)
    doctor = load_doctor(forge) if needs.probes else None
    spec = None
    if needs.worker:
        from dgr_forge.host import worker

        spec = worker.resolve(forge, needs.worker_override)
    return m, recipes, doctor, spec


@contextlib.contextmanager
def open_session(forge: Forge, out: Reporter, needs: Needs) -> Iterator[Session]:
    from dgr_forge.core.lock import root_lock, workspace_lock

    with contextlib.ExitStack() as stack:
        if needs.lock:
            stack.enter_context(workspace_lock(forge, out))
        before = None
        if needs.root_lock:
            # another run holds the root lock: keep the manifest as it was before waiting,
            # so a writer can tell that run's write from its own view
            seen: list[bytes] = []

            def waiting() -> None:
                from dgr_forge.core.errors import BadInput
                from dgr_forge.upstream.manifest import read_raw

                # bounded, a FIFO never waited on: the loader refuses such a file after
                with contextlib.suppress(OSError, BadInput):
                    seen.append(read_raw(forge.upstream_manifest))

            stack.enter_context(root_lock(forge.root, out, on_wait=waiting))
            before = seen[0] if seen else None
        if needs.recover:
            from dgr_forge.upstream import series_journal

            series_journal.recover(forge.root, out)
        if needs.refuse_rebase:
            from dgr_forge.upstream.workspace import refuse_during_rebase

            refuse_during_rebase(forge)
        try:
            m, recipes, doctor, spec = _load_inputs(forge, out, needs)
        except BadInput as err:  # read from a root the search upwards picked: named
            raise forge.picked(err) from err
        yield Session(forge, out, m, recipes, doctor, spec, before)
