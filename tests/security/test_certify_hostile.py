"""Hostile certification outputs, probes and steps (issue 45, causes 1, 2, 4 and 5): each
attack as the hostile round ran it, and a variant of it.

1. JUnit with a DOCTYPE and internal entities in UTF-16 passed the byte-pattern ban and
   was expanded: refused by the XML reader itself, in any encoding.
2. The attested path's hardware probe captured everything a tool printed: every probe now
   goes through one bounded runner (bytes and time).
4. A step's child that ignored SIGTERM and closed its descriptors outlived an exit-0 step:
   the step's processes are killed and waited for after every step, whatever its outcome.
5. The step environment let credentials through: it is an allow-list now, and the step's
   kept log is masked as every other output is.

Cheap: no build; the steps run a shell script through `certify.run.run_steps` (about 1 s
in all), the attested path one in-process `certify` on a written report.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream
from support.reports import isolate_key_env, lane_build, make_patch, setup_root

from dgr_forge.attest import keys, reports
from dgr_forge.certify import hardware, parsers
from dgr_forge.certify import run as certrun
from dgr_forge.certify.shapes import CertStep
from dgr_forge.core import proc
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.host.recipes import Step, Suite

# --- 1: JUnit read by a hardened XML reader ---------------------------------------------

JUNIT = """<?xml version="1.0" encoding="{enc}"?>
<!DOCTYPE t [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>
<testsuite tests="1" failures="0"><testcase name="&b;"/></testsuite>
"""
EXTERNAL = """<?xml version="1.0" encoding="{enc}"?>
<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/hostname">]>
<testsuite tests="1" failures="0"><testcase name="&x;"/></testsuite>
"""


@pytest.mark.parametrize(
    ("text", "declared", "codec"),
    [
        (JUNIT, "UTF-16", "utf-16"),  # the round's attack: a BOM, then UTF-16 LE
        (JUNIT, "UTF-16", "utf-16-be"),  # no BOM: expat reads the encoding from `<?`
        (EXTERNAL, "UTF-16", "utf-16-le"),  # an external entity, no BOM
        (JUNIT, "ISO-8859-1", "latin-1"),  # the ASCII form the byte ban did catch
    ],
)
def test_a_doctype_is_refused_in_any_encoding(text: str, declared: str, codec: str) -> None:
    data = text.format(enc=declared).encode(codec)
    with pytest.raises(parsers.Unreadable, match="DOCTYPE"):
        parsers.parse_ctest_junit(data)


def test_plain_junit_in_utf_16_still_reads() -> None:
    text = '<?xml version="1.0" encoding="UTF-16"?>\n<testsuite tests="1" failures="1">'
    text += '<testcase name="t"><failure message="x"/></testcase></testsuite>\n'
    got = parsers.parse_ctest_junit(text.encode("utf-16"))
    assert got.figures.tests == 1 and got.figures.failed == 1  # type: ignore[union-attr]
    assert [c.name for c in got.failing] == ["t"]


# --- 2: every probe bounded -------------------------------------------------------------


def _stub(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(0o755)


HUGE_SMI = "line = 'NVIDIA H200, 560.35, 9.0, 143771, GPU-' + 'f' * 60 + '\\n'\n"
HUGE_SMI += "sys.stdout.write(line * 50000)"  # 5 MB of GPUs
HUGE_ROCM = "sys.stdout.write('  Marketing Name: AMD Instinct MI300X\\n  Device Type: GPU\\n'"
HUGE_ROCM += " * 100000)"  # 5 MB of agents


@pytest.mark.parametrize(("tool", "body"), [("nvidia-smi", HUGE_SMI), ("rocminfo", HUGE_ROCM)])
def test_the_attested_probe_is_bounded(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch, tool: str, body: str
) -> None:
    """`certify --attested` without `--hardware` probes the host: a tool printing megabytes
    is cut at the probe's bound, and the signed record stays a few KiB (it was 933 MB)."""
    isolate_key_env(tmp_path, monkeypatch)
    root = setup_root(tmp_path / "forge", upstream, make_patch(upstream))
    forge = Forge(root, root / ".dgr")
    keys.generate(tmp_path / "ci.pem")
    report = reports.write_report(
        forge, lane_build(forge), keys.load_signer(tmp_path / "ci.pem"), Reporter()
    )
    keys.generate(tmp_path / "release.pem")
    evidence = tmp_path / "run.log"
    evidence.write_text("passed\n")
    _stub(tmp_path / "bin", tool, body)
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    r = run_forge(
        "certify", "--attested", str(evidence), "--report", str(report),
        "--key", str(tmp_path / "release.pem"), "--report-key", str(tmp_path / "ci.pem.pub"),
        "--root", str(root), "--json", env={"PATH": path},
    )  # fmt: skip
    assert r.code == 0, r
    record = Path(r.json["certification"])
    assert record.stat().st_size < 64 << 10, record.stat().st_size
    assert r.json["hardware"]["identity"]["gpus"] == []  # an over-long answer is no answer


def test_a_host_probe_is_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe `doctor` runs (`tool --version`) goes through the same runner: megabytes
    of version text are no answer, not memory."""
    _stub(tmp_path / "bin", "chatty", "sys.stdout.write('chatty 1.0 ' * 400000)")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert proc.probe(["chatty", "--version"]) is None
    _stub(tmp_path / "bin", "quiet", "print('quiet 2.1')")
    done = proc.probe(["quiet", "--version"])
    assert done is not None and done.stdout == "quiet 2.1\n" and done.returncode == 0
    _stub(tmp_path / "bin", "hung", "import time\ntime.sleep(30)")
    started = time.monotonic()
    assert proc.probe(["hung", "--version"], timeout=0.5) is None
    assert time.monotonic() - started < 5
    assert hardware.run_probe(["chatty"]) is None


# --- 4 and 5: a step's processes, environment and log -----------------------------------

OPS_OK = (
    "Backend 1/1: CPU\n  Device description: test\n  ADD(type=f32,ne=[4,1,1,1]): OK\n"
    "  1/1 tests passed\n  Backend CPU: OK\n1/1 backends passed\n\033[1;32mOK\033[0m\n"
)


def _run_step(tmp_path: Path, script: str) -> CertStep:
    """One ops step whose program is `script` (sh), run as `certify` runs a step."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    forge = Forge(root, root / ".dgr")
    program = tmp_path / "test-backend-ops"
    program.write_text("#!/bin/sh\n" + script)
    program.chmod(0o755)
    step = Step(
        name="ops", program="test-backend-ops", parser="test-backend-ops", max_failed=0, timeout=30
    )
    suite = Suite(targets=("test-backend-ops",), steps=(step,))
    found = {"test-backend-ops": certrun.Program("test-backend-ops", program, "bin/t", "0" * 64)}
    (result,) = certrun.run_steps(forge, "cpu", suite, found, {}, Reporter())
    return result


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie its new parent has yet to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _pid(path: Path) -> int:
    for _ in range(100):
        if path.is_file() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"no pid in {path}")


STUBBORN = f"""
{sys.executable} - <<'EOF' &
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
{{setup}}
for fd in range(3):
    os.close(fd)
open("{{pidfile}}", "w").write(str(os.getpid()))
time.sleep(120)
EOF
while [ ! -s "{{pidfile}}" ]; do sleep 0.05; done
printf '%s' '{OPS_OK}'
exit {{code}}
"""


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("", 0),  # the round's attack: an exit-0 step, its child still in its group
        ("os.setpgid(0, 0)", 3),  # a failing step whose child left for a group of its own
    ],
)
def test_a_step_leaves_no_process_behind(tmp_path: Path, setup: str, code: int) -> None:
    pidfile = tmp_path / "child.pid"
    result = _run_step(tmp_path, STUBBORN.format(setup=setup, pidfile=pidfile, code=code))
    assert result.passed is (code == 0), result.problems
    child = _pid(pidfile)
    assert _gone(child), f"pid {child} outlived its step"


SECRETS = {
    "CI_JOB_JWT": "eyJhbGciOiJSUzI1NiJ9.jwtpayload.sig",
    "CCACHE_REMOTE_STORAGE": "redis://user:hunter2pass@cache.example|bearer-token=tok123456",
    "DGR_MIRROR": "https://mirror.example/m?token=mirrortoken99",
    "SCCACHE_REDIS": "redis://:redispass77@redis.example:6379",
    "NPM_CONFIG__AUTH": "bnBtYXV0aHNlY3JldA==",
    "api_key": "apikey-0123456789",
    # a variant: names no deny-list foresaw, carrying credentials all the same
    "SENTRY_DSN": "https://sentrykey42@o1.ingest.example/7",
    "DATABASE_URL": "postgres://app:dbpass555@db.example/app",
}
KEPT = {"PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "GGML_SCHED_MAX_COPIES", "TMPDIR"}


def test_the_step_environment_is_an_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    for name in KEPT - {"PATH", "HOME"}:
        monkeypatch.setenv(name, "1" if name != "LANG" else "C.UTF-8")
    seen = tmp_path / "env.json"
    dump = f'import json, os; json.dump(dict(os.environ), open("{seen}", "w"))'
    script = f"{sys.executable} -c '{dump}'\n"
    script += f"printf '%s' '{OPS_OK}'\n"
    assert _run_step(tmp_path, script).passed
    env = json.loads(seen.read_text())
    assert not set(SECRETS) & set(env), sorted(env)
    assert set(env) >= KEPT, sorted(env)
    leaked = [v for v in SECRETS.values() if any(v in x for x in env.values())]
    assert leaked == []


def test_the_step_log_is_masked(tmp_path: Path) -> None:
    """The program's own output may hold a credential (its config, a URL it was given): the
    log `certify` keeps, and a CI job uploads, is masked like every other output."""
    printed = [
        "fetching https://user:hunter2pass@mirror.example/m.gguf?token=mirrortoken99",
        "remote cache redis://:redispass77@redis.example bearer-token=tok123456",
        "sentry https://sentrykey42@o1.ingest.example/7 api_key=apikey-0123456789",
    ]
    script = "".join(f"echo '{line}' >&2\n" for line in printed)
    script += f"printf '%s' '{OPS_OK}'\n"
    result = _run_step(tmp_path, script)
    assert result.passed, result.problems
    log = (tmp_path / "root" / result.log.path).read_text()
    for secret in ("hunter2pass", "mirrortoken99", "redispass77", "tok123456", "sentrykey42",
                   "apikey-0123456789"):  # fmt: skip
        assert secret not in log, log
    assert "mirror.example" in log and "Backend CPU: OK" in log  # masked, not dropped
