"""The one forge-root builder: a forge root pinning the test upstream, with a patch series.

`make_root(path, upstream, edits)` is the whole thing; `write_series(root, upstream,
edits)` (re)writes the series of an existing root. A series is authored the way a person
does it, with plain git: each `Edit` is committed on the pin in a scratch clone, then
`git format-patch` writes the files (`flags`: `CANONICAL`, what `dgr-forge export` writes,
or `PLAIN`, a person's `format-patch -k` with diffstat and signature) and the manifest gets
each file's sha256, and with `trees=True` the git tree after each patch and after the
whole series. With `how="forge"` the root is then put through the real forge
(`dgr-forge patch` + `dgr-forge export`), which canonicalizes patches and manifest.

Used by the tests and by bench/.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from .cli import Result, run_forge
from .git import GIT_ENV, Upstream, committed_head, sh_git
from .snapshot import copy_tree

REPO = Path(__file__).resolve().parent.parent.parent

# what `dgr-forge export` writes (DESIGN.md, "Patch files are canonical")
CANONICAL: tuple[str, ...] = (
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--no-numbered",
    "--keep-subject",
    "--no-stat",
)
# a person's plain `git format-patch -k`: diffstat, version signature
PLAIN: tuple[str, ...] = ("-k", "--zero-commit")

# the identity the upstream's own commits have (GIT_ENV)
UPSTREAM_AUTHOR = {k: v for k, v in GIT_ENV.items() if k.startswith(("GIT_AUTHOR", "GIT_COMM"))}


def manifest_text(
    url: str,
    commit: str,
    tree: str | None = None,
    series: list[dict[str, str]] | None = None,
    result_tree: str | None = None,
    name: str = "llama.cpp",
) -> str:
    lines = [
        "# the pin (test)",
        "schema = 1",
        "",
        "[upstream]",
        f'name = "{name}"',
        f'url = "{url}"',
        f'commit = "{commit}"',
    ]
    if tree:
        lines.append(f'tree = "{tree}"')
    lines += ["", "[patches]", f'dir = "patches/{name}"']
    for entry in series or []:
        lines += ["", "[[patches.series]]"]
        lines += [f'{k} = "{v}"' for k, v in entry.items()]
    if result_tree:
        lines += ["", "[patches.result]", f'tree = "{result_tree}"']
    return "\n".join(lines) + "\n"


def make_forge_root(
    path: Path, upstream: Upstream, commit: str | None = None, with_tree: bool = True
) -> Path:
    """A forge root pinning `upstream` at `commit` (default: its head), with an empty series."""
    commit = commit or upstream.head
    (path / "manifests").mkdir(parents=True)
    (path / "patches" / "llama.cpp").mkdir(parents=True)
    for d in ("recipes", "toolchains", "cmake"):
        (path / d).mkdir()
    tree = upstream.tree(commit) if with_tree else None
    (path / "manifests" / "llama.cpp.toml").write_text(manifest_text(upstream.url, commit, tree))
    return path


def copy_product(root: Path) -> None:
    """The real recipes/, toolchains/ and cmake/ of this repository into a test root."""
    for name in ("recipes", "toolchains", "cmake"):
        shutil.rmtree(root / name, ignore_errors=True)
        shutil.copytree(REPO / name, root / name)


# ----------------------------------------------------------------------------- series

# a file's new content, None to delete it, or a function of its content at the pin
Content = str | None | Callable[[str], str]


@dataclass(frozen=True)
class Edit:
    """One patch: the files it changes and its commit message."""

    files: dict[str, Content]
    subject: str
    body: str | None = None

    def contents(self, read: Callable[[str], str]) -> list[tuple[str, str | None]]:
        """Each file this edit leaves: its new text, None to delete it; a function of a
        file's content is given what `read` answers for that path."""
        return [(rel, c(read(rel)) if callable(c) else c) for rel, c in self.files.items()]


EditLike = Edit | tuple[dict[str, str | None], str]


@dataclass
class Series:
    """A forge root's patch series as written: file names, the authoring commits, the tree
    after each patch (whether or not the manifest records them)."""

    root: Path
    upstream: Upstream
    pin: str
    files: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)

    @property
    def manifest(self) -> Path:
        return self.root / "manifests" / "llama.cpp.toml"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches" / "llama.cpp"

    @property
    def src(self) -> Path:
        return self.root / ".dgr" / "src" / "llama.cpp"

    def paths(self, root: Path | None = None) -> list[Path]:
        return [(root or self.root) / "patches" / "llama.cpp" / f for f in self.files]

    def patch_files(self) -> list[str]:
        return sorted(p.name for p in self.patches_dir.glob("*.patch"))

    def snapshot(self) -> dict[str, bytes]:
        """Every byte of the manifest and patches/: what must survive an abort."""
        files = {"manifest": self.manifest.read_bytes()}
        for p in sorted(self.patches_dir.iterdir()):
            files[p.name] = p.read_bytes()
        return files

    def forge(self, *args: str, env: dict[str, str] | None = None) -> Result:
        """`dgr-forge --root ROOT ARGS` (see `support.cli.run_forge`)."""
        return run_forge("--root", str(self.root), *args, env=env)


def slugify(subject: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:52].rstrip("-")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fixed_date(i: int) -> str:
    """The default commit date of the i-th patch (0-based): deterministic patch bytes."""
    return f"2025-02-01T00:00:{i % 60:02d}Z"


def commit_edits(
    repo: Path,
    edits: Sequence[EditLike],
    *,
    author: dict[str, str] | None = None,
    date: Callable[[int], str] = fixed_date,
) -> list[str]:
    """Commit each edit on the current HEAD of `repo`; the new commit ids."""
    commits = []
    for i, edit in enumerate(_edits(edits)):
        for rel, content in edit.contents(lambda rel: (repo / rel).read_text()):
            target = repo / rel
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        sh_git(repo, "add", "-A")
        env = {**(author or {}), "GIT_AUTHOR_DATE": date(i), "GIT_COMMITTER_DATE": date(i)}
        message = ["-m", edit.subject] + (["-m", edit.body] if edit.body else [])
        sh_git(repo, "commit", "-q", *message, env=env)
        commits.append(committed_head(repo))
    return commits


def author_patches(
    upstream: Upstream,
    edits: Sequence[EditLike],
    *,
    pin: str | None = None,
    flags: Sequence[str] = CANONICAL,
    author: dict[str, str] | None = None,
    date: Callable[[int], str] = fixed_date,
    scratch: Path | None = None,
) -> tuple[list[tuple[str, bytes]], list[str], list[str]]:
    """Patches made with plain git: (git's file name, bytes) per edit, the commits and the
    tree after each. `scratch` is the authoring clone (default: a temporary one).

    Without `scratch`, the result is made once per test process for each input (see
    `_authoring_key`) and handed out again: most of the suite's series are the same few."""
    pin = pin or upstream.head
    key = None if scratch else _authoring_key(upstream, edits, pin, flags, author, date)
    if key is not None and key in _AUTHORED:
        patches, commits, trees = _AUTHORED[key]
        return list(patches), list(commits), list(trees)
    with tempfile.TemporaryDirectory(dir=upstream.path.parent, prefix=".author-") as tmp:
        work = scratch or Path(tmp) / "clone"
        if work.exists():
            shutil.rmtree(work)
        sh_git(work.parent, "clone", "-q", "--no-checkout", str(upstream.path), str(work))
        sh_git(work, "checkout", "-q", "--detach", pin)
        commits = commit_edits(work, edits, author=author, date=date)
        trees = sh_git(work, "rev-parse", *(f"{c}^{{tree}}" for c in commits)).split()
        out = Path(tmp) / "formatted"
        sh_git(work, "format-patch", "-q", *flags, "-o", str(out), f"{pin}..HEAD")
        patches = [(p.name, p.read_bytes()) for p in sorted(out.glob("*.patch"))]
    assert len(patches) == len(commits), "an edit that changes nothing makes no patch"
    if key is not None:
        _AUTHORED[key] = (list(patches), list(commits), list(trees))
    return patches, commits, trees


# authoring input -> (patches, commits, trees): see `_authoring_key`
_AUTHORED: dict[str, tuple[list[tuple[str, bytes]], list[str], list[str]]] = {}


def _authoring_key(
    upstream: Upstream,
    edits: Sequence[EditLike],
    pin: str,
    flags: Sequence[str],
    author: dict[str, str] | None,
    date: Callable[[int], str],
) -> str | None:
    """What the authored commits and patch bytes depend on: the pin, the files each edit
    leaves (computed here from the upstream's clean work tree at the pin), its message,
    author and date, and the format-patch flags. None when that cannot be known cheaply
    (another pin than the checked-out one, a dirty work tree, a file the pin lacks)."""
    status = sh_git(upstream.path, "status", "--porcelain=v2", "--branch", "-z")
    fields = [f for f in status.split("\0") if f]
    if f"# branch.oid {pin}" not in fields or any(not f.startswith("#") for f in fields):
        return None
    files: dict[str, str | None] = {}  # what the edits so far left (None: deleted)

    def read(rel: str) -> str:
        text = files[rel] if rel in files else (upstream.path / rel).read_text()
        if text is None:
            raise FileNotFoundError(rel)
        return text

    h = hashlib.sha256(repr((pin, tuple(flags), sorted((author or {}).items()))).encode())
    for i, edit in enumerate(_edits(edits)):
        try:
            left = edit.contents(read)
        except OSError:
            return None  # the real run fails on it too (and so stores nothing)
        files.update(left)
        h.update(repr((edit.subject, edit.body, date(i), sorted(left, key=str))).encode())
    return h.hexdigest()


def write_manifest(
    root: Path,
    upstream: Upstream,
    files: list[str],
    trees: list[str] | None,
    *,
    pin: str | None = None,
    result_tree: str | None = None,
) -> None:
    """The manifest for `files` in patches/llama.cpp: each sha256, with `trees` each
    patch's tree and the result tree (the last one unless `result_tree` is given)."""
    pin = pin or upstream.head
    pdir = root / "patches" / "llama.cpp"
    series = []
    for i, name in enumerate(files):
        entry = {"file": name, "sha256": sha256(pdir / name)}
        if trees:
            entry["tree"] = trees[i]
        series.append(entry)
    result = result_tree or (trees[-1] if trees else None)
    text = manifest_text(upstream.url, pin, upstream.tree(pin), series, result)
    (root / "manifests" / "llama.cpp.toml").write_text(text)


def write_series(
    root: Path,
    upstream: Upstream,
    edits: Sequence[EditLike],
    *,
    pin: str | None = None,
    how: Literal["git", "forge"] = "git",
    flags: Sequence[str] = CANONICAL,
    names: Literal["git", "slug"] | Sequence[str] = "slug",
    trees: bool = True,
    author: dict[str, str] | None = None,
    date: Callable[[int], str] = fixed_date,
    scratch: Path | None = None,
) -> Series:
    """Replace the series of the forge root `root` with `edits` (see the module doc).

    `names`: git's own file names, `NNNN-<slug of the subject>.patch`, or given ones."""
    pin = pin or upstream.head
    patches, commits, trees_after = author_patches(
        upstream, edits, pin=pin, flags=flags, author=author, date=date, scratch=scratch
    )
    subjects = [e.subject for e in _edits(edits)]
    if names == "git":
        files = [name for name, _ in patches]
    elif names == "slug":
        files = [f"{i:04d}-{slugify(s)}.patch" for i, s in enumerate(subjects, start=1)]
    else:
        files = list(names)
    pdir = root / "patches" / "llama.cpp"
    pdir.mkdir(parents=True, exist_ok=True)
    for old in pdir.glob("*.patch"):
        old.unlink()
    for name, (_, data) in zip(files, patches, strict=True):
        (pdir / name).write_bytes(data)
    write_manifest(root, upstream, files, trees_after if trees else None, pin=pin)
    series = Series(root, upstream, pin, files, commits, trees_after)
    if how == "forge":
        canonicalize(root)
        series.files = series.patch_files()
    return series


def canonicalize(root: Path) -> None:
    """Put a root through the real forge: `dgr-forge patch`, then `dgr-forge export`.

    The outcome depends only on the manifest (pin and URL), the patch files and the
    upstream's objects, so it is made once per test run for each such input (shared between
    the xdist workers through FORGETEST_SHARED_DIR) and copied, with the root's path and
    the upstream's URL rewritten, for every later root: most of the suite's roots are the
    same few series. tests/test_support_roots.py holds a copy to a fresh run."""
    key = _canon_key(root)
    done = (_CANON.get(key) or _shared(key)) if key else None
    if done is None:
        for command in ("patch", "export"):
            res = run_forge("--root", str(root), command)
            assert res.code == 0, res
        if key:
            _CANON[key] = _keep(root)
            _share(key, *_CANON[key])
        return
    kept, old_root, old_url = done
    new_url = _manifest_url(root)
    for rel in ("manifests", "patches", ".dgr"):
        if (root / rel).exists():
            shutil.rmtree(root / rel)
        if (kept / rel).exists():
            copy_tree(kept / rel, root / rel)
    _relocate(root, {old_root: str(root), old_url: new_url})


# (manifest with its URL left out, patch bytes, upstream path) -> (the canonical root's
# manifests/, patches/ and .dgr/, the root and URL they were made at)
_CANON: dict[str, tuple[Path, str, str]] = {}
_CANON_DIR: list[Path] = []


def _manifest_url(root: Path) -> str:
    text = (root / "manifests" / "llama.cpp.toml").read_text()
    found = re.search(r'^url = "([^"]*)"$', text, re.M)
    return found.group(1) if found else ""


def _path_of(url: str) -> str:
    """A local upstream's path, from its URL as the manifest writes it (path or file://)."""
    return unquote(url.removeprefix("file://")) if url.startswith("file:///") else url


def _canon_key(root: Path) -> str | None:
    if any(name.startswith("DGR_") for name in os.environ) or (root / ".dgr").exists():
        return None  # a workspace elsewhere, a fault point, a mirror: made fresh
    url = _manifest_url(root)
    if not url.startswith(("/", "file:///")) or not Path(_path_of(url)).is_dir():
        return None
    h = hashlib.sha256()
    h.update((root / "manifests" / "llama.cpp.toml").read_bytes().replace(url.encode(), b"@"))
    for p in sorted((root / "patches").rglob("*")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        if p.is_file():
            h.update(p.read_bytes())
    # the upstream's refs and objects as they are now (a test may have committed to it)
    upstream = Path(_path_of(url))
    h.update(sh_git(upstream, "for-each-ref", "--format=%(objectname) %(refname)").encode())
    h.update(sh_git(upstream, "rev-parse", "HEAD").encode())
    return h.hexdigest()


def _keep(root: Path) -> tuple[Path, str, str]:
    if not _CANON_DIR:
        _CANON_DIR.append(Path(tempfile.mkdtemp(prefix="dgr-canonical-")))
        atexit.register(shutil.rmtree, _CANON_DIR[0], True)
    kept = _CANON_DIR[0] / str(len(_CANON))
    for rel in ("manifests", "patches", ".dgr"):
        if (root / rel).exists():
            copy_tree(root / rel, kept / rel)
    shutil.rmtree(kept / ".dgr" / "tmp", ignore_errors=True)
    return kept, str(root), _manifest_url(root)


# the test run's directory that every xdist worker sees (set by tests/conftest.py): a root
# canonicalized by one worker is there for the others
SHARED_DIR_ENV = "FORGETEST_SHARED_DIR"


def _shared(key: str) -> tuple[Path, str, str] | None:
    shared = os.environ.get(SHARED_DIR_ENV)
    kept = Path(shared) / "canonical" / key if shared else None
    if kept is None or not (kept / "made-at.json").is_file():
        return None
    made_at = json.loads((kept / "made-at.json").read_text())
    _CANON[key] = (kept, made_at["root"], made_at["url"])
    return _CANON[key]


def _share(key: str, kept: Path, old_root: str, old_url: str) -> None:
    """Publish a canonical root for the other workers: copied whole, then renamed into
    place (a worker that made the same one first wins; both are the same bytes)."""
    shared = os.environ.get(SHARED_DIR_ENV)
    if not shared:
        return
    dest = Path(shared) / "canonical" / key
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".incoming-"))
    for rel in ("manifests", "patches", ".dgr"):
        if (kept / rel).exists():
            copy_tree(kept / rel, tmp / rel)
    (tmp / "made-at.json").write_text(json.dumps({"root": old_root, "url": old_url}))
    try:
        tmp.rename(dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another worker's copy is already there


def _relocate(root: Path, paths: dict[str, str]) -> None:
    """Rewrite the old root's and upstream's paths in every small text file the copy has
    (the manifest, git's config, FETCH_HEAD, reflogs, the forge's records)."""
    olds = sorted(paths, key=len, reverse=True)  # the longer (more precise) path first
    for p in [root / "manifests" / "llama.cpp.toml", *(root / ".dgr").rglob("*")]:
        if p.is_symlink() or not p.is_file() or "objects" in p.parts or p.name == "index":
            continue
        data = p.read_bytes()
        if len(data) > 1 << 20 or b"\0" in data:
            continue
        new = data
        for old in olds:
            new = new.replace(old.encode(), paths[old].encode())
        if new != data:
            p.write_bytes(new)


def make_root(
    path: Path,
    upstream: Upstream,
    edits: Sequence[EditLike] = (),
    *,
    product: bool = False,
    pin: str | None = None,
    **series: object,
) -> Series:
    """A forge root at `path` pinning `upstream` at `pin` (default: its head) with `edits`
    as its series (none: an empty series); `product` copies the real recipes/,
    toolchains/ and cmake/. `series` are `write_series`'s options."""
    pin = pin or upstream.head
    make_forge_root(path, upstream, pin)
    if product:
        copy_product(path)
    if not edits:
        return Series(path, upstream, pin)
    return write_series(path, upstream, edits, pin=pin, **series)  # type: ignore[arg-type]


def _edits(edits: Sequence[EditLike]) -> list[Edit]:
    return [e if isinstance(e, Edit) else Edit(dict(e[0]), e[1]) for e in edits]


# a content pin of the tool, as a root that is not the tool's repository installs it in CI
GIT_PIN = "dgr-forge @ git+https://example.invalid/dgr-forge.git@" + "c" * 40
CONSTRAINTS = "cmake==4.4.5\nninja==1.13.2\n"


def pin_ci(root: Path) -> Path:
    """The ci/ files the install step of a root that is not the tool's repository reads."""
    (root / "ci").mkdir(parents=True, exist_ok=True)
    (root / "ci" / "requirements.txt").write_text(GIT_PIN + "\n")
    (root / "ci" / "constraints.txt").write_text(CONSTRAINTS)
    return root
