"""Unix streams (issue 32 point 2): a command's answer on stdout, progress, warnings and
errors on stderr; piped, plain text a script reads; `--json` exactly as before;
`--quiet` (errors only) and `--verbose` (the child commands, as west logs them) on every
command. And the messages point 5 made true: a failed fetch, a walked-up root.

Real child processes through real pipes and files, as a shell runs them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.cli import forge_env, forge_popen, run_forge
from support.demo import DemoTour
from support.git import Upstream, sh_git
from support.roots import copy_product

ESC = "\x1b"
BOX = set("─│┃━┏┓┗┛┡┩└┘┌┐")  # what a Rich table draws


@pytest.fixture(autouse=True)
def _wide_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


def _shell(*args: str, cwd: Path, stdout: Path, env: dict[str, str] | None = None) -> str:
    """`dgr-forge ARGS > stdout` in a child process; its stderr."""
    with open(stdout, "w") as out:
        proc = forge_popen(
            *args,
            cwd=cwd,
            env=forge_env(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return str(err)


def test_status_redirected_to_a_file_gives_the_table_there_and_nothing_on_stderr(
    forge_root: Path, upstream: Upstream, tmp_path: Path
) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    f = tmp_path / "f"
    err = _shell("status", cwd=forge_root, stdout=f)
    text = f.read_text()
    assert f"upstream  llama.cpp  {upstream.url}" in text, text
    assert f"pin       {upstream.head}" in text and "verified  yes" in text, text
    assert "local changes: none" in text
    assert err == "", err  # nothing of the answer, and nothing else, on stderr
    assert ESC not in text and not BOX & set(text)  # plain text: no colour, no boxes


def test_lanes_piped_to_grep_through_a_real_pipe(forge_root: Path) -> None:
    copy_product(forge_root)  # the real recipes/ and probes
    env = forge_env()
    with forge_popen(
        "lanes", cwd=forge_root, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as lanes, subprocess.Popen(
        ["grep", "cpu"], stdin=lanes.stdout, stdout=subprocess.PIPE, text=True
    ) as grep:  # fmt: skip
        assert lanes.stdout is not None and lanes.stderr is not None
        lanes.stdout.close()  # grep holds the read end now, as a shell's pipe does
        found, _ = grep.communicate(timeout=120)
        err = lanes.stderr.read().decode()
    assert lanes.returncode == 0 and grep.returncode == 0, err
    rows = found.splitlines()
    assert rows and rows[0].split()[:3] == ["cpu", "CPU", "buildable"], found
    assert ESC not in found and not BOX & set(found)
    assert "cpu" not in err, err


def test_json_keeps_stdout_for_the_one_object(forge_root: Path) -> None:
    r = run_forge("--json", "status", cwd=forge_root)
    assert r.code == 0, r
    assert json.loads(r.stdout)["command"] == "status"  # the whole of stdout: one object
    assert "pin " in r.stderr  # the human lines still go to stderr, as before


def test_quiet_prints_nothing_on_success_and_the_error_on_failure(
    forge_root: Path, tmp_path: Path
) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    for args in (("--quiet", "status"), ("status", "-q"), ("fetch", "--quiet")):
        r = run_forge(*args, cwd=forge_root)
        assert (r.code, r.stdout, r.stderr) == (0, "", ""), (args, r)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_forge("status", "--quiet", cwd=empty)
    assert r.code == 2 and r.stdout == "", r
    assert r.stderr.startswith("error: no forge root found"), r
    # --json is its own channel: --quiet does not take the object away
    r = run_forge("--quiet", "--json", "status", cwd=forge_root)
    assert r.code == 0 and r.json["ok"] is True and r.stderr == "", r


def test_verbose_names_the_git_children_and_never_a_credential(
    forge_root: Path, upstream: Upstream
) -> None:
    src = forge_root / ".dgr" / "src" / "llama.cpp"
    r = run_forge("fetch", "--verbose", cwd=forge_root)
    assert r.code == 0, r
    running = [line for line in r.stderr.splitlines() if line.startswith("running: git ")]
    assert f"running: git -C {src} " in r.stderr, r.stderr
    assert any(" fetch " in line and upstream.url in line for line in running), running
    assert "running:" not in r.stdout  # a log line, never part of the answer
    quiet = run_forge("status", cwd=forge_root)
    assert "running:" not in quiet.stderr  # only when asked
    # a mirror URL with a credential in it: the command is shown, the secret never
    secret = "s3cr3t-token-value"
    url = f"https://user:{secret}@127.0.0.1:9/llama.cpp.git"  # discard port: refused
    shutil.rmtree(forge_root / ".dgr")  # the pin must be fetched again
    r = run_forge("fetch", "--verbose", "--mirror", url, cwd=forge_root)
    assert r.code == 1 and "running: git " in r.stderr, r
    assert "127.0.0.1:9" in r.stderr
    assert secret not in r.stdout + r.stderr, r


def test_status_after_a_failed_fetch_says_it_failed_and_why(
    forge_root: Path, upstream: Upstream, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.git"
    sh_git(tmp_path, "init", "-q", "--bare", str(empty))  # reachable, without the pin
    r = run_forge("fetch", "--mirror", str(empty), cwd=forge_root)
    assert r.code != 0, r
    st = run_forge("status", cwd=forge_root)
    assert st.code == 0, st
    note = next(line for line in st.stdout.splitlines() if line.startswith("note "))
    assert "the last fetch failed: " in note and "interrupted" not in note, note
    assert upstream.head[:12] in note or "not our ref" in note or "not found" in note, note
    assert "`dgr-forge fetch` tries again" in note
    # fetched for real afterwards: the failure is gone with the journal
    assert run_forge("fetch", cwd=forge_root).code == 0
    assert "note " not in run_forge("status", cwd=forge_root).stdout


def test_a_fetch_failure_cause_is_shown_masked_and_a_hostile_journal_tells_nothing(
    forge_root: Path,
) -> None:
    """The cause comes from git's words (a URL with a credential, control characters) and
    the journal lies in the workspace: shown masked and escaped; a FIFO or a link there is
    never opened (status answers at once, as for a killed fetch)."""
    import os

    assert run_forge("fetch", cwd=forge_root).code == 0
    journal = forge_root / ".dgr" / "src" / "llama.cpp" / ".git" / "dgr-fetching"
    journal.write_text("x\nfailed: from https://u:tok3n-secret@h.example/r \x1b[2J gone\n")
    note = run_forge("status", cwd=forge_root).stdout
    assert "the last fetch failed: from https://" in note, note
    assert "tok3n-secret" not in note and "\x1b" not in note and "\\x1b[2J" in note, note
    for hostile in ("fifo", "link"):
        journal.unlink()
        if hostile == "fifo":
            os.mkfifo(journal)
        else:
            (forge_root / "elsewhere").write_text("x\nfailed: not the forge's\n")
            journal.symlink_to(forge_root / "elsewhere")
        r = run_forge("status", cwd=forge_root)
        assert r.code == 0 and "an interrupted fetch" in r.stdout, (hostile, r)
        assert "not the forge's" not in r.stdout


def test_an_error_in_a_walked_up_root_names_the_root_and_how_it_was_picked(
    tmp_path: Path,
) -> None:
    unrelated = tmp_path / "project"
    (unrelated / "manifests").mkdir(parents=True)  # someone else's manifests/
    (unrelated / "src" / "deep").mkdir(parents=True)
    r = run_forge("status", cwd=unrelated / "src" / "deep")
    assert r.code == 2, r
    assert "no such manifest" in r.stderr
    assert f"in the forge root {unrelated.resolve()}: the nearest directory" in r.stderr
    assert f"walking up from {(unrelated / 'src' / 'deep').resolve()}" in r.stderr
    assert "--root DIR or DGR_ROOT chooses another root" in r.stderr
    # the working directory itself holds the unrelated manifests/: said as such
    r = run_forge("status", cwd=unrelated)
    assert r.code == 2 and f"in the forge root {unrelated.resolve()}: the working" in r.stderr
    # named by --root or DGR_ROOT: the user chose it, the error says no more than before
    for extra, env in ((("--root", str(unrelated)), None), ((), {"DGR_ROOT": str(unrelated)})):
        r = run_forge(*extra, "status", cwd=tmp_path, env=env)
        assert r.code == 2 and "no such manifest" in r.stderr, r
        assert "walking up" not in r.stderr, r
    # --json: the same words in the failure object
    r = run_forge("--json", "status", cwd=unrelated / "src")
    assert r.code == 2 and "walking up from" in r.json["error"], r


@pytest.mark.slow
def test_report_show_redirected_to_a_file(demo_tour: DemoTour, tmp_path: Path) -> None:
    assert demo_tour.result.code == 0, demo_tour.result
    root = demo_tour.fresh()
    report = next((root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    r_txt = tmp_path / "r.txt"
    err = _shell("report", "show", str(report), cwd=root, stdout=r_txt, env=demo_tour.env())
    text = r_txt.read_text()
    assert text.startswith(f"report     {report}\n"), text
    assert "lane       cpu" in text and "artifacts  " in text
    assert err == "", err
    # a compare result too: the answer in the file, stderr empty
    from dgr_forge.demo import sources

    pub = root / sources.KEYS_DIR / f"{sources.KEY_FILE}.pub"
    c_txt = tmp_path / "c.txt"
    err = _shell("report", "compare", str(report), str(report), "--key", str(pub), cwd=root,
                 stdout=c_txt, env=demo_tour.env())  # fmt: skip
    assert f"{report} and {report}: identical subjects" in c_txt.read_text()
    assert err == "", err


@pytest.mark.slow
def test_every_program_in_a_report_has_a_true_version(demo_tour: DemoTour) -> None:
    """GCC's internal programs: the compiler proper (cc1plus) has its driver's version;
    as, collect2 and ld their own (binutils), never the compiler's, never empty."""
    assert demo_tour.result.code == 0, demo_tour.result
    root = demo_tour.fresh()
    report = next((root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"))
    r = run_forge("report", "show", str(report), cwd=root, env=demo_tour.env())
    entries = [line.removeprefix("tool").strip() for line in r.stdout.splitlines()
               if line.startswith("tool ")]  # fmt: skip
    by_name: dict[str, str] = {}  # GCC's own programs: "cxx-compiler as GNU assembler ..."
    for entry in entries:
        owner, _, rest = entry.partition(" ")
        name, _, version = rest.partition(" ")
        if owner.endswith("-compiler") and name in ("as", "ld", "collect2", "cc1", "cc1plus"):
            by_name[name] = version.strip()
    assert {"as", "ld", "cc1plus"} <= set(by_name), entries
    assert all(by_name.values()), entries  # none empty
    assert "assembler" in by_name["as"].lower(), by_name  # binutils' own, not GCC's
    assert " ld " in f" {by_name['ld']} ".lower() and by_name["ld"] != by_name["cc1plus"]
    driver = next(e for e in entries if e.startswith("cxx-compiler GNU "))  # the File API's
    assert driver.split()[-1] in by_name["cc1plus"], (driver, by_name)  # the driver's version


def test_a_first_build_with_no_network_tells_the_fetch_failure_first(
    forge_root: Path, upstream: Upstream, tmp_path: Path
) -> None:
    """Issue 44 point 5: the README's main job with the upstream unreachable (a closed
    port), no key anywhere, no terminal, not CI. The first warning or error is the fetch's
    failure, its fix on the next line; the build number that the same failure left unknown
    is not said before it, and the key warning not at all (no report is written). The
    run after it is not told it finishes an "interrupted" one."""
    copy_product(forge_root)
    manifest = forge_root / "manifests" / "llama.cpp.toml"
    manifest.write_text(
        manifest.read_text().replace(upstream.url, "http://127.0.0.1:9/llama.cpp.git")
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "CI": ""}
    for run in (1, 2):
        r = run_forge("build", "--lane", "cpu", cwd=forge_root, env=env)
        assert r.code == 1, r
        said = [line for line in r.stderr.splitlines() if line.startswith(("warning:", "error:"))]
        assert said and said[0].startswith("error: fetching llama.cpp from http://127.0.0.1:9"), (
            said
        )
        lines = r.stderr.splitlines()
        fix = lines[lines.index(said[0]) + 1]
        assert fix.startswith("  fix: ") and "--mirror" in fix, r.stderr
        assert "signing key" not in r.stderr and "UNSIGNED" not in r.stderr, r.stderr
        assert "interrupted" not in r.stderr, (run, r.stderr)
        assert not (forge_root / ".dgr" / "reports").exists() or not list(
            (forge_root / ".dgr" / "reports").iterdir()
        )
    assert "build_number" not in manifest.read_text()  # nothing guessed
