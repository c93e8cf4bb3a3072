"""Generate the published `--json` contract: `docs/json-schema/<command>.json` (JSON Schema
2020-12) and `docs/json.md`, both from the declarations in `cli.contract`.

    python -m dgr_forge.cli.schemas [--check] [ROOT]

writes them under ROOT (default: the current directory); `--check` writes nothing and
exits 1 naming the files that differ from what it would write (the suite runs this).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dgr_forge.cli.contract import COMMANDS
from dgr_forge.cli.results import DETAILS, FAILURE, HELP, Command, Form, Schema

DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE_ID = "https://dgr-forge.invalid/json-schema/"
SCHEMA_DIR = Path("docs") / "json-schema"
DOC = Path("docs") / "json.md"


def _envelope(words: str, *, ok: Schema, exit_code: Schema) -> dict[str, Schema]:
    return {
        "ok": {**ok, "description": "`exit_code == 0`"},
        "exit_code": {
            **exit_code,
            "description": "the process exit status: 0 ok, 1 the operation failed, 2 bad "
            "input or usage, 3 needs a human, 130 interrupted",
        },
        "command": {"const": words, "description": "the command path"},
    }


def _closed(title: str, props: dict[str, Schema], required: list[str]) -> Schema:
    return {
        "title": title,
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def _form_schema(cmd: Command, form: Form) -> Schema:
    if form.may_fail:
        env = _envelope(cmd.words, ok={"type": "boolean"}, exit_code={"type": "integer"})
    else:
        env = _envelope(cmd.words, ok={"const": True}, exit_code={"const": 0})
    required = [*env, *(k for k in form.props if k not in form.optional)]
    return _closed(form.title, {**env, **form.props}, required)


def command_schema(cmd: Command) -> Schema:
    """Success forms, `--help`, and the failure envelope; every branch closed, and the top
    level closed over the union of their keys."""
    failure_env = _envelope(
        cmd.words, ok={"const": False}, exit_code={"type": "integer", "minimum": 1}
    )
    failure = _closed(
        "failure", {**failure_env, **FAILURE}, ["ok", "exit_code", "command", "error"]
    )
    help_ = _closed(
        "--help",
        {**_envelope(cmd.words, ok={"const": True}, exit_code={"const": 0}), **HELP},
        ["ok", "exit_code", "command", "help"],
    )
    branches = [_form_schema(cmd, f) for f in cmd.forms]
    keys: dict[str, Schema] = {}
    for branch in [*branches, failure, help_]:
        for key in branch["properties"]:
            keys.setdefault(key, {})
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{cmd.name}.json",
        "title": f"dgr-forge {cmd.words} --json",
        "description": cmd.summary,
        "type": "object",
        "properties": keys,
        "additionalProperties": False,
        "anyOf": [*branches, {"$ref": "#/$defs/failure"}, {"$ref": "#/$defs/help"}],
        "$defs": {"failure": failure, "help": help_},
    }


# --- docs/json.md ---------------------------------------------------------------------------


def type_words(schema: Schema) -> str:
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    words = []
    for k in kinds:
        if k == "array":
            items = schema.get("items", {})
            inner = type_words(items)
            words.append(f"list of {inner}s" if inner in ("string", "object") else "list")
        elif k == "null":
            continue
        elif k == "boolean":
            words.append("bool")
        elif k in ("integer", "number"):
            words.append("int" if k == "integer" else "number")
        else:
            words.append(str(k))
    text = " or ".join(words) or "any"
    return text + (" or null" if "null" in kinds else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


BIG = 6  # an object with more keys than this gets a table of its own


def _optional(schema: Schema) -> tuple[str, ...]:
    required = schema.get("required", [])
    return tuple(k for k in schema.get("properties", {}) if k not in required)


def _meaning(schema: Schema, depth: int = 0) -> str:
    """A key's description, its nested keys' in parentheses (a big object: its own table)."""
    text = str(schema.get("description", ""))
    props = schema.get("properties") or schema.get("items", {}).get("properties")
    if depth == 0 and len(schema.get("properties", {})) > BIG:
        return _cell(text + " (see below)")
    if props and depth < 3:
        parts = [f"`{k}`: {_meaning(v, depth + 1)}" for k, v in props.items()]
        text += " (" + "; ".join(parts) + ")"
    return _cell(text)


def _sentence(text: str) -> str:
    return _cell(text[:1].upper() + text[1:] + ".")


def _table(props: dict[str, Schema], optional: tuple[str, ...] = ()) -> list[str]:
    lines = ["| key | type | meaning |", "| --- | --- | --- |"]
    for key, schema in props.items():
        flag = " *(optional)*" if key in optional else ""
        lines.append(f"| `{key}`{flag} | {type_words(schema)} | {_meaning(schema)} |")
    return lines


ENVELOPE: dict[str, Schema] = {
    "ok": {"type": "boolean", "description": "`exit_code == 0`"},
    "exit_code": {
        "type": "integer",
        "description": "the process exit status: `0` ok · `1` the operation failed · `2` bad "
        "input or usage · `3` needs a human · `130` interrupted",
    },
    "command": {
        "type": "string",
        "description": 'the command path as typed, e.g. `"build"`, `"ci render"`, '
        '`"report verify"`; `"dgr-forge"` when no command was named',
    },
}

INTRO = """\
# `--json`: the machine-readable contract

<!-- Generated by `python -m dgr_forge.cli.schemas` from src/dgr_forge/cli/contract.py
and cli/results.py; edit those (the prose lives in cli/schemas.py), then regenerate. -->

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
(the command's words joined by `-`, e.g. `report-verify.json`): every success form, the
`--help` object and the failure envelope, each closed (`additionalProperties: false`).
`tests/test_json_schemas.py` runs every command, succeeding and failing, and validates
its output against its schema. Keys may gain siblings in a later version, never change
meaning; nested objects are open to new keys.

## The envelope (every command)

{envelope}

These three always come first. On failure the object also carries:

| key | type | meaning |
| --- | --- | --- |
| `error` | string | what went wrong, and where (file, key, patch, line) |
| `hint` | string or null | how to fix it (absent for usage errors) |
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


def render_doc() -> str:
    out = [INTRO.replace("{envelope}", "\n".join(_table(ENVELOPE))), "### Failure details", ""]
    out.append(
        "An error's own fields, by key (each present only when it applies); any of them "
        "may appear in a command's failure object:"
    )
    out.append("")
    out += ["| key | meaning |", "| --- | --- |"]
    out += [f"| `{k}` | {_cell(str(v.get('description', '')))} |" for k, v in DETAILS.items()]
    out += ["", "## Per command", ""]
    for cmd in COMMANDS:
        out += [
            f"### `{cmd.words}`",
            "",
            f"{cmd.summary} Schema: `docs/json-schema/{cmd.name}.json`.",
            "",
        ]
        if cmd.prose:
            out += [cmd.prose, ""]
        for form in cmd.forms:
            fails = " *(may fail: `ok` false with these keys)*" if form.may_fail else ""
            if len(cmd.forms) > 1 or fails:
                out += [f"`{form.title}`{fails}", ""]
            first = cmd.forms[0]
            shared = [
                k for k, v in form.props.items() if form is not first and first.props.get(k) == v
            ]
            if len(shared) > 2:  # the first form's rows once, not again
                names = ", ".join(f"`{k}`" for k in shared)
                out += [f"The same {names} as `{first.title}`, and:", ""]
            else:
                shared = []
            mine = {k: v for k, v in form.props.items() if k not in shared}
            out += _table(mine, form.optional)
            out.append("")
            if form.note:
                out += [_sentence(form.note), ""]
            for key, sub in form.props.items():
                if len(sub.get("properties", {})) > BIG:  # its own table, not one long cell
                    out += [
                        f"`{cmd.words}`: `{key}`",
                        "",
                        _sentence(sub.get("description", "")),
                        "",
                    ]
                    out += [*_table(sub["properties"], _optional(sub)), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def rendered() -> dict[Path, str]:
    """Every generated file (relative to the project root) and its text."""
    files = {
        SCHEMA_DIR / f"{cmd.name}.json": json.dumps(command_schema(cmd), indent=2) + "\n"
        for cmd in COMMANDS
    }
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


__all__ = ["command_schema", "main", "render_doc", "rendered"]
