"""The command context: what a command body gets (`Env`), and `Env.session`, which takes
what the command declares it needs, in this order:

1. the workspace lock (`lock`) and the root lock (`root_lock`), before any input is read,
   so a waiting run sees what the run it waited for wrote;
2. for commands that write (`recover`), finishing or undoing what a killed export or
   rebase left half-written (`series_journal.recover`): the only place recovery runs,
   since loaders are pure;
3. the refusal during a rebase (`refuse_rebase`);
4. each input loaded once: the upstream manifest, recipes, host probes (as a `Doctor`),
   the worker (with the command's override).

Library functions take these loaded values; none loads or locks on its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
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


@dataclass
class GlobalOptions:
    """The options of the whole tool (`--root`, `--json`, ...), wherever they were given."""

    root: Path | None = None
    workspace: Path | None = None
    json: bool = False
    quiet: bool = False
    verbose: bool = False


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
        assert self._manifest is not None, "declare session(manifest=True)"
        return self._manifest

    @property
    def manifest_or_none(self) -> UpstreamManifest | None:
        return self._manifest

    @property
    def recipes(self) -> dict[str, Recipe]:
        assert self._recipes is not None, "declare session(recipes=True)"
        return self._recipes

    @property
    def doctor(self) -> Doctor:
        assert self._doctor is not None, "declare session(probes=True)"
        return self._doctor


@dataclass
class Env:
    """What a command body gets: the output channel and (lazily) the forge it works on."""

    options: GlobalOptions
    out: Reporter
    _forge: Forge | None = field(default=None, repr=False)

    @property
    def forge(self) -> Forge:
        if self._forge is None:
            self._forge = Forge.locate(self.options.root, self.options.workspace)
        return self._forge

    @contextlib.contextmanager
    def session(
        self,
        *,
        lock: bool = False,
        root_lock: bool = False,
        recover: bool = False,
        refuse_rebase: bool = False,
        manifest: bool = True,
        manifest_may_fail: bool = False,
        recipes: bool = False,
        probes: bool = False,
        worker: bool = False,
        worker_override: Path | None = None,
    ) -> Iterator[Session]:
        """The command boundary (the module doc); without `lock` nothing waits behind a
        build. `manifest_may_fail`: a manifest that does not load is None, not an error
        (`rebase --continue` reports it as changed since the rebase started)."""
        from dgr_forge.core.lock import root_lock as take_root_lock
        from dgr_forge.core.lock import workspace_lock

        forge, out = self.forge, self.out
        with contextlib.ExitStack() as stack:
            if lock:
                stack.enter_context(workspace_lock(forge, out))
            before = None
            if root_lock:
                # another run holds the root lock: keep the manifest as it was before
                # waiting, so a writer can tell that run's write from its own view
                seen: list[bytes] = []

                def waiting() -> None:
                    from dgr_forge.upstream.manifest import read_raw

                    # bounded, a FIFO never waited on: the loader refuses such a file after
                    with contextlib.suppress(OSError, BadInput):
                        seen.append(read_raw(forge.upstream_manifest))

                stack.enter_context(take_root_lock(forge.root, out, on_wait=waiting))
                before = seen[0] if seen else None
            if recover:
                from dgr_forge.upstream import series_journal

                series_journal.recover(forge.root, out)
            if refuse_rebase:
                from dgr_forge.upstream.workspace import refuse_during_rebase

                refuse_during_rebase(forge)
            try:
                m = _load_manifest(forge, out, recover, manifest_may_fail) if manifest else None
                loaded = None
                if recipes:
                    from dgr_forge.certify import suite
                    from dgr_forge.host.recipes import load_all

                    loaded = load_all(forge.recipes_dir, forge.root)
                    for recipe in loaded.values():  # a hostile [certify] is exit 2 everywhere
                        suite.load(recipe)
                doctor = load_doctor(forge) if probes else None
                spec = None
                if worker:
                    from dgr_forge.host import worker as worker_mod

                    spec = worker_mod.resolve(forge, worker_override)
            except BadInput as err:  # read from a root the search upwards picked: named
                raise forge.picked(err) from err
            yield Session(forge, out, m, loaded, doctor, spec, before)


def load_doctor(forge: Forge) -> Doctor:
    """Host probes from toolchains/probes.toml: the one place they are read."""
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.probes import PROBES, load_probes
    from dgr_forge.host.toolkit import LOCK_NAME, installed_site

    probes = load_probes(forge.root / PROBES, PROBES, root=forge.root)
    lock = forge.toolchains_dir / LOCK_NAME
    site = installed_site(lock)  # the pinned toolkit, first
    fenced = (forge.root, forge.workspace)
    return Doctor(probes, fenced=fenced, sites=(site,) if site else (), pinned=lock.is_file())


def _load_manifest(
    forge: Forge, out: Reporter, recover: bool, may_fail: bool
) -> UpstreamManifest | None:
    """The manifest, once. For a writer, after recovery: a series kept outside `patches/` has its
    journal next to its own directory, known only once the manifest names it (then it is finished
    and the manifest read again). A reader refuses a half-written series instead."""
    from dgr_forge.upstream import manifest, series_journal

    try:
        try:
            m = manifest.load(forge.upstream_manifest, forge.root)
            pdir = m.patches_dir
        except BadInput as err:  # perhaps the half-written series: the error says where
            where = err.details.get("patches_dir")
            if not (recover and where and series_journal.pending(Path(str(where)))):
                raise
            pdir = Path(str(where))
        if recover and series_journal.pending(pdir):
            series_journal.recover(forge.root, out, pdir=pdir)
            m = manifest.load(forge.upstream_manifest, forge.root)
    except BadInput as err:
        if not recover:
            where = err.details.get("patches_dir")
            _refuse_interrupted(forge, Path(str(where)) if where else None, err)
        if not may_fail:
            raise
        return None
    if not recover:
        _refuse_interrupted(forge, m.patches_dir, None)
    return m


def _refuse_interrupted(forge: Forge, pdir: Path | None, err: Exception | None) -> None:
    """A command that does not write never finishes a killed export's or rebase's write of patches/
    and the manifest: it says so (exit 3) rather than read a half-written series."""
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
