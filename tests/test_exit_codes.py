"""One exit code per meaning (issue 44 point 2): each exit code a command's `--help`
documents (cli/helpstyle.USAGE, the one table both come from) is one that command really
gives, in the situation the help names.

Covered here: the commands whose every documented code a cheap situation reaches (no
build): `status`, `fetch`, `keygen`, `report show|verify|compare`, `lanes`, `ci matrix`,
`ci render`, `artifacts verify|provision|manifest`, `doctor`. The codes of `build`,
`patch`, `export`, `rebase`, `bump`, `check`, `certify`, `demo`, `presets`, `artifacts map`
and `toolchain install` are reached by their own test files, and pinned in PENDING here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.git import Upstream
from support.reports import PATCH_FILE, RECIPE, lane_build, setup_root, write_manifest
from support.roots import copy_product
from support.server import flip_byte, manifest_of, write_split_gguf

from dgr_forge.attest import keys, reports
from dgr_forge.cli.helpstyle import USAGE
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter

GIT_PIN = "dgr-forge @ git+https://example.invalid/dgr-forge.git@" + "c" * 40


def documented(command: str) -> set[int]:
    """The exit codes `dgr-forge COMMAND --help` lists."""
    return {int(part.split(" ", 1)[0]) for part in USAGE[command][1].split(" · ")}


class Scene:
    """Every situation of one test's tmp_path: a forge root, a report, a model."""

    def __init__(self, tmp: Path, upstream: Upstream, patch_text: str) -> None:
        self.tmp = tmp
        self.upstream = upstream
        self.patch = patch_text
        self._root: Path | None = None
        self.last: Result | None = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = setup_root(self.tmp / "forge", self.upstream, self.patch)
            copy_product(self._root)
            ci = self._root / "ci"
            ci.mkdir()
            (ci / "requirements.txt").write_text(GIT_PIN + "\n")
            (ci / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
        return self._root

    def forge(self, *args: str, env: dict[str, str] | None = None) -> int:
        return self.run("-C", str(self.root), *args, env=env)

    def run(self, *args: str, env: dict[str, str] | None = None) -> int:
        """`dgr-forge ARGS`; the result is kept for the failure message."""
        self.last = run_forge(*args, env=env)
        return self.last.code

    def report(self, tag: str = "") -> Path:
        forge = Forge(self.root, self.root / ".dgr")
        signer = keys.generate(self.tmp / f"key{tag}.pem") if tag == "" else self.signer()
        return reports.write_report(forge, lane_build(forge, tag=tag), signer, Reporter())

    def signer(self) -> keys.Signer:
        return keys.load_signer(self.tmp / "key.pem")

    def model(self) -> tuple[Path, Path, Path]:
        source = self.tmp / "source"
        if not source.exists():
            write_split_gguf(source, "tiny", 2)
        manifest = manifest_of(source, "http://127.0.0.1:9/m", self.tmp / "tiny.toml", "tiny")
        return manifest, source, self.tmp / "models" / "tiny"


def _status_3(s: Scene) -> int:
    # what a killed export leaves: its journal beside patches/, its owner (pid 0) gone
    (s.root / "patches" / ".llama.cpp.journal-0-dead").mkdir()
    return s.forge("status")


def _fetch_3(s: Scene) -> int:
    assert s.forge("fetch") == 0
    older = s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")
    src = s.root / ".dgr" / "src" / "llama.cpp"
    (src / "README.local").write_text("my edit\n")
    manifest = s.root / "manifests" / "llama.cpp.toml"
    text = manifest.read_text()
    old = re.search(r'commit = "([0-9a-f]{40})"', text)
    assert old
    manifest.write_text(re.sub(r'\ntree = "[0-9a-f]{40}"', "", text).replace(old[1], older))
    return s.forge("fetch")


def _fetch_1(s: Scene) -> int:
    manifest = s.root / "manifests" / "llama.cpp.toml"
    manifest.write_text(manifest.read_text().replace(s.upstream.url, "http://127.0.0.1:9/x.git"))
    return s.forge("fetch")


def _bad_manifest(s: Scene, *args: str) -> int:
    manifest = s.root / "manifests" / "llama.cpp.toml"
    manifest.write_text(manifest.read_text().replace('commit = "', 'commit = "zz'))
    return s.forge(*args)


def _bad_recipe(s: Scene, *args: str) -> int:
    (s.root / "recipes" / "cpu.toml").write_text("schema = 1\n[lane]\nnope = 1\n")
    return s.forge(*args)


def _keygen_2(s: Scene) -> int:
    key = s.tmp / "k.pem"
    assert run_forge("keygen", "--out", str(key)).code == 0
    return run_forge("keygen", "--out", str(key)).code


def _verify(s: Scene, tamper: bool) -> int:
    report = s.report()
    if tamper:
        env = json.loads(report.read_text())
        env["signatures"][0]["sig"] = "A" * 86 + "=="
        report.write_text(json.dumps(env) + "\n")
    return run_forge("report", "verify", str(report), "--key", str(s.tmp / "key.pem.pub")).code


def _compare(s: Scene, differ: bool) -> int:
    a = s.report()
    b = s.report("2") if differ else a
    pub = str(s.tmp / "key.pem.pub")
    return run_forge("report", "compare", str(a), str(b), "--key", pub).code


def _artifacts(s: Scene, command: str, broken: bool) -> int:
    manifest, source, dest = s.model()
    run = ["artifacts", "provision", str(manifest), "--dest", str(dest), "--mirror"]
    if command == "provision":
        mirror = source
        if broken:
            mirror = s.tmp / "half"
            mirror.mkdir()
            first = sorted(source.iterdir())[0]
            (mirror / first.name).write_bytes(first.read_bytes())
        return run_forge(*run, str(mirror)).code
    assert run_forge(*run, str(source)).code == 0
    if broken:
        flip_byte(dest / sorted(source.iterdir())[0].name, 40_000)
    return run_forge("artifacts", "verify", str(manifest), "--dest", str(dest)).code


def _ci_check_stale(s: Scene) -> int:
    stale = s.tmp / "wf.yml"
    stale.write_text("# an older rendering\n")
    return s.forge("ci", "render", "--check", str(stale))


def _ci_no_source(s: Scene) -> int:
    (s.root / "ci" / "requirements.txt").unlink()
    return s.forge("ci", "render")


def _make_manifest(s: Scene, directory: Path) -> int:
    url = "https://models.example.com/tiny/"
    out = str(s.tmp / "m.toml")
    return run_forge(
        "artifacts", "manifest", str(directory), "--name", "tiny", "--url-base", url, "--out", out
    ).code


SCENES: dict[tuple[str, int], Callable[[Scene], int]] = {
    ("status", 0): lambda s: s.forge("status"),
    ("status", 2): lambda s: _bad_manifest(s, "status"),
    ("status", 3): _status_3,
    ("fetch", 0): lambda s: s.forge("fetch"),
    ("fetch", 1): _fetch_1,
    ("fetch", 2): lambda s: _bad_manifest(s, "fetch"),
    ("fetch", 3): _fetch_3,
    ("keygen", 0): lambda s: run_forge("keygen", "--out", str(s.tmp / "new.pem")).code,
    ("keygen", 2): _keygen_2,
    ("report show", 0): lambda s: run_forge("report", "show", str(s.report())).code,
    ("report show", 2): lambda s: run_forge("report", "show", str(s.root / "README")).code,
    ("report verify", 0): lambda s: _verify(s, tamper=False),
    ("report verify", 1): lambda s: _verify(s, tamper=True),
    ("report verify", 2): lambda s: run_forge("report", "verify", str(s.tmp / "none")).code,
    ("report compare", 0): lambda s: _compare(s, differ=False),
    ("report compare", 1): lambda s: _compare(s, differ=True),
    ("report compare", 2): lambda s: run_forge("report", "compare", "no-a", "no-b").code,
    ("lanes", 0): lambda s: s.forge("lanes"),
    ("lanes", 2): lambda s: _bad_recipe(s, "lanes"),
    ("ci matrix", 0): lambda s: s.forge("ci", "matrix"),
    ("ci matrix", 2): lambda s: _bad_recipe(s, "ci", "matrix"),
    ("ci render", 0): lambda s: s.forge("ci", "render"),
    ("ci render", 1): _ci_check_stale,
    ("ci render", 2): _ci_no_source,
    ("artifacts provision", 0): lambda s: _artifacts(s, "provision", broken=False),
    ("artifacts provision", 1): lambda s: _artifacts(s, "provision", broken=True),
    ("artifacts provision", 2): lambda s: (
        run_forge(
            "artifacts", "provision", str(s.tmp / "none.toml"), "--dest", str(s.tmp / "d")
        ).code
    ),
    ("artifacts verify", 0): lambda s: _artifacts(s, "verify", broken=False),
    ("artifacts verify", 1): lambda s: _artifacts(s, "verify", broken=True),
    ("artifacts verify", 2): lambda s: (
        run_forge("artifacts", "verify", str(s.model()[0]), "--dest", str(s.tmp / "nowhere")).code
    ),
    ("artifacts manifest", 0): lambda s: _make_manifest(s, s.model()[1]),
    ("artifacts manifest", 2): lambda s: _make_manifest(s, s.tmp / "none"),
    ("doctor", 0): lambda s: s.forge("doctor"),
    ("doctor", 2): lambda s: _bad_recipe(s, "doctor", "--lane", "cpu"),
}


# -- the series: patch, export, rebase, bump, check (the Scene's one-patch root)

UNREACHABLE = "http://127.0.0.1:9/x.git"


def _unreachable(s: Scene) -> None:
    manifest = s.root / "manifests" / "llama.cpp.toml"
    manifest.write_text(manifest.read_text().replace(s.upstream.url, UNREACHABLE))


def _conflicting(s: Scene, then: bool = False) -> str:
    """An upstream commit (after the root's pin) that rewrites the line the patch changes;
    with `then`, one more clean commit after it. The commit the patch conflicts at."""
    assert s.root.is_dir()
    text = (s.upstream.path / "src" / "llama.cpp").read_text()
    broken = s.upstream.commit({"src/llama.cpp": text.replace("return 0;", "return 1;")}, "x")
    if then:
        s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")
    return broken


def _patch_2(s: Scene) -> int:
    # a series entry that writes through `..` out of the tree: refused before any fetch
    escape = s.patch.replace("src/llama.cpp", "../../escaped.txt")
    (s.root / "patches" / "llama.cpp" / PATCH_FILE).write_text(escape)
    write_manifest(s.root, s.upstream, s.upstream.head, escape)
    code = s.forge("patch")
    assert not list(s.tmp.rglob("escaped.txt"))
    return code


def _patch_3(s: Scene) -> int:
    write_manifest(s.root, s.upstream, _conflicting(s), s.patch)
    return s.forge("patch")


def _export_3(s: Scene) -> int:
    assert s.forge("patch") == 0
    moved = s.patch.replace("add layer range ownership", "add layer range ownership (v2)")
    (s.root / "patches" / "llama.cpp" / PATCH_FILE).write_text(moved)  # a teammate's pull
    write_manifest(s.root, s.upstream, s.upstream.head, moved)
    return s.forge("export")


def _later(s: Scene) -> str:
    assert s.root.is_dir()
    return s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")


def _check(s: Scene, canonical: bool) -> int:
    """`check` with only the test recipe (options the test upstream declares): with
    `canonical`, the series as `export` writes it; else a person's `format-patch`."""
    for recipe in (s.root / "recipes").glob("*.toml"):
        recipe.unlink()
    (s.root / "recipes" / "cpu.toml").write_text(RECIPE)
    if canonical:
        assert s.forge("patch") == 0 and s.forge("export") == 0
    return s.forge("check")


SERIES: dict[tuple[str, int], Callable[[Scene], int]] = {
    ("patch", 0): lambda s: s.forge("patch"),
    ("patch", 1): lambda s: (_unreachable(s), s.forge("patch"))[1],
    ("patch", 2): _patch_2,
    ("patch", 3): _patch_3,
    ("export", 0): lambda s: (s.forge("patch"), s.forge("export"))[1],
    ("export", 2): lambda s: _bad_manifest(s, "export"),
    ("export", 3): _export_3,
    ("rebase", 0): lambda s: s.forge("rebase", "--onto", _later(s), "--dry-run"),
    ("rebase", 1): lambda s: s.forge("rebase", "--onto", "main", "--mirror", UNREACHABLE),
    ("rebase", 2): lambda s: s.forge("rebase", "--onto=--upload-pack=touch /tmp/pwned"),
    ("rebase", 3): lambda s: s.forge("rebase", "--onto", _conflicting(s)),
    ("bump", 0): lambda s: (_later(s), s.forge("bump", "--dry-run"))[1],
    ("bump", 1): lambda s: s.forge("bump", "--dry-run", "--mirror", UNREACHABLE),
    ("bump", 2): lambda s: s.forge("bump", "--dry-run", "--to=--upload-pack=touch /tmp/pwned"),
    ("bump", 3): lambda s: (_conflicting(s, then=True), s.forge("bump", "--dry-run"))[1],
    ("check", 0): lambda s: _check(s, canonical=True),
    ("check", 1): lambda s: _check(s, canonical=False),
    ("check", 2): lambda s: _bad_manifest(s, "check"),
}
SCENES.update(SERIES)

COVERED = sorted({command for command, _ in SCENES})

# Commands whose codes are not yet reached from here (each by its own test file today), with
# the codes their help lists now: a code added to one of these helps fails until it gets a
# scenario here (or this table is updated along with that command's test).
PENDING: dict[str, set[int]] = {
    "build": {0, 1, 2, 3},
    "certify": {0, 1, 2},
    "demo": {0, 1, 2},
    "presets": {0, 2},
    "artifacts map": {0, 1, 2},
    "toolchain install": {0, 1, 2},
}


def test_every_command_of_the_help_is_covered_or_pending_with_its_codes() -> None:
    assert set(USAGE) == set(COVERED) | set(PENDING)
    assert not set(COVERED) & set(PENDING)
    for command, codes in PENDING.items():
        assert documented(command) == codes, command


def test_every_documented_code_of_a_covered_command_has_its_situation() -> None:
    for command in COVERED:
        assert {code for c, code in SCENES if c == command} == documented(command), command


@pytest.mark.parametrize(("command", "code"), sorted(SCENES))
def test_the_command_really_exits_with_the_code_its_help_documents(
    command: str, code: int, tmp_path: Path, upstream: Upstream, patch_text: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DGR_ARTIFACTS_BACKOFF", "0.01")
    monkeypatch.setenv("DGR_ARTIFACTS_TRIES", "1")
    for var in ("DGR_SIGNING_KEY", "DGR_VERIFY_KEY", "CI"):
        monkeypatch.delenv(var, raising=False)
    assert code in documented(command)
    scene = Scene(tmp_path, upstream, patch_text)
    got = SCENES[command, code](scene)
    print("\n####", command, code, (scene.last.stderr if scene.last else "")[-600:])
    assert got == code, scene.last


@pytest.fixture
def patch_text(upstream: Upstream) -> str:
    from support.reports import make_patch

    return make_patch(upstream)
