"""One exit code per meaning (issue 44 point 2): each exit code a command's `--help`
documents (cli/options.USAGE, the one table both come from) is one that command really
gives, in the situation the help names. Every command of the help has its scenes here, one
per documented code (SCENES): a code added to a help without a scene fails.

The scenes are cheap: the Scene's one-patch root (fetched and patched in a few git calls,
never built) for most; the demo's toured root (`demo_tour`: built, signed and certified
once a session, shared with the other files of its xdist scope) where a code needs a
built lane (`build` 0 and 1, `certify` 0, 1 and 2, `demo` 0). Hostile values where a scene
is about bad input: a `..` in a series, a model name or a lane, a leading `-` in a rev or a
directory, a lock naming an option as its wheel, a commit adding `git~1/`.

And one lane that cannot build here gets one answer (DESIGN.md "Lanes"): exit 2 naming
what is missing from `doctor --lane`, `build` and `certify`, and `lanes` lists it as such.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.demo import DemoTour
from support.git import Upstream, sh_git
from support.reports import PATCH_FILE, RECIPE, lane_build, setup_root, write_manifest
from support.roots import copy_product, pin_ci
from support.server import flip_byte, manifest_of, write_layered_gguf, write_split_gguf
from support.wheelhouse import make_wheel

from dgr_forge.attest import keys, reports
from dgr_forge.cli.options import USAGE
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.demo import sources
from dgr_forge.host import toolkit
from dgr_forge.models.sources import FILE_ROOTS_ENV


def documented(command: str) -> set[int]:
    """The exit codes `dgr-forge COMMAND --help` lists."""
    return {int(part.split(" ", 1)[0]) for part in USAGE[command][1].split(" · ")}


class Scene:
    """Every situation of one test's tmp_path: a forge root, a report, a model; and the
    session's demo root (`tour`: the `demo_tour` fixture, made on first use)."""

    def __init__(
        self, tmp: Path, upstream: Upstream, patch_text: str, tour: Callable[[], DemoTour]
    ) -> None:
        self.tmp = tmp
        self.tour = tour
        self.upstream = upstream
        self.patch = patch_text
        self._root: Path | None = None
        self.last: Result | None = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = setup_root(self.tmp / "forge", self.upstream, self.patch)
            copy_product(self._root)
            pin_ci(self._root)
        return self._root

    def forge(self, *args: str, env: dict[str, str] | None = None) -> int:
        return self.run("-C", str(self.root), *args, env=env)

    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        """`dgr-forge ARGS`; the result is kept for the failure message."""
        self.last = run_forge(*args, env=env, cwd=cwd)
        return self.last.code

    def demo(self, *args: str, first: Callable[[Path], object] = lambda root: None) -> int:
        """`dgr-forge ARGS` in the demo's toured root (built, signed, certified: the session's
        one `dgr-forge demo`, put back as it was), as the tour ran its steps; `first` is
        given the root before."""
        tour = self.tour()
        assert tour.result.code == 0, tour.result
        root = tour.fresh()
        first(root)
        env = {**tour.env(), FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR}
        return self.run("-C", str(root), *args, env=env, cwd=root)

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


def _export_1(s: Scene) -> int:
    # a workspace commit adding a path git itself refuses to apply (`git~1`, NTFS's short
    # name of `.git`): its patch cannot reproduce it, so nothing is written
    assert s.forge("patch") == 0
    src = s.root / ".dgr" / "src" / "llama.cpp"
    (src / "git~1").mkdir()
    (src / "git~1" / "x").write_text("x\n")
    # committed as a person's git with protectNTFS off would (the forge's git has it on)
    sh_git(src, "-c", "core.protectNTFS=false", "add", "git~1/x")
    sh_git(src, "-c", "core.protectNTFS=false", "commit", "-q", "-m", "add git~1/x")
    before = sorted((s.root / "patches" / "llama.cpp").iterdir())
    code = s.forge("export")
    assert s.last is not None and "does not reproduce its commit" in s.last.stderr, s.last
    assert sorted((s.root / "patches" / "llama.cpp").iterdir()) == before
    return code


def _later(s: Scene) -> str:
    assert s.root.is_dir()
    return s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")


def _hostile_rev(s: Scene, *command: str) -> int:
    # a rev that is a git option: refused as a rev, never handed to git
    planted = s.tmp / "pwned"
    code = s.forge(*command[:-1], f"{command[-1]}=--upload-pack=touch {planted}")
    assert not planted.exists()
    return code


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
    ("export", 1): _export_1,
    ("export", 2): lambda s: _bad_manifest(s, "export"),
    ("export", 3): _export_3,
    ("rebase", 0): lambda s: s.forge("rebase", "--onto", _later(s), "--dry-run"),
    ("rebase", 1): lambda s: s.forge("rebase", "--onto", "main", "--mirror", UNREACHABLE),
    ("rebase", 2): lambda s: _hostile_rev(s, "rebase", "--onto"),
    ("rebase", 3): lambda s: s.forge("rebase", "--onto", _conflicting(s)),
    ("bump", 0): lambda s: (_later(s), s.forge("bump", "--dry-run"))[1],
    ("bump", 1): lambda s: s.forge("bump", "--dry-run", "--mirror", UNREACHABLE),
    ("bump", 2): lambda s: _hostile_rev(s, "bump", "--dry-run", "--to"),
    ("bump", 3): lambda s: (_conflicting(s, then=True), s.forge("bump", "--dry-run"))[1],
    ("check", 0): lambda s: _check(s, canonical=True),
    ("check", 1): lambda s: _check(s, canonical=False),
    ("check", 2): lambda s: _bad_manifest(s, "check"),
}
SCENES.update(SERIES)


# -- the host: presets, toolchain install, artifacts map, build, certify, demo


def _presets_0(s: Scene) -> int:
    assert s.forge("fetch") == 0  # the upstream tree, where the presets go
    return s.forge("presets", "--lane", "cpu", "--dry-run")


def _presets_2(s: Scene) -> int:
    # a CMakeUserPresets.json that is a link out of the tree: never written through
    out = s.tmp / "ide"
    out.mkdir()
    theirs = s.tmp / "theirs.json"
    theirs.write_text("{}\n")
    (out / "CMakeUserPresets.json").symlink_to(theirs)
    code = s.forge("presets", "--lane", "cpu", "--out", str(out))
    assert theirs.read_text() == "{}\n"
    return code


def _toolchain(
    s: Scene, lock_edit: Callable[[str], str] = lambda lock: lock, installed: bool = False
) -> int:
    """`toolchain install cuda --offline` of a one-wheel lock from a wheelhouse (`installed`:
    the lock's prefix is there already, as an earlier install left it: no pip)."""
    house = s.tmp / "wheels"
    house.mkdir()
    nvcc = b'#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n'
    files = {"nvidia/cu13/bin/nvcc": (nvcc, 0o755)}
    wheel = make_wheel(house, "nvidia-cuda-nvcc", "13.0.88", files)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = lock_edit(
        'schema = 1\ntoolkit = "cuda"\nversion = "13.0.2"\n\n[[wheel]]\n'
        f'name = "nvidia-cuda-nvcc"\nversion = "13.0.88"\nsha256 = "{sha}"\n'
    )
    (s.root / "toolchains" / "cuda.lock").write_text(lock)
    env = {"DGR_TOOLCHAINS_DIR": str(s.tmp / "toolchains")}
    if installed:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DGR_TOOLCHAINS_DIR", env["DGR_TOOLCHAINS_DIR"])
            prefix = toolkit.prefix_for(hashlib.sha256(lock.encode()).hexdigest())
        (prefix / "site").mkdir(parents=True)
        (prefix / toolkit.MARKER).write_text("{}\n")
    args = ("toolchain", "install", "cuda", "--offline", "--wheelhouse", str(house))
    code = s.forge(*args, env=env)
    said = s.last.stdout + s.last.stderr if s.last else ""
    assert ("already installed" in said) == installed, s.last
    return code


def _flip_sha(lock: str) -> str:
    at = lock.index('sha256 = "') + len('sha256 = "')
    return lock[:at] + ("0" if lock[at] != "0" else "1") + lock[at + 1 :]


def _map(s: Scene, *, url: str = "https://models.example.com/l4", dest: bool = True,
         header: dict[int, dict[str, int]] | None = None) -> int:  # fmt: skip
    source = s.tmp / "layered"
    write_layered_gguf(source, "l4", layers=4, splits=2, header=header)
    manifest = manifest_of(source, url, s.tmp / "l4.toml", "l4")
    env = {"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TRIES": "1"}
    where = ("--dest", str(source)) if dest else ()
    return s.run("artifacts", "map", str(manifest), *where, env=env)


def _broken_worker(root: Path) -> None:
    # the worker's CMake project stops at once: the re-run of its configure fails the build
    (root / "worker" / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.18)\nmessage(FATAL_ERROR "this worker does not build")\n'
    )


def _build_0(s: Scene) -> int:
    code = s.demo(*BUILD)
    assert s.last is not None and "up to date" in s.last.stdout + s.last.stderr, s.last
    return code


def _build_1(s: Scene) -> int:
    code = s.demo(*BUILD, first=_broken_worker)
    assert s.last is not None and "cpu: build failed" in s.last.stderr, s.last
    return code


def _build_3(s: Scene) -> int:
    assert s.forge("patch") == 0
    (s.root / ".dgr" / "src" / "llama.cpp" / "stray.c").write_text("int stray;\n")
    return s.forge("build", "--lane", "cpu", "--no-sign")


def _demo_1(s: Scene) -> int:
    # a host without C/C++ compilers (PATH: git only): the tour's build step is refused
    bin_dir = s.tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    code = s.run("demo", str(s.tmp / "demo"), env={"PATH": str(bin_dir)})
    assert s.last is not None and "demo step build (" in s.last.stderr, s.last
    return code


def _demo_2(s: Scene) -> int:
    # a DIR that reads as an option: refused, nothing made (`./-demo` names it)
    code = s.run("demo", "--", "-demo", cwd=s.tmp)
    assert not (s.tmp / "-demo").exists()
    return code


DEMO_KEY = f"{sources.KEYS_DIR}/{sources.KEY_FILE}"
BUILD = ("build", "--lane", "cpu", "--key", DEMO_KEY, "--cache", "off")
CERTIFY = ("certify", "--lane", "cpu", "--key", DEMO_KEY, "--report-key", f"{DEMO_KEY}.pub")


def _forged_signature(root: Path) -> None:
    for report in (root / ".dgr" / "reports").glob("cpu-*.intoto.jsonl"):
        env = json.loads(report.read_text())
        env["signatures"][0]["sig"] = "A" * 86 + "=="
        report.write_text(json.dumps(env) + "\n")


def _certify_1(s: Scene) -> int:
    # the lane's signed report no longer verifies: refused, no certification written
    code = s.demo(*CERTIFY, "--model", sources.MODEL, first=_forged_signature)
    assert s.last is not None and "the signature is corrupt" in s.last.stderr, s.last
    return code


HOST: dict[tuple[str, int], Callable[[Scene], int]] = {
    ("presets", 0): _presets_0,
    ("presets", 2): _presets_2,
    ("toolchain install", 0): lambda s: _toolchain(s, installed=True),
    ("toolchain install", 1): lambda s: _toolchain(s, _flip_sha),
    ("toolchain install", 2): lambda s: _toolchain(
        s,
        lambda lock: lock.replace('name = "nvidia-cuda-nvcc"', 'name = "--index-url=http://evil"'),
    ),
    ("artifacts map", 0): _map,
    ("artifacts map", 1): lambda s: _map(s, url="http://127.0.0.1:9/l4", dest=False),
    ("artifacts map", 2): lambda s: _map(s, header={1: {"split.count": 7}}),
    ("build", 0): _build_0,
    ("build", 1): _build_1,
    ("build", 2): lambda s: s.forge("build", "--lane", "../cpu", "--no-sign"),
    ("build", 3): _build_3,
    ("certify", 0): lambda s: s.demo(*CERTIFY, "--model", sources.MODEL),
    ("certify", 1): _certify_1,
    # a model name that climbs out of manifests/models/
    ("certify", 2): lambda s: s.demo(*CERTIFY, "--model", "../../etc/passwd"),
    ("demo", 0): lambda s: s.tour().result.code,
    ("demo", 1): _demo_1,
    ("demo", 2): _demo_2,
}
SCENES.update(HOST)

COVERED = sorted({command for command, _ in SCENES})


def test_every_command_of_the_help_has_its_situations_here() -> None:
    assert set(USAGE) == set(COVERED)


def test_every_documented_code_of_a_covered_command_has_its_situation() -> None:
    for command in COVERED:
        assert {code for c, code in SCENES if c == command} == documented(command), command


@pytest.mark.parametrize(("command", "code"), sorted(SCENES))
def test_the_command_really_exits_with_the_code_its_help_documents(
    command: str, code: int, tmp_path: Path, upstream: Upstream, patch_text: str,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("DGR_ARTIFACTS_BACKOFF", "0.01")
    monkeypatch.setenv("DGR_ARTIFACTS_TRIES", "1")
    for var in ("DGR_SIGNING_KEY", "DGR_VERIFY_KEY", "CI"):
        monkeypatch.delenv(var, raising=False)
    assert code in documented(command)
    scene = Scene(tmp_path, upstream, patch_text, lambda: request.getfixturevalue("demo_tour"))
    assert SCENES[command, code](scene) == code, scene.last


@pytest.fixture
def patch_text(upstream: Upstream) -> str:
    from support.reports import make_patch

    return make_patch(upstream)


# -- one lane that cannot build here, one answer (issue 44 point 2, DESIGN.md "Lanes")


def _without_cublas(root: Path, nowhere: Path) -> None:
    """The lane needs cuBLAS, and the root's probe looks for it only where there is none."""
    recipe = root / "recipes" / "cpu.toml"
    recipe.write_text(recipe.read_text().replace("libraries = []", 'libraries = ["cublas"]', 1))
    probes = root / "toolchains" / "probes.toml"
    head, body = probes.read_text().split("\n[libraries.cublas]\n", 1)
    body = re.sub(r"(?m)^roots = .*$", f'roots = ["{nowhere}"]', body, count=1)
    probes.write_text(f"{head}\n[libraries.cublas]\n{body}")


@pytest.mark.parametrize("missing", ["gcc", "cublas"])
def test_a_missing_tool_or_library_is_the_same_exit_2_from_every_command_that_meets_the_lane(
    missing: str, tmp_path: Path, demo_tour: DemoTour
) -> None:
    """On the demo's built, certified root, a host without the C compiler (PATH: git only),
    or a lane needing a cuBLAS that is not here: `doctor --lane`, `build` and `certify`
    refuse the lane with exit 2 naming what is missing, before anything runs; `lanes` lists
    it (exit 0, a listing) as not buildable here, missing the same."""
    assert demo_tour.result.code == 0, demo_tour.result
    root = demo_tour.fresh()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    # no toolkit this host's user installed (`toolchain install`) is looked at either
    env = {**demo_tour.env(), FILE_ROOTS_ENV: sources.MODEL_SOURCE_DIR,
           "DGR_TOOLCHAINS_DIR": str(tmp_path / "toolchains")}  # fmt: skip
    if missing == "gcc":
        env["PATH"] = str(bin_dir)
        shown = "GNU C compiler"
    else:
        (tmp_path / "no-cuda").mkdir()
        _without_cublas(root, tmp_path / "no-cuda")
        shown = "cuBLAS"
    certifications = sorted(p.relative_to(root) for p in (root / "certifications").rglob("*"))
    runs = {
        "doctor": ("doctor", "--lane", "cpu"),
        "build": BUILD,
        "certify": (*CERTIFY, "--model", sources.MODEL),
    }
    for command, args in runs.items():
        res = run_forge("-C", str(root), "--json", *args, env=env, cwd=root)
        assert res.code == 2, (command, res)
        assert f"missing {shown}" in res.stderr, (command, res)
    assert sorted(p.relative_to(root) for p in (root / "certifications").rglob("*")) == (
        certifications
    )
    listed = run_forge("-C", str(root), "--json", "lanes", env=env, cwd=root)
    assert listed.code == 0, listed
    (row,) = listed.json["lanes"]
    assert row["buildable"] is False and shown in row["summary"], row
