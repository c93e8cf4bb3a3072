"""Run a rendered CI job the way its runner would, on this machine, without the network.

GitHub Actions (`run_github_job`): each `run:` step is a bash script run as the runner
runs it (`bash --noprofile --norc -eo pipefail FILE`), with `${{ }}` expressions
evaluated (github, matrix, env, runner, secrets, steps; `always()`, `success()`,
`join`, `format`, `startsWith`, `contains`, `&&`, `||`, `!`, `==`, `!=`), step `if:`
honoured, and the runner's environment files applied after each step: `GITHUB_ENV`
(plain and heredoc), `GITHUB_OUTPUT` (into `steps.<id>.outputs`) and `GITHUB_PATH`.
`uses:` steps are emulated by what the action does to the job: checkout, cache and
cache/restore nothing (the job starts in a fresh clone, the cache is empty);
setup-python puts the given interpreter on PATH; sccache-action puts sccache on PATH and
exports the cache service's URL and token (a loopback server that answers every lookup
with a miss); upload-artifact checks that its paths exist (`if-no-files-found: error`).

GitLab CI (`run_gitlab_job`): the job's `before_script` (through `extends`) and `script`
lines in one bash session (`-eo pipefail`), with the global and job `variables` and the
predefined ones, in the project directory; artifacts' paths must exist.

What neither emulates is the machine image: the caller passes PATH entries standing for
what the image has installed (an `apt-get` that only confirms packages the image holds,
compilers, ccache).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------- expressions

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|&&|\|\||[!(),.\[\]])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ValueError(f"cannot parse expression at {text[pos:]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def _text(value: Any) -> str:
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class _Parser:
    """A recursive-descent evaluator of GitHub's expression language (the part used)."""

    def __init__(self, tokens: list[tuple[str, str]], context: Mapping[str, Any],
                 functions: Mapping[str, Callable[..., Any]]) -> None:  # fmt: skip
        self.tokens, self.pos = tokens, 0
        self.context, self.functions = context, functions

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise ValueError("unexpected end of expression")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expected {expected!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.pos != len(self.tokens):
            raise ValueError(f"trailing tokens: {self.tokens[self.pos :]}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.unary()
            same = _text(value).lower() == _text(right).lower()
            value = same if op == "==" else not same
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind != "name":
            raise ValueError(f"unexpected {text!r}")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == "(":
            self.take()
            args: list[Any] = []
            while self.peek() != ")":
                args.append(self.or_())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            return self.functions[text](*args)
        value: Any = self.context.get(text)
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key: Any = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            value = value.get(key) if isinstance(value, dict) else None
        return value


def evaluate(expression: str, context: Mapping[str, Any], status: str = "success") -> Any:
    def fmt(template: str, *args: Any) -> str:
        return re.sub(r"\{(\d+)\}", lambda m: _text(args[int(m.group(1))]), template)

    functions: dict[str, Callable[..., Any]] = {
        "always": lambda: True,
        "success": lambda: status == "success",
        "failure": lambda: status == "failure",
        "cancelled": lambda: False,
        "join": lambda items, sep=",": sep.join(_text(i) for i in items or []),
        "format": fmt,
        "startsWith": lambda a, b: _text(a).lower().startswith(_text(b).lower()),
        "endsWith": lambda a, b: _text(a).lower().endswith(_text(b).lower()),
        "contains": lambda a, b: (b in a) if isinstance(a, list) else _text(b) in _text(a),
        "fromJSON": json.loads,
        "toJSON": json.dumps,
    }
    return _Parser(_tokens(expression), context, functions).parse()


_EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


def substitute(value: Any, context: Mapping[str, Any]) -> Any:
    """A workflow value with its `${{ }}` parts evaluated (a lone expression keeps its type)."""
    if not isinstance(value, str):
        return value
    whole = _EMBEDDED.fullmatch(value.strip())
    if whole:
        return evaluate(whole.group(1), context)
    return _EMBEDDED.sub(lambda m: _text(evaluate(m.group(1), context)), value)


def condition(value: Any, context: Mapping[str, Any], status: str) -> bool:
    """A step's `if:` (bare or in `${{ }}`); a condition without a status function is
    `success() && (...)`, as on the runner."""
    if value is None:
        return status == "success"
    text = str(value).strip()
    whole = _EMBEDDED.fullmatch(text)
    text = whole.group(1) if whole else text
    result = truthy(evaluate(text, context, status))
    if not re.search(r"\b(always|success|failure|cancelled)\(", text):
        result = result and status == "success"
    return result


# ----------------------------------------------------------------------------- runner files


def read_env_file(path: Path) -> dict[str, str]:
    """GITHUB_ENV / GITHUB_OUTPUT: `KEY=VALUE` lines and `KEY<<DELIM` ... `DELIM` blocks."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            body: list[str] = []
            i += 1
            while lines[i] != delim:
                body.append(lines[i])
                i += 1
            out[key] = "\n".join(body)
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out


@dataclass
class StepResult:
    name: str
    kind: str  # "run", "uses" or "skipped"
    code: int = 0
    stdout: str = ""
    stderr: str = ""
    uploaded: list[Path] = field(default_factory=list)


@dataclass
class JobResult:
    steps: list[StepResult]
    env: dict[str, str]

    @property
    def ok(self) -> bool:
        return all(s.code == 0 for s in self.steps)

    def failure(self) -> str:
        bad = [s for s in self.steps if s.code != 0]
        if not bad:
            return ""
        s = bad[0]
        out, err = s.stdout[-4000:], s.stderr[-4000:]
        return f"step {s.name!r} exit {s.code}\n--- stdout\n{out}\n--- stderr\n{err}"


class _MissCache(BaseHTTPRequestHandler):
    """The Actions cache service, empty: every lookup misses (HTTP 204); no write lands."""

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def _refuse(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_PATCH = _refuse

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def cache_service() -> Iterator[tuple[str, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MissCache)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Runner:
    """One machine: its base environment (image), the interpreter setup-python provides,
    and the sccache binary sccache-action installs."""

    base_env: dict[str, str]
    python_bin: Path  # a directory holding python3 / python3.X
    sccache: Path | None = None
    cache_url: str = ""


def _action(uses: str) -> str:
    return uses.split("@", 1)[0]


def run_github_job(
    workflow: dict[str, Any],
    job_name: str,
    workdir: Path,
    runner: Runner,
    github: dict[str, Any],
    matrix: dict[str, Any] | None = None,
    temp: Path | None = None,
    timeout: float = 600,
) -> JobResult:
    job = workflow["jobs"][job_name]
    context: dict[str, Any] = {
        "github": github,
        "matrix": matrix or {},
        "secrets": {},
        "runner": {"os": "Linux", "arch": "X64", "temp": str(temp or workdir.parent)},
        "steps": {},
        "env": {},
        "vars": {},
    }
    if "if" in job and not condition(job["if"], context, "success"):
        return JobResult([StepResult(job_name, "skipped")], {})
    container = substitute(job.get("container"), context)
    assert not container, f"{job_name}: a container job ({container}) cannot run here"
    files = workdir.parent / f"runner-files-{job_name}"
    files.mkdir(exist_ok=True)
    env = dict(runner.base_env)
    env.update(
        {
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(workdir),
            "GITHUB_EVENT_NAME": github["event_name"],
            "GITHUB_REF": github["ref"],
            "GITHUB_WORKFLOW_REF": github["workflow_ref"],
            "GITHUB_REPOSITORY": github["repository"],
            "RUNNER_OS": "Linux",
            "RUNNER_TEMP": context["runner"]["temp"],
        }
    )
    paths: list[str] = []
    for scope in (workflow.get("env") or {}, job.get("env") or {}):
        for key, value in scope.items():
            context["env"] = {**context["env"], key: _text(substitute(value, context))}
    env.update(context["env"])
    default_shell = ((workflow.get("defaults") or {}).get("run") or {}).get("shell", "bash")
    assert default_shell == "bash", default_shell
    results: list[StepResult] = []
    status = "success"
    for index, step in enumerate(job["steps"]):
        name = step.get("name") or step.get("uses") or step.get("run", "")[:40]
        if not condition(step.get("if"), context, status):
            results.append(StepResult(name, "skipped"))
            continue
        step_env = {k: _text(substitute(v, context)) for k, v in (step.get("env") or {}).items()}
        with_ = {k: substitute(v, context) for k, v in (step.get("with") or {}).items()}
        if "uses" in step:
            result = _emulate(step["uses"], with_, workdir, runner, paths, env)
        else:
            script = files / f"step-{index}.sh"
            script.write_text(_text(substitute(step["run"], context)))
            for kind in ("env", "output", "path"):
                (files / f"{kind}-{index}").write_text("")
            run_env = {
                **env,
                **step_env,
                "GITHUB_ENV": str(files / f"env-{index}"),
                "GITHUB_OUTPUT": str(files / f"output-{index}"),
                "GITHUB_PATH": str(files / f"path-{index}"),
                "PATH": os.pathsep.join([*reversed(paths), env["PATH"]]),
            }
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=workdir, env=run_env, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
            result = StepResult(name, "run", proc.returncode, proc.stdout, proc.stderr)
            exported = read_env_file(files / f"env-{index}")
            env.update(exported)
            context["env"] = {**context["env"], **exported}
            paths += [p for p in (files / f"path-{index}").read_text().splitlines() if p]
            if step.get("id"):
                outputs = read_env_file(files / f"output-{index}")
                context["steps"][step["id"]] = {"outputs": outputs}
        results.append(result)
        if result.code != 0:
            status = "failure"
    env["PATH"] = os.pathsep.join([*reversed(paths), env["PATH"]])
    return JobResult(results, env)


def _emulate(
    uses: str,
    with_: dict[str, Any],
    workdir: Path,
    runner: Runner,
    paths: list[str],
    env: dict[str, str],
) -> StepResult:
    action = _action(uses)
    if action == "actions/checkout":
        assert with_.get("persist-credentials") is False, "a checkout keeps its credentials"
        assert (workdir / ".git").is_dir(), "the job starts in a clone"
        return StepResult(uses, "uses")
    if action == "actions/setup-python":
        paths.append(str(runner.python_bin))
        return StepResult(uses, "uses")
    if action in ("actions/cache", "actions/cache/restore"):
        return StepResult(uses, "uses")  # an empty cache: nothing restored
    if action == "mozilla-actions/sccache-action":
        assert runner.sccache is not None, "this runner has no sccache to install"
        paths.append(str(runner.sccache.parent))
        env.update(
            {
                "SCCACHE_PATH": str(runner.sccache),
                "ACTIONS_CACHE_URL": runner.cache_url,
                "ACTIONS_RUNTIME_TOKEN": "emulated",
            }
        )
        return StepResult(uses, "uses")
    if action == "actions/upload-artifact":
        wanted = [line.strip() for line in str(with_["path"]).splitlines() if line.strip()]
        found = [workdir / p for p in wanted if (workdir / p).exists()]
        missing = [p for p in wanted if not (workdir / p).exists()]
        # stricter than the action (which fails only when nothing matches): every path the
        # workflow names must be there
        code = 1 if missing and with_.get("if-no-files-found", "warn") == "error" else 0
        return StepResult(uses, "uses", code, stderr=f"missing: {missing}", uploaded=found)
    raise AssertionError(f"no emulation for action {uses}")


# ----------------------------------------------------------------------------- gitlab


def gitlab_job(pipeline: dict[str, Any], name: str) -> dict[str, Any]:
    """The job with `extends` merged (one level of hidden-job templates, as rendered)."""
    job = dict(pipeline[name])
    base = job.pop("extends", None)
    if base:
        merged = dict(pipeline[base])
        merged.update(job)
        job = merged
    return job


def run_gitlab_job(
    pipeline: dict[str, Any],
    name: str,
    workdir: Path,
    runner: Runner,
    predefined: dict[str, str],
    timeout: float = 600,
) -> JobResult:
    job = gitlab_job(pipeline, name)
    env = dict(runner.base_env)
    env["PATH"] = os.pathsep.join([str(runner.python_bin), env["PATH"]])
    env.update({"CI": "true", "GITLAB_CI": "true", "CI_PROJECT_DIR": str(workdir), **predefined})
    for scope in (pipeline.get("variables") or {}, job.get("variables") or {}):
        env.update({k: str(v) for k, v in scope.items()})
    lines = [*(job.get("before_script") or []), *(job.get("script") or [])]
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", "\n".join(lines)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    steps = [StepResult(name, "run", proc.returncode, proc.stdout, proc.stderr)]
    artifacts = (job.get("artifacts") or {}).get("paths") or []
    found = [workdir / p for p in artifacts if (workdir / p).exists()]
    missing = [p for p in artifacts if not (workdir / p).exists()]
    steps.append(StepResult("artifacts", "uses", 1 if missing else 0, stderr=str(missing),
                            uploaded=found))  # fmt: skip
    return JobResult(steps, env)


def load_yaml(text: str) -> Any:
    """A rendered workflow as data: PyYAML's safe loader, through libyaml where the wheel
    has it (the same safe subset, about ten times faster than the pure-Python loader)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
