"""Getting the pinned commit's objects from the upstream or a mirror (`fetch`'s transfer).

The URL is validated data before git sees it and follows `--`; git runs with a protocol
policy; what a person is shown is masked (docs/architecture.md, 'Fetch').
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from dgr_forge.core import gitutil, proc
from dgr_forge.core.errors import Details, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import check_url, mask, mask_text, shown
from dgr_forge.upstream.workspace import remove_partial_objects

if TYPE_CHECKING:
    from rich.progress import TaskID

# where the full-fetch fallback keeps the upstream's branches and tags
UPSTREAM_REFS = ("+refs/heads/*:refs/dgr/upstream/heads/*", "+refs/tags/*:refs/dgr/upstream/tags/*")


def resolve_mirror(mirror: str | None) -> str | None:
    """--mirror, else DGR_MIRROR, validated (exit 2 naming which); a local path becomes a
    file:// URL (made absolute here, since git runs inside the work tree)."""
    where = "--mirror" if mirror else "DGR_MIRROR"
    value = mirror if mirror else os.environ.get("DGR_MIRROR", "").strip() or None
    if value is None:
        return None
    if value.startswith("-") or any(ord(c) < 32 or ord(c) == 127 for c in value):
        check_url(value, where)  # refuses, naming the option or variable
    if "://" in value or (re.match(r"^[^/]+:", value) and not Path(value).exists()):
        return check_url(value, where)  # a URL, or scp-like user@host:path
    return check_url(Path(value).expanduser().resolve().as_uri(), where)


_PROGRESS = re.compile(
    r"^(Receiving objects|Resolving deltas|Unpacking objects):\s+(\d+)% \((\d+)/(\d+)\)(.*)$"
)


# git's words when no server answered at all (as opposed to a server refusing a SHA want)
_UNREACHABLE = (
    "Could not resolve host",
    "unable to look up",  # git:// and ssh's resolver
    "Name or service not known",
    "Temporary failure in name resolution",
    "Failed to connect",
    "Connection refused",
    "Connection timed out",
    "Network is unreachable",
    "does not appear to be a git repository",
    "Could not read from remote repository",
)
# a server that answered and then died: its pack-objects could not read an object it
# holds (a partial mirror, a corrupt repository); a whole-history fetch needs the same
_SERVER_ABORT = (
    "aborting due to possible repository corruption",
    "pack-objects died",
    "remote: fatal:",
    "remote: error:",
)
# a server that will not serve a depth-1 fetch of one commit id (but may serve its refs)
_REFUSAL = (
    "not our ref",
    "unadvertised object",
    "does not support shallow",
    "does not allow request",
)

# the causes another way of fetching may get past (the server answered and said no)
CAN_RETRY = ("refused", "other")

_HINT_NETWORK = (
    "check the URL and network access; on an air-gapped host fetch from a local copy with "
    "--mirror PATH (or DGR_MIRROR)"
)
_HINT_SERVER = (
    "the repository at {url} is missing objects or corrupt (a partial mirror?): run "
    "`git fsck` there and repair it, or fetch from a complete copy with --mirror PATH "
    "(or DGR_MIRROR)"
)
_HINT_POLICY = (
    "{url} leads git to a transport the forge does not use for it (a local path through "
    "an insteadOf rule, or a command-running transport): give the real URL, or a local "
    "copy with --mirror PATH (or DGR_MIRROR)"
)
_HINT_OTHER = (
    "git's words are above: check that {url} serves this repository over a transport "
    "git supports, or fetch from a local copy with --mirror PATH (or DGR_MIRROR)"
)


def diagnose(stderr: str) -> str:
    """Why a fetch failed, from git's words: "policy" (the transport policy stopped git
    before any server, e.g. an insteadOf rule onto a local path), "unreachable",
    "server-abort" (wins over what the client said after it), "refused" or "other"."""
    if re.search(r"transport '[^']*' not allowed", stderr):
        return "policy"
    causes = (("server-abort", _SERVER_ABORT), ("unreachable", _UNREACHABLE), ("refused", _REFUSAL))
    return next((cause for cause, words in causes if any(w in stderr for w in words)), "other")


def transfer(src: Path, url: str, commit: str, out: Reporter, name: str) -> str:
    """Fetch `commit` from `url`: shallow when the server allows it, else everything."""
    out.step(f"fetching {name} {commit[:12]} from {mask(url)}")
    rc, stderr = _run_fetch(src, out, url, ["--depth=1", "--", url, commit])
    if rc == 0:
        return "shallow"
    cause = diagnose(stderr)
    if cause in CAN_RETRY:  # else a full fetch would fail the same way (and move more bytes)
        said = "refused" if cause == "refused" else "failed"
        out.info(
            f"the server {said} a depth-1 fetch of the commit "
            f"({last_error(stderr)}); fetching all branches and tags instead"
        )
        args = ["--", url, *UPSTREAM_REFS]
        if (src / ".git" / "shallow").exists():
            args.insert(0, "--unshallow")
        rc, stderr = _run_fetch(src, out, url, args)
    if rc != 0:
        raise fetch_failed(name, url, stderr)
    if gitutil.rev_parse(src, commit) != commit:
        raise OperationFailed(
            f"commit {commit} not found at {mask(url)}",
            hint="check `commit` in the manifest (is it pushed to that repository's branches "
            "or tags?) and the URL",
            details={"commit": commit, "url": mask(url)},
        )
    return "full"


def fetch_failed(what: str, url: str, stderr: str, cause: str | None = None) -> OperationFailed:
    """The error for a failed fetch of `what`, its fix fitted to the (`diagnose`d) cause."""
    cause = cause or diagnose(stderr)
    details: Details = {"url": mask(url), "cause": cause, "git_stderr": shown(stderr[-4000:])}
    said = last_error(stderr)
    if cause == "server-abort":
        # the server's own error lines ("remote: fatal: unable to read …"), once each (git
        # repeats some), masked, control bytes escaped (git 2.39 ends an abort with a NUL)
        lines = [ln.strip() for ln in shown(stderr).splitlines()]
        told = [ln.removeprefix("remote:").strip() for ln in lines if ln.startswith("remote:")]
        words = "; ".join(dict.fromkeys(ln for ln in told if ln)) or said
        details["server_said"] = words
        said = f"the server aborted the transfer (missing objects or corrupt on its side): {words}"
    hints = {"unreachable": _HINT_NETWORK, "policy": _HINT_POLICY, "server-abort": _HINT_SERVER}
    hint = hints.get(cause, _HINT_OTHER).format(url=mask(url))
    return OperationFailed(
        f"fetching {what} from {mask(url)} failed: {said}", hint=hint, details=details
    )


def last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in shown(stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (errors or lines or ["no output"])[-1]


def _run_fetch(src: Path, out: Reporter, url: str, args: list[str]) -> tuple[int, str]:
    """`git fetch --progress ...`'s exit code and kept lines, its progress shown as `out`'s."""
    fetch = ("fetch", "--no-tags", "--no-write-fetch-head", "--progress", *args)
    # fetch.unpackLimit=1: objects always arrive as one pack, which git publishes (its
    # .idx) only when complete, so a killed fetch never leaves a commit without its trees
    cmd = gitutil.git_command(fetch, (*gitutil.protocol_policy(url), "fetch.unpackLimit=1"))
    # network calls keep the user's git config: credentials, proxies, insteadOf mirrors
    env = gitutil.base_env(isolated=False)
    kept: list[str] = []
    tasks: dict[str, TaskID | str] = {}  # per phase its progress; "size": the amount
    started = time.monotonic()
    with out.progress(transfer=False) as sink:

        def on_line(raw: str) -> None:
            if not (line := mask_text(raw.strip())):
                return
            if (match := _PROGRESS.match(line)) is None:
                # the server's own error lines are kept: they say why a transfer died
                if not line.startswith("remote: ") or any(
                    word in line.lower() for word in ("error", "fatal", "abort", "unable")
                ):
                    kept.append(line)
                return
            phase, _pct, done, total, rest = match.groups()
            detail = rest.split(", done")[0].strip(", ")
            if phase == "Receiving objects" and detail:
                tasks["size"] = detail  # "12.5 MiB | 3.1 MiB/s": the last one is the total
            description = f"{phase.lower()}" + (f" ({detail})" if detail else "")
            if phase not in tasks:
                tasks[phase] = sink.add(phase.lower(), total=float(total))
            sink.update(
                tasks[phase], completed=float(done), total=float(total), description=description
            )

        rc = proc.stream(cmd, on_line, cwd=src, env=env, merge_stdout=False)
    if rc != 0:
        # a failed transfer leaves its partial pack behind (megabytes): never reused
        remove_partial_objects(src / ".git")
    if rc == 0 and tasks:
        size = str(tasks.get("size", ""))
        amount = f"{size.split(' |')[0]} " if size else ""
        out.info(f"fetched {amount}in {time.monotonic() - started:.1f} s")
    return rc, "\n".join(kept[-50:])
