"""The published JSON contract: every command's `--json` object validates against its
schema in docs/json-schema/, succeeding and failing, and the schemas and docs/json.md are
exactly what `python -m dgr_forge.cli.schemas` generates.

The commands run once, in order, on a copy of the demo root (the session's `demo_tour`,
whose cpu lane is built: `build` is up to date, nothing compiles again).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import typer
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from support.build import TEST_CUDA_RECIPE, path_without
from support.cli import Result, run_forge
from support.demo import DemoTour
from support.server import write_layered_gguf

from dgr_forge.cli import schemas
from dgr_forge.cli.app import app
from dgr_forge.cli.commands import register_all
from dgr_forge.cli.schemas import COMMANDS
from dgr_forge.core.errors import Details, ForgeError

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "docs" / "json-schema"
SHARED = json.loads((SCHEMAS / schemas.SHARED).read_text())
# the failure and --help objects every command schema references (`envelope.json`)
Schema = dict[str, Any]
REGISTRY: Registry = Registry().with_resource(SHARED["$id"], Resource.from_contents(SHARED))


def validator(name: str) -> Draft202012Validator:
    """The command's schema, its references to the shared envelope resolved."""
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    return Draft202012Validator(schema, registry=REGISTRY)


def _registered() -> set[str]:
    register_all()
    found: set[str] = set()

    def visit(node: Any, path: tuple[str, ...]) -> None:
        subs = getattr(node, "commands", None)
        if isinstance(subs, Mapping):
            for name in subs:
                visit(subs[name], (*path, name))
        else:
            found.add(" ".join(path))

    visit(typer.main.get_command(app), ())
    return found


def test_the_committed_schemas_and_doc_are_what_the_generator_writes() -> None:
    for rel, text in schemas.rendered().items():
        assert (REPO / rel).read_text(encoding="utf-8") == text, (
            f"{rel} is stale: run `python -m dgr_forge.cli.schemas`"
        )
    assert {p.name for p in SCHEMAS.iterdir()} == {f"{c.name}.json" for c in COMMANDS} | {
        schemas.SHARED,
        schemas.TOML_DIR,
    }
    assert {p.name for p in (SCHEMAS / schemas.TOML_DIR).iterdir()} == {
        f"{name}.json" for name, *_ in schemas.inputs()
    }


def _toml_validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / schemas.TOML_DIR / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_every_checked_in_toml_input_validates_against_its_schema() -> None:
    """The schemas an editor reads accept every TOML input the repository holds, and each
    is closed like its loader: an unknown key, a bool for an integer, a table for an
    array are flagged there too."""
    checked: dict[str, int] = {}
    also = {"model": "tests/data/models/*.toml"}  # the suite's own model manifest
    for name, files, _, _ in schemas.inputs():
        v = _toml_validator(name)
        for path in sorted(REPO.glob(files)) + sorted(REPO.glob(also.get(name, files))):
            doc = tomllib.loads(path.read_text())
            assert not list(v.iter_errors(doc)), (path, [e.message for e in v.iter_errors(doc)])
            checked[name] = checked.get(name, 0) + 1
        assert not v.is_valid({"schema": 1, "--help": 1}), name
        assert not v.is_valid({"schema": True}), name
    assert set(checked) >= {"manifest", "recipe", "probes", "shard-worker", "model"}, checked
    recipe = _toml_validator("recipe")
    good = {"schema": 1, "lane": {"backend": "CPU"}, "cmake": {"options": {"X": ["a", 1]}}}
    assert recipe.is_valid(good)
    assert not recipe.is_valid({**good, "cmake": {"options": {"X": 1.5}}})
    assert not recipe.is_valid({**good, "requires": {"tools": {"a": 1}}})
    pin = _toml_validator("manifest")
    up = {"name": "llama.cpp", "url": "u", "commit": "c" * 40}
    assert pin.is_valid({"schema": 1, "upstream": up})
    assert not pin.is_valid({"schema": 1, "upstream": {**up, "build_number": True}})
    assert not pin.is_valid({"schema": 1, "upstream": {**up, "build_number": 0}})
    series = [{"file": "0001-a.patch", "sha256": "s"}] * 3 + [{"file": "f", "sha256": "s", "x": 1}]
    assert not pin.is_valid({"schema": 1, "upstream": up, "patches": {"series": series}})


def test_the_generator_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    assert schemas.main([str(tmp_path)]) == 0
    assert schemas.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "docs" / "json-schema" / "fetch.json").write_text("{}\n")
    assert schemas.main(["--check", str(tmp_path)]) == 1
    assert (tmp_path / "docs" / "json-schema" / "fetch.json").read_text() == "{}\n"


def test_every_registered_command_has_a_closed_2020_12_schema() -> None:
    assert {c.words for c in COMMANDS} == _registered()
    Draft202012Validator.check_schema(SHARED)
    assert all(b["additionalProperties"] is False for b in SHARED["$defs"].values())
    for cmd in COMMANDS:
        schema = json.loads((SCHEMAS / f"{cmd.name}.json").read_text())
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        # every branch of the top-level anyOf is closed: a form, the failure, --help
        forms = [schema["$defs"][f.__name__] for f in cmd.forms]
        assert all(b["additionalProperties"] is False for b in forms), cmd.words
        assert [r["$ref"] for r in schema["anyOf"]] == [
            *(f"#/$defs/{f.__name__}" for f in cmd.forms),
            f"{schemas.SHARED}#/$defs/failure",
            f"{schemas.SHARED}#/$defs/help",
        ]


def test_every_error_detail_is_declared_once_by_its_type() -> None:
    """`ForgeError(details=...)` takes `core.errors.Details`, so mypy (strict, on src/)
    refuses a key that is not declared there; the failure schema's keys are that class's."""
    assert ForgeError.__init__.__annotations__["details"] == "Details | None"
    failure = SHARED["$defs"]["failure"]["properties"]
    assert set(failure) == {"ok", "exit_code", "command", "error", "hint"} | set(
        Details.__annotations__
    )
    assert all(failure[k]["description"] for k in Details.__annotations__)


def test_a_failure_detail_of_another_type_fails_validation() -> None:
    """Each detail has its type (`core.errors.Details`), in the failure schema too: a list
    key given a string, a string key given a list, a count given text are refused."""
    failure = Draft202012Validator(
        {"$ref": "#/$defs/failure", "$defs": SHARED["$defs"]}, registry=REGISTRY
    )
    base = {"ok": False, "exit_code": 2, "command": "build", "error": "e", "hint": None}
    assert failure.is_valid({**base, "lanes": [], "commit": "c" * 40, "free_bytes": 1})
    for bad in ({"lanes": "cpu"}, {"commit": ["c"]}, {"free_bytes": "lots"}, {"files": 1}):
        assert not failure.is_valid({**base, **bad}), bad


def _defs_validator(name: str, definition: str) -> tuple[Draft202012Validator, Schema]:
    """A validator of one `$defs` entry of a command's schema, and the schema's `$defs`."""
    defs = json.loads((SCHEMAS / f"{name}.json").read_text())["$defs"]
    schema = {"$ref": f"#/$defs/{definition}", "$defs": defs}
    return Draft202012Validator(schema, registry=REGISTRY), defs


def _keys(schema: Schema, defs: dict[str, Schema]) -> set[str]:
    """The keys an object schema declares (through `$ref`, `| None`, a tagged union's
    variants: their union); empty for a bare object."""
    if "$ref" in schema:
        return _keys(defs[schema["$ref"].removeprefix("#/$defs/")], defs)
    found = set(schema.get("properties", {}))
    for branch in schema.get("anyOf", []):
        found |= _keys(branch, defs)
    return found


OPS = {"parser": "test-backend-ops", "ops_passed": 10, "ops_failed": 0, "ops_unsupported": 2,
       "ops_total": 10, "backends": [{"name": "CPU", "status": "OK", "passed": 10, "total": 10,
                                      "ok": 10, "failed": 0, "unsupported": 2}]}  # fmt: skip
BENCH_TEST = {"n_prompt": 64, "n_gen": 0, "avg_ts": 812.5, "stddev_ts": 1.5, "backends": "CPU",
              "model_type": "llama 1B Q4_0", "model_size": 1000}  # fmt: skip
BENCH = {"parser": "llama-bench", "tests": [BENCH_TEST], "prompt_ts": 812.5, "gen_ts": None,
         "backends": ["CPU"], "model_type": "llama 1B Q4_0", "model_size": 1000}  # fmt: skip
CTEST = {"parser": "ctest", "tests": 3, "failed": 1, "skipped": 1, "passed": 1}


def test_a_certification_step_and_entry_type_every_nested_object() -> None:
    """Issue 30's audit: a step's program, thresholds, figures and log, the hardware, the
    lanes entry's figures and the lane row's certification were bare objects, so any shape
    passed. Each is now a declared shape, and the figures are tagged by their parser."""
    steps, defs = _defs_validator("certify", "CertStep")
    for key, want in (
        ("program", {"target", "path", "sha256"}),
        ("log", {"path", "sha256"}),
        ("thresholds", {"max_failed", "min_avg_ts"}),
        ("figures", {"parser", "ops_failed", "backends", "tests", "prompt_ts", "gen_ts"}),
    ):
        assert want <= _keys(defs["CertStep"]["properties"][key], defs), key
    hardware = defs["Hardware"]["properties"]
    assert {"class", "identity", "description"} <= set(hardware)
    identity = defs["Identity"]
    assert {"cpu", "memory_bytes", "os", "gpus", "uuid_salt", "probed"} <= _keys(identity, defs)
    lanes = json.loads((SCHEMAS / "lanes.json").read_text())["$defs"]
    per_step = lanes["Entry"]["properties"]["figures"]["additionalProperties"]
    assert {"parser", "ops_passed", "prompt_ts", "skipped"} <= _keys(per_step, lanes)
    assert {"reason", "attested", "record"} <= _keys(
        lanes["LaneRow"]["properties"]["certification"], lanes
    )

    step = {
        "name": "ops", "args": ["test"], "parser": "test-backend-ops", "exit_code": 0,
        "seconds": 1.0, "verdict": "pass", "problems": [],
        "program": {"target": "test-backend-ops", "path": "build/cpu/bin/test-backend-ops",
                    "sha256": "0" * 64},
        "thresholds": {"max_failed": 0}, "figures": OPS,
        "log": {"path": ".dgr/logs/certify-cpu-x-ops.log", "sha256": "0" * 64},
    }  # fmt: skip
    assert steps.is_valid(step)
    for figures in (BENCH, CTEST, None, {**CTEST, "new_key": 1}):  # nested objects stay open
        assert steps.is_valid({**step, "figures": figures}), figures
    for bad in (
        {**OPS, "ops_failed": "0"},  # a count that is not a number
        {**CTEST, "tests": [BENCH_TEST]},  # llama-bench's `tests` under the ctest tag
        {**BENCH, "tests": 3},  # and ctest's under llama-bench's
        {k: v for k, v in OPS.items() if k != "ops_total"},
        {k: v for k, v in OPS.items() if k != "parser"},  # untagged
        {**OPS, "parser": "nope"},
        {"ops_passed": "lots"},
    ):
        assert not steps.is_valid({**step, "figures": bad}), bad
    assert not steps.is_valid({**step, "thresholds": {"min_avg_ts": {"gen": "fast"}}})
    assert not steps.is_valid({**step, "program": {"target": "x"}})
    assert not steps.is_valid({**step, "log": {"sha256": 1}})
    entry, _ = _defs_validator("lanes", "Entry")
    row = {"lane": "cpu", "kind": "checked", "model": "tiny", "hardware_class": "cpu-x86_64-avx2",
           "advertised": True, "reason": "certified", "file": "x.json", "keyid": "k",
           "certified_on": None, "figures": {"ops": OPS, "speed": BENCH}}  # fmt: skip
    assert entry.is_valid(row)
    assert not entry.is_valid({**row, "figures": {"speed": {**BENCH, "gen_ts": "fast"}}})
    assert not entry.is_valid({**row, "figures": {"ops": {"ops_failed": 0}}})


@dataclass
class Run:
    label: str
    command: str  # the schema's name
    result: Result


def run_every_command(demo_tour: DemoTour, tmp: Path) -> list[Run]:
    """Every command, succeeding and failing, on a copy of the demo root."""
    assert demo_tour.result.code == 0, demo_tour.result
    root = demo_tour.fresh()
    empty = tmp / "empty"
    empty.mkdir()
    demo = demo_tour.result.json
    report = next((root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    key, pub = "keys/demo-signing-key.pem", "keys/demo-signing-key.pem.pub"
    (tmp / "evidence.txt").write_text("ran on a box\n")
    model = tmp / "model"
    model.mkdir()
    (model / "a.bin").write_bytes(b"hello\n")
    env = {**demo_tour.env(), "DGR_ARTIFACTS_FILE_ROOTS": str(model)}  # file:// URLs from there
    m = str(tmp / "m.toml")
    out: list[Run] = []

    def go(label: str, command: str, *args: str, code: int | None = None, at: Path = root) -> None:
        result = run_forge("--json", *args, cwd=at, env=env)
        if code is not None:
            assert result.code == code, (label, result)
        out.append(Run(label, command, result))

    fails = 2
    go("fetch", "fetch", "fetch", "--offline", code=0)
    go("fetch fails", "fetch", "fetch", code=fails, at=empty)
    go("patch", "patch", "patch", "--offline", code=0)
    go("patch --check", "patch", "patch", "--check", code=0)
    go("patch --abort fails", "patch", "patch", "--abort", code=fails)
    go("status", "status", "status", code=0)
    go("status fails", "status", "status", code=fails, at=empty)
    go("export", "export", "export", code=0)
    go("export --force", "export", "export", "--force", code=0)
    go("export fails", "export", "export", code=fails, at=empty)
    go("check", "check", "check", "--offline", code=0)
    go("check fails", "check", "check", code=fails, at=empty)
    go("build", "build", "build", "--lane", "cpu", "--key", key, "--cache", "off", "--offline")
    go("build fails", "build", "build", "--lane", "no-such-lane", code=fails)
    go("lanes", "lanes", "lanes", code=0)
    go("lanes --advertised", "lanes", "lanes", "--advertised", code=0)
    go("lanes fails", "lanes", "lanes", code=fails, at=empty)
    # the shapes another host gives: a lane missing a tool, a lane for another OS
    recipes = root / "recipes"
    (recipes / "cuda.toml").write_text(TEST_CUDA_RECIPE)
    shutil.copy(REPO / "recipes" / "metal.toml", recipes / "metal.toml")
    no_cuda = {"PATH": path_without("nvcc"), "CUDA_PATH": "", "CUDA_HOME": ""}
    for args, code in ((("lanes",), 0), (("doctor",), 0), (("doctor", "--lane", "cuda"), 2)):
        result = run_forge("--json", *args, cwd=root, env={**env, **no_cuda})
        assert result.code == code, (args, result)
        out.append(Run(" ".join(args) + ": lanes that cannot build here", args[0], result))
    (recipes / "cuda.toml").unlink()
    (recipes / "metal.toml").unlink()
    # toolchain install: a no-op where the lock's prefix is installed (no pip, no network)
    lock = root / "toolchains" / "cuda.lock"
    shutil.copy(REPO / "toolchains" / "cuda.lock", lock)
    home = tmp / "toolchains-home"
    prefix = home / f"cuda-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"
    (prefix / "site").mkdir(parents=True)
    (prefix / "dgr-toolchain.json").write_text("{}")
    for args, code in ((("cuda", "--offline"), 0), (("rocm",), 2)):
        tc_env = {**env, "DGR_TOOLCHAINS_DIR": str(home)}
        result = run_forge("--json", "toolchain", "install", *args, cwd=root, env=tc_env)
        assert result.code == code, (args, result)
        out.append(Run(f"toolchain install {' '.join(args)}", "toolchain-install", result))
    shutil.rmtree(home)
    lock.unlink()
    go("doctor --lane cpu", "doctor", "doctor", "--lane", "cpu", code=0)
    go("doctor fails", "doctor", "doctor", "--lane", "no-such-lane", code=fails)
    go("rebase --dry-run onto the pin", "rebase", "rebase", "--dry-run", "--onto", demo["pin"])
    go("rebase --dry-run", "rebase", "rebase", "--dry-run", "--onto", demo["onto"], code=3)
    go("rebase fails", "rebase", "rebase", "--continue", code=fails)
    go("rebase --onto: a conflict", "rebase", "rebase", "--onto", demo["onto"], code=3)
    go("status mid-rebase", "status", "status", code=0)
    go("rebase --abort", "rebase", "rebase", "--abort", code=0)
    go("bump --dry-run", "bump", "bump", "--dry-run", "--to", demo["onto"], code=3)
    go("bump --dry-run to the pin", "bump", "bump", "--dry-run", "--to", demo["pin"], code=0)
    go("bump fails", "bump", "bump", "--to", "-x", code=fails)
    go("keygen", "keygen", "keygen", "--out", str(tmp / "k" / "key.pem"), code=0)
    go("keygen fails", "keygen", "keygen", "--out", str(root / key), code=fails)
    go("report show", "report-show", "report", "show", str(report), code=0)
    go("report show fails", "report-show", "report", "show", str(tmp / "none.jsonl"), code=fails)
    go("report verify", "report-verify", "report", "verify", str(report), "--key", pub, code=0)
    go("report verify fails", "report-verify", "report", "verify", str(report), "--key",
       str(tmp / "k" / "key.pem.pub"), code=1)  # fmt: skip
    go("report compare", "report-compare", "report", "compare", str(report), str(report),
       "--key", pub, code=0)  # fmt: skip
    go("report compare fails", "report-compare", "report", "compare", str(report),
       str(tmp / "none.jsonl"), code=fails)  # fmt: skip
    # the demo's checked certification shaped `lanes` above; without it the lane's row
    # shows the attested record's shape
    shutil.rmtree(root / "certifications" / "cpu")
    go("certify", "certify", "certify", "--report", str(report), "--evidence",
       str(tmp / "evidence.txt"), "--key", key, "--report-key", pub, "--hardware", "box",
       code=0)  # fmt: skip
    go("lanes: an attested lane", "lanes", "lanes", "--key", pub, code=0)  # its record's shape
    go("certify fails", "certify", "certify", "--report", str(report), "--evidence",
       str(tmp / "none.txt"), "--key", key, code=fails)  # fmt: skip
    go("ci matrix", "ci-matrix", "ci", "matrix", code=0)
    go("ci matrix fails", "ci-matrix", "ci", "matrix", code=fails, at=empty)
    # the demo root names no install source (dgr-forge is not published): exit 2 until given
    go("ci render: no install source", "ci-render", "ci", "render", code=2)
    tool = "git+https://git.example.com/you/dgr-forge@" + "0" * 40
    wf = str(tmp / "ci.yml")
    go("ci render --out", "ci-render", "ci", "render", "--tool-source", tool, "--write-pins",
       "--out", wf, code=0)  # fmt: skip
    go("ci render", "ci-render", "ci", "render", "--tool-source", tool, code=0)
    go("ci render --check", "ci-render", "ci", "render", "--tool-source", tool, "--check", wf,
       code=0)  # fmt: skip
    Path(wf).write_text("# stale\n")
    go("ci render --check stale", "ci-render", "ci", "render", "--tool-source", tool,
       "--check", wf, code=1)  # fmt: skip
    go("ci render fails", "ci-render", "ci", "render", "--provider", "nope", code=fails)
    go("presets --print", "presets", "presets", "--print", code=0)
    go("presets", "presets", "presets", "--out", str(tmp / "CMakeUserPresets.json"), code=0)
    go("presets fails", "presets", "presets", "--lane", "no-such-lane", code=fails)
    go("artifacts manifest", "artifacts-manifest", "artifacts", "manifest", str(model),
       "--name", "m", "--url-base", model.as_uri(), "--out", m, code=0)  # fmt: skip
    go("artifacts manifest fails", "artifacts-manifest", "artifacts", "manifest",
       str(tmp / "none"), "--name", "m", "--url-base", model.as_uri(), code=fails)  # fmt: skip
    dest = str(tmp / "dest")
    go("artifacts provision", "artifacts-provision", "artifacts", "provision", m, "--dest",
       dest, code=0)  # fmt: skip
    go("artifacts verify", "artifacts-verify", "artifacts", "verify", m, "--dest", dest, code=0)
    (tmp / "dest" / "a.bin").write_bytes(b"HELLO\n")
    go("artifacts verify fails", "artifacts-verify", "artifacts", "verify", m, "--dest", dest,
       code=1)  # fmt: skip
    (tmp / "dest" / "a.bin").unlink()
    layered = tmp / "layered"
    write_layered_gguf(layered, "l4", layers=4, splits=2)
    lm = str(tmp / "l4.toml")
    go("artifacts manifest with a map", "artifacts-manifest", "artifacts", "manifest",
       str(layered), "--name", "l4", "--url-base", layered.as_uri(), "--out", lm,
       code=0)  # fmt: skip
    go("artifacts map", "artifacts-map", "artifacts", "map", lm, "--dest", str(layered), code=0)
    go("artifacts map fails", "artifacts-map", "artifacts", "map", m, code=fails)
    ldest = str(tmp / "ldest")
    go("artifacts provision --layers --dry-run", "artifacts-provision", "artifacts",
       "provision", lm, "--dest", ldest, "--layers", "1-2", "--dry-run", "--mirror",
       str(layered), code=0)  # fmt: skip
    go("artifacts provision --layers", "artifacts-provision", "artifacts", "provision", lm,
       "--dest", ldest, "--layers", "1-2", "--mirror", str(layered), code=0)  # fmt: skip
    go("artifacts verify --layers", "artifacts-verify", "artifacts", "verify", lm, "--dest",
       ldest, "--layers", "1-2", code=0)  # fmt: skip
    go("artifacts verify a record", "artifacts-verify", "artifacts", "verify", lm, "--dest",
       ldest, code=0)  # fmt: skip
    shutil.rmtree(model)
    go("artifacts provision fails", "artifacts-provision", "artifacts", "provision", m,
       "--dest", dest, code=1)  # fmt: skip
    # the shapes of an empty series (a new forge's): the same root, its patches removed
    root = demo_tour.fresh()
    manifest = root / "manifests" / "llama.cpp.toml"
    pin = tomllib.loads(manifest.read_text())
    for entry in pin["patches"].pop("series", []):
        (root / pin["patches"]["dir"] / entry["file"]).unlink()
    manifest.write_text(tomli_w.dumps(pin))
    for args in (["status"], ["patch", "--offline"], ["patch", "--check"], ["export"],
                 ["check", "--offline"], ["status"]):  # fmt: skip
        go(f"{' '.join(args)}: an empty series", args[0], *args, code=0)
    out.append(Run("demo", "demo", demo_tour.result))
    go("demo fails", "demo", "demo", str(root), code=fails)
    for cmd in COMMANDS:  # --help: the same object for every command
        go(f"{cmd.words} --help", cmd.name, *cmd.words.split(), "--help", code=0)
    return out


def every_command_succeeds_and_fails(runs: list[Run]) -> None:
    for cmd in COMMANDS:
        mine = [r.result for r in runs if r.command == cmd.name and "--help" not in r.label]
        assert any(r.json["ok"] for r in mine), cmd.words
        assert any(not r.json["ok"] for r in mine), cmd.words


def invalid_outputs(runs: list[Run]) -> list[tuple[str, list[str], Result]]:
    """(label, why, result) of each output its command's schema rejects."""
    bad = []
    for cmd in COMMANDS:
        check = validator(cmd.name)
        for run in (r for r in runs if r.command == cmd.name):
            errors = sorted(check.iter_errors(run.result.json), key=str)
            why = [
                f"{list(sub.absolute_path)}: {sub.message[:200]}"
                for e in errors
                for sub in (e.context or [e])
            ]
            if errors:
                bad.append((run.label, why[:15], run.result))
    return bad


def a_foreign_key_or_another_shape_fails_validation(runs: list[Run]) -> None:
    """The schemas are closed and typed: the validation can fail."""
    status = next(r.result.json for r in runs if r.label == "status")
    check = validator("status")
    assert check.is_valid(status)
    assert not check.is_valid({**status, "surprise": 1})
    assert not check.is_valid({**status, "lanes": {"cpu": {}}})  # lanes are a list
    no_upstream = {k: v for k, v in status.items() if k != "upstream"}
    assert not check.is_valid(no_upstream)


def the_drifts_are_fixed(runs: list[Run]) -> None:
    """The keys docs/json.md promised and the commands did not give."""
    by = {r.label: r.result.json for r in runs}
    manifest = {f["name"]: f["sha256"] for f in by["artifacts manifest"]["files"]}
    assert [(f["name"], f["sha256"]) for f in by["artifacts provision"]["files"]] == list(
        manifest.items()
    )
    assert [f["status"] for f in by["artifacts verify"]["files"]] == ["ok"]
    assert [f["status"] for f in by["artifacts verify fails"]["files"]] == ["bad"]
    same = by["rebase --dry-run onto the pin"]
    pin = by["rebase --dry-run"]["old"]
    assert same["old"] == same["new"] == pin and same["onto"] == pin["commit"]
    assert same["result_tree"] and same["kind"] == "dgr-forge/rebase-report"
    assert [p["outcome"] for p in same["patches"]] == ["unchanged"] * 3
    assert [lane["lane"] for lane in by["status"]["lanes"]] == ["cpu"]
    assert by["status mid-rebase"]["rebase"]["onto"] == by["rebase --dry-run"]["onto"]
    for label in ("lanes: lanes that cannot build here", "doctor: lanes that cannot build here"):
        rows = {row["lane"]: row for row in by[label]["lanes"]}
        assert not rows["cuda"]["buildable"] and not rows["metal"]["buildable"], label
        assert "nvcc" in [m["name"] for m in rows["cuda"]["missing"]], label
    # the demo's own checked certification, then (removed) an attested one
    (checked,) = [row for row in by["lanes"]["lanes"] if row["lane"] == "cpu"]
    assert checked["certified"] and checked["certification"]["reason"] == "certified", checked
    (attested,) = [row for row in by["lanes: an attested lane"]["lanes"] if row["lane"] == "cpu"]
    assert attested["certification"]["reason"] == "attested, not checked", attested
    assert by["patch --offline: an empty series"]["patches"] == []
    assert by["status: an empty series"]["patches"]["series"] == []
    in_status = by["status"]["lanes"][0]["last_build"]
    in_lanes = by["lanes"]["lanes"][0]["last_build"]
    assert {k: in_status[k] for k in in_lanes} == in_lanes


@pytest.mark.slow  # the demo root (one real CMake build for the session)
def test_every_command_validates_against_its_schema(demo_tour: DemoTour, tmp_path: Path) -> None:
    """One test, so that one xdist worker runs the commands (about 4 s), not every worker."""
    runs = run_every_command(demo_tour, tmp_path)
    every_command_succeeds_and_fails(runs)
    assert not invalid_outputs(runs)
    a_foreign_key_or_another_shape_fails_validation(runs)
    the_drifts_are_fixed(runs)
