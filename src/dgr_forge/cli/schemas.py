"""Generate the published `--json` contract: `docs/json-schema/<command>.json` (JSON Schema
2020-12), `docs/json-schema/envelope.json` (the failure and `--help` objects every command
shares, referenced by `$ref`) and `docs/json.md`, all from `COMMANDS` (each command's
result types, the `core.structs.Form` Structs `--json` prints, and its help's first
paragraph) and `core.errors.Details` (msgspec writes the schemas; this module adds the
envelope and the prose); and, through `cli.input_schemas`, the TOML
inputs' schemas and their page (`docs/json-schema/toml/<input>.json`, `docs/inputs.md`).

    python -m dgr_forge.cli.schemas [--check] [ROOT]

writes them under ROOT (default: the current directory); `--check` writes nothing and
exits 1 naming the files that differ from what it would write (the suite runs this).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path, PurePath
from typing import Any, get_type_hints

import msgspec
import typer

from dgr_forge import demo
from dgr_forge.attest import keys, reports
from dgr_forge.certify import advertise, shapes
from dgr_forge.ci import render
from dgr_forge.cli import input_schemas
from dgr_forge.cli.input_schemas import Schema, Tables, cell
from dgr_forge.core.errors import Details
from dgr_forge.core.structs import Form
from dgr_forge.host import toolkit
from dgr_forge.lanes import build, check, plan, presets, status
from dgr_forge.models import make_manifest, provision, verify
from dgr_forge.upstream import export, fetch, local_replay, patches
from dgr_forge.upstream.rebase import bump, state


class Command(msgspec.Struct, frozen=True):
    words: str  # "report verify"
    forms: tuple[type[Form], ...]

    @property
    def name(self) -> str:
        return self.words.replace(" ", "-")

    @property
    def summary(self) -> str:
        """The first paragraph of the command's own help."""
        from dgr_forge.cli.app import app
        from dgr_forge.cli.commands import register_all

        register_all()
        node: Any = typer.main.get_command(app)  # Typer's own copy of Click's classes
        for word in self.words.split():
            node = node.commands[word]
        return " ".join((node.help or "").split("\n\n")[0].split())


COMMANDS: tuple[Command, ...] = (
    Command("fetch", (fetch.Fetch,)),
    Command("patch", (local_replay.Patch, local_replay.PatchAbort, patches.PatchCheck)),
    Command("status", (status.Status,)),
    Command("export", (export.Export,)),
    Command("check", (check.Check,)),
    Command("build", (build.BuildResult,)),
    Command("lanes", (advertise.Lanes,)),
    Command("doctor", (plan.DoctorResult,)),
    Command("rebase", (state.Rebase, state.RebaseDryRun, state.RebaseAbort)),
    Command("bump", (bump.Bump,)),
    Command("keygen", (keys.Keygen,)),
    Command("report show", (reports.ReportShow,)),
    Command("report verify", (reports.ReportVerify,)),
    Command("report compare", (reports.ReportCompare,)),
    Command("certify", (shapes.Certified,)),
    Command("ci matrix", (render.CiMatrix,)),
    Command("ci render", (render.CiRender, render.CiRenderOut, render.CiRenderCheck)),
    Command("artifacts manifest", (make_manifest.ArtifactsManifest,)),
    Command("artifacts map", (make_manifest.ArtifactsMap,)),
    Command("artifacts provision", (provision.ArtifactsProvision,)),
    Command("artifacts verify", (verify.ArtifactsVerify,)),
    Command("presets", (presets.Presets,)),
    Command("toolchain install", (toolkit.InstallResult,)),
    Command("demo", (demo.Demo,)),
)


DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE_ID = "https://dgr-forge.invalid/json-schema/"
SCHEMA_DIR = Path("docs") / "json-schema"
DOC = Path("docs") / "json.md"
SHARED = "envelope.json"  # the failure and --help objects, once
ENVELOPE = {  # each key's meaning; its type differs by form
    "ok": "`exit_code == 0`",
    "exit_code": "the process exit status: `0` ok · `1` the operation failed · `2` bad "
    "input or usage · `3` needs a human · `130` interrupted",
    "command": 'the command path as typed, e.g. `"build"`, `"ci render"`, '
    '`"report verify"`; `"dgr-forge"` when no command was named',
}


def details() -> dict[str, str]:
    """The failure details' keys and meanings, from `core.errors.Details`."""
    hints = get_type_hints(Details, include_extras=True)
    return {key: str(hint.__metadata__[0]) for key, hint in hints.items()}


def _detail_types() -> dict[str, Schema]:
    """Each failure detail's schema, from its type in `core.errors.Details`."""
    _, defs = msgspec.json.schema_components([Details])
    props: dict[str, Schema] = defs["Details"]["properties"]
    return props


def _envelope(ok: Schema, exit_code: Schema, command: Schema) -> dict[str, Schema]:
    kinds = {"ok": ok, "exit_code": exit_code, "command": command}
    return {key: {**kind, "description": ENVELOPE[key]} for key, kind in kinds.items()}


def _closed(title: str, props: dict[str, Schema], required: list[str]) -> Schema:
    return {
        "title": title,
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def envelope_schema() -> Schema:
    """The failure object (the error, its hint, its details) and the `--help` object."""
    failure_env = _envelope({"const": False}, {"type": "integer", "minimum": 1}, {"type": "string"})
    failure = _closed(
        "failure",
        {
            **failure_env,
            "error": {
                "type": "string",
                "description": "what went wrong, and where (file, key, patch, line)",
            },
            "hint": {
                "type": ["string", "null"],
                "description": "how to fix it (absent for usage errors)",
            },
            **{
                key: {**_detail_types()[key], "description": text}
                for key, text in details().items()
            },
        },
        ["ok", "exit_code", "command", "error"],
    )
    help_env = _envelope({"const": True}, {"const": 0}, {"type": "string"})
    help_ = _closed(
        "--help",
        {**help_env, "help": {"type": "string", "description": "`printed on stderr`"}},
        ["ok", "exit_code", "command", "help"],
    )
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{SHARED}",
        "title": "dgr-forge --json: the failure and --help objects every command shares",
        "$defs": {"failure": failure, "help": help_},
    }


def _schema_hook(kind: type) -> Schema:
    """A path in a result is its string (`cli.app` encodes it so)."""
    if isinstance(kind, type) and issubclass(kind, PurePath):
        return {"type": "string"}
    raise NotImplementedError(kind)


def command_schema(cmd: Command) -> Schema:
    """The command's forms (msgspec's schemas of its types, each closed, with the envelope
    first), or by reference the shared failure and `--help` objects."""
    refs, defs = msgspec.json.schema_components(
        cmd.forms, ref_template="#/$defs/{name}", schema_hook=_schema_hook
    )
    for form in cmd.forms:
        schema = defs[form.__name__]
        if form.may_fail:
            env = _envelope({"type": "boolean"}, {"type": "integer"}, {"const": cmd.words})
        else:
            env = _envelope({"const": True}, {"const": 0}, {"const": cmd.words})
        schema["title"] = form.title
        schema["properties"] = {**env, **schema["properties"]}
        schema["required"] = [*env, *schema.get("required", [])]
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{cmd.name}.json",
        "title": f"dgr-forge {cmd.words} --json",
        "description": cmd.summary,
        "anyOf": [*refs, {"$ref": f"{SHARED}#/$defs/failure"}, {"$ref": f"{SHARED}#/$defs/help"}],
        "$defs": defs,
    }


# --- docs/json.md ---------------------------------------------------------------------------


INTRO = """\
# `--json`: the machine-readable contract

<!-- Generated by `python -m dgr_forge.cli.schemas` from each command's result types (the
library's `Form` Structs that `COMMANDS` in cli/schemas.py names) and core/errors.py
(`Details`); edit those (the prose lives in cli/schemas.py), then regenerate. -->

Every dgr-forge invocation that has `--json` anywhere on its command line (global options
may stand anywhere) prints **exactly one JSON object on stdout** and nothing else there;
human text (progress, tables, errors, `--help`) goes to stderr. This holds for successes,
failures, usage errors (bad flag, unknown command, missing argument or value), `--help`,
`--version`, and even for an internal error (its traceback goes to stderr); child
processes' output goes to stderr too. Human output has no escape codes (colour, bold,
progress bars) unless both stdout and stderr are terminals and `NO_COLOR` is unset;
progress bars are also off when `CI` is set or with `--json`. `tests/test_json_contract.py`
checks all of this for every registered command.

Each command's object has a JSON Schema (2020-12) in `docs/json-schema/<command>.json`
(the command's words joined by `-`, e.g. `report-verify.json`): every success form, and
by reference the `--help` object and the failure envelope, both defined once in
`docs/json-schema/envelope.json`; each closed (`additionalProperties: false`).
`tests/test_json_schemas.py` runs every command, succeeding and failing, and validates
its output against its schema. Keys may gain siblings in a later version, never change
meaning; nested objects are open to new keys.

## The envelope (every command)

{envelope}

These three always come first. On failure the object also carries:

{failure}
| *details* | any | the error's own machine-readable fields (below) |

A command may also fail with its own result fields (e.g. `report verify` with the list
of failures: the forms marked *may fail* below), so consumers should test
`ok`/`exit_code`, not the presence of `error`.
`--help` gives `{"ok": true, "exit_code": 0, "command": ..., "help": "printed on stderr"}`;
`--version` adds `"version"`.

```console no-test=hardware
$ dgr-forge build --lane cuda --json 2>/dev/null
{
  "ok": false,
  "exit_code": 2,
  "command": "build",
  "error": "lane cuda cannot build on this host: missing cuBLAS",
  ...
}
```
"""


def _rows(props: dict[str, Schema], required: list[str], keys: tuple[str, ...]) -> str:
    tables = Tables({"": {"properties": props, "required": required}}, "", toml=False)
    tables.table("", "", keys)
    return "\n".join(tables.out).rstrip("\n")


def render_doc() -> str:
    kinds = _envelope({"type": "boolean"}, {"type": "integer"}, {"type": "string"})
    failure = envelope_schema()["$defs"]["failure"]
    intro = INTRO.replace("{envelope}", _rows(kinds, list(kinds), tuple(kinds)))
    intro = intro.replace("{failure}", _rows(failure["properties"], ["error"], ("error", "hint")))
    out = [intro, "### Failure details", ""]
    out.append(
        "An error's own fields, by key (each present only when it applies); any of them "
        "may appear in a command's failure object:"
    )
    out.append("")
    out += ["| key | meaning |", "| --- | --- |"]
    out += [f"| `{k}` | {cell(v)} |" for k, v in details().items()]
    out += ["", "## Per command", ""]
    for cmd in COMMANDS:
        out += [
            f"### `{cmd.words}`",
            "",
            f"{cmd.summary} Schema: `docs/json-schema/{cmd.name}.json`.",
            "",
        ]
        tables = Tables(
            command_schema(cmd)["$defs"], f"#### `{cmd.words}`: `{{where}}`", toml=False
        )
        for form in cmd.forms:
            fails = " *(may fail: `ok` false with these keys)*" if form.may_fail else ""
            if len(cmd.forms) > 1 or fails:
                out += [f"`{form.title}`{fails}", ""]
            if form.note:
                out += [cell(form.note[:1].upper() + form.note[1:] + "."), ""]
            tables.table("", form.__name__, form.__struct_fields__)
            out += tables.out
            tables.out = []
    return "\n".join(out).rstrip("\n") + "\n"


def _json(schema: Schema) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[Path, str]:
    """Every generated file (relative to the project root) and its text."""
    files = {SCHEMA_DIR / f"{cmd.name}.json": _json(command_schema(cmd)) for cmd in COMMANDS}
    files[SCHEMA_DIR / SHARED] = _json(envelope_schema())
    files |= input_schemas.rendered(DIALECT, BASE_ID, SCHEMA_DIR)
    files[DOC] = render_doc()
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    root = Path(rest[0]) if rest else Path.cwd()
    stale = []
    for rel, text in rendered().items():
        path = root / rel
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        stale.append(str(rel))
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if check and stale:
        print("stale (run `python -m dgr_forge.cli.schemas`): " + ", ".join(stale))
        return 1
    for name in stale:
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
