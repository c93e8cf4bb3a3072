"""Generate the `--json` contract (docs/json-schema/, docs/json.md) from `COMMANDS` and
`core.errors.Details`, and the TOML inputs' schemas and page (docs/inputs.md) from each
loader's `Record` (docs/architecture.md, `cli/`).

    python -m dgr_forge.cli.schemas [--check] [ROOT]   # --check: exit 1 naming what differs
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path, PurePath
from typing import Any, get_type_hints

import msgspec
import typer

from dgr_forge import demo
from dgr_forge.attest import keys, reports
from dgr_forge.certify import records, shapes
from dgr_forge.ci import render
from dgr_forge.core.errors import Details
from dgr_forge.core.structs import Form
from dgr_forge.core.tominput import CheckedStr
from dgr_forge.host import probes, recipes, toolkit, worker
from dgr_forge.lanes import build, check, plan, presets, status
from dgr_forge.models import make_manifest, provision, verify
from dgr_forge.models import manifest as models
from dgr_forge.upstream import export, fetch, local_replay, manifest, patches
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
        node = _click_root()
        for word in self.words.split():
            node = node.commands[word]
        return " ".join((node.help or "").split("\n\n")[0].split())


@functools.cache
def _click_root() -> Any:
    """The registered app as Click's classes (Typer's own copy), made once: Typer builds
    the whole tree on each call (~20 ms), and every command's summary reads it."""
    from dgr_forge.cli.app import app
    from dgr_forge.cli.commands import register_all

    register_all()
    return typer.main.get_command(app)


COMMANDS: tuple[Command, ...] = (
    Command("fetch", (fetch.Fetch,)),
    Command("patch", (local_replay.Patch, local_replay.PatchAbort, patches.PatchCheck)),
    Command("status", (status.Status,)),
    Command("export", (export.Export,)),
    Command("check", (check.Check,)),
    Command("build", (build.BuildResult,)),
    Command("lanes", (records.Lanes,)),
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


Schema = dict[str, Any]
DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE_ID = "https://dgr-forge.invalid/json-schema/"
SCHEMA_DIR = Path("docs") / "json-schema"
DOC = Path("docs") / "json.md"
_HERE = Path(__file__).parent / "prose"  # the pages' prose, the tables filled in
TOML_DOC = Path("docs") / "inputs.md"
TOML_DIR = "toml"  # under docs/json-schema/
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
    types = msgspec.json.schema_components([Details])[1]["Details"]["properties"]
    failure = _closed(
        "failure",
        {
            **_envelope({"const": False}, {"type": "integer", "minimum": 1}, {"type": "string"}),
            "error": {
                "type": "string",
                "description": "what went wrong, and where (file, key, patch, line)",
            },
            "hint": {
                "type": ["string", "null"],
                "description": "how to fix it (absent for usage errors)",
            },
            **{key: {**types[key], "description": text} for key, text in details().items()},
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


def _schema_hook(t: Any) -> Schema:
    """A path is its string (`cli.app` encodes it so; a `LOADED` field, left out below)."""
    if isinstance(t, type) and issubclass(t, CheckedStr):  # its check is the loader's
        return {"type": "string", "description": (t.__doc__ or "").strip()}
    if isinstance(t, type) and issubclass(t, PurePath):
        return {"type": "string"}
    raise NotImplementedError(t)


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


INTRO = (_HERE / "json.md").read_text(encoding="utf-8")  # with {envelope}, {failure}, {details}


def _rows(props: dict[str, Schema], required: list[str], keys: tuple[str, ...]) -> str:
    tables = Tables({"": {"properties": props, "required": required}}, "", toml=False)
    tables.table("", "", keys)
    return "\n".join(tables.out).rstrip("\n")


def render_doc(made: dict[str, Schema], envelope: Schema) -> str:
    """docs/json.md from each command's schema (by name) and the envelope's."""
    kinds = _envelope({"type": "boolean"}, {"type": "integer"}, {"type": "string"})
    failure = envelope["$defs"]["failure"]
    intro = INTRO.replace("{envelope}", _rows(kinds, list(kinds), tuple(kinds)))
    intro = intro.replace("{failure}", _rows(failure["properties"], ["error"], ("error", "hint")))
    rows = "\n".join(f"| `{k}` | {cell(v)} |" for k, v in details().items())
    out = [intro.replace("{details}", rows)]
    for cmd in COMMANDS:
        out += [
            f"### `{cmd.words}`",
            "",
            f"{cmd.summary} Schema: `docs/json-schema/{cmd.name}.json`.",
            "",
        ]
        tables = Tables(made[cmd.name]["$defs"], f"#### `{cmd.words}`: `{{where}}`", toml=False)
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


# --- the TOML inputs: docs/json-schema/toml/*.json ------------------------------------------


def inputs() -> list[tuple[str, str, str, Any]]:
    """Each TOML input: its schema's name, the files it describes, what they are, its Record."""
    return [
        ("manifest", "manifests/llama.cpp.toml", "the upstream pin and its patch series",
         manifest.UpstreamManifest),
        ("recipe", "recipes/*.toml", "one backend lane", recipes.Recipe),
        ("probes", "toolchains/probes.toml", "how doctor looks for tools and libraries",
         probes.Probes),
        ("shard-worker", "manifests/shard-worker.toml", "the worker a build builds",
         worker.Manifest),
        ("model", "manifests/models/*.toml", "a model's artifacts", models.ModelManifest),
        ("ci-bump", "ci/bump.toml", "the nightly roller's settings", render.BumpSettings),
    ]  # fmt: skip


def toml_schema(name: str, files: str, what: str, shape: Any) -> Schema:
    """A TOML input's JSON Schema, closed like its Record: editors flag what the loader refuses."""
    body = msgspec.json.schema(shape, schema_hook=_schema_hook)
    top = body["$defs"][str(body["$ref"]).removeprefix("#/$defs/")]
    for key in getattr(shape, "LOADED", ()):  # the loader's, never the file's
        del top["properties"][key]
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}{TOML_DIR}/{name}.json",
        "title": f"dgr-forge {files}: {what}",
        "description": "Generated from the loader's Record by `python -m dgr_forge.cli.schemas`;"
        " the loader also checks what a type cannot say (ids, names, paths, URLs).",
        **body,
    }


# --- docs/inputs.md -------------------------------------------------------------------------

TOML_INTRO = (_HERE / "inputs.md").read_text(encoding="utf-8")  # with {files}


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


class Tables:
    """A schema's objects as one table each, in the order they nest: an object a key holds
    (directly, through null, in a list, as a map's values, or as a union's variants) gets
    its own table after the one that names it. `toml` says a type as TOML does (table,
    array, a default column); otherwise as JSON does (object, list, an optional flag)."""

    def __init__(self, defs: dict[str, Schema], heading: str, *, toml: bool) -> None:
        self.defs, self.heading, self.toml = defs, heading, toml
        self.done: dict[str, str] = {}  # each def's table: where it is first met
        self.out: list[str] = []

    def refs(self, node: Schema) -> list[tuple[str, str]]:
        """The defs a value is made of, each with its path's suffix (`[]`, `.<name>`)."""
        if "$ref" in node:
            return [("", str(node["$ref"]).removeprefix("#/$defs/"))]
        found = [r for b in node.get("anyOf", []) for r in self.refs(b)]
        for key, suffix in (("items", "[]"), ("additionalProperties", ".<name>")):
            if isinstance(node.get(key), dict):
                found += [(suffix + more, name) for more, name in self.refs(node[key])]
        return found

    def words(self, node: Schema) -> str:
        """A value's type, its bounds and choices."""
        if "const" in node:
            return f"`{json.dumps(node['const'])}`"
        if "enum" in node:
            return " or ".join(f"`{json.dumps(v)}`" for v in node["enum"])
        if "$ref" in node:
            return "table" if self.toml else "object"
        if "anyOf" in node:  # TOML has no null: an absent key is one
            branches = [b for b in node["anyOf"] if not self.toml or b.get("type") != "null"]
            return " or ".join(dict.fromkeys(self.words(b) for b in branches))
        if isinstance(kind := node.get("type"), list):
            return " or ".join(self.words({**node, "type": k}) for k in kind)
        inner = node.get({"array": "items", "object": "additionalProperties"}.get(str(kind), ""))
        if kind in ("array", "object"):
            words = ("array", "table", "table") if self.toml else ("list", "object", "map")
            text = words[0] if kind == "array" else words[1]
            if not isinstance(inner, dict) or not inner:
                return text
            of = self.words(inner)  # `strings`, `tables`; `(string or integer)`
            of = f"{of}s" if of.isalpha() else f"({of})"
            return f"{words[2] if kind == 'object' else text} of {of}"
        text = {"number": "float" if self.toml else "number"}.get(str(kind), str(kind or "any"))
        bounds = [
            f"{sign} {node[k]}"
            for k, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
            if k in node
        ]
        if node.get("pattern") == r"\S":
            bounds.append("not empty")
        return f"{text} ({', '.join(bounds)})" if bounds else text

    def table(self, where: str, name: str, keys: tuple[str, ...] | None = None) -> None:
        """The def `name` at `where` (and what it nests); `keys`: only these of its own."""
        schema = self.defs[name]
        props: dict[str, Schema] = schema.get("properties", {})
        required = set(schema.get("required", []))
        head = ["key", "type", *(["default"] if self.toml else []), "meaning"]
        rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        nested: list[tuple[str, str]] = []
        for key in props if keys is None else keys:
            node = props[key]
            branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
            own = node if len(branches) != 1 else {**branches[0], **node}
            meaning = str(own.get("description") or "")
            for suffix, sub in self.refs(node):
                meaning = meaning or str(self.defs[sub].get("description", ""))
                if sub in self.done:
                    meaning += f" (its keys: as `{self.done[sub]}`)"
                else:
                    self.done[sub] = f"{where}.{key}{suffix}".lstrip(".")
                    nested.append((self.done[sub], sub))
            flag = "" if key in required or self.toml else " *(optional)*"
            shown = json.dumps(node["default"]) if "default" in node else None
            default = {None: " optional |", "null": " none |"}.get(shown, f" `{shown}` |")
            default = "" if not self.toml else " *required* |" if key in required else default
            rows.append(f"| `{key}`{flag} | {cell(self.words(node))} |{default} {cell(meaning)} |")
        self.out += [*rows, ""]
        for sub_where, sub in nested:
            about = str(self.defs[sub].get("description", ""))
            self.out += [
                self.heading.format(where=sub_where),
                "",
                *([cell(about), ""] if about else []),
            ]
            self.table(sub_where, sub)


def render_toml_doc(schemas: dict[str, Schema]) -> str:
    files = "\n".join(
        f"| `{file_names}` | `docs/json-schema/{TOML_DIR}/{name}.json` | {what} |"
        for name, file_names, what, _ in inputs()
    )
    out = [TOML_INTRO.replace("{files}", files)]
    for name, file_names, what, _ in inputs():
        tables = Tables(schemas[name]["$defs"], "### `[{where}]`", toml=True)
        top = str(schemas[name]["$ref"]).removeprefix("#/$defs/")
        about = cell(str(tables.defs[top].get("description", "")))
        out += [f"## `{file_names}`: {what}", "", "### The top level", "", about, ""]
        tables.table("", top)
        out += tables.out
    return "\n".join(out).rstrip("\n") + "\n"


def _json(schema: Schema) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[Path, str]:
    """Every generated file (relative to the project root) and its text."""
    per_command = {cmd.name: command_schema(cmd) for cmd in COMMANDS}
    envelope = envelope_schema()
    files = {SCHEMA_DIR / f"{name}.json": _json(schema) for name, schema in per_command.items()}
    files[SCHEMA_DIR / SHARED] = _json(envelope)
    made = {n: toml_schema(n, f, w, s) for n, f, w, s in inputs()}
    files |= {SCHEMA_DIR / TOML_DIR / f"{name}.json": _json(body) for name, body in made.items()}
    files[TOML_DOC] = render_toml_doc(made)
    files[DOC] = render_doc(per_command, envelope)
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    root = Path(rest[0]) if rest else Path.cwd()
    stale = []
    for rel, text in rendered().items():
        if (path := root / rel).is_file() and path.read_text(encoding="utf-8") == text:
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
