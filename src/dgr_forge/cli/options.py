"""Every option several commands take, declared once: its names, placeholder and check; one
help style for every command (`apply`), and the values the shell completes (`complete_*`,
which never fail) (docs/architecture.md, `cli/`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import is_tty

GLOBAL_OPTIONS = (
    "Global options, accepted anywhere on the line: --root PATH or -C PATH (the forge root), "
    "--workspace PATH, --json (one JSON object on stdout), --quiet (errors only), "
    "--verbose (the child commands run); see dgr-forge --help."
)

# Per command: one example, and what each exit code it can give means there (0 ok, 1 the
# operation failed, 2 bad input or usage, 3 needs a human). tests/test_terminal.py checks
# that every command has an entry and shows it.
USAGE: dict[str, tuple[str, str]] = {
    "fetch": ("dgr-forge fetch --mirror /srv/mirrors/llama.cpp.git",
              "0 at the pinned commit · 1 the fetch failed · 2 bad manifest or URL · "
              "3 local changes in the workspace (--force discards them)"),
    "status": ("dgr-forge status",
               "0 shown (a rebase or patch replay stopped at a conflict too: it says how to "
               "go on) · 2 no forge root or a bad manifest · 3 an export or rebase was killed "
               "while writing patches/ and the manifest (a writing command finishes it)"),
    "patch": ("dgr-forge patch --check",
              "0 applied (or already) · 1 a git step failed · 2 bad manifest or series · "
              "3 a conflict: patch --continue or --abort"),
    "export": ("dgr-forge export",
               "0 written (or unchanged) · 1 a commit git cannot write as a patch that "
               "reproduces it (nothing written) · 2 bad input · 3 the series on disk moved "
               "since this workspace was patched (--force saves and overwrites)"),
    "rebase": ("dgr-forge rebase --onto master --dry-run",
               "0 rebased (or, with --dry-run, every patch replays) · 1 failed · 2 bad "
               "input · 3 a patch conflicts: fix, then rebase --continue"),
    "check": ("dgr-forge check",
              "0 the series re-exports byte for byte and every recipe option is declared · "
              "1 it does not · 2 bad input"),
    "bump": ("dgr-forge bump --dry-run --report bump.md",
             "0 the target was reached · 1 failed · 2 bad input · 3 a patch stopped it "
             "short (named in the report)"),
    "build": ("dgr-forge build --lane cpu --no-sign",
              "0 built (or up to date) · 1 the build failed · 2 bad input, or the lane "
              "cannot build on this host · 3 the source tree is not the patched tree"),
    "doctor": ("dgr-forge doctor --lane cuda",
               "0 probed · 2 with --lane: that lane cannot build here (as build), or bad input"),
    "toolchain install": ("dgr-forge toolchain install cuda --offline --wheelhouse wheels/",
                          "0 installed (or already there) · 1 a wheel does not match the lock, "
                          "or pip failed: nothing installed · 2 bad lock or argument"),
    "lanes": ("dgr-forge lanes --advertised", "0 listed · 2 bad input (a recipe)"),
    "presets": ("dgr-forge presets --lane cpu --dry-run",
                "0 written (or shown) · 2 no tree to write into, or a CMakeUserPresets.json "
                "the forge will not edit (left unchanged)"),
    "keygen": ("dgr-forge keygen --out keys/ci.pem",
               "0 written · 2 the file exists or the path is unusable"),
    "certify": ("dgr-forge certify --lane cpu --model tiny",
                "0 recorded and signed · 1 a step failed, or the report does not verify "
                "(nothing written) · 2 bad input"),
    "demo": ("dgr-forge demo /tmp/dgr-demo",
             "0 the whole tour ran · 1 a step did not end as expected · 2 DIR is not new or "
             "empty"),
    "report show": ("dgr-forge report show --lane cpu",
                    "0 shown · 2 not a report, unreadable, or no report of that lane"),
    "report verify": ("dgr-forge report verify --artifacts .dgr/reports/cpu-*.intoto.jsonl",
                      "0 verified · 1 not (signature, subjects, artifacts) · 2 bad input"),
    "report compare": ("dgr-forge report compare A.intoto.jsonl B.intoto.jsonl",
                       "0 the same subjects · 1 they differ, or one does not verify · "
                       "2 bad input"),
    "artifacts provision": ("dgr-forge artifacts provision manifests/models/m.toml "
                            "--dest /srv/models --layers 0-15 --first",
                            "0 every file present and verified · 1 a download or hash "
                            "failed · 2 bad manifest or destination"),
    "artifacts verify": ("dgr-forge artifacts verify manifests/models/m.toml --dest /srv/models",
                         "0 verified · 1 a file is missing or differs · 2 bad input"),
    "artifacts map": ("dgr-forge artifacts map manifests/models/m.toml --dest /srv/models",
                      "0 the map added (or already there) · 1 a header could not be read · "
                      "2 bad manifest or headers"),
    "artifacts manifest": ("dgr-forge artifacts manifest /srv/models/m --name m "
                           "--url-base https://models.example.com/m/",
                           "0 written · 2 bad input"),
    "ci matrix": ("dgr-forge ci matrix", "0 printed · 2 bad recipes"),
    "ci render": ("dgr-forge ci render --tool-source "
                  "git+https://git.example.com/you/dgr-forge@<40-hex commit> --write-pins "
                  "--out .github/workflows/dgr-forge.yml",
                  "0 rendered (--check: up to date) · 1 --check: stale · 2 bad input, or a "
                  "file the install step reads is missing (named, with the ways to give it)"),
}  # fmt: skip


def _metavar(param: Any) -> str:
    """The placeholder, by the value's type, of an option that declares none (cli/options does)."""
    if "Path" in (kind := type(param.type).__name__) or "File" in kind:
        return "PATH"
    if "Int" in kind:
        return "N"
    if "Float" in kind:
        return "SECONDS"
    return "TEXT"


UNWRAPPED = 1 << 20  # Click's help width in a pipe: no line is wrapped (or broken)


def apply(root: Any) -> None:
    """Placeholders and the epilog on every command under `root`; help read from a pipe or
    a file (`--help | less`) is Click's plain text: no Rich panels, whose boxes and cut
    lines a reader or grep cannot use."""
    import os
    import sys

    if (plain := not is_tty(sys.stdout)) and not os.environ.get("COLUMNS", "").strip():
        # one line per paragraph: Click would break a URL or path at its hyphens to fit 80
        # (a copy: the dict may be the Typer app's own, kept across in-process runs)
        wide = dict.fromkeys(("terminal_width", "max_content_width"), UNWRAPPED)
        root.context_settings = {**(root.context_settings or {}), **wide}
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        command, path = stack.pop()
        if plain and hasattr(command, "rich_markup_mode"):
            command.rich_markup_mode = None
        for param in command.params:
            if param.param_type_name == "argument":
                # keeps its name in the usage line (REPORT, DIR), its kind shown as an
                # option's (PATH), not Typer's `<path>`: on its own copy of the type, so a
                # shared type object (Click's STRING) is never changed
                if param.metavar is None:
                    param.metavar = (param.name or "value").upper()
                shown, param.type = _metavar(param), copy.copy(param.type)
                param.type.get_metavar = lambda *args, shown=shown, **kwargs: shown
                continue
            option = param.param_type_name == "option" and not getattr(param, "is_flag", False)
            if option and (param.metavar is None or param.metavar.startswith("<")):
                param.metavar = _metavar(param)
        subs = getattr(command, "commands", None) or {}
        if path and not command.epilog:
            # a command without an entry is a test's own (tests/test_terminal.py checks
            # that every command of the tool has one)
            command.epilog = GLOBAL_OPTIONS
            if not subs and path in USAGE:
                example, exits = USAGE[path]
                command.epilog = f"Example: {example}\n\nExit codes: {exits}\n\n{GLOBAL_OPTIONS}"
        stack += [(sub, f"{path} {name}".strip()) for name, sub in subs.items()]


def complete_lanes(ctx: typer.Context, incomplete: str) -> list[str]:
    """Lane names: recipes/<lane>.toml of the forge root (--root, DGR_ROOT, or upwards)."""
    from dgr_forge.core.forge import Forge

    root = ctx.find_root().params.get("root")
    try:
        recipes = Forge.locate(Path(root) if root else None).recipes_dir
        names = sorted(p.stem for p in recipes.glob("*.toml") if p.is_file())
    except Exception:  # completion must never print a traceback into the shell
        return []
    return [n for n in names if n.startswith(incomplete)]


def _words(module: str, name: str) -> Callable[[str], list[str]]:
    """The completer of a fixed set of words: `module.name`, imported when completing."""

    def complete(incomplete: str) -> list[str]:
        import importlib

        return [
            v for v in getattr(importlib.import_module(module), name) if v.startswith(incomplete)
        ]

    return complete


complete_cache = _words("dgr_forge.cache.select", "CHOICES")
complete_cache_mode = _words("dgr_forge.cache.select", "MODES")
complete_provider = _words("dgr_forge.ci.render", "PROVIDERS")


def _jobs(value: int | None) -> int | None:
    """1 to 4096 (what `build` checks in the library too)."""
    if value is not None and not 1 <= value <= MAX_JOBS:
        raise BadInput(f"--jobs {value}: must be 1 to {MAX_JOBS}", hint="e.g. --jobs 2")
    return value


MAX_JOBS = 4096


def _option(*names: str, **kw: Any) -> Callable[[str], Any]:
    """An option's names, placeholder and check, awaiting each command's help."""
    return lambda help: typer.Option(*names, help=help, **kw)


_jobs_option = _option("--jobs", "-j", metavar="N", callback=_jobs)
_lane_option = _option("--lane", "-l", metavar="LANE", autocompletion=complete_lanes)
_mirror_option = _option("--mirror", metavar="URL")
_force_option = _option("--force")
_key_option = _option("--key", metavar="PATH")
_out_option = _option("--out", metavar="PATH")


Mirror = Annotated[
    str | None,
    _mirror_option(
        "Fetch the upstream from this git mirror (URL or path; default: DGR_MIRROR); what "
        "arrives is verified against the pin all the same."
    ),
]
FileMirror = Annotated[
    str | None,
    _mirror_option(
        "Fetch each file from BASE/NAME instead of its URL (a URL or a directory); what "
        "arrives is verified against the manifest all the same."
    ),
]
Offline = Annotated[
    bool,
    typer.Option(
        "--offline", help="Never touch the network; fail if something it needs is not here."
    ),
]

FetchForce = Annotated[
    bool,
    _force_option(
        "Discard local changes in the workspace (saved as a patch under its logs/ first)."
    ),
]
ExportForce = Annotated[
    bool,
    _force_option(
        "Overwrite a series that moved on disk since this workspace was patched (the "
        "replaced files are saved under its logs/ first)."
    ),
]
BuildForce = Annotated[
    bool,
    _force_option(
        "Move a git worker checkout that holds edits or commits of yours (saved under the "
        "workspace's logs/ first)."
    ),
]
KeygenForce = Annotated[bool, _force_option("Replace an existing key (and its .pub).")]

SigningKey = Annotated[
    str | None, _key_option("Sign with this private key (default: DGR_SIGNING_KEY, then yours).")
]
VerifyKey = Annotated[
    str | None, _key_option("Verify with this public key (default: DGR_VERIFY_KEY, then yours).")
]
# `lanes` trusts any number of public keys besides trusted-keys/
TrustedKeys = Annotated[
    list[str] | None, _key_option("Also trust this public key (besides trusted-keys/; repeatable).")
]

BuildJobs = Annotated[int | None, _jobs_option("Parallel compile jobs (default: the cores).")]
HashJobs = Annotated[int | None, _jobs_option("Files hashed or read at once (default: the cores).")]
DownloadJobs = Annotated[int, _jobs_option("Files downloaded at once.")]

BuildLanes = Annotated[
    list[str] | None, _lane_option("A lane to build (recipes/LANE.toml); repeatable; default: cpu.")
]
Lanes = Annotated[
    list[str] | None, _lane_option("A lane (recipes/LANE.toml); repeatable; default: every lane.")
]
ReportLane = Annotated[
    list[str] | None,
    _lane_option("Use this lane's latest report in the workspace, instead of naming one."),
]
CertifyLane = Annotated[list[str] | None, _lane_option("The lane to certify (recipes/LANE.toml).")]

KeygenOut = Annotated[
    Path | None,
    _out_option(
        "Write the private key here, its public key beside it as PATH.pub (default: "
        "signing-key.pem in the user's config directory)."
    ),
]
ManifestOut = Annotated[
    Path | None, _out_option("Write the model manifest here (default: manifests/models/NAME.toml).")
]
WorkflowOut = Annotated[
    Path | None, _out_option("Write the workflow here (atomically) instead of stdout.")
]
PresetsOut = Annotated[
    Path | None,
    _out_option(
        "Write into this CMakeUserPresets.json (or the one in this directory; "
        "default: the worker's directory, else the upstream tree)."
    ),
]

BuildReport = Annotated[
    Path | None,
    typer.Option(
        "--build-report", metavar="PATH", help="The lane's signed report (default: its latest)."
    ),
]
# the spelling `certify` took before `--build-report` (docs and scripts name it)
BuildReportAsReport = Annotated[Path | None, typer.Option("--report", metavar="PATH", hidden=True)]
MarkdownReport = Annotated[
    Path | None, typer.Option("--report", metavar="PATH", help="Write the Markdown report here.")
]

Worker = Annotated[
    Path | None,
    typer.Option("--worker", help="Worker CMake project (overrides manifests/shard-worker.toml)."),
]

ModelDest = Annotated[Path, typer.Option("--dest", help="Directory the model files live in.")]
HeaderDest = Annotated[
    Path | None,
    typer.Option("--dest", help="Read the headers from the files here (default: over HTTP Range)."),
]
CertifyDest = Annotated[
    Path | None, typer.Option("--dest", help="Model directory (default: <workspace>/models/NAME).")
]
