"""`dgr-forge fetch`: exact pinned commit over git daemon (v2 and v0) and file://, shallow
when the server allows it, full-fetch fallback when it refuses, verification, dirty
workspaces, --force, --offline, --mirror, crashes and concurrent runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from support.cli import run_forge
from support.daemon import PROTOCOL_V0, Background, git_daemon
from support.git import Upstream, sh_git
from support.roots import make_forge_root, manifest_text

from dgr_forge.core.forge import Forge
from dgr_forge.core.lock import holder_of, workspace_lock
from dgr_forge.core.output import Reporter

UNKNOWN = "0123456789abcdef0123456789abcdef01234567"
FORGE_COMMITTER = {"GIT_COMMITTER_NAME": "dgr-forge", "GIT_COMMITTER_EMAIL": "dgr-forge@invalid"}


@pytest.fixture(autouse=True)
def _wide_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # messages are asserted whole: keep Rich from wrapping them at 80 columns
    monkeypatch.setenv("COLUMNS", "10000")


def src_of(root: Path) -> Path:
    return root / ".dgr" / "src" / "llama.cpp"


def set_pin(root: Path, url: str, commit: str, tree: str | None = None) -> None:
    (root / "manifests" / "llama.cpp.toml").write_text(manifest_text(url, commit, tree))


def head(src: Path) -> str:
    return sh_git(src, "rev-parse", "HEAD")


def assert_exactly_at(src: Path, upstream: Upstream, commit: str) -> None:
    assert head(src) == commit
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == upstream.tree(commit)
    assert sh_git(src, "status", "--porcelain", "--untracked-files=all") == ""
    assert is_detached(src)
    assert (src / "CMakeLists.txt").read_text().strip() == upstream.read("CMakeLists.txt", commit)


def is_detached(src: Path) -> bool:
    return not (src / ".git" / "HEAD").read_text().startswith("ref:")


def add_bulk(upstream: Upstream, files: int = 150, size: int = 2048) -> str:
    """A commit with many incompressible files: >100 objects, so git writes a real pack."""
    return upstream.commit(
        {f"bulk/blob-{i:03d}.bin": os.urandom(size).hex() for i in range(files)}, "bulk data"
    )


# ----------------------------------------------------------------------------- transports


@pytest.mark.parametrize("protocol", ["v2", "v0-allow-sha"])
def test_git_daemon_shallow_fetch_of_exactly_the_pin(
    tmp_path: Path, upstream: Upstream, protocol: str
) -> None:
    pin = upstream.commits[1]  # not a branch tip: only a SHA want reaches it
    env = {}
    if protocol == "v0-allow-sha":
        sh_git(upstream.path, "config", "uploadpack.allowAnySHA1InWant", "true")
        env = PROTOCOL_V0
    with git_daemon(tmp_path) as base:
        root = make_forge_root(tmp_path / "forge", upstream, commit=pin)
        set_pin(root, f"{base}/upstream", pin, upstream.tree(pin))
        r = run_forge("fetch", "--json", cwd=root, env=env)
    assert r.code == 0, r
    src = src_of(root)
    assert_exactly_at(src, upstream, pin)
    assert is_detached(src)
    assert sh_git(src, "rev-list", "--count", "HEAD") == "1"
    assert (src / ".git" / "shallow").exists()
    data = r.json
    assert data["ok"] is True and data["command"] == "fetch"
    assert data["commit"] == pin and data["tree"] == upstream.tree(pin)
    assert data["method"] == "shallow" and data["shallow"] is True and data["changed"] is True
    assert data["src_dir"] == str(src) and data["saved_patch"] is None


def test_git_daemon_v0_refusing_sha_wants_falls_back_to_full_fetch(
    tmp_path: Path, upstream: Upstream
) -> None:
    pin = upstream.commits[1]
    with git_daemon(tmp_path) as base:
        root = make_forge_root(tmp_path / "forge", upstream, commit=pin)
        set_pin(root, f"{base}/upstream", pin, upstream.tree(pin))
        r = run_forge("fetch", "--json", cwd=root, env=PROTOCOL_V0)
    assert r.code == 0, r
    assert "refused a depth-1 fetch" in r.stderr and "unadvertised object" in r.stderr
    assert "aborted" not in r.stderr  # a real refusal, not a server-side abort
    src = src_of(root)
    assert_exactly_at(src, upstream, pin)
    assert r.json["method"] == "full" and r.json["shallow"] is False
    assert sh_git(src, "rev-list", "--count", "HEAD") == "2"  # the pin's whole history
    assert not (src / ".git" / "shallow").exists()


@pytest.mark.parametrize(("protocol", "method"), [("v2", "shallow"), ("v0", "full")])
def test_file_url(forge_root: Path, upstream: Upstream, protocol: str, method: str) -> None:
    pin = upstream.commits[1]  # not advertised: v0 refuses the SHA want
    set_pin(forge_root, upstream.url, pin, upstream.tree(pin))
    r = run_forge("fetch", "--json", cwd=forge_root, env=PROTOCOL_V0 if protocol == "v0" else {})
    assert r.code == 0, r
    assert r.json["method"] == method
    assert_exactly_at(src_of(forge_root), upstream, pin)


def test_moving_the_pin_moves_a_clean_workspace(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    new = upstream.commit({"src/new.c": "int x;\n"}, "upstream moves on")
    set_pin(forge_root, upstream.url, new, upstream.tree(new))
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert r.json["changed"] is True
    assert_exactly_at(src_of(forge_root), upstream, new)


def test_fallback_in_a_shallow_workspace_unshallows(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0  # v2: shallow at the head
    src = src_of(forge_root)
    assert (src / ".git" / "shallow").exists()
    older = upstream.commits[1]  # behind the shallow boundary, not advertised
    set_pin(forge_root, upstream.url, older, upstream.tree(older))
    r = run_forge("fetch", "--json", cwd=forge_root, env=PROTOCOL_V0)
    assert r.code == 0, r
    assert r.json["method"] == "full" and r.json["shallow"] is False
    assert_exactly_at(src, upstream, older)


# ----------------------------------------------------------------------------- verification


def test_tree_mismatch_fails_naming_both_ids(tmp_path: Path, upstream: Upstream) -> None:
    root = make_forge_root(tmp_path / "forge", upstream)
    wrong = upstream.tree(upstream.commits[0])
    set_pin(root, upstream.url, upstream.head, wrong)
    manifest_before = (root / "manifests" / "llama.cpp.toml").read_text()
    r = run_forge("fetch", "--json", cwd=root)
    assert r.code == 1, r
    assert wrong in r.stderr and upstream.tree(upstream.head) in r.stderr
    assert "tree mismatch" in r.stderr and "fix:" in r.stderr
    assert r.json["expected_tree"] == wrong and r.json["actual_tree"] == upstream.tree(
        upstream.head
    )
    # verified before checkout: nothing was checked out, the manifest is untouched
    assert not (src_of(root) / "CMakeLists.txt").exists()
    assert (root / "manifests" / "llama.cpp.toml").read_text() == manifest_before


def test_tree_mismatch_leaves_an_existing_workspace_where_it_was(
    forge_root: Path, upstream: Upstream
) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    new = upstream.commit({"x.txt": "x\n"}, "new")
    set_pin(forge_root, upstream.url, new, upstream.tree(upstream.commits[0]))
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 1 and "tree mismatch" in r.stderr, r
    assert head(src_of(forge_root)) == upstream.commits[-2]


@pytest.mark.parametrize("protocol", ["v2", "v0"])
def test_unknown_commit_fails_naming_it(
    forge_root: Path, upstream: Upstream, protocol: str
) -> None:
    set_pin(forge_root, upstream.url, UNKNOWN)
    r = run_forge("fetch", "--json", cwd=forge_root, env=PROTOCOL_V0 if protocol == "v0" else {})
    assert r.code == 1, r
    assert f"commit {UNKNOWN} not found at {upstream.url}" in r.stderr
    assert r.json["commit"] == UNKNOWN


@pytest.mark.parametrize("bad", ["main", "4df29be", "4DF29BE4F4C3673F428170FDA944A5B19F743BB8"])
def test_malformed_pin_is_bad_input(forge_root: Path, upstream: Upstream, bad: str) -> None:
    set_pin(forge_root, upstream.url, bad)
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 2, r
    assert "manifests/llama.cpp.toml" in r.stderr and "commit" in r.stderr
    assert r.json["key"] == "upstream.commit" or "commit" in r.json["key"]
    assert not (forge_root / ".dgr" / "src").exists()


def test_unreachable_url_fails_with_a_hint(forge_root: Path, upstream: Upstream) -> None:
    set_pin(forge_root, "file:///nonexistent/llama.cpp.git", upstream.head)
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 1, r
    assert "file:///nonexistent/llama.cpp.git" in r.stderr and "--mirror" in r.stderr
    # no server answered: it is not reported as a refused shallow fetch, nor retried in full
    assert "refused a depth-1 fetch" not in r.stderr


def test_unreachable_daemon_port_is_not_taken_for_a_refusal(
    forge_root: Path, upstream: Upstream
) -> None:
    with socket.socket() as sock:  # a free port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    set_pin(forge_root, f"git://127.0.0.1:{port}/llama.cpp.git", upstream.head)
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 1, r
    assert "refused a depth-1 fetch" not in r.stderr and "--mirror" in r.stderr, r


# ----------------------------------------------------------------------------- no-op


def test_second_fetch_is_a_no_op_without_network(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    # the upstream goes away: a no-op must not need it
    set_pin(
        forge_root, "file:///nonexistent/llama.cpp.git", upstream.head, upstream.tree(upstream.head)
    )
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert r.json["changed"] is False and r.json["method"] == "none"
    assert "nothing to do" in r.stderr


def test_no_op_runs_two_git_commands(forge_root: Path, tmp_path: Path) -> None:
    """The fast path: one `git status` (HEAD + changes) and one `rev-parse` (the pin's tree)."""
    assert run_forge("fetch", cwd=forge_root).code == 0
    trace = tmp_path / "trace"
    r = run_forge("fetch", cwd=forge_root, env={"GIT_TRACE": str(trace)})
    assert r.code == 0 and "nothing to do" in r.stdout, r
    commands = [
        ln.split("built-in: git ")[1]
        for ln in trace.read_text().splitlines()
        if "built-in: git " in ln
    ]
    assert len(commands) == 2, commands
    assert "status" in commands[0] and "log" in commands[1]  # workspace.inspect


def test_pin_plus_patch_commits_is_not_dirty_and_not_reset(
    forge_root: Path, upstream: Upstream
) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    for n in (1, 2):  # what the patch step does: commits by the forge's identity
        (src / "src" / "llama.cpp").write_text(f"// patched {n}\n")
        sh_git(src, "commit", "-qam", f"000{n} a patch commit", env=FORGE_COMMITTER)
    patched = head(src)
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert r.json["changed"] is False
    assert head(src) == patched and (src / "src" / "llama.cpp").read_text() == "// patched 2\n"
    # a dirty patched workspace: --force discards the edit but keeps the patch commits
    (src / "src" / "llama.cpp").write_text("// edit\n")
    r = run_forge("fetch", "--force", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert head(src) == patched and (src / "src" / "llama.cpp").read_text() == "// patched 2\n"


def test_commits_of_the_users_own_need_a_human(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    (src / "src" / "llama.cpp").write_text("// my work\n")
    sh_git(src, "commit", "-qam", "my own work")
    mine = head(src)
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 3, r
    assert f"{mine[:12]} my own work" in r.stderr and "--force" in r.stderr
    assert r.json["local_commits"] == [f"{mine[:12]} my own work"]
    assert head(src) == mine

    r = run_forge("fetch", "--force", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert_exactly_at(src, upstream, upstream.head)
    mbox = next((forge_root / ".dgr" / "logs").glob("fetch-saved-commits-*.mbox"))
    assert str(mbox) in r.stderr
    sh_git(src, "am", "-q", str(mbox))
    assert (src / "src" / "llama.cpp").read_text() == "// my work\n"


# ----------------------------------------------------------------------------- local changes


def make_dirty(src: Path) -> None:
    with (src / "src" / "llama.cpp").open("a") as fh:
        fh.write("// my local fix\n")
    (src / "notes.txt").write_text("untracked notes\n")


def assert_still_dirty(src: Path) -> None:
    assert (src / "src" / "llama.cpp").read_text().endswith("// my local fix\n")
    assert (src / "notes.txt").read_text() == "untracked notes\n"


def test_dirty_workspace_needs_a_human_and_keeps_the_edits(
    forge_root: Path, upstream: Upstream
) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    make_dirty(src)
    (src / "build").mkdir()  # ignored by nothing here: counts as untracked
    (src / "build" / "x.o").write_text("obj")
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 3, r
    assert "src/llama.cpp (modified)" in r.stderr and "notes.txt (untracked)" in r.stderr
    assert "--force" in r.stderr
    changes = {c["path"]: c["change"] for c in r.json["local_changes"]}
    assert changes == {
        "src/llama.cpp": "modified",
        "notes.txt": "untracked",
        "build/x.o": "untracked",
    }
    assert_still_dirty(src)


def test_ignored_files_are_not_local_changes(forge_root: Path, upstream: Upstream) -> None:
    upstream.commit({".gitignore": "/build/\n"}, "ignore build")
    set_pin(forge_root, upstream.url, upstream.head, upstream.tree(upstream.head))
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    (src / "build").mkdir()
    (src / "build" / "x.o").write_text("obj")
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0 and r.json["changed"] is False, r


def test_dirty_workspace_is_not_moved_to_a_new_pin(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    old = head(src)
    make_dirty(src)
    new = upstream.commit({"docs/more.md": "more\n"}, "more docs")
    set_pin(forge_root, upstream.url, new, upstream.tree(new))
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 3, r
    assert head(src) == old
    assert_still_dirty(src)


def test_force_saves_a_patch_that_reapplies(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    make_dirty(src)
    (src / "docs" / "notes-0.md").unlink()
    (src / "blob.bin").write_bytes(bytes(range(256)))
    expected = {p: (src / p).read_bytes() for p in ("src/llama.cpp", "notes.txt", "blob.bin")}
    new = upstream.commit({"docs/more.md": "more\n"}, "more docs")
    set_pin(forge_root, upstream.url, new, upstream.tree(new))

    r = run_forge("fetch", "--force", "--json", cwd=forge_root)
    assert r.code == 0, r
    saved = Path(r.json["saved_patch"])
    assert saved.parent == forge_root / ".dgr" / "logs" and saved.is_file()
    assert str(saved) in r.stderr
    assert_exactly_at(src, upstream, new)

    sh_git(src, "apply", str(saved))
    for rel, content in expected.items():
        assert (src / rel).read_bytes() == content
    assert not (src / "docs" / "notes-0.md").exists()


def test_force_with_a_failing_fetch_keeps_the_edits(forge_root: Path, upstream: Upstream) -> None:
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    make_dirty(src)
    set_pin(forge_root, upstream.url, UNKNOWN)
    r = run_forge("fetch", "--force", cwd=forge_root)
    assert r.code == 1 and f"commit {UNKNOWN} not found" in r.stderr, r
    assert_still_dirty(src)
    assert not (forge_root / ".dgr" / "logs").exists()


def test_src_dir_that_is_not_a_repository_is_refused(forge_root: Path) -> None:
    src = src_of(forge_root)
    src.mkdir(parents=True)
    (src / "precious.txt").write_text("mine\n")
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 3, r
    assert "not a git work tree" in r.stderr and "precious.txt" in r.stderr
    assert (src / "precious.txt").read_text() == "mine\n"


# ----------------------------------------------------------------------------- offline, mirror


def test_offline_without_the_commit_fails_clearly(forge_root: Path, upstream: Upstream) -> None:
    r = run_forge("fetch", "--offline", "--json", cwd=forge_root)
    assert r.code == 1, r
    assert upstream.head in r.stderr and "--offline" in r.stderr
    assert "--mirror" in r.stderr and "network" in r.stderr
    assert not (src_of(forge_root) / "CMakeLists.txt").exists()


def test_offline_uses_objects_already_present(forge_root: Path, upstream: Upstream) -> None:
    # a full fetch (v0 fallback) brings the whole history; then an older pin needs no network
    pin = upstream.commits[1]
    set_pin(forge_root, upstream.url, pin, upstream.tree(pin))
    assert run_forge("fetch", cwd=forge_root, env=PROTOCOL_V0).code == 0
    old = upstream.commits[0]
    set_pin(forge_root, "file:///nonexistent/llama.cpp.git", old, upstream.tree(old))
    r = run_forge("fetch", "--offline", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert r.json["method"] == "local"
    assert_exactly_at(src_of(forge_root), upstream, old)


@pytest.mark.parametrize("how", ["flag", "relative", "env", "git-daemon"])
def test_mirror_fetches_and_verifies_the_pinned_ids(
    tmp_path: Path, upstream: Upstream, how: str
) -> None:
    mirror = tmp_path / "mirrors" / "llama.cpp.git"
    sh_git(tmp_path, "clone", "-q", "--mirror", str(upstream.path), str(mirror))
    root = make_forge_root(tmp_path / "forge", upstream)
    set_pin(root, "file:///nonexistent/llama.cpp.git", upstream.head, upstream.tree(upstream.head))
    if how == "flag":
        r = run_forge("fetch", "--mirror", str(mirror), "--json", cwd=root)
    elif how == "relative":  # to the cwd, not to the work tree git runs in
        r = run_forge("fetch", "--mirror", "../mirrors/llama.cpp.git", "--json", cwd=root)
    elif how == "env":
        r = run_forge("fetch", "--json", cwd=root, env={"DGR_MIRROR": str(mirror)})
    else:
        with git_daemon(tmp_path / "mirrors") as base:
            r = run_forge("fetch", "--mirror", f"{base}/llama.cpp.git", "--json", cwd=root)
    assert r.code == 0, r
    assert r.json["url"] != "file:///nonexistent/llama.cpp.git"
    assert_exactly_at(src_of(root), upstream, upstream.head)


def test_mirror_with_a_different_history_fails(tmp_path: Path, upstream: Upstream) -> None:
    other = tmp_path / "other"
    sh_git(tmp_path, "init", "-q", str(other))
    (other / "f").write_text("other\n")
    sh_git(other, "add", "f")
    sh_git(other, "commit", "-qm", "unrelated")
    root = make_forge_root(tmp_path / "forge", upstream)
    r = run_forge("fetch", "--mirror", str(other), cwd=root)
    assert r.code == 1, r
    assert f"commit {upstream.head} not found at {other.as_uri()}" in r.stderr


# ----------------------------------------------------------------------------- crashes, locking


def test_sigkill_mid_fetch_then_rerun_succeeds(tmp_path: Path, upstream: Upstream) -> None:
    pin = add_bulk(upstream)
    with git_daemon(tmp_path, slow=0.01) as base:
        root = make_forge_root(tmp_path / "forge", upstream)
        set_pin(root, f"{base}/upstream", pin, upstream.tree(pin))
        run = Background("fetch", cwd=root)
        run.wait_for("receiving objects")
        run.kill_group()
        src = src_of(root)
        leftovers = list((src / ".git" / "objects" / "pack").glob("tmp_pack_*"))
        assert leftovers, "the kill should have interrupted the pack transfer"
        assert not (src / "CMakeLists.txt").exists()
        # the dead run's lock is gone with it: DGR_LOCK_TIMEOUT=0 proves nobody waits
        r = run_forge("fetch", "--json", cwd=root, env={"DGR_LOCK_TIMEOUT": "0"})
    assert r.code == 0, r
    assert_exactly_at(src, upstream, pin)
    assert not list((src / ".git" / "objects" / "pack").glob("tmp_pack_*"))
    assert sh_git(src, "fsck", "--no-dangling") == ""


def test_interrupted_checkout_is_completed(forge_root: Path, upstream: Upstream) -> None:
    """A run killed between objects and work tree: files half there, journal left behind."""
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    new = upstream.commit({"src/llama.cpp": "// rewritten\n", "docs/notes-1.md": None}, "rewrite")
    set_pin(forge_root, upstream.url, new, upstream.tree(new))
    # what a checkout killed half-way leaves: the journal, one file updated, index.lock
    sh_git(src, "fetch", "-q", "--depth=1", upstream.url, new)
    (src / ".git" / "dgr-checkout").write_text(new + "\n")
    (src / "src" / "llama.cpp").write_text("// rewritten\n")
    (src / ".git" / "index.lock").write_text("")
    (src / ".git" / "shallow.lock").write_text("")
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert_exactly_at(src, upstream, new)
    assert not (src / ".git" / "dgr-checkout").exists()


def test_interrupted_patch_run_is_rolled_back_to_the_pin(
    forge_root: Path, upstream: Upstream
) -> None:
    """A `dgr-forge patch` killed mid `git am`: its journal tells fetch the edits are ours."""
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_of(forge_root)
    patches = forge_root / "p"
    patches.mkdir()
    (patches / "1.patch").write_text(
        "From: A <a@invalid>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: one\n\n---\n"
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
        "@@ -1,3 +1,3 @@\n-# llama (test upstream)\n+# patched\n"
        " \n A tiny stand-in for llama.cpp.\n"
    )
    (patches / "2.patch").write_text(
        "From: A <a@invalid>\nDate: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: two\n\n---\n"
        "diff --git a/nope.txt b/nope.txt\n--- a/nope.txt\n+++ b/nope.txt\n"
        "@@ -1 +1 @@\n-x\n+y\n"
    )
    (src / ".git" / "dgr-patching").write_text(upstream.head + "\n")
    with pytest.raises(AssertionError):
        sh_git(src, "am", str(patches / "1.patch"), str(patches / "2.patch"), env=FORGE_COMMITTER)
    assert (src / ".git" / "rebase-apply").exists() and head(src) != upstream.head
    r = run_forge("fetch", "--json", cwd=forge_root)
    assert r.code == 0, r
    assert_exactly_at(src, upstream, upstream.head)
    assert not (src / ".git" / "rebase-apply").exists()
    assert not (src / ".git" / "dgr-patching").exists()


def test_half_made_repository_is_started_over(forge_root: Path, upstream: Upstream) -> None:
    """A run killed inside `git init`: an empty .git, and the temporary init directory."""
    src = src_of(forge_root)
    (src / ".git" / "refs").mkdir(parents=True)
    stale = src.parent / ".llama.cpp.init-99999"
    (stale / ".git").mkdir(parents=True)
    r = run_forge("fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": "0"})
    assert r.code == 0, r
    assert_exactly_at(src, upstream, upstream.head)
    assert not stale.exists()


def test_concurrent_runs_wait_or_are_told(tmp_path: Path, upstream: Upstream) -> None:
    pin = add_bulk(upstream, files=120)
    with git_daemon(tmp_path, slow=0.04) as base:
        root = make_forge_root(tmp_path / "forge", upstream)
        set_pin(root, f"{base}/upstream", pin, upstream.tree(pin))
        first = Background("fetch", cwd=root)
        first.wait_for("receiving objects")  # holds the lock, mid-transfer
        told = run_forge("fetch", "--json", cwd=root, env={"DGR_LOCK_TIMEOUT": "0"})
        waiter = Background("fetch", "--json", cwd=root, env={"DGR_LOCK_TIMEOUT": "120"})
        waiter.wait_for("waiting for")
        code1, _, err1 = first.finish()
        code2, out2, err2 = waiter.finish()
    assert told.code == 1, told
    assert f"pid {first.proc.pid}" in told.stderr and "dgr-forge fetch" in told.stderr
    assert told.json["holder"].startswith(f"pid {first.proc.pid}")
    assert code1 == 0, err1
    assert code2 == 0, err2
    assert f"waiting for pid {first.proc.pid}" in err2
    assert '"changed": false' in out2  # the first run did the work
    assert_exactly_at(src_of(root), upstream, pin)


def describe_holder(lock_file: Path) -> str:
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return holder_of(-1)
    try:
        return holder_of(fd)
    finally:
        os.close(fd)


def test_lock_is_reentrant_in_one_process(tmp_path: Path) -> None:
    forge = Forge(root=tmp_path, workspace=tmp_path / ".dgr")
    out = Reporter(quiet=True)
    with workspace_lock(forge, out):
        assert describe_holder(forge.lock_file).startswith(f"pid {os.getpid()}")
        with workspace_lock(forge, out):
            pass
        assert describe_holder(forge.lock_file).startswith(f"pid {os.getpid()}")
    assert "unknown" in describe_holder(forge.lock_file)


def test_lock_wait_gives_up_after_the_timeout(forge_root: Path) -> None:
    holder = Forge(root=forge_root, workspace=forge_root / ".dgr")
    with workspace_lock(holder, Reporter(quiet=True)):
        r = run_forge("fetch", "--json", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": "0.5"})
    assert r.code == 1, r
    assert r.stderr.count("waiting for") == 1 and f"pid {os.getpid()}" in r.stderr
    assert "still in use" in r.stderr and "DGR_LOCK_TIMEOUT" in r.stderr
    assert not (forge_root / ".dgr" / "src").exists()


def test_bad_lock_timeout_is_bad_input(forge_root: Path) -> None:
    holder = Forge(root=forge_root, workspace=forge_root / ".dgr")
    with workspace_lock(holder, Reporter(quiet=True)):
        r = run_forge("fetch", cwd=forge_root, env={"DGR_LOCK_TIMEOUT": "soon"})
    assert r.code == 2, r
    assert "DGR_LOCK_TIMEOUT" in r.stderr


# ----------------------------------------------------------------------------- issue 19


def _break_object(upstream: Upstream, rel: str, rev: str = "HEAD") -> None:
    """Delete one loose blob the commit needs: the upstream's pack-objects then dies
    mid-transfer, as a dropped connection or a corrupt server does."""
    blob = sh_git(upstream.path, "rev-parse", f"{rev}:{rel}")
    (upstream.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()


def test_failed_fetch_leaves_no_temporary_packs(forge_root: Path, upstream: Upstream) -> None:
    add_bulk(upstream, files=40, size=60_000)  # the server starts sending megabytes
    tail = upstream.commit({"zz-last.txt": os.urandom(2000).hex()}, "tail")
    set_pin(forge_root, upstream.url, tail)
    _break_object(upstream, "zz-last.txt")
    r = run_forge("--root", str(forge_root), "--json", "fetch")
    assert r.code == 1, r
    pack = src_of(forge_root) / ".git" / "objects" / "pack"
    assert sorted(p.name for p in pack.glob("tmp_*")) == [], list(pack.iterdir())
    assert not list((src_of(forge_root) / ".git" / "objects").glob("incoming-*"))


# ----------------------------------------------------------------------------- issue 29


@pytest.mark.parametrize("transport", ["file", "git-daemon"])
def test_server_missing_an_object_is_named_a_server_abort_not_a_refusal(
    tmp_path: Path, upstream: Upstream, transport: str
) -> None:
    """A partial mirror: the server's pack-objects cannot read a blob the pin needs. That
    is the server's fault, said in its own words, never "refused a depth-1 fetch"."""
    pin = upstream.commit({"models/vocab.bin": os.urandom(3000).hex()}, "vocab")
    blob = sh_git(upstream.path, "rev-parse", f"{pin}:models/vocab.bin")
    _break_object(upstream, "models/vocab.bin", pin)
    with git_daemon(tmp_path) as base:
        url = upstream.url if transport == "file" else f"{base}/upstream"
        root = make_forge_root(tmp_path / "forge", upstream, commit=pin)
        set_pin(root, url, pin, upstream.tree(pin))
        manifest = (root / "manifests" / "llama.cpp.toml").read_bytes()
        r = run_forge("fetch", "--json", cwd=root)
    assert r.code == 1, r
    assert "refused" not in r.stderr, r.stderr
    assert "aborted" in r.stderr and "missing objects or corrupt" in r.stderr, r.stderr
    assert f"unable to read {blob}" in r.stderr  # the server's own words
    assert "fix:" in r.stderr and "git fsck" in r.stderr and "--mirror" in r.stderr
    assert "network access" not in r.stderr  # the network worked
    assert r.json["cause"] == "server-abort"
    assert f"unable to read {blob}" in r.json["server_said"]
    # nothing lost, and no fallback to a whole-history fetch that needs the same blob
    assert (root / "manifests" / "llama.cpp.toml").read_bytes() == manifest
    assert "fetching all branches" not in r.stderr
    pack = src_of(root) / ".git" / "objects" / "pack"
    assert not list(pack.glob("tmp_*"))


def test_server_abort_words_are_masked(tmp_path: Path, upstream: Upstream) -> None:
    """The server's words and the URL pass the masking: a credential never shows. The
    user's git config (kept for network calls) maps the https URL onto the daemon."""
    pin = upstream.commit({"models/vocab.bin": os.urandom(3000).hex()}, "vocab")
    _break_object(upstream, "models/vocab.bin", pin)
    with git_daemon(tmp_path) as base:
        root = make_forge_root(tmp_path / "forge", upstream, commit=pin)
        secret = "https://user:hunter2secret@example.invalid/"
        config = tmp_path / "gitconfig"
        config.write_text(f'[url "{base}/"]\n\tinsteadOf = {secret}\n')
        set_pin(root, f"{secret}upstream", pin, upstream.tree(pin))
        r = run_forge("fetch", "--json", cwd=root, env={"GIT_CONFIG_GLOBAL": str(config)})
    assert r.code == 1, r
    assert "the server aborted the transfer" in r.stderr, r.stderr
    assert "hunter2secret" not in r.stderr and "hunter2secret" not in r.stdout


@pytest.mark.parametrize(
    ("said", "cause"),
    [
        # git's own words (git 2.39), recorded: no test resolves a name (no network)
        ("fatal: unable to look up example.invalid (port 9418) (Name or service not known)",
         "unreachable"),
        ("fatal: unable to access 'https://x.invalid/': Could not resolve host: x.invalid",
         "unreachable"),
        ("remote: fatal: unable to read 6178\nfatal: protocol error: bad pack header",
         "server-abort"),
        ("fatal: remote error: upload-pack: not our ref 0123", "refused"),
        ("fatal: protocol error: bad pack header", "other"),
    ],
)  # fmt: skip
def test_diagnosis_of_gits_words(said: str, cause: str) -> None:
    from dgr_forge.upstream.transfer import diagnose

    assert diagnose(said) == cause


def test_control_bytes_in_the_servers_words_never_reach_a_person() -> None:
    """git 2.39 ends a server abort with a NUL ("... on the remote side.\\x00", seen on a
    real partial mirror); an escape sequence could move a terminal's cursor. The message,
    `server_said`, `git_stderr` and `last_error` show each control byte as an escape."""
    from dgr_forge.upstream.transfer import fetch_failed, last_error

    said = (
        "remote: fatal: unable to read 6178abcd\x1b[2J\n"
        "error: git upload-pack: git-pack-objects died with error.\n"
        "fatal: aborting due to possible repository corruption on the remote side.\x00\n"
    )
    err = fetch_failed("llama.cpp abc", "file:///srv/up.git", said)
    shown = [str(err), err.details["server_said"], err.details["git_stderr"], last_error(said)]
    for text in shown:
        assert isinstance(text, str)
        assert not any(ord(c) < 32 and c not in "\n\t" for c in text), repr(text)
    assert "\\x1b[2J" in err.details["server_said"], err.details
    assert "remote side.\\x00" in last_error(said)
    assert err.details["cause"] == "server-abort"
