"""How the rendered CI installs dgr-forge: one step, the same in every job (the modes and
what each file must pin: docs/ci.md, "One install step"). `--tool-source` is checked as
hostile input and reaches pip through the workflow's `DGR_TOOL_SOURCE`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dgr_forge import __version__
from dgr_forge.core import tominput
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.fsutil import atomic_write_text, read_regular
from dgr_forge.core.urls import check_url

REQUIREMENTS = "ci/requirements.txt"
CI_CONSTRAINTS = "ci/constraints.txt"
# the install step's venv (both templates: `$python` and `$venv` set, each its own paths),
# and `venv_pip`, pip on that venv, for the step's `venv_pip install`
VENV_SETUP = """\
# the interpreter's own pip installs into the venv (ensurepip takes seconds); one
# without pip (or older than 22.3, before --python) gives the venv its own. pip's
# version is read by import: starting pip to ask it costs two interpreter starts
"$python" -m venv --without-pip "$venv"
pip_ok='import pip, sys; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))'
if "$python" -c "$pip_ok" 2>/dev/null; then
  venv_pip() { "$python" -m pip --python "$venv/bin/python" "$@"; }
else
  "$venv/bin/python" -m ensurepip --default-pip >/dev/null
  venv_pip() { "$venv/bin/python" -m pip "$@"; }
fi"""
SELF_CONSTRAINTS = "constraints.txt"
MAX_BYTES = 64 * 1024

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?"
_HASHES = r"(\s+--hash=sha256:[0-9a-f]{64})+"
# an exact commit of a git repository: the bytes are the commit's
_GIT_PIN = re.compile(_NAME + r"\s*@\s*git\+(https|ssh|file)://[^\s@#;]+(@[^\s@#;]+)?@[0-9a-f]{40}")
# name==version or name @ https://...: pinned by content only with --hash
_HASHED_PIN = re.compile(_NAME + r"(==[A-Za-z0-9.+!_-]+|\s*@\s*https://[^\s#;]+)" + _HASHES)
_EXACT = re.compile(_NAME + r"==[A-Za-z0-9.+!_-]+")


@dataclass(frozen=True)
class Install:
    """What the rendered install step runs, and the files it reads."""

    mode: str  # "checkout" (the tool's own repository), "requirements" or "source"
    requirements: str | None  # ci/requirements.txt in "requirements" mode
    constraints: str  # constraints.txt or ci/constraints.txt
    exists: bool  # every file the step reads is there
    hashes: bool  # every requirement carries --hash: pip runs with --require-hashes
    missing: tuple[str, ...] = ()
    source: str | None = None  # "source" mode: the requirement --tool-source gave

    @property
    def args(self) -> str:  # no user value: --tool-source arrives through the environment
        if self.mode == "checkout":
            return f"-c {self.constraints} ."
        if self.mode == "source":
            return f'-c {self.constraints} "$DGR_TOOL_SOURCE"'
        hashes = "--require-hashes " if self.hashes else ""
        return f"{hashes}-c {self.constraints} -r {self.requirements}"


def is_tool_repository(root: Path) -> bool:
    """pyproject.toml names the project `dgr-forge` and src/dgr_forge/ is there. Beside
    src/dgr_forge/ a pyproject.toml that is no regular file is exit 2 (a silent other
    install mode would leave `ci render --check` reporting a drift that points nowhere)."""
    if not (root / "src" / "dgr_forge" / "__init__.py").is_file():
        return False
    try:
        raw = read_regular(
            root / "pyproject.toml",
            what="pyproject.toml",
            hint="the tool's own repository (src/dgr_forge/ is here) keeps a plain "
            "pyproject.toml: restore it from git",
            limit=tominput.MAX_BYTES,
            shown="pyproject.toml",
            follow=False,
        )
    except BadInput:
        if not os.path.lexists(root / "pyproject.toml"):
            return False
        raise
    try:  # bounded like every TOML input (depth, number size), then the one key we read
        project = tominput.Checker("pyproject.toml").parse(raw).get("project")
    except BadInput:
        return False  # not a pyproject we can read: not the tool's
    name = project.get("name") if isinstance(project, dict) else None
    return isinstance(name, str) and _canonical(name) == "dgr-forge"


def _read(root: Path, rel: str) -> list[tuple[int, str]] | None:
    """(line number, requirement) pairs, continuations joined, comments dropped; None: missing."""
    if (path := root / rel).parent.is_symlink() or path.is_symlink():
        # read or written through a planted link, it would pin whatever the link points at
        raise BadInput(f"{rel}: not a regular file", hint="commit a plain file")
    if not os.path.lexists(path):
        return None
    # bounded, no link, a FIFO never waited on: a pull request writes this file
    raw = read_regular(
        path,
        what="CI pin file",
        hint="commit a plain file; pin only what CI installs",
        limit=MAX_BYTES,
        shown=rel,
        follow=False,
    )
    lines = raw.decode("utf-8", errors="replace").replace("\\\n", " ").splitlines()
    bodies = [(n, ln.split(" #", 1)[0].strip()) for n, ln in enumerate(lines, 1)]
    return [(n, body) for n, body in bodies if body and not body.startswith("#")]


TOOLCHAIN = ("cmake", "ninja")


def _constraints(root: Path, rel: str) -> bool:
    """Whether it is there: exact `name==version` lines only (a constraint that floats pins
    nothing), cmake and ninja among them (a report names the exact ones it built with)."""
    if (found := _read(root, rel)) is None:
        return False
    pinned = set()
    for number, body in found:
        if not _EXACT.fullmatch(body):
            raise BadInput(
                f"{rel}:{number}: {body[:60]!r} is not an exact pin",
                hint="write name==version, one per line (ci render --out writes the file)",
                details={"file": rel, "line": number},
            )
        pinned.add(_canonical(body.split("==", 1)[0].split("[", 1)[0]))
    if missing := [tool for tool in TOOLCHAIN if tool not in pinned]:
        raise BadInput(
            f"{rel}: does not pin {' or '.join(missing)}: the toolchain CI builds with",
            hint=f"add {'==<version> and '.join(missing)}==<version> (what a report names)",
            details={"file": rel},
        )
    return True


PIN_HINT = (
    "pin dgr-forge by content: `dgr-forge @ git+https://<the tool's repository>@<40-hex "
    "commit>`, or a lock with --hash=sha256:... on every line; or render with "
    "--tool-source (dgr-forge==X, https://.../dgr_forge-X-py3-none-any.whl#sha256=<64 hex>, "
    "or git+https://.../REPO@<40-hex commit>)"
)

TOOL_SOURCE_HINT = (
    "give --tool-source as dgr-forge==X (a release on your package index), "
    "https://HOST/PATH/dgr_forge-X-py3-none-any.whl#sha256=<64 hex> (a wheel and its hash), "
    "or git+https://HOST/PATH@<40-hex commit>"
)
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!_-]{0,63}")
# no `@` in it: a credential in a workflow file is readable by everyone who can read it
_WHEEL = re.compile(r"(https://[^\s#@]+/dgr_forge-[^/\s#@]+\.whl)#sha256=([0-9a-f]{64})")
_GIT = re.compile(r"git\+(https://[^\s@#]+)@([0-9a-f]{40})")
# nothing the shell, YAML or a CI expression reads specially, even inside double quotes
_UNSAFE = set("$`\\\"'{}<>|;&*?!~^[]()%,")


def unpublished() -> str:
    """A sentence when dgr-forge's project URLs are `.invalid` placeholders, else ""."""
    try:
        urls = metadata.metadata("dgr-forge").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return ""
    source = next((u.split(", ", 1)[1] for u in urls if u.startswith("Source, ")), "")
    host = re.sub(r"^[a-z+]+://([^/:]+).*$", r"\1", source)
    if source and not host.endswith(".invalid"):
        return ""
    return (
        f"dgr-forge's own project URL ({source or 'none'}) is a placeholder: there is no "
        "published repository or release to pin by default, so name the one your project "
        "installs from"
    )


def tool_source(raw: str) -> str:
    where = "--tool-source"

    def refused(problem: str) -> BadInput:
        return BadInput(f"{where}: {problem}", hint=TOOL_SOURCE_HINT)

    if not raw or raw.startswith("-") or len(raw) > 2048:
        raise refused(f"{raw[:80]!r} is empty, too long or starts with '-'")
    if any(ord(c) < 33 or ord(c) > 126 for c in raw):
        raise refused(f"{raw[:80]!r} contains a space, control or non-ASCII character")
    if raw.startswith("dgr-forge=="):
        if not _VERSION.fullmatch(raw.split("==", 1)[1]):
            raise refused(f"{raw!r}: not an exact version")
        return raw
    if bad := sorted(set(raw) & _UNSAFE):
        raise refused(f"{raw[:80]!r} contains {' '.join(bad)}, which a URL here never needs")
    if url := _WHEEL.fullmatch(raw) or _GIT.fullmatch(raw):
        check_url(url.group(1), where, schemes=("https",))
        return f"dgr-forge @ {raw}"
    raise refused(f"{raw[:80]!r} names no exact release, hashed wheel or commit")


def _check_requirements(found: list[tuple[int, str]]) -> bool:
    """Every line pinned by content; True when they are hashes (pip --require-hashes)."""
    if not found:
        raise BadInput(f"{REQUIREMENTS}: pins nothing", hint=PIN_HINT)
    hashed = 0
    for number, body in found:
        if _HASHED_PIN.fullmatch(body):
            hashed += 1
        elif not _GIT_PIN.fullmatch(body):
            raise BadInput(
                f"{REQUIREMENTS}:{number}: {body[:60]!r} is not pinned by content",
                hint=PIN_HINT,
                details={"file": REQUIREMENTS, "line": number},
            )
    if hashed and hashed != len(found):
        raise BadInput(
            f"{REQUIREMENTS}: some lines have --hash and some do not",
            hint="pip checks hashes for all lines or none: hash every line, or pin by commit",
            details={"file": REQUIREMENTS},
        )
    return hashed == len(found)


def install(root: Path, source: str | None = None) -> Install:
    """Files checked, none written; `source` (`tool_source`) replaces the root's own pin."""
    own = is_tool_repository(root)
    if source is not None or own:
        # the tool's own repository pins its toolchain once, in constraints.txt
        rel = SELF_CONSTRAINTS if own else CI_CONSTRAINTS
        missing: tuple[str, ...] = () if _constraints(root, rel) else (rel,)
        mode = "checkout" if source is None else "source"
        return Install(mode, None, rel, not missing, False, missing, source)
    reqs = _read(root, REQUIREMENTS)
    hashes = _check_requirements(reqs) if reqs is not None else False
    missing = ((REQUIREMENTS,) if reqs is None else ()) + (
        () if _constraints(root, CI_CONSTRAINTS) else (CI_CONSTRAINTS,)
    )
    return Install("requirements", REQUIREMENTS, CI_CONSTRAINTS, not missing, hashes, missing)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_pins(of: tuple[str, ...] = ("dgr-forge",)) -> list[str]:
    """`name==version` of every installed distribution `of` needs at run time, no extras."""
    seen: dict[str, str] = {}
    todo = list(of)
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:
            continue  # not installed here: its marker excluded it
        for req in dist.requires or []:
            m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
            if re.search(r"\bextra\s*==", req) or not m or _canonical(m[0]) in seen:
                continue
            try:
                seen[_canonical(m[0])] = f"{m[0]}=={metadata.version(m[0])}"
            except metadata.PackageNotFoundError:
                continue
            todo.append(m[0])
    return sorted(seen.values(), key=str.lower)


def _direct_pin() -> str | None:
    """`dgr-forge @ git+URL@COMMIT` when this dgr-forge was installed from a git commit."""
    try:
        data = json.loads(metadata.distribution("dgr-forge").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    vcs = data.get("vcs_info") if isinstance(data, dict) else None
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git":
        return None
    commit = vcs.get("commit_id")  # the URL is a string if the line matches
    line = f"dgr-forge @ git+{data.get('url')}@{commit}"
    return line if isinstance(commit, str) and _GIT_PIN.fullmatch(line) else None


CONSTRAINTS_HINT = (
    f"`ci render --write-pins` writes {CI_CONSTRAINTS} from this environment (exact "
    "versions), or write it yourself: name==version lines, cmake and ninja among them"
)


def missing_refusal(current: Install) -> BadInput:
    """Exit 2: the files the install step reads that are missing, every way to give each."""
    files = current.missing
    ways = {
        REQUIREMENTS: PIN_HINT,
        CI_CONSTRAINTS: CONSTRAINTS_HINT,
        SELF_CONSTRAINTS: "restore it from git (the tool's own pins)",
    }
    why = unpublished() if REQUIREMENTS in files else ""
    return BadInput(
        f"{', '.join(files)}: missing: every job's install step reads "
        f"{'it' if len(files) == 1 else 'them'}, so no job could install dgr-forge"
        + (f" ({why})" if why else ""),
        hint="; ".join(f"for {f}: {way}" for f, way in ways.items() if f in files),
        details={"files": list(files)},
    )


def write_missing(root: Path, current: Install) -> list[str]:
    """The missing ci/constraints.txt (this environment's pins) and, when this dgr-forge
    came from a git commit, ci/requirements.txt, written; never overwrites."""
    if current.mode not in ("requirements", "source"):
        return []
    todo: dict[str, str] = {}
    if CI_CONSTRAINTS in current.missing:
        if not (pins := runtime_pins()):
            raise OperationFailed(
                f"{CI_CONSTRAINTS}: cannot tell this dgr-forge's runtime dependencies (it is "
                "not installed as a distribution)",
                hint=f"install dgr-forge with pip and re-run, or write {CI_CONSTRAINTS} "
                "(name==version lines, cmake and ninja among them)",
            )
        todo[CI_CONSTRAINTS] = (
            f"# The toolchain CI installs dgr-forge with (written by dgr-forge {__version__}'s\n"
            "# `ci render` from the environment it ran in): exact versions only; a report\n"
            "# names the cmake and ninja it built with. Change it deliberately.\n"
            + "".join(f"{pin}\n" for pin in pins)
        )
    pin = _direct_pin()
    if current.mode == "requirements" and REQUIREMENTS in current.missing and pin is not None:
        todo[REQUIREMENTS] = (
            "# dgr-forge for CI, pinned by content: an exact commit of the tool's repository\n"
            "# (or a lock with --hash=sha256:... on every line). Change it deliberately.\n"
            f"{pin}\n"
        )
    for rel, text in todo.items():
        try:
            (root / "ci").mkdir(exist_ok=True)
            atomic_write_text(root / rel, text, mode=0o644)
        except OSError as err:
            raise BadInput(
                f"{rel}: cannot write: {err.strerror}", hint="check the forge root"
            ) from None
    return list(todo)
