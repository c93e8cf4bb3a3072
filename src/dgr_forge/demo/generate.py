"""Write a demo forge root: an upstream repository with history, a pinned series, a worker.

Everything goes into one new (or empty) directory; nothing outside it is written, or read
but the forge's own recipes/, toolchains/ and cmake/ (`core.product`): the signing key is
a demo key inside DIR, the upstream a local repository pinned by a `file://` URL.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core import gitutil, product
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import UPSTREAM_MANIFEST
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import COMMIT, Form, d
from dgr_forge.demo import sources
from dgr_forge.lanes.plan import refuse_unbuildable_paths
from dgr_forge.models.make_manifest import build_manifest
from dgr_forge.upstream.export import ExportedPatch, compute_series
from dgr_forge.upstream.manifest_edit import updated_text
from dgr_forge.upstream.series_journal import scratch_dir

# what a demo root takes of the forge's own files (the real product, not copies)
PRODUCT = ("cmake", "toolchains", "recipes/cpu.toml", "recipes/parity.txt")


class DemoStep(Struct, kw_only=True):
    """a step"""

    step: Annotated[
        str,
        d(
            "`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`, `certify`, "
            "`lanes --advertised`"
        ),
    ]
    command: Annotated[list[str], d("the argv, from `dgr-forge`")]
    exit_code: Annotated[int | None, d("its exit code (null: it did not run)")]
    proved: Annotated[str, d("one line")]


class Demo(Form, kw_only=True):
    """`demo`'s result (its `--json` object)."""

    title = "demo DIR"
    note = (
        "a step that does not end as expected is exit 1 with `step` and `step_exit_code`; a "
        "non-empty DIR is exit 2"
    )

    root: Annotated[Path, d("DIR: the demo forge root")]
    upstream: Annotated[Path, d("the demo upstream's directory")]
    pin: Annotated[str, COMMIT]
    onto: Annotated[str, d("the newer upstream commit the dry run replays onto")]
    patches: Annotated[list[str], d("file names")]
    key: Annotated[Path, d("the demo key")]
    public_key: Annotated[Path, d("its public key")]
    steps: Annotated[list[DemoStep], d("per step")]


def check_target(raw: str) -> Path:
    """DIR as given: new or empty, a real directory (exit 2 with the fix otherwise)."""
    if "\0" in raw:
        raise BadInput("demo DIR: the path contains a NUL byte", hint="give a directory path")
    if not raw or raw.startswith("-"):
        raise BadInput(
            f"demo DIR {raw!r}: empty or starts with '-'",
            hint="give a directory path; write a name starting with '-' as ./-name",
        )
    path = Path(raw)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise BadInput(f"demo DIR {raw}: {err.strerror}", hint="give a usable directory") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise BadInput(
                f"demo DIR {raw}: is a symbolic link",
                hint="give the directory itself (the demo writes a forge root into it)",
            )
        if not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"demo DIR {raw}: not a directory", hint="give a new or empty directory")
        # a directory this run did not create: only the caller's own, that no one else
        # may write to (else another user plants links in it while the demo writes)
        if st.st_uid != os.geteuid():
            raise BadInput(
                f"demo DIR {raw}: owned by another user (uid {st.st_uid})",
                hint="give a new directory (the demo creates it) or one you own",
                details={"file": raw},
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise BadInput(
                f"demo DIR {raw}: writable by other users (mode {stat.S_IMODE(st.st_mode):o})",
                hint=f"give a new directory, or `chmod go-w {raw}` first",
                details={"file": raw},
            )
        if any(path.iterdir()):
            raise BadInput(
                f"demo DIR {raw}: not empty",
                hint="give a new or empty directory; the demo never writes over files",
            )
    # `..` as the kernel reads it (through the parents, never a stray `new/` for
    # `new/../demo`); the last component stays as checked above, never followed
    target = path.resolve() if path.name in ("", ".", "..") else path.parent.resolve() / path.name
    refuse_unbuildable_paths(target, fix="give a demo DIR")  # the tour builds in it
    try:
        for d in (*reversed(target.parents), target):
            if not d.exists():
                d.mkdir(mode=_DIR_MODE)
                os.chmod(d, _DIR_MODE)  # whatever the umask: no one else writes here
    except OSError as err:
        raise BadInput(
            f"demo DIR {raw}: cannot create it: {err.strerror}", hint="give a writable path"
        ) from None
    return target


_DIR_MODE = 0o755
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def write_new(root: Path, rel: str, content: str | bytes) -> None:
    """`content` as a new file `rel` inside `root`, every component opened O_NOFOLLOW (the
    file O_EXCL): a link planted anywhere below `root` is refused, never written through."""
    *dirs, name = rel.split("/")
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in dirs:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, _DIR_MODE, dir_fd=fd)
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            out = os.open(name, _NEW_FILE | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise BadInput(
            f"demo DIR {root}: cannot write {rel}: {err.strerror} (a file or link is already "
            "there: another user may have planted it)",
            hint="run the demo again in a new directory",
            details={"file": str(root / rel)},
        ) from None
    with os.fdopen(out, "wb") as f:
        f.write(content.encode() if isinstance(content, str) else content)


def _commit(repo: Path, files: dict[str, str], subject: str, n: int, ident: dict[str, str]) -> str:
    for rel, content in files.items():
        if (target := repo / rel).is_file() and not target.is_symlink():
            target.unlink()  # a later commit's version: a new file, written no-follow
        write_new(repo, rel, content)
    gitutil.git(repo, "add", "-A")
    when = sources.date(n)
    env = {**ident, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    gitutil.git(repo, "commit", "-q", "--no-verify", "-m", subject, env=env)
    return gitutil.out(repo, "rev-parse", "HEAD")


def write_series(root: Path, upstream: Path, pin: str) -> list[ExportedPatch]:
    """The series authored on the pin in a scratch clone, exported into patches/llama.cpp/."""
    with scratch_dir(root, ".demo-series-") as tmp:
        clone = tmp / "clone"
        gitutil.git(None, "clone", "-q", "--no-checkout", "--", str(upstream), str(clone))
        gitutil.git(clone, "checkout", "-q", "--detach", pin)
        for n, c in enumerate(sources.SERIES, len(sources.HISTORY)):
            _commit(clone, c.files, c.subject, n, sources.IDENTITY)
        return compute_series(clone, pin, root / "patches" / "llama.cpp", tmp_root=tmp)


def generate(root: Path) -> Demo:
    """Fill the (checked, empty) `root`: a forge root of one commit, as a team's would be."""
    from dgr_forge.attest import keys  # the cryptography import, only when a demo is made

    upstream = root / sources.UPSTREAM_DIR
    upstream.mkdir(parents=True)
    gitutil.git(upstream, "init", "-q", "-b", sources.BRANCH)
    history = enumerate(sources.HISTORY)  # the upstream's commit ids, oldest first:
    commits = [_commit(upstream, c.files, c.subject, n, sources.IDENTITY) for n, c in history]
    pin = commits[sources.PIN_INDEX]
    (root / "manifests").mkdir()
    series = write_series(root, upstream, pin)
    tree = gitutil.tree_of(upstream, pin)
    # the upstream's own build number at the pin (its commit count there), as fetch records
    number = int(gitutil.out(upstream, "rev-list", "--count", pin, "--"))
    # the manifest before the pin and the series go in (`manifest_edit`, as export writes them)
    manifest = updated_text(
        sources.text(UPSTREAM_MANIFEST), series, series[-1].tree, upstream_url=upstream.as_uri(),
        upstream_commit=pin, upstream_tree=tree, upstream_build_number=number,
    )  # fmt: skip
    write_new(root, UPSTREAM_MANIFEST, manifest)
    write_new(root, "manifests/shard-worker.toml", sources.text("manifests/shard-worker.toml"))
    for rel, content in sources.tree(sources.WORKER_DIR).items():
        write_new(root, f"{sources.WORKER_DIR}/{rel}", content)
    product.copy_into(root, PRODUCT, "the demo")
    for name, data in sources.model_parts().items():  # the model's source, written no-follow
        write_new(root, f"{sources.MODEL_SOURCE_DIR}/{name}", data)
    served = root / sources.MODEL_SOURCE_DIR  # its manifest names the file:// URLs there
    _, text = build_manifest(served, sources.MODEL, served.as_uri(), Reporter(quiet=True), jobs=1)
    write_new(root, f"manifests/models/{sources.MODEL}.toml", text)
    write_new(root, ".gitignore", sources.GITIGNORE)
    key = root / sources.KEYS_DIR / sources.KEY_FILE
    keys.generate(key)
    # the demo key signs the certification and is trusted for it: `lanes --advertised`
    public_key = key.with_name(key.name + ".pub")
    write_new(root, sources.TRUSTED_KEY, public_key.read_text())
    gitutil.git(root, "init", "-q", "-b", "main")
    _commit(root, {}, "a dgr-forge demo root", 0, sources.ROOT_IDENTITY)
    return Demo(
        root=root,
        upstream=upstream,
        pin=pin,
        onto=commits[-1],
        patches=[s.file for s in series],
        key=key,
        public_key=public_key,
        steps=[],
    )
