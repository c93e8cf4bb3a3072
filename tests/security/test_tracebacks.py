"""No tracebacks (issue 12 #7): every hostile input or unusable path is one `error:` line with
a hint and the specified exit code (2: bad input or unusable path, 1: the operation failed);
`DGR_DEBUG=1` adds the traceback. Nothing is lost on the way out."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
from support.cli import forge_cmd, forge_env, run_forge
from support.git import Upstream, sh_git
from support.patches import AUTHOR_ENV, commit_in, make_series, snapshot, src_dir

from dgr_forge.cli import main as cli
from dgr_forge.cli.app import JSON_CHANNEL, app, as_forge_error, run
from dgr_forge.core.errors import BadInput, ExitCode, env_number

REPO = Path(__file__).resolve().parents[2]
DEEP = "x = " + "[" * 5000 + "]" * 5000 + "\n"


def in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The real entry point, in this process: argv may hold a NUL, which exec cannot pass."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert JSON_CHANNEL.stream is None
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out + captured.err


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and 'File "' not in text, text


# ----------------------------------------------------------------------------- NUL


@pytest.mark.parametrize("option", ["--workspace", "--root"])
def test_nul_in_a_path_option_is_exit_2(
    forge_root: Path, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(forge_root)
    args = ["--root", str(forge_root)] if option == "--workspace" else []
    code, text = in_process([*args, option, str(forge_root / "ws\x00evil"), "patch"], capsys)
    assert code == ExitCode.BAD_INPUT, text
    assert f"error: {option}: the value contains a NUL byte" in text
    no_traceback(text)
    assert snapshot(forge_root) == before  # nothing created, nothing changed


def test_nul_in_a_path_option_with_json_is_one_object(
    forge_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["--root", str(forge_root), "--json", "--workspace=w\x00", "patch"])
    captured = capsys.readouterr()
    assert info.value.code == ExitCode.BAD_INPUT
    payload = json.loads(captured.out)  # exactly one object
    assert payload["exit_code"] == 2 and payload["command"] == "patch"
    assert payload["argument"] == "--workspace" and "NUL" in payload["error"]
    no_traceback(captured.err)


def test_nul_in_a_url_option_is_exit_2(
    forge_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = in_process(
        ["--root", str(forge_root), "fetch", "--mirror", "https://example.invalid/\x00x"], capsys
    )
    assert code == ExitCode.BAD_INPUT, text
    assert "--mirror: the value contains a NUL byte" in text
    no_traceback(text)


def test_nul_in_the_manifest_url_is_exit_2_naming_file_and_key(forge_root: Path) -> None:
    path = forge_root / "manifests" / "llama.cpp.toml"
    text = path.read_text()
    url = text.split('url = "')[1].split('"')[0]
    path.write_text(text.replace(url, url + "\\u0000--upload-pack=x"))
    before = path.read_bytes()
    r = run_forge("--root", str(forge_root), "fetch")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "manifests/llama.cpp.toml: upstream.url: contains a NUL byte" in r.stderr
    no_traceback(r.stderr)
    assert path.read_bytes() == before


# ----------------------------------------------------------------------------- deep TOML


def test_5000_deep_manifest_is_exit_2(forge_root: Path) -> None:
    path = forge_root / "manifests" / "llama.cpp.toml"
    path.write_text(DEEP + path.read_text())
    before = path.read_bytes()
    for command in (["status"], ["--json", "patch"]):
        r = run_forge("--root", str(forge_root), *command)
        assert r.code == ExitCode.BAD_INPUT, r
        assert "manifests/llama.cpp.toml: (file): tables or arrays nested more than" in r.stderr
        no_traceback(r.stderr + r.stdout)
    assert path.read_bytes() == before


@pytest.mark.parametrize("target", ["recipes/cpu.toml", "toolchains/probes.toml"])
def test_5000_deep_recipe_and_probes_are_exit_2(forge_root: Path, target: str) -> None:
    shutil.copy(REPO / "toolchains" / "probes.toml", forge_root / "toolchains" / "probes.toml")
    (forge_root / "recipes" / "cpu.toml").write_text('schema = 1\n[lane]\nbackend = "CPU"\n')
    path = forge_root / target
    path.write_text(DEEP + path.read_text())
    r = run_forge("--root", str(forge_root), "doctor")
    assert r.code == ExitCode.BAD_INPUT, r
    assert f"{target}: (file): tables or arrays nested" in r.stderr
    no_traceback(r.stderr)


def test_5000_deep_model_manifest_is_exit_2(tmp_path: Path) -> None:
    m = tmp_path / "m.toml"
    m.write_text(DEEP)
    (tmp_path / "dest").mkdir()
    r = run_forge("artifacts", "verify", str(m), "--dest", str(tmp_path / "dest"))
    assert r.code == ExitCode.BAD_INPUT, r
    assert "nested more than" in r.stderr
    no_traceback(r.stderr)


# ----------------------------------------------------------------------------- unusable paths


def test_workspace_under_proc_is_exit_2_naming_it(forge_root: Path) -> None:
    before = snapshot(forge_root)
    for extra in ([], ["--json"]):
        r = run_forge("--root", str(forge_root), "--workspace", "/proc/forbidden", *extra, "patch")
        assert r.code == ExitCode.BAD_INPUT, r
        assert "/proc/forbidden" in r.stderr and "fix:" in r.stderr
        assert r.stderr.count("error:") == 1
        no_traceback(r.stderr + r.stdout)
        if extra:
            assert r.json["exit_code"] == 2 and "/proc/forbidden" in r.json["error"]
    assert snapshot(forge_root) == before


def test_lock_that_is_a_directory_is_exit_2_and_left_alone(forge_root: Path) -> None:
    lock = forge_root / ".dgr" / "lock"
    lock.mkdir(parents=True)
    (lock / "keep").write_text("mine")
    r = run_forge("--root", str(forge_root), "patch")
    assert r.code == ExitCode.BAD_INPUT, r
    assert ".dgr/lock" in r.stderr and "error:" in r.stderr
    no_traceback(r.stderr)
    assert (lock / "keep").read_text() == "mine"  # nothing lost


def test_an_oserror_escaping_a_command_is_one_line_and_debug_shows_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever command lets a file error escape, the boundary names the path; DGR_DEBUG=1
    adds the traceback."""
    missing = tmp_path / "gone" / "file.txt"

    def reads(ctx: typer.Context) -> None:
        run(ctx, "zz-read", lambda env: {"bytes": len(missing.read_bytes())})

    app.command("zz-read")(reads)
    try:
        monkeypatch.delenv("DGR_DEBUG", raising=False)
        code, text = in_process(["zz-read"], capsys)
        assert code == ExitCode.BAD_INPUT, text
        assert f"error: {missing}: No such file or directory" in text and "fix:" in text
        no_traceback(text)
        monkeypatch.setenv("DGR_DEBUG", "1")
        code, text = in_process(["zz-read"], capsys)
        assert code == ExitCode.BAD_INPUT, text
        assert "Traceback" in text and f"error: {missing}" in text
    finally:
        # by name: a command module imported meanwhile registers its commands after this one
        app.registered_commands[:] = [c for c in app.registered_commands if c.name != "zz-read"]


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs a private mount namespace (unshare -m)")
def test_read_only_patches_during_export_is_one_error_and_loses_nothing(
    upstream: Upstream, forge_root: Path
) -> None:
    """A real EROFS: `patches/` bind-mounted read-only in a private mount namespace (root
    ignores permission bits, so a chmod would not stop it)."""
    make_series(forge_root, upstream, with_trees=False)
    assert run_forge("--root", str(forge_root), "patch").code == 0
    src = src_dir(forge_root)
    commit_in(src, {"NEW.txt": "a new patch\n"}, "add a new file", 7)
    head = sh_git(src, "rev-parse", "HEAD")
    patches = forge_root / "patches"
    before = snapshot(patches)
    manifest = (forge_root / "manifests" / "llama.cpp.toml").read_bytes()
    script = (
        f'mount --bind "{patches}" "{patches}" && mount -o remount,bind,ro "{patches}" && exec "$@"'
    )
    cmd = ["unshare", "-m", "sh", "-c", script, "sh"]
    cmd += forge_cmd("--root", str(forge_root), "--json", "export")
    proc = subprocess.run(
        cmd, env=forge_env(AUTHOR_ENV), capture_output=True, text=True, timeout=120, check=False
    )
    if "mount:" in proc.stderr:
        pytest.skip(f"bind mount not allowed here: {proc.stderr.strip()}")
    # export's series write says what failed and that nothing changed: exit 1
    assert proc.returncode == ExitCode.FAILED, proc
    assert "Read-only file system" in proc.stderr and "fix:" in proc.stderr
    assert proc.stderr.count("error:") == 1
    no_traceback(proc.stderr)
    assert json.loads(proc.stdout)["exit_code"] == 1
    # nothing lost: patches, manifest and the workspace commit as they were
    assert snapshot(patches) == before
    assert (forge_root / "manifests" / "llama.cpp.toml").read_bytes() == manifest
    assert sh_git(src, "rev-parse", "HEAD") == head
    # and once writable again, the same export completes
    r = run_forge("--root", str(forge_root), "export", env=AUTHOR_ENV)
    assert r.code == 0, r


# ----------------------------------------------------------------------------- the mapping


def test_operation_failures_are_exit_1_with_a_hint() -> None:
    err = as_forge_error(OSError(errno.ENOSPC, "No space left on device", "/w/build/x.o"))
    assert err is not None and err.exit_code == ExitCode.FAILED
    assert str(err).startswith("/w/build/x.o: No space left on device") and err.hint
    err = as_forge_error(OSError(errno.EIO, "Input/output error"))
    assert err is not None and err.exit_code == ExitCode.FAILED
    err = as_forge_error(PermissionError(errno.EACCES, "Permission denied", "/etc/x"))
    assert err is not None and err.exit_code == ExitCode.BAD_INPUT
    err = as_forge_error(RecursionError("maximum recursion depth exceeded"))
    assert err is not None and err.exit_code == ExitCode.BAD_INPUT
    err = as_forge_error(ValueError("Invalid IPv6 URL"))
    assert err is not None and err.exit_code == ExitCode.BAD_INPUT
    assert as_forge_error(ZeroDivisionError()) is None  # a bug keeps its traceback


def test_network_errors_are_exit_1_and_masked() -> None:
    import requests

    err = as_forge_error(
        requests.exceptions.ConnectionError("cannot reach https://u:SECRET@h.invalid/m.gguf")
    )
    assert err is not None and err.exit_code == ExitCode.FAILED
    assert "SECRET" not in str(err) and "network error" in str(err)
    err = as_forge_error(requests.exceptions.InvalidURL("http://[::1"))
    assert err is not None and err.exit_code == ExitCode.BAD_INPUT


# ----------------------------------------------------------------------------- env numbers


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "abc", "1e999", "-1", "0x10", ""])
def test_env_numbers_are_finite_and_in_range(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DGR_TEST_NUMBER", value)
    if value == "":
        assert env_number("DGR_TEST_NUMBER", 5.0, 0.0, 3600.0) == 5.0  # unset/empty: default
        return
    with pytest.raises(BadInput) as info:
        env_number("DGR_TEST_NUMBER", 5.0, 0.0, 3600.0)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "DGR_TEST_NUMBER" in str(info.value) and "0.0 to 3600.0" in str(info.value)


def test_env_whole_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGR_TEST_TRIES", "7")
    assert env_number("DGR_TEST_TRIES", 5, 1, 100) == 7
    for bad in ("2.5", "0", "1000000", "inf", "nan", "x" * 10_000):
        monkeypatch.setenv("DGR_TEST_TRIES", bad)
        with pytest.raises(BadInput) as info:
            env_number("DGR_TEST_TRIES", 5, 1, 100)
        assert len(str(info.value)) < 300  # a huge value is not echoed whole
    monkeypatch.setenv("DGR_TEST_TRIES", " 3 ")
    assert env_number("DGR_TEST_TRIES", 5, 1, 100) == 3
