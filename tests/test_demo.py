"""`dgr-forge demo DIR`: the tour without network or key setup, and DIR afterwards.

The tour itself runs once per session (the `demo_tour` fixture: offline, a fresh empty
XDG_CONFIG_HOME and HOME, not at a terminal, so no key but the demo's own can be used).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import msgspec
import pytest
from support.cli import run_forge, run_python
from support.demo import DemoTour
from support.git import sh_git

STEPS = [
    "fetch", "patch", "build", "report verify", "rebase --dry-run", "certify", "lanes --advertised",
]  # fmt: skip


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_the_tour_runs_every_step_offline_and_says_what_each_proved(
    demo_tour: DemoTour,
) -> None:
    r = demo_tour.result
    assert r.code == 0, r
    data = r.json
    assert data["ok"] and data["command"] == "demo"
    assert [s["step"] for s in data["steps"]] == STEPS
    # the dry run finds the conflict the history was made for: exit 3 is the expected outcome
    assert [s["exit_code"] for s in data["steps"]] == [0, 0, 0, 0, 3, 0, 0]
    proved = [s["proved"] for s in data["steps"]]
    assert "pinned commit " + data["pin"][:12] in proved[0]
    assert "3 patches applied" in proved[1]
    # the worker binary ran and shows both patches compiled in (round-robin owner, the cap)
    assert "worker 3 of 4 (at most 64 workers)" in proved[2]
    assert "re-hash" in proved[3]
    canary = proved[4]
    assert "0001-llama-own-layers-round-robin.patch would conflict in src/llama.cpp" in canary
    assert "llama: validate the layer index" in canary
    assert "0002-llama-add-llama-max-workers.patch is upstreamed by" in canary
    assert "0003-readme-say-the-tree-is-patched.patch unchanged" in canary
    # the demo's own test-backend-ops and llama-bench ran on its tiny model: checked, signed
    certified, advertised = proved[5], proved[6]
    assert certified.startswith("a checked certification of lane cpu with model demo-tiny on cpu-")
    assert "8/8 op cases match the reference" in certified and " t/s, tg " in certified
    cls = certified.split(" on ", 1)[1].split(":", 1)[0]
    assert advertised.endswith(f"cpu / demo-tiny / {cls}"), advertised
    # one human line per step on stderr
    assert r.stderr.count("proved: ") == len(STEPS)
    # nothing outside DIR: no default key, no config written
    assert list(demo_tour.config.iterdir()) == []


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_dir_is_an_ordinary_forge_root_afterwards(demo_tour: DemoTour) -> None:
    assert demo_tour.result.code == 0, demo_tour.result
    root = demo_tour.fresh()
    manifest = tomllib.loads((root / "manifests" / "llama.cpp.toml").read_text())
    assert manifest["upstream"]["url"].startswith("file://")  # offline by construction
    r = run_forge("--json", "status", cwd=root, env=demo_tour.env())
    assert r.code == 0, r
    st = r.json
    assert st["upstream"]["verified"] and st["upstream"]["commits_on_top"] == 3
    assert [p["state"] for p in st["patches"]["series"]] == ["applied"] * 3
    assert [lane["lane"] for lane in st["lanes"]] == ["cpu"]
    # the dry run touched nothing: the root's own git sees no change to manifest or
    # patches; certify added its record (to commit, as a team would)
    (cert,) = (root / "certifications" / "cpu" / "demo-tiny").glob("cpu-*.json")
    assert sh_git(root, "status", "--porcelain") == "?? certifications/cpu/"
    # the certification is checked and listed by `lanes --advertised` with its figures
    adv = run_forge("--json", "lanes", "--advertised", cwd=root, env=demo_tour.env())
    assert adv.code == 0, adv
    (entry,) = adv.json["entries"]
    assert (entry["lane"], entry["model"], entry["hardware_class"]) == (
        "cpu",
        "demo-tiny",
        cert.stem,
    )
    assert entry["kind"] == "checked" and entry["advertised"], entry
    assert entry["figures"]["ops"]["ops_failed"] == 0 and entry["figures"]["ops"]["ops_passed"] == 8
    assert entry["figures"]["speed"]["gen_ts"] > 5.0  # the shipped cpu gate's, measured
    # the private key is the owner's only
    key = root / "keys" / "demo-signing-key.pem"
    assert os.stat(key).st_mode & 0o077 == 0


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_the_check_gate_passes_offline_on_the_demo_root(demo_tour: DemoTour) -> None:
    """The series the demo writes is canonical: what `export` would write, byte for byte."""
    root = demo_tour.fresh()
    r = run_forge("check", "--offline", cwd=root, env=demo_tour.env())
    assert r.code == 0, r


@pytest.fixture
def nonempty(tmp_path: Path) -> Path:
    d = tmp_path / "full"
    d.mkdir()
    (d / "mine.txt").write_text("keep me\n")
    return d


def _refused(tmp_path: Path, *args: str) -> str:
    r = run_forge("demo", *args, cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert r.code == 2, r
    assert "error:" in r.stderr and "fix:" in r.stderr, r
    assert not (tmp_path / "cfg").exists()
    return r.stderr


def test_a_non_empty_dir_is_refused_and_left_as_it_was(tmp_path: Path, nonempty: Path) -> None:
    err = _refused(tmp_path, str(nonempty))
    assert "not empty" in err
    assert sorted(p.name for p in nonempty.iterdir()) == ["mine.txt"]
    assert (nonempty / "mine.txt").read_text() == "keep me\n"


def test_a_symlink_is_refused_even_to_an_empty_dir(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    assert "symbolic link" in _refused(tmp_path, str(tmp_path / "link"))
    assert list(target.iterdir()) == []


def test_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x\n")
    assert "not a directory" in _refused(tmp_path, str(f))
    assert f.read_text() == "x\n"


def test_a_leading_dash_and_a_nul_byte_are_refused(tmp_path: Path) -> None:
    assert "starts with '-'" in _refused(tmp_path, "--", "-demo")
    assert not (tmp_path / "-demo").exists()
    assert "NUL" in _refused(tmp_path, str(tmp_path / "a\0b"))
    assert list(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("char", [";", "$", "*", "\n"])
def test_a_dir_a_build_cannot_run_in_is_refused_before_anything_is_written(
    tmp_path: Path, char: str
) -> None:
    # the tour builds in DIR: refused up front, not at its build step after a fetch
    err = _refused(tmp_path, str(tmp_path / f"in{char}here" / "demo"))
    assert f"holds {char!r}" in err and "give a demo DIR" in err
    assert list(tmp_path.iterdir()) == []


def test_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert "symbolic link" in _refused(tmp_path, str(tmp_path / "dangling"))
    assert not (tmp_path / "nowhere").exists()


def test_dot_dot_is_read_as_the_kernel_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`new/../demo` is ./demo (no stray `new/`); `..` of a non-empty parent is refused."""
    from dgr_forge.core.errors import BadInput
    from dgr_forge.demo.generate import check_target

    monkeypatch.chdir(tmp_path)
    (tmp_path / "inner").mkdir()
    assert check_target("new/../demo") == tmp_path / "demo"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo", "inner"]
    with pytest.raises(BadInput, match="not empty"):
        check_target("inner/..")


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_a_step_that_does_not_end_as_expected_stops_the_tour_naming_it(
    demo_tour: DemoTour,
) -> None:
    from dgr_forge.core.errors import ExitCode, OperationFailed
    from dgr_forge.demo.generate import Demo
    from dgr_forge.demo.tour import _run, steps
    from dgr_forge.upstream.fetch import Fetch

    root = demo_tour.fresh()
    data = demo_tour.result.json
    demo = Demo(
        root=root,
        upstream=root / "upstream",
        pin=data["pin"],
        onto=data["onto"],
        patches=data["patches"],
        key=Path(data["key"]),
        public_key=Path(data["public_key"]),
        steps=[],
    )
    step = {s.name: s for s in steps(demo)}
    with pytest.raises(OperationFailed) as info:
        _run(demo, msgspec.structs.replace(step["patch"], args=["patch", "--no-such-flag"]))
    err = info.value
    assert err.exit_code == ExitCode.FAILED
    assert "demo step patch (`dgr-forge patch --no-such-flag`) exited 2" in str(err)
    assert err.details == {"step": "patch", "step_exit_code": 2}
    assert err.hint and "dgr-forge doctor" in err.hint
    # the dry run's exit 3 is expected, anything else is not
    with pytest.raises(OperationFailed, match="exited 3"):
        _run(demo, msgspec.structs.replace(step["rebase --dry-run"], expect=(ExitCode.OK,)))
    # an expected exit whose --json object is not the command's own result stops it too
    with pytest.raises(OperationFailed) as info:
        _run(demo, msgspec.structs.replace(step["patch"], reads=Fetch))
    assert "demo step patch (`dgr-forge patch`) exited 0: its --json object is not " in str(
        info.value
    )
    assert "`fetch`'s: Object missing required field `url`" in str(info.value)
    assert info.value.details == {"step": "patch", "step_exit_code": 0}


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_a_no_op_build_imports_no_socket_and_no_thread_pool(demo_tour: DemoTour) -> None:
    """An up-to-date lane is answered without what only real work needs: no socket (the
    sccache-dist and HTTP paths) and no thread pool (program hashing, configure), kept off
    a no-op's start (a measured share of the no-op budget)."""
    root = demo_tour.fresh()
    key = root / "keys" / "demo-signing-key.pem"
    argv = ["--json", "build", "--lane", "cpu", "--key", str(key), "--cache", "off"]
    probe = f"""
import json, os, sys
os.chdir({str(root)!r})
os.environ.update({demo_tour.env()!r})
import dgr_forge.cli.main as m
try:
    m.main({argv!r})
except SystemExit as exit:
    code = exit.code
watched = ("socket", "concurrent.futures", "ssl", "requests")
print(json.dumps([code, sorted(n for n in watched if n in sys.modules)]), file=sys.stderr)
"""
    ran = run_python(probe)
    code, loaded = json.loads(ran.stderr.strip().splitlines()[-1])
    assert code == 0, ran.stderr
    (lane,) = json.loads(ran.stdout)["lanes"]
    assert lane["status"] == "up-to-date" and lane["report_reused"], lane
    assert not lane["configured"] and lane["ninja_steps"] == 0, lane
    assert loaded == [], f"a no-op build imported {loaded}"


def test_the_demo_model_is_a_split_gguf_the_reference_reader_reads(tmp_path: Path) -> None:
    """The tiny model's parts are real GGUF (read back by gguf-py), split as gguf-split
    writes it: split.no / split.count / split.tensors.count, one tensor each."""
    import gguf

    from dgr_forge.demo import sources

    parts = sources.model_parts()
    assert list(parts) == ["demo-tiny-00001-of-00002.gguf", "demo-tiny-00002-of-00002.gguf"]
    for no, (name, data) in enumerate(parts.items()):
        (tmp_path / name).write_bytes(data)
        r = gguf.GGUFReader(tmp_path / name)
        kv = {f.name: f.contents() for f in r.fields.values()}
        assert (kv["split.no"], kv["split.count"], kv["split.tensors.count"]) == (no, 2, 2)
        assert kv["general.architecture"] == "llama"
        (tensor,) = r.tensors
        assert tensor.name == f"blk.{no}.weight" and tensor.n_elements == 256


def test_the_demo_test_backend_ops_prints_what_the_parser_reads_passing_and_failing(
    tmp_path: Path,
) -> None:
    """Compiled as the demo upstream has it, and with MUL broken in its library: the
    output is read by certify's own parser, the failing cases named as the pin prints
    them (`[MUL] ERR = … > … ` before the case's line)."""
    import shutil
    import subprocess

    from dgr_forge.certify.parsers import parse_test_backend_ops
    from dgr_forge.demo.sources import text

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    ops_cpp = text("upstream/src/ggml-ops.cpp")
    (tmp_path / "ggml-ops.h").write_text(text("upstream/include/ggml-ops.h"))
    (tmp_path / "t.cpp").write_text(text("upstream/tests/test-backend-ops.cpp"))
    broken = ops_cpp.replace("dst[i] = a[i] * b[i];", "dst[i] = a[i] + b[i];")
    assert broken != ops_cpp
    (tmp_path / "broken.cpp").write_text(broken)
    (tmp_path / "ops.cpp").write_text(ops_cpp)
    # one compile: the program and the broken library, and the good library alone
    for name in ("ops", "broken"):
        subprocess.run([cxx, "-O0", "-c", f"{name}.cpp"], cwd=tmp_path, check=True)
    subprocess.run([cxx, "-O0", "-c", "t.cpp"], cwd=tmp_path, check=True)
    args = ["test", "-b", "CPU", "-o", "MUL_MAT,ADD,MUL,SCALE,RMS_NORM"]
    outputs = {}
    for name in ("ops", "broken"):
        subprocess.run([cxx, "t.o", f"{name}.o", "-o", name], cwd=tmp_path, check=True)
        ran = subprocess.run([tmp_path / name, *args], capture_output=True, check=False)
        outputs[name] = (ran.returncode, parse_test_backend_ops(ran.stdout))
    code, good = outputs["ops"]
    assert code == 0 and good.figures.ops_passed == 8 and good.figures.ops_failed == 0
    code, bad = outputs["broken"]
    assert code == 1 and bad.figures.ops_failed == 2 and bad.figures.ops_passed == 6
    assert [c.name for c in bad.failing] == ["MUL", "MUL"]
    assert bad.failing[0].params == "type=f32,ne=[10,5,4,3]"
    assert bad.failing[0].error and bad.failing[0].error.startswith("[MUL] ERR = ")


def test_the_model_source_is_allowed_for_certify_alone_whatever_dirs_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DGR_ARTIFACTS_FILE_ROOTS is a path list: a DIR with `:` in its name must not split
    into other roots; the allowance is the certify step's alone."""
    from dgr_forge.demo.generate import Demo
    from dgr_forge.demo.tour import steps
    from dgr_forge.models.sources import FILE_ROOTS_ENV, file_roots

    root = tmp_path / "a:b"
    (root / "model-source").mkdir(parents=True)
    key = root / "k.pem"
    demo = Demo(
        root=root,
        upstream=root / "upstream",
        pin="0" * 40,
        onto="1" * 40,
        patches=[],
        key=key,
        public_key=key.with_name("k.pem.pub"),
        steps=[],
    )
    envs = {s.name: s.env for s in steps(demo)}
    assert [n for n, env in envs.items() if env] == ["certify"]
    monkeypatch.chdir(root)  # the step's working directory: DIR
    monkeypatch.setenv(FILE_ROOTS_ENV, envs["certify"][FILE_ROOTS_ENV])
    assert file_roots(None) == (str(root / "model-source"),)


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_certify_refuses_a_moved_root_its_pin_build_cannot_run_in(
    demo_tour: DemoTour, tmp_path: Path
) -> None:
    """The lane was built elsewhere; the root then moved under a `$`. certify's own build
    of the unpatched pin could not run there: exit 2 before any step, nothing written."""
    from dgr_forge.demo import sources
    from dgr_forge.models.sources import FILE_ROOTS_ENV

    moved = tmp_path / "a$x" / "demo"
    shutil.copytree(demo_tour.fresh(), moved, symlinks=True)
    certs = {p: p.read_bytes() for p in (moved / "certifications").rglob("*") if p.is_file()}
    logs = sorted((moved / ".dgr" / "logs").iterdir())
    key = f"{sources.KEYS_DIR}/{sources.KEY_FILE}"
    r = run_forge(
        "-C", str(moved), "--json", "certify", "--lane", "cpu", "--model", sources.MODEL,
        "--key", key, "--report-key", f"{key}.pub", cwd=moved,
        env={**demo_tour.env(), FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR},
    )  # fmt: skip
    assert r.code == 2, r
    assert "a build cannot run under this path: it holds '$'" in r.json["error"], r.json
    assert r.json["path"] == str(moved)
    assert {p: p.read_bytes() for p in certs} == certs
    assert sorted((moved / ".dgr" / "logs").iterdir()) == logs
