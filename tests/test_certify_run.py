"""Certification that checks (issue 30): the cpu lane of an upstream with its own
`test-backend-ops` and `llama-bench` (tests/support/llamaprogs) is built, then certified
end to end by `certify --lane cpu --model tiny`; each failure is refused with its exit
code and message and writes nothing to certifications/.

Five real builds for the module: one of the plain series (every passing and most refusing
paths run on it, each test putting back what it changed), one whose series breaks MUL and
slows decoding, one whose llama-bench prints a line before its JSON, one whose logits and
model size are shifted, and the product's cpu recipe as it ships."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.cli import Result, run_forge
from support.git import Upstream
from support.llamaprogs import (
    BREAK_MUL,
    NOISY_BENCH,
    SHIFT_LOGITS,
    SLOW_DECODE,
    WRONG_SIZE,
    make_llamaprogs_upstream,
)
from support.roots import REPO, Edit, make_root
from support.server import flip_byte, write_split_gguf
from test_json_schemas import validator

from dgr_forge.attest import dsse, keys
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.fsutil import sha256_file

pytestmark = pytest.mark.slow

# the product's cpu recipe, with the upstream's tests on and the suite: an op filter of
# the families the runtime uses, a short bench, a gate far below the unpatched speed and
# far above the slowed one (tests/support/llamaprogs)
SUITE = """
[certify]
targets = ["test-backend-ops", "llama-bench", "llama-perplexity"]

[[certify.steps]]
name = "ops"
program = "test-backend-ops"
args = ["test", "-b", "{device}", "-o", "ADD,MUL,SCALE,SQR,CONV_TRANSPOSE_1D"]
parser = "test-backend-ops"
max_failed = 0
timeout = 60

[[certify.steps]]
name = "speed"
program = "llama-bench"
args = ["-m", "{model}", "-t", "{threads}", "-p", "64", "-n", "16", "-r", "3", "-o", "json"]
parser = "llama-bench"
min_avg_ts = { prompt = 1000.0, gen = 1000.0 }
by_model.huge = { gen = 9000000.0 }
timeout = 60

[[certify.steps]]
name = "parity"
program = "llama-perplexity"
args = ["-m", "{model}", "-f", "{text}", "-c", "128", "--chunks", "2", "-t", "{threads}"]
text = "recipes/parity.txt"
parser = "parity"
reference = "pin"
max_rel_diff = 0.001
timeout = 60
"""


def valid(result: Result, command: str) -> None:
    """The --json object validates against docs/json-schema/<command>.json."""
    errors = [e.message for e in validator(command).iter_errors(result.json)]
    assert not errors, errors


def not_valid(result: Result, command: str, where: tuple[str | int, ...], value: Any) -> bool:
    """The --json object with the value at `where` replaced does not validate."""
    changed = copy.deepcopy(result.json)
    parent = changed
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    return not validator(command).is_valid(changed)


def recipe_text() -> str:
    text = (REPO / "recipes" / "cpu.toml").read_text()
    text = text.split("\n[certify]")[0]  # the product's own suite, if any, replaced
    return text.replace('LLAMA_BUILD_TESTS = "OFF"', 'LLAMA_BUILD_TESTS = "ON"') + SUITE


@dataclass
class Built:
    root: Path
    key: Path  # signs reports and certifications
    models: Path  # where the model's files are served from (file:// URLs)

    def forge(self, *args: str) -> Result:
        env = {"DGR_ARTIFACTS_FILE_ROOTS": str(self.models)}  # the manifest's file:// URLs
        return run_forge("--root", str(self.root), "--json", *args, env=env)

    def certify(self, *args: str) -> Result:
        return self.forge(
            "certify", "--lane", "cpu", "--key", str(self.key),
            "--report-key", f"{self.key}.pub", *args,
        )  # fmt: skip

    @property
    def certs(self) -> Path:
        return self.root / "certifications"

    def written(self) -> list[Path]:
        return sorted(p for p in self.certs.rglob("*.json")) if self.certs.exists() else []


def _model_manifest(root: Path, served: Path) -> None:
    files = write_split_gguf(served, "tiny", 2)
    lines = ["schema = 1", "[model]", 'name = "tiny"']
    for f in files:
        lines += [
            "[[files]]", f'name = "{f.name}"', f"size = {f.stat().st_size}",
            f'sha256 = "{sha256_file(f)}"', f'url = "{f.as_uri()}"',
        ]  # fmt: skip
    (root / "manifests" / "models").mkdir(parents=True, exist_ok=True)
    (root / "manifests" / "models" / "tiny.toml").write_text("\n".join(lines) + "\n")
    # the same files under another name, with a gate of its own in the recipe (by_model)
    huge = "\n".join(lines).replace('name = "tiny"', 'name = "huge"', 1)
    (root / "manifests" / "models" / "huge.toml").write_text(huge + "\n")


def _build(path: Path, upstream: Upstream, edits: list[Edit], recipe: str | None = None) -> Built:
    series = make_root(path / "forge", upstream, edits, product=True)
    root = series.root
    (root / "recipes" / "cpu.toml").write_text(recipe or recipe_text())
    for other in (root / "recipes").glob("*.toml"):
        if other.name != "cpu.toml":
            other.unlink()
    _model_manifest(root, path / "served")
    key = path / "release.pem"
    keys.generate(key)
    trusted = root / "certifications" / "trusted-keys"
    trusted.mkdir(parents=True)
    shutil.copy(f"{key}.pub", trusted / "release.pub")
    built = Built(root, key, path / "served")
    r = built.forge("build", "--lane", "cpu", "-j", "2", "--key", str(key))
    assert r.code == 0, r
    return built


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_llamaprogs_upstream(tmp_path_factory.mktemp("llamaprogs") / "upstream")


@pytest.fixture(scope="module")
def _plain(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Built:
    return _build(tmp_path_factory.mktemp("plain"), upstream, [])


@pytest.fixture
def plain(_plain: Built) -> Iterator[Built]:
    """The plain build, with no certification and the model as provisioned; put back after."""
    manifest = _plain.root / "manifests" / "models" / "tiny.toml"
    text = manifest.read_text()
    yield _plain
    manifest.write_text(text)
    for p in _plain.written():
        p.unlink()
    shutil.rmtree(_plain.root / ".dgr" / "models", ignore_errors=True)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Built:
    return _build(tmp_path_factory.mktemp("broken"), upstream, [BREAK_MUL, SLOW_DECODE])


def test_the_cpu_lane_is_certified_end_to_end_and_advertised_with_its_figures(
    plain: Built,
) -> None:
    r = plain.certify("--model", "tiny")
    assert r.code == 0, r
    valid(r, "certify")
    # each figure is typed by its parser: the same output with a key of another shape fails
    parsers = [s["figures"]["parser"] for s in r.json["steps"]]
    assert parsers == ["test-backend-ops", "llama-bench", "parity"]
    assert not_valid(r, "certify", ("steps", 0, "figures", "ops_failed"), "0")
    assert not_valid(r, "certify", ("steps", 1, "figures", "tests"), 2)
    assert not_valid(r, "certify", ("steps", 1, "figures", "parser"), "ctest")
    assert not_valid(r, "certify", ("steps", 0, "program", "sha256"), None)
    assert not_valid(r, "certify", ("steps", 1, "thresholds", "min_avg_ts"), 1000.0)
    assert not_valid(r, "certify", ("hardware", "identity", "cpu", "flags"), "avx2")
    path = Path(r.json["certification"])
    cls = r.json["hardware_class"]
    assert path == plain.certs / "cpu" / "tiny" / f"{cls}.json" and r.json["trusted"] is True
    assert cls.startswith("cpu-")
    env = json.loads(path.read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    ops, speed, parity = body["steps"]
    assert ops["verdict"] == "pass" and ops["figures"]["ops_failed"] == 0
    assert ops["figures"]["ops_passed"] == 10 and ops["figures"]["ops_unsupported"] == 2
    assert speed["figures"]["prompt_ts"] > 1000 and speed["figures"]["gen_ts"] > 1000
    assert speed["thresholds"] == {"min_avg_ts": {"prompt": 1000.0, "gen": 1000.0}}
    # the program that ran is the report's own subject, by path and sha256
    subjects = {s["name"]: s["digest"]["sha256"] for s in body["report"]["subjects"]}
    assert subjects[ops["program"]["path"]] == ops["program"]["sha256"]
    assert ops["program"]["path"].endswith("test-backend-ops")
    # the model is bound by its manifest and every file; {model} was the first split
    manifest = plain.root / "manifests" / "models" / "tiny.toml"
    assert body["model"]["manifest_sha256"] == sha256_file(manifest)
    assert [f["name"] for f in body["model"]["files"]] == [
        "tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf",
    ]  # fmt: skip
    assert speed["args"][1].endswith("tiny-00001-of-00002.gguf")
    # llama-bench's model_size is the verified model's tensor data (both splits' tensors)
    assert body["model"]["tensor_bytes"] == 2 * 16 * 1024 * 4 == speed["figures"]["model_size"]
    # whole-model parity: the pin's own build ran too; both programs and figures are bound
    figures, ref = parity["figures"], parity["figures"]["reference"]
    assert figures["ppl"] == figures["reference_ppl"] > 1 and figures["rel_diff"] == 0.0
    assert subjects[parity["program"]["path"]] == parity["program"]["sha256"]
    assert ref["target"] == "llama-perplexity" and ref["path"].startswith(".dgr/tmp/certify-cpu/")
    assert sha256_file(plain.root / ref["path"]) == ref["sha256"]
    # and the shared libraries the pin's build made, which the program loads: the
    # numerics live there (an executable's own bytes are the same in both builds)
    libs = figures["reference_libraries"]
    assert libs and all(lib["path"].startswith(".dgr/tmp/certify-cpu/") for lib in libs)
    assert all(sha256_file(plain.root / lib["path"]) == lib["sha256"] for lib in libs)
    assert parity["thresholds"] == {"max_rel_diff": 0.001}
    assert parity["text_sha256"] == sha256_file(plain.root / "recipes" / "parity.txt")
    pin_log = plain.root / figures["reference_log"]["path"]
    assert sha256_file(pin_log) == figures["reference_log"]["sha256"]
    assert "Final estimate: PPL = " in pin_log.read_text()
    # each step's full log is kept, named by its sha256
    for step in (ops, speed, parity):
        log = plain.root / step["log"]["path"]
        assert log.parent == plain.root / ".dgr" / "logs"
        assert sha256_file(log) == step["log"]["sha256"]
    assert "Backend CPU: " in (plain.root / ops["log"]["path"]).read_text()
    # the hardware identity: probed, never a GPU UUID in clear
    assert body["hardware"]["identity"]["cpu"]["model"]
    assert dsse.Envelope.from_json(path.read_bytes()).payload_type.endswith("certification+json")

    adv = plain.forge("lanes", "--advertised")
    assert adv.code == 0, adv
    valid(adv, "lanes")
    valid(plain.forge("lanes"), "lanes")
    (entry,) = adv.json["entries"]
    assert not_valid(adv, "lanes", ("entries", 0, "figures", "speed", "gen_ts"), "fast")
    assert not_valid(adv, "lanes", ("entries", 0, "figures", "ops", "backends"), 1)
    assert (entry["lane"], entry["model"], entry["hardware_class"]) == ("cpu", "tiny", cls)
    assert entry["figures"]["ops"]["ops_failed"] == 0
    assert entry["figures"]["speed"]["gen_ts"] == speed["figures"]["gen_ts"]
    assert adv.json["advertised"] == ["cpu"]
    human = run_forge("--root", str(plain.root), "lanes", "--advertised")
    assert "tiny" in human.stdout + human.stderr and cls in human.stdout + human.stderr
    ops_line = f"ops: {ops['figures']['ops_passed']}/{ops['figures']['ops_total']} ops"
    assert ops_line in human.stdout, human.stdout
    assert f"speed: tg {speed['figures']['gen_ts']:.1f} t/s" in human.stdout, human.stdout
    assert f"parity: PPL {figures['ppl']} (pin {figures['reference_ppl']})" in human.stdout


def test_a_changed_model_manifest_or_recipe_lapses_the_certification(plain: Built) -> None:
    assert plain.certify("--model", "tiny").code == 0
    manifest = plain.root / "manifests" / "models" / "tiny.toml"
    original = manifest.read_text()
    manifest.write_text(original.replace('name = "tiny"', 'name = "tiny"\nsource_revision = "'
                                         + "a" * 40 + '"', 1))  # fmt: skip
    lanes = plain.forge("lanes", "--advertised")
    assert lanes.code == 0 and lanes.json["entries"] == [], lanes
    shown = plain.forge("lanes")
    (cpu,) = [row for row in shown.json["lanes"] if row["lane"] == "cpu"]
    assert cpu["certified"] is False
    assert "model manifest manifests/models/tiny.toml changed" in cpu["certification"]["reason"]
    manifest.write_text(original)
    assert plain.forge("lanes", "--advertised").json["advertised"] == ["cpu"]
    recipe = plain.root / "recipes" / "cpu.toml"
    text = recipe.read_text()
    recipe.write_text(text + "# edited\n")
    try:
        cpu = plain.forge("lanes").json["lanes"][0]
        assert "lapsed: the recipe changed" in cpu["certification"]["reason"], cpu
        # and the report, built from the recipe before the edit, is not certified again
        again = plain.certify("--model", "tiny")
        assert again.code == ExitCode.BAD_INPUT, again
        assert "the report does not match this checkout: recipe recipes/cpu.toml" in again.stderr
    finally:
        recipe.write_text(text)
    # a rebase moves the pin: lapsed as an attested record lapses
    pin = plain.root / "manifests" / "llama.cpp.toml"
    pinned = pin.read_text()
    commit = tomllib.loads(pinned)["upstream"]["commit"]
    pin.write_text(pinned.replace(commit, "c" * 40))
    try:
        cpu = plain.forge("lanes").json["lanes"][0]
        assert "lapsed: the upstream pin moved" in cpu["certification"]["reason"], cpu
        assert plain.forge("lanes", "--advertised").json["entries"] == []
    finally:
        pin.write_text(pinned)
    assert plain.forge("lanes", "--advertised").json["advertised"] == ["cpu"]
    # the parity step's text is bound by its sha256: another text lapses the record
    parity_text = plain.root / "recipes" / "parity.txt"
    kept = parity_text.read_bytes()
    parity_text.write_bytes(kept + b"more\n")
    try:
        cpu = plain.forge("lanes").json["lanes"][0]
        assert "lapsed: the step parity's text changed" in cpu["certification"]["reason"], cpu
    finally:
        parity_text.write_bytes(kept)
    assert plain.forge("lanes", "--advertised").json["advertised"] == ["cpu"]


def test_an_attested_certification_is_recorded_but_never_advertised(plain: Built) -> None:
    evidence = plain.root.parent / "run.log"
    evidence.write_text("test-backend-ops: all passed (a person says)\n")
    report = next((plain.root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    r = plain.forge(
        "certify", "--attested", str(evidence), "--report", str(report), "--key",
        str(plain.key), "--report-key", f"{plain.key}.pub", "--hardware", "a rig",
    )  # fmt: skip
    assert r.code == 0, r
    assert "attested, not checked" in r.stderr
    lanes = plain.forge("lanes", "--advertised")
    assert lanes.json["advertised"] == [] and lanes.json["entries"] == []
    cpu = plain.forge("lanes").json["lanes"][0]
    assert cpu["certified"] is False and cpu["certification"]["reason"] == "attested, not checked"


def test_a_trusted_record_whose_figures_changed_shape_is_invalid(plain: Built) -> None:
    """`lanes` shows a record's figures in the shapes `certify` wrote (its schema's): a
    record signed by a trusted key whose figures have another shape is invalid, its
    figures not shown, and not advertised."""
    r = plain.certify("--model", "tiny")
    assert r.code == 0, r
    path = Path(r.json["certification"])
    env = json.loads(path.read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    body["steps"][0]["figures"]["ops_failed"] = "none"
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    signed = dsse.sign(payload, env["payloadType"], keys.load_signer(plain.key))
    path.write_text(json.dumps(msgspec.to_builtins(signed)) + "\n")
    lanes = plain.forge("lanes")
    assert lanes.code == 0, lanes
    valid(lanes, "lanes")
    (entry,) = lanes.json["lanes"][0]["certifications"]
    assert entry["advertised"] is False and entry["figures"] == {}, entry
    assert entry["reason"].startswith("invalid: its steps are not a certification's"), entry
    assert "ops_failed" in entry["reason"], entry
    assert plain.forge("lanes", "--advertised").json["entries"] == []


def test_a_models_own_speed_gate_is_the_one_applied(plain: Built) -> None:
    r = plain.certify("--model", "huge")
    assert r.code == ExitCode.FAILED, r
    assert "step speed: gen speed" in r.stderr and "under min_avg_ts.gen = 9e+06" in r.stderr
    speed = r.json["steps"][1]
    assert speed["thresholds"] == {"min_avg_ts": {"gen": 9000000.0}}
    assert plain.written() == []


def test_a_changed_model_file_is_exit_1_and_writes_nothing(plain: Built) -> None:
    dest = plain.root.parent / "model-disk"
    assert plain.certify("--model", "tiny", "--dest", str(dest)).code == 0
    for p in plain.written():
        p.unlink()
    flip_byte(dest / "tiny-00002-of-00002.gguf", 100)
    r = plain.certify("--model", "tiny", "--dest", str(dest))
    assert r.code == ExitCode.FAILED, r
    assert "tiny-00002-of-00002.gguf" in r.stderr and "wrong sha256" in r.stderr
    assert plain.written() == []


def test_unparseable_output_fails_the_step(plain: Built) -> None:
    """A device the program does not test: test-backend-ops skips it and tests nothing,
    which the parser cannot read as a pass."""
    r = plain.certify("--model", "tiny", "--device", "CUDA0")
    assert r.code == ExitCode.FAILED, r
    assert "step ops: unreadable test-backend-ops output" in r.stderr
    assert "no backend was tested" in r.stderr
    assert r.json["failed_steps"] == ["ops"]
    assert plain.written() == []


def test_a_program_that_is_not_a_subject_of_the_report_is_refused(
    plain: Built, tmp_path: Path
) -> None:
    """A report, validly signed, that does not name test-backend-ops: the program the
    build left there is not the shipped binary and never runs."""
    report = next((plain.root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    env = json.loads(report.read_text())
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"] = [s for s in stmt["subject"] if "test-backend-ops" not in s["name"]]
    payload = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    other = tmp_path / report.name
    signed = dsse.sign(payload, env["payloadType"], keys.load_signer(plain.key))
    other.write_text(json.dumps(msgspec.to_builtins(signed)) + "\n")
    r = plain.certify("--model", "tiny", "--report", str(other))
    assert r.code == ExitCode.FAILED, r
    assert "'test-backend-ops'" in r.stderr and "not a subject of the report" in r.stderr
    assert plain.written() == []
    logs = plain.root / ".dgr" / "logs"
    assert not [p for p in logs.glob("certify-cpu-*") if p.stat().st_mtime > other.stat().st_mtime]


def test_a_report_subject_changed_since_the_build_is_refused(plain: Built) -> None:
    """Every subject of the report is re-hashed before a step runs, not only the suite's
    programs: a shipped file changed after the build fails the report (exit 1 naming it,
    nothing run, nothing written); and a program that no longer hashes to its subject
    never runs (the second check, right before the steps)."""
    import time

    from dgr_forge.certify import run as certrun
    from dgr_forge.core.errors import OperationFailed
    from dgr_forge.core.forge import Forge
    from dgr_forge.host.recipes import Suite

    report = next((plain.root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    stmt = json.loads(base64.b64decode(json.loads(report.read_text())["payload"]))
    subjects = {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]}
    name = next(n for n in subjects if not n.endswith(("test-backend-ops", "llama-bench")))
    victim = plain.root / ".dgr" / name
    data = victim.read_bytes()
    started = time.time()
    flip_byte(victim, len(data) // 2)
    try:
        r = plain.certify("--model", "tiny")
    finally:
        victim.write_bytes(data)
    assert r.code == ExitCode.FAILED, r
    assert "failed verification" in r.stderr and f"artifact {name} changed" in r.stderr, r
    assert plain.written() == []
    logs = plain.root / ".dgr" / "logs"
    assert not [p for p in logs.glob("certify-cpu-*") if p.stat().st_mtime >= started]
    bench = next(n for n in subjects if n.endswith("llama-bench"))
    forge = Forge(plain.root, plain.root / ".dgr")
    with pytest.raises(OperationFailed, match="changed since the report"):
        certrun.programs(forge, "cpu", Suite(targets=("llama-bench",)), {bench: "0" * 64})


def test_certify_dest_under_home_holding_the_model_is_refused(plain: Built) -> None:
    """Issue 45, cause 3: `certify --dest` under /home (directly, or through a link), with
    the model's exact files already there, verified them, wrote .dgr-verified.json there
    and certified. Now it is exit 2 before a file is hashed, and nothing is written."""
    import os
    import uuid

    if not os.access("/home", os.W_OK):
        pytest.skip("needs a writable /home")
    home = Path("/home") / f"dgr-forge-test-{uuid.uuid4().hex}"
    shutil.copytree(plain.models, home)
    link = plain.root.parent / f"models-{home.name}"
    link.symlink_to(home, target_is_directory=True)
    try:
        for dest in (home, link):
            r = plain.certify("--model", "tiny", "--dest", str(dest))
            assert r.code == ExitCode.BAD_INPUT, r
            assert f"resolves to {home}, under /home" in r.stderr, r
            assert not (home / ".dgr-verified.json").exists()
            assert plain.written() == []
    finally:
        link.unlink()
        shutil.rmtree(home, ignore_errors=True)


def test_hostile_certify_options_are_exit_2(plain: Built) -> None:
    for args, says in (
        (["--model", "tiny", "--device", "--rf"], "not a ggml device name"),
        (["--model", "tiny", "--device", "CPU;id"], "not a ggml device name"),
        (["--model", "../../etc/passwd"], "not a manifest name"),
        (["--model", "-x"], "not a manifest name"),
        ([], "pass --model"),
        (["--model", "tiny", "--dest", "/dev/zero"], "/dev/zero"),
        (["--model", "tiny", "--dest", "/home/someone/models"], "/home"),
        (["--model", "tiny", "--attested", "/dev/null"], "--attested records"),
        (["--model", "tiny", "--hardware", "a rig"], "--hardware goes with --attested"),
        (["--model", "tiny", "--lane", "cuda"], "certify takes one --lane"),
    ):
        r = plain.certify(*args)
        assert r.code == ExitCode.BAD_INPUT, (args, r)
        assert says in r.stderr, (args, r.stderr)
    # a lane whose recipe has no suite has nothing to run
    recipe = plain.root / "recipes" / "cpu.toml"
    text = recipe.read_text()
    recipe.write_text(text.split("\n[certify]")[0] + "\n")
    try:
        r = plain.certify("--model", "tiny")
    finally:
        recipe.write_text(text)
    assert r.code == ExitCode.BAD_INPUT and "no [certify] suite" in r.stderr, r
    assert plain.written() == []


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Built:
    return _build(tmp_path_factory.mktemp("noisy"), upstream, [NOISY_BENCH])


def test_a_bench_that_prints_more_than_its_json_is_unreadable(noisy: Built) -> None:
    """A patch makes llama-bench print a line before its JSON: the speed step cannot read
    it, so it fails (the ops step still passes), nothing written."""
    r = noisy.certify("--model", "tiny")
    assert r.code == ExitCode.FAILED, r
    assert r.json["failed_steps"] == ["speed"]
    assert "step speed: unreadable llama-bench output: not JSON" in r.stderr
    assert r.json["steps"][1]["figures"] is None and r.json["steps"][0]["verdict"] == "pass"
    assert noisy.written() == []


def test_a_failing_op_case_and_a_speed_under_the_gate_are_named(broken: Built) -> None:
    r = broken.certify("--model", "tiny")
    assert r.code == ExitCode.FAILED, r
    valid(r, "certify")
    assert r.json["failed_steps"] == ["ops", "speed"], r.json
    err = r.stderr
    assert "2 op case(s) failed (max_failed = 0)" in err
    # named in the pin's own line form: the case, then what the compare found
    assert "MUL(type=f32,ne=[10,5,4,3]) [MUL] ERR = " in err
    (ops_step, _, parity) = r.json["steps"]
    assert parity["verdict"] == "pass"  # MUL and the decode loop: not the shared logits
    assert [(c["name"], c["params"]) for c in ops_step["failed_cases"]] == [
        ("MUL", "type=f32,ne=[10,5,4,3]"), ("MUL", "type=f32,ne=[16,1,1,1]"),
    ]  # fmt: skip
    assert all(c["error"].startswith("[MUL] ERR = ") for c in ops_step["failed_cases"])
    assert "speed" in err and "is under min_avg_ts.gen = 1000" in err
    assert "is under min_avg_ts.prompt = 1000" in err
    assert broken.written() == []
    steps: list[dict[str, Any]] = r.json["steps"]
    assert steps[0]["figures"]["ops_failed"] == 2 and steps[0]["exit_code"] == 1
    assert steps[1]["figures"]["gen_ts"] < 250


def test_the_pins_build_is_kept_while_its_tree_is_the_pins(plain: Built) -> None:
    """The parity reference is configured once per tree and arguments (a `--fresh`
    configure would drop its objects): a second run is a Ninja no-op; a file changed in
    the exported tree has it exported afresh, configured and built again."""
    logs = plain.root / ".dgr" / "logs"

    def pin_log() -> str:
        return max(logs.glob("build-cpu-pin-*.log")).read_text()

    assert plain.certify("--model", "tiny").code == 0
    for p in plain.written():
        p.unlink()
    assert plain.certify("--model", "tiny").code == 0
    again = pin_log()
    assert "ninja: no work to do." in again and "cmake" not in again.split("\n", 1)[0], again
    lists = plain.root / ".dgr" / "tmp" / "certify-cpu" / "pin" / "src" / "CMakeLists.txt"
    lists.write_text(lists.read_text() + "# edited\n")
    for p in plain.written():
        p.unlink()
    assert plain.certify("--model", "tiny").code == 0
    assert "# edited" not in lists.read_text() and "--fresh" in pin_log()


@pytest.fixture(scope="module")
def shifted(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Built:
    return _build(tmp_path_factory.mktemp("shifted"), upstream, [SHIFT_LOGITS, WRONG_SIZE])


def test_a_patch_to_shared_numerics_fails_parity_and_a_wrong_model_size_fails(
    shifted: Built,
) -> None:
    """Issue 43 #2b, #3: the series changes the logits code both op paths share (the ops
    step cannot see it) and makes llama-bench count the header in model_size: parity names
    both figures and the tolerance, the speed step both sizes; nothing written."""
    r = shifted.certify("--model", "tiny")
    assert r.code == ExitCode.FAILED, r
    valid(r, "certify")
    assert r.json["failed_steps"] == ["speed", "parity"], r.json
    ops, speed, parity = r.json["steps"]
    assert ops["verdict"] == "pass"
    f = parity["figures"]
    assert f["ppl"] != f["reference_ppl"] and f["rel_diff"] > 0.001
    said = (
        f"PPL {f['ppl']:.4f} differs from the pin's {f['reference_ppl']:.4f} by "
        f"{f['rel_diff']:.3g} (relative), over max_rel_diff = 0.001"
    )
    wrong = (
        "llama-bench reports model_size 138880 bytes, the verified model's tensor data is "
        "131072 bytes"
    )
    assert said in r.stderr and wrong in r.stderr, r.stderr
    assert speed["figures"]["model_size"] == 138880
    human = run_forge(
        "--root", str(shifted.root), "certify", "--lane", "cpu", "--model", "tiny",
        "--key", str(shifted.key), "--report-key", f"{shifted.key}.pub",
        env={"DGR_ARTIFACTS_FILE_ROOTS": str(shifted.models)},
    )  # fmt: skip
    assert human.code == ExitCode.FAILED and said in human.stderr and wrong in human.stderr
    assert shifted.written() == []


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_hostile_parity_text_is_exit_2_and_runs_nothing(plain: Built, kind: str) -> None:
    """The step's `text` is a file the forge root supplies: a link out of the root, a FIFO
    (never waited on) or a directory is refused naming it; the file is put back after."""
    text = plain.root / "recipes" / "parity.txt"
    kept = text.read_bytes()
    text.unlink()
    if kind == "symlink":
        text.symlink_to("/etc/passwd")
    elif kind == "fifo":
        os.mkfifo(text)
    else:
        text.mkdir()
    try:
        r = plain.certify("--model", "tiny")
    finally:
        text.rmdir() if kind == "directory" else text.unlink()
        text.write_bytes(kept)
    assert r.code == ExitCode.BAD_INPUT, r
    assert "recipes/parity.txt" in r.stderr, r.stderr
    why = {"symlink": "symbolic link", "fifo": "not a regular file", "directory": "directory"}
    assert why[kind] in r.stderr, r.stderr
    assert plain.written() == []


def test_a_step_past_its_time_limit_is_stopped_and_fails(plain: Built) -> None:
    """The runner on the real build: a step whose program outlives its limit is killed at
    it and fails; the log keeps what it wrote; the environment keeps no signing key."""
    import os
    import time

    from dgr_forge.attest.reports import latest_report, subject_digests, verify_report
    from dgr_forge.certify import run as certrun
    from dgr_forge.core.forge import Forge
    from dgr_forge.core.output import Reporter
    from dgr_forge.host.recipes import Speeds, Step, Suite

    forge = Forge(plain.root, plain.root / ".dgr")
    report = latest_report(forge, "cpu")
    assert report is not None
    subjects = subject_digests(
        verify_report(report, keys.load_public_file(Path(f"{plain.key}.pub")))
    )
    args = ("-m", "{model}", "-p", "64", "-n", "0", "-r", "100000000", "-o", "json")
    endless = Step(
        name="endless", program="llama-bench", args=args, parser="llama-bench",
        min_avg_ts=Speeds(prompt=1.0), timeout=1,
    )  # fmt: skip
    suite = Suite(targets=("llama-bench",), steps=(endless,))
    found = certrun.programs(forge, "cpu", suite, subjects)
    model = next(plain.models.glob("*00001-of-*.gguf"))
    started = time.monotonic()
    (result,) = certrun.run_steps(forge, "cpu", suite, found, {"model": str(model)}, Reporter())
    assert time.monotonic() - started < 20
    assert not result.passed and result.exit_code is None
    assert result.problems == ("stopped at its time limit (1 s)",)
    assert sha256_file(plain.root / result.log.path) == result.log.sha256
    os.environ["DGR_SIGNING_KEY"] = str(plain.key)
    try:
        assert "DGR_SIGNING_KEY" not in certrun.child_env()
        os.environ["GH_TOKEN"] = "t"
        assert "GH_TOKEN" not in certrun.child_env() and "PATH" in certrun.child_env()
    finally:
        os.environ.pop("DGR_SIGNING_KEY", None)
        os.environ.pop("GH_TOKEN", None)
    # a step whose placeholder has no value is exit 2 before anything runs
    with pytest.raises(BadInput, match=r"needs \{model\}"):
        certrun.run_steps(forge, "cpu", suite, found, {"model": None}, Reporter())


def test_a_hostile_report_path_is_exit_2(plain: Built, tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo), str(tmp_path / "missing.jsonl")):
        r = plain.certify("--model", "tiny", "--report", path)
        assert r.code == ExitCode.BAD_INPUT, (path, r)
    assert plain.written() == []


def test_an_untrusted_or_tampered_record_is_not_advertised(plain: Built) -> None:
    r = plain.certify("--model", "tiny")
    assert r.code == 0, r
    path = Path(r.json["certification"])
    trusted = plain.certs / "trusted-keys" / "release.pub"
    pub = trusted.read_bytes()
    trusted.unlink()
    try:
        lanes = plain.forge("lanes")
        (entry,) = lanes.json["lanes"][0]["certifications"]
        assert entry["advertised"] is False and entry["reason"].startswith("untrusted:")
        assert plain.forge("lanes", "--advertised").json["entries"] == []
        # an explicitly trusted key counts (lanes --advertised --key PUB)
        extra = plain.forge("lanes", "--advertised", "--key", f"{plain.key}.pub")
        assert [e["hardware_class"] for e in extra.json["entries"]] == [path.stem], extra
    finally:
        trusted.write_bytes(pub)
    env = json.loads(path.read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    body["steps"][1]["figures"]["gen_ts"] = 1e9  # a better figure than was measured
    env["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    path.write_text(json.dumps(env))
    (entry,) = plain.forge("lanes").json["lanes"][0]["certifications"]
    assert entry["advertised"] is False and "signature does not verify" in entry["reason"]
    # a record moved to another hardware class's name is not that class's
    path.unlink()
    assert plain.certify("--model", "tiny").code == 0
    other = path.with_name("nvidia-sm90-h200-141gb.json")
    path.rename(other)
    (entry,) = plain.forge("lanes").json["lanes"][0]["certifications"]
    assert entry["advertised"] is False and entry["reason"].startswith("invalid: the record")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Built:
    """The product's cpu recipe exactly as it ships, its own [certify] suite included."""
    path = tmp_path_factory.mktemp("shipped")
    built = _build(path, upstream, [], recipe=(REPO / "recipes" / "cpu.toml").read_text())
    return built


def test_the_shipped_cpu_recipe_certifies_op_parity_and_speed(shipped: Built) -> None:
    """Issue 43 #1: the shipped suite runs `test-backend-ops test -b CPU -o <families>` (the
    pin skips the CPU only without a backend filter) and the speed gate; on the test
    upstream the ops its stand-in has (ADD, MUL, SCALE) are compared, and the record is
    written."""
    r = shipped.certify("--model", "tiny")
    assert r.code == 0, r
    ops, parity, speed = r.json["steps"]
    assert parity["figures"]["rel_diff"] == 0.0 and parity["text_sha256"]
    assert ops["args"][:3] == ["test", "-b", "CPU"] and "MUL_MAT" in ops["args"][4]
    assert ops["figures"]["backends"][0]["name"] == "CPU"
    assert ops["figures"]["ops_passed"] == ops["figures"]["ops_total"] == 6
    assert speed["verdict"] == "pass"
    assert Path(r.json["certification"]).is_file()


def test_a_shared_model_directory_is_refused_unless_declared(plain: Built, tmp_path: Path) -> None:
    """Issue 43 #3: a group- or world-writable --dest (or one another user owns) lets
    someone swap a file between its verification and the program reading it: exit 2,
    naming the directory and the rule, nothing written. The sticky directory the model
    manifest declares (`[model] shared_dir`) is read: only a file's owner may replace it
    there, and the program reads the forge's private link, not the shared name."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for mode in (0o777, 0o757, 0o1777):  # (group-writable is a user-private group's right)
        shared.chmod(mode)
        r = plain.certify("--model", "tiny", "--dest", str(shared))
        assert r.code == ExitCode.BAD_INPUT, (oct(mode), r)
        assert str(shared) in r.stderr and "writable by others" in r.stderr, r.stderr
        assert plain.written() == []
    manifest = plain.root / "manifests" / "models" / "tiny.toml"
    manifest.write_text(
        manifest.read_text().replace('name = "tiny"', f'name = "tiny"\nshared_dir = "{shared}"', 1)
    )
    r = plain.certify("--model", "tiny", "--dest", str(shared))
    assert r.code == 0, r  # the declared sticky directory
    shared.chmod(0o777)  # declared, but not sticky: refused
    r = plain.certify("--model", "tiny", "--dest", str(shared))
    assert r.code == ExitCode.BAD_INPUT and "sticky" in r.stderr, r


def test_the_program_reads_a_private_link_of_the_verified_model(plain: Built) -> None:
    """The model the steps read is the forge's own link in the lane's certify directory
    (mode 0700), not the destination's name; it is re-verified after the steps."""
    r = plain.certify("--model", "tiny")
    assert r.code == 0, r
    _, speed, _ = r.json["steps"]
    model = Path(speed["args"][1])
    assert model.name == "tiny-00001-of-00002.gguf"
    private = plain.root / ".dgr" / "models" / "tiny" / ".dgr-certify-cpu"
    assert model.parent == private, model
    assert not private.exists()  # gone after the run


@pytest.mark.skipif(os.environ.get("FORGETEST_SUBPROCESS") == "1", reason="an in-process hook")
def test_a_model_swapped_during_the_steps_fails(plain: Built, tmp_path: Path) -> None:
    """A file changed in place while the steps ran (its owner, another process) is caught
    by the verification after them: exit 1 naming the file, nothing written."""
    from dgr_forge.certify import model
    from dgr_forge.core.output import Reporter

    real = model.check_after

    def swap(prepared: model.Prepared, out: Reporter) -> None:
        flip_byte(next(prepared.private.glob("*00002-of-*.gguf")), 100)
        real(prepared, out)

    model.check_after = swap  # between the steps and the model's second verification
    try:
        r = plain.certify("--model", "tiny")
    finally:
        model.check_after = real
    assert r.code == ExitCode.FAILED, r
    assert "tiny-00002-of-00002.gguf" in r.stderr and "changed while" in r.stderr, r.stderr
    assert plain.written() == []
