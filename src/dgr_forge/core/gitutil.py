"""Running git, every call through `git()`: the settings that make it fast and deterministic."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from msgspec import Struct

from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.proc import capture, starting

# Settings for every call: no background gc, no signing, no CRLF conversion, a pinned
# diff algorithm (patch bytes must not depend on user config), no pager, no hooks.
CONFIG: tuple[str, ...] = (
    "gc.auto=0",
    "maintenance.auto=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.autocrlf=false",
    "core.eol=lf",
    "core.safecrlf=false",
    "core.quotePath=false",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "diff.algorithm=myers",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.renames=false",
    "format.signature=",
    "advice.detachedHead=false",
    "am.threeWay=false",
    "init.defaultBranch=main",
    "user.name=dgr-forge",
    "user.email=dgr-forge@invalid",
    # transports that run commands or read descriptors are never used (docs/design.md, trust)
    "protocol.ext.allow=never",
    "protocol.fd.allow=never",
)

# Identity and dates used for commits the forge makes (patch commits use each patch's
# own author and date; the committer is always this, so ids are reproducible).
FORGE_IDENTITY = {"GIT_COMMITTER_NAME": "dgr-forge", "GIT_COMMITTER_EMAIL": "dgr-forge@invalid"}

# the shapes of identifiers every package checks
HEX40 = re.compile(r"^[0-9a-f]{40}$")  # a git object id (sha1)
HEX64 = re.compile(r"^[0-9a-f]{64}$")  # a sha256 digest
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a plain directory or file name


def c_quote(path: bytes) -> bytes:
    """`path` C-style quoted, as git reads it back (a fast-import path, an alternates entry):
    every byte outside printable ASCII as three octal digits, so any name is ASCII text."""
    quoted = bytearray(b'"')
    for c in path:
        if c in (0x22, 0x5C):
            quoted += b"\\" + bytes([c])
        elif c < 0x20 or c >= 0x7F:
            quoted += b"\\%03o" % c
        else:
            quoted.append(c)
    return bytes(quoted + b'"')


def is_local_url(url: str) -> bool:
    return url.startswith(("file://", "/"))


def protocol_policy(url: str) -> tuple[str, ...]:
    """Settings for a call that contacts `url`: the local transport only when `url` is local
    (a redirect or an insteadOf rule must not make git read another repository here)."""
    local = "always" if is_local_url(url) else "never"
    return (
        "protocol.allow=never",
        "protocol.https.allow=always",
        "protocol.http.allow=always",
        "protocol.ssh.allow=always",
        "protocol.git.allow=always",
        f"protocol.file.allow={local}",
        "protocol.ext.allow=never",
        "protocol.fd.allow=never",
    )


def base_env(isolated: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(var, None)
    env.update(
        GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C", LANG="C", GIT_CONFIG_NOSYSTEM="1"
    )
    if isolated:
        # user config must not change patch bytes or commit ids; network operations
        # keep it (credentials, proxies, insteadOf rules for private mirrors)
        env["GIT_CONFIG_GLOBAL"] = os.devnull
    return env


def git(
    cwd: Path | None,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    isolated: bool = True,
    text: bool = True,
    timeout: float | None = None,
    config: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`git <args>` in `cwd`; OperationFailed with git's stderr when `check`. Callers put
    `--` before repositories, refs and paths: a value starting with `-` is data."""
    proc = capture(
        git_command(args, config),
        cwd=cwd,
        env={**base_env(isolated), **(env or {})},
        input=input,
        text=text,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        # git's words and arguments can hold a URL with a credential: masked (core.urls)
        from dgr_forge.core.urls import mask_text

        err = (
            proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode("utf-8", "replace")
        )
        shown = [mask_text(a) for a in args]
        raise OperationFailed(
            f"git {' '.join(shown[:3])} failed (exit {proc.returncode}): "
            f"{mask_text(err.strip()[-2000:])}",
            details={"git_args": shown, "git_stderr": mask_text(err)},
        )
    return proc


def git_command(args: Sequence[str], config: Sequence[str] = ()) -> list[str]:
    """The argv of `git <args>` with the forge's settings (`CONFIG`) and `config` first."""
    cmd = ["git"]
    for setting in (*CONFIG, *config):
        cmd += ["-c", setting]
    return cmd + list(args)


def start(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A `git <args>` batch command kept open over stdin and stdout (stderr discarded: the
    caller checks every answer)."""
    cmd = git_command(args)
    starting(cmd, cwd)
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**base_env(True), **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def out(cwd: Path | None, *args: str, **kw: object) -> str:
    return git(cwd, *args, **kw).stdout.strip()  # type: ignore[arg-type]


def rev_parse(repo: Path, rev: str) -> str | None:
    # --end-of-options: a rev starting with "-" is a rev (that does not exist), not an option
    proc = git(
        repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}",
        check=False,
    )  # fmt: skip
    return proc.stdout.strip() if proc.returncode == 0 else None


def tree_of(repo: Path, rev: str) -> str:
    return out(repo, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{tree}}")


def commit_and_tree(repo: Path, rev: str) -> tuple[str, str] | None:
    """`rev`'s commit and tree in one git call (the names over stdin); None: no commit."""
    if "\n" in rev or "\0" in rev:
        return None
    query = f"{rev}^{{commit}}\n{rev}^{{tree}}\n"
    proc = git(
        repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", input=query, check=False
    )
    found = [line.split(" ") for line in proc.stdout.splitlines()]
    if proc.returncode != 0 or [kind for *_, kind in found] != ["commit", "tree"]:
        return None
    return found[0][0], found[1][0]


def has_object(repo: Path, oid: str) -> bool:
    return git(repo, "cat-file", "-e", "--end-of-options", oid, check=False).returncode == 0


def status_porcelain(repo: Path, args: Sequence[str] = ()) -> list[str]:
    proc = git(repo, "status", "--porcelain=v1", "--untracked-files=all", *args)
    return [line for line in proc.stdout.splitlines() if line]


class Change(Struct, frozen=True):
    """One path a diff changes: its new mode (DELETED: the path goes) and object."""

    path: bytes
    mode: str
    oid: str


DELETED = "000000"


def tree_changes(repo: Path, lines: Sequence[str]) -> list[list[Change]]:
    """The changes of each line ("<commit>": against its parent; "<commit> <commit>"), from
    one `git diff-tree --stdin` (commits only: two trees get a header ended by a newline)."""
    data = _diff_tree(repo, "--stdin", "--always", input="".join(f"{ln}\n" for ln in lines))
    diffs: list[list[Change]] = []
    tokens = data.split(b"\0")
    i = 0
    while i < len(tokens):
        if tokens[i].startswith(b":") and diffs:
            diffs[-1].append(_change(tokens[i], tokens[i + 1]))
            i += 2
            continue
        if tokens[i]:
            diffs.append([])  # the header of the next line (--always: one for every line)
        i += 1
    if len(diffs) != len(lines):
        raise OperationFailed(f"git diff-tree --stdin answered {len(diffs)} of {len(lines)} lines")
    return diffs


def changes_between(repo: Path, old: str, new: str) -> list[Change]:
    tokens = _diff_tree(repo, "--end-of-options", old, new).split(b"\0")
    return [_change(tokens[i], tokens[i + 1]) for i in range(0, len(tokens) - 1, 2)]


def _diff_tree(repo: Path, *args: str, input: str | None = None) -> bytes:
    proc = git(repo, "diff-tree", "-r", "-z", "--no-renames", *args, input=input, text=False)
    raw: bytes | str = proc.stdout
    return raw.encode() if isinstance(raw, str) else raw


def _change(entry: bytes, path: bytes) -> Change:  # ":<mode> <mode> <id> <id> <status>"
    _old_mode, mode, _old, oid, _status = entry[1:].decode("ascii").split(" ")
    return Change(path, mode, oid)
