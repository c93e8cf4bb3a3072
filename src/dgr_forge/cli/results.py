"""What each command's `--json` object holds: the declarations `docs/json-schema/*.json`
and `docs/json.md` are generated from (`python -m dgr_forge.cli.schemas`).

One `Command` per command path; each has one or more `Form`s (a mode such as
`patch --check`, or a result that may be `ok: false`, e.g. `report verify` with
failures) and shares the failure envelope (`FAILURE`). Every key carries the meaning
docs/json.md shows. `tests/test_json_schemas.py` runs each command and validates its
output, so a key added to a command without a line here fails the suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Schema = dict[str, Any]


def s(description: str, *, enum: list[str] | None = None) -> Schema:
    out: Schema = {"type": "string", "description": description}
    if enum:
        out["enum"] = enum
    return out


def b(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def i(description: str) -> Schema:
    return {"type": "integer", "description": description}


def n(description: str) -> Schema:
    return {"type": "number", "description": description}


def anything(description: str) -> Schema:
    return {"description": description}


def null(schema: Schema) -> Schema:
    """The same, or null."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif kind is None:
        return out  # any value, null included
    return out


def arr(items: Schema, description: str) -> Schema:
    return {"type": "array", "description": description, "items": items}


def strs(description: str) -> Schema:
    return arr({"type": "string"}, description)


def obj(description: str, props: dict[str, Schema] | None = None, **extra: Any) -> Schema:
    """A nested object: its keys described and typed, open to new siblings (keys may be
    added, never change meaning); `optional` names keys that may be absent."""
    out: Schema = {"type": "object", "description": description}
    if props:
        optional = set(extra.pop("optional", ()))
        out["properties"] = props
        out["required"] = [k for k in props if k not in optional]
    out.update(extra)
    return out


def mapping(values: Schema, description: str) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": values}


@dataclass(frozen=True)
class Form:
    """One shape of a command's object: `title` names the mode; `props` its keys after the
    envelope; `optional` those that may be absent; `may_fail`: `ok` may be false with these
    keys (a result that is a failure, e.g. a verification that found problems)."""

    title: str
    props: dict[str, Schema]
    optional: tuple[str, ...] = ()
    may_fail: bool = False
    note: str = ""


@dataclass(frozen=True)
class Command:
    words: str  # "report verify"
    summary: str
    forms: tuple[Form, ...]
    failure_note: str = ""
    prose: str = ""  # hand-written text shown above the key tables in docs/json.md
    extra_defs: dict[str, Schema] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.words.replace(" ", "-")


# --- shared shapes --------------------------------------------------------------------

SHA = "a sha256, hex"
COMMIT = "a full git commit id"

ARTIFACT = obj(
    "a built artifact",
    {
        "kind": s("CMake target type, e.g. `EXECUTABLE`"),
        "name": s("the target's artifact name"),
        "path": s("where it is"),
        "sha256": s(SHA),
    },
)

LAST_BUILD = null(
    obj(
        "the lane's last build in this workspace (null: never built here)",
        {
            "time": s("when it finished (ISO 8601, UTC)"),
            "result": s("`ok` or `failed`"),
            "report": null(s("the signed report's path (null without one)")),
            "log": null(s("the `build-<lane>.log` link")),
            "artifacts": arr(ARTIFACT, "`status` only: the artifacts it made"),
            "stale": strs(
                "what moved since this build's report was made: `pin`, `series`, `recipe`, "
                "`worker` (empty: it is current; a build recorded by an older forge: all)"
            ),
        },
        optional=("report", "log", "artifacts", "stale"),
    )
)

CACHE = obj(
    "the compiler cache this build used; the same object is the report's `compilerCache` "
    "(see docs/distributed-compilation.md)",
    {
        "tool": null(s("`ccache`, `sccache`, or null: no cache")),
        "version": s('the tool\'s version (`""` when none)'),
        "backend": s("`none`, `local`, or `local + remote <masked URL or kind>`"),
        "mode": s("`rw`, `ro` or `off`"),
        "hits": null(i("this build's cache hits (with a cache; null when the tool would not say)")),
        "misses": null(i("this build's cache misses (with a cache)")),
        "distributed": null(
            obj(
                "with an sccache-dist scheduler: `scheduler` (masked), `remoteCompiles`, "
                "`localCompiles`"
            )
        ),
    },
    optional=("hits", "misses", "distributed"),
)

MISSING = obj(
    "a tool or library a lane needs that this host lacks (as in `doctor`'s `tools`)",
    {"name": s("probe name"), "found": b("false here")},
)

DOCTOR_LANE = obj(
    "a lane and whether it can build on this host",
    {
        "lane": s("the lane (recipes/<lane>.toml)"),
        "backend": s("the recipe's backend"),
        "buildable": b("every requirement is met here"),
        "host_os_ok": b("this host's OS is one the lane builds on"),
        "missing": arr(MISSING, "what is missing"),
        "summary": s("one line: `buildable`, or what is missing"),
    },
)

REBASE_ROW = obj(
    "a patch's outcome",
    {
        "file": s("the patch file before"),
        "new_file": null(
            s(
                "its file after (null when dropped); a dry run's `conflict` row names the "
                "file the real rebase writes once it is resolved (it keeps its place)"
            )
        ),
        "subject": null(s("its subject")),
        "outcome": s(
            "`unchanged`, `refreshed`, `merged`, `resolved`, `dropped` (upstreamed), "
            "`dropped-by-hand`, `conflict`"
        ),
        "old_commit": null(s("its commit on the old pin")),
        "new_commit": null(s("its commit on the new pin")),
        "upstream_commits": arr(
            obj("an upstream commit", {"commit": s(COMMIT), "subject": s("its subject")}),
            "the upstream commits that touched its files (that upstreamed it, or conflict)",
        ),
        "files": strs("the conflicted files"),
    },
    optional=("subject", "old_commit", "new_commit", "upstream_commits", "files"),
)

COUNTS = mapping(
    {"type": "integer"},
    "patches per outcome: `unchanged`, `refreshed`, `merged`, `resolved`, `dropped`, "
    "`dropped-by-hand`, `conflict`",
)

PIN_SIDE = obj(
    "a side of the rebase",
    {"url": s("the upstream URL, masked"), "commit": s(COMMIT), "tree": null(s("its tree"))},
)

VERIFICATION = obj(
    "a report's verification",
    {
        "report": s("the report's path"),
        "verified": b("the signature verifies and nothing failed"),
        "key": null(obj("the key it was checked with: `keyid`, `source`")),
        "signed_by": strs("key ids of the envelope's signatures"),
        "failures": strs("what failed (empty when verified)"),
        "artifacts": arr(
            obj("a subject re-hashed on disk"), "with `--artifacts`: per subject on disk"
        ),
    },
)

# --- the failure envelope ----------------------------------------------------------------

# The error's own machine-readable fields (ForgeError details), by key. A key raised
# anywhere in src/ must be listed: tests/test_json_schemas.py scans for them.
DETAILS: dict[str, Schema] = {
    "actual_tree": anything("the tree found"),
    "argument": anything("the argument at fault"),
    "artifacts": anything("the artifacts involved"),
    "base": anything("the base commit"),
    "cache": anything("the `--cache` choice"),
    "cache_mode": anything("the `--cache-mode` choice"),
    "cause": anything(
        "`fetch`, `rebase`, `bump`: why a transfer failed: `policy` (the forge's transport "
        "policy stopped git, e.g. an insteadOf rule onto a local path), `unreachable`, "
        "`server-abort` (the server died reading its own objects), `refused`, `other`"
    ),
    "changed": anything("`build`: input files or programs changed during the build"),
    "changes": anything("the local changes (e.g. in the upstream or git-worker tree)"),
    "chosen": anything("`build`: the compiler launcher the forge chose"),
    "code_check": anything("`build`: the launchers found in the code-check rules"),
    "compile": anything("`build`: the launchers found in the compile rules"),
    "commit": anything("the commit at fault, e.g. the one a replay stopped on"),
    "conflicts": anything("the conflicts"),
    "current": anything("`ci render --check`: false"),
    "dest": anything("the `--dest` directory"),
    "diff": anything("a unified diff"),
    "dir": anything("the directory at fault"),
    "dirty": anything("a worker checkout's own edits"),
    "drift": anything(
        "a stale export: `added`, `changed`, `removed` (patches changed on disk since this "
        "workspace was patched), `pin_moved`"
    ),
    "edited": anything("the edited files"),
    "errno": anything("the OS error number of a failed file operation"),
    "expected": anything("what was expected"),
    "expected_tree": anything("the tree expected"),
    "failures": anything("what failed"),
    "file": anything("the file at fault (a manifest, recipe, model manifest)"),
    "files": anything("the files involved (e.g. conflicted)"),
    "free_bytes": anything("free space at the destination"),
    "git_args": anything("the git command that failed"),
    "git_stderr": anything("what git said"),
    "header": anything("the GGUF header at fault"),
    "holder": anything("who holds a busy lock"),
    "journals": anything("a killed export's or rebase's pending writes (exit 3)"),
    "key": anything("the key at fault (manifest key, or signing key)"),
    "lane": anything("the lane at fault"),
    "lanes": anything(
        "the lanes at fault: a list of `doctor` lane rows (`ci render --check`: the lanes rendered)"
    ),
    "link": anything("`build`: the launchers found in the link rules"),
    "line": anything("the line at fault (e.g. a malformed patch header)"),
    "local_changes": anything("local changes a command would lose"),
    "local_commits": anything("your commits a command would lose"),
    "lock": anything("a busy lock's path"),
    "log": anything("the log to read"),
    "manifest": anything("the manifest at fault"),
    "mirror": anything("the mirror at fault (masked)"),
    "mode": anything("a signing key's mode when readable by others"),
    "needed_bytes": anything("space needed"),
    "next_commands": anything("the commands that continue"),
    "operation": anything("the operation in progress"),
    "option": anything("the option at fault (e.g. `--key`)"),
    "patch": anything("the patch at fault"),
    "patches_dir": anything("a patches directory that does not match the series"),
    "path": anything("the path at fault (also an unusable path or a failed file operation)"),
    "phase": anything("the phase an operation stopped in"),
    "pin": anything("the pin"),
    "probe": anything("the probe at fault"),
    "provider": anything("the CI provider"),
    "report": anything("the report at fault"),
    "install": anything("`ci render`: how the jobs install dgr-forge"),
    "install_args": anything("`ci render`: pip install's arguments"),
    "constraints": anything("`ci render`: the constraints file"),
    "requirements": anything("`ci render`: the requirements file"),
    "requirements_exist": anything("`ci render`: the forge root has it"),
    "tool_source": anything("`ci render`: the `--tool-source` requirement"),
    "resolved": anything("what a path resolved to"),
    "rollback_error": anything("what failed while rolling back"),
    "scheduler": anything("the sccache-dist scheduler (masked)"),
    "server_said": anything("`fetch`: the server's own error lines (masked)"),
    "setting": anything("the setting at fault"),
    "sha256": anything("`ci render`: of the rendering"),
    "split_problems": anything("GGUF split problems, per file"),
    "src_dir": anything("the workspace's checkout"),
    "stale": anything("what is stale"),
    "state": anything("the state found"),
    "status": anything("the status found"),
    "step": anything("`demo`: the step that did not end as expected"),
    "step_exit_code": anything("`demo`: its exit code"),
    "subject": anything("the commit's subject"),
    "symlink": anything("a symbolic link in the way"),
    "target": anything("the target"),
    "text": anything("the text at fault (e.g. a message line `git am` would cut)"),
    "tree": anything("the tree"),
    "undeclared": anything("CMake options upstream no longer declares"),
    "unmerged": anything("unmerged files"),
    "unstaged": anything("unstaged files"),
    "unused": anything("unused entries"),
    "upstream_commits": anything("upstream commits that touched a conflicted patch's files"),
    "url": anything("the URL at fault (masked)"),
    "value": anything("the bad value"),
    "variable": anything(
        "the bad environment variable (with `expected` for a key variable that is neither "
        "PEM nor a key file, whose value is never shown)"
    ),
    "worker": anything("the worker checkout at fault"),
    "workspace": anything("the workspace"),
}

FAILURE: dict[str, Schema] = {
    "error": s("what went wrong, and where (file, key, patch, line)"),
    "hint": null(s("how to fix it (absent for usage errors)")),
    **DETAILS,
}

HELP: dict[str, Schema] = {"help": s("`printed on stderr`")}
