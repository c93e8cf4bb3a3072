"""A repository URL is data, never a git option or a command-running transport.

Each attack names a marker file the injected command would create: it must never exist,
the run must exit 2 and say which input (manifest file and key, option, or variable) was
refused. Credentials in a URL never appear in any output channel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream
from support.roots import manifest_text


def _inject(marker: Path) -> str:
    return f"--upload-pack=touch {marker};git-upload-pack"


def _set_url(root: Path, upstream: Upstream, url: str) -> None:
    commit = upstream.head
    text = manifest_text(url, commit, upstream.tree(commit))
    (root / "manifests" / "llama.cpp.toml").write_text(text)


def _assert_refused(res, marker: Path, *names: str) -> None:  # type: ignore[no-untyped-def]
    assert res.code == 2, res
    assert not marker.exists(), "the injected command ran"
    assert "Traceback" not in res.stderr, res
    for name in names:
        assert name in res.stderr, res


@pytest.mark.parametrize("command", ["fetch", "check", "patch"])
def test_manifest_url_option_never_runs(
    tmp_path: Path, upstream: Upstream, forge_root: Path, command: str
) -> None:
    marker = tmp_path / "marker"
    _set_url(forge_root, upstream, _inject(marker))
    res = run_forge("--root", str(forge_root), command, cwd=forge_root)
    _assert_refused(res, marker, "llama.cpp.toml", "url")


def test_manifest_ext_transport_never_runs(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    marker = tmp_path / "marker"
    _set_url(forge_root, upstream, f"ext::sh -c touch% {marker}")
    res = run_forge("--root", str(forge_root), "fetch", cwd=forge_root)
    _assert_refused(res, marker, "llama.cpp.toml", "url")


def test_mirror_option_is_validated(tmp_path: Path, forge_root: Path) -> None:
    marker = tmp_path / "marker"
    res = run_forge("fetch", f"--mirror={_inject(marker)}", cwd=forge_root)
    _assert_refused(res, marker, "--mirror")
    assert not (forge_root / ".dgr" / "src").exists()  # refused before any git call


def test_mirror_ext_transport_is_refused(tmp_path: Path, forge_root: Path) -> None:
    marker = tmp_path / "marker"
    res = run_forge("fetch", "--mirror", f"ext::sh -c touch% {marker}", cwd=forge_root)
    _assert_refused(res, marker, "--mirror", "transport")


@pytest.mark.parametrize("command", ["fetch", "patch"])
def test_dgr_mirror_variable_is_validated(tmp_path: Path, forge_root: Path, command: str) -> None:
    marker = tmp_path / "marker"
    res = run_forge(command, cwd=forge_root, env={"DGR_MIRROR": _inject(marker)})
    _assert_refused(res, marker, "DGR_MIRROR")


def test_mirror_with_nul_or_newline_is_refused(tmp_path: Path, forge_root: Path) -> None:
    marker = tmp_path / "marker"
    res = run_forge("fetch", "--mirror", "https://example.org/x\nfoo", cwd=forge_root)
    _assert_refused(res, marker, "--mirror", "control character")


def test_file_protocol_only_for_a_local_url(tmp_path: Path, upstream: Upstream) -> None:
    """The policy git runs a fetch with: a remote URL may not reach local repositories."""
    from dgr_forge.core.gitutil import protocol_policy

    remote = protocol_policy("https://example.org/x.git")
    assert "protocol.file.allow=never" in remote and "protocol.ext.allow=never" in remote
    assert "protocol.allow=never" in remote
    assert "protocol.file.allow=always" in protocol_policy(upstream.url)
    assert "protocol.file.allow=always" in protocol_policy(str(upstream.path))


SECRET = "s3cr3t-T0KEN"


@pytest.mark.parametrize("how", ["manifest", "mirror", "DGR_MIRROR"])
def test_credentials_never_printed_by_fetch_or_status(
    upstream: Upstream, forge_root: Path, how: str
) -> None:
    url = f"http://user:{SECRET}@127.0.0.1:1/x.git"  # nothing listens: the fetch fails
    args, env = ["fetch"], {}
    if how == "manifest":
        _set_url(forge_root, upstream, url)
    elif how == "mirror":
        args += ["--mirror", url]
    else:
        env["DGR_MIRROR"] = url
    for json_flag in ([], ["--json"]):
        res = run_forge(*json_flag, *args, cwd=forge_root, env=env)
        assert res.code == 1, res
        assert SECRET not in res.stdout + res.stderr, res
        assert "127.0.0.1" in res.stdout + res.stderr  # the URL is named, masked
        st = run_forge(*json_flag, "status", cwd=forge_root, env=env)
        assert st.code == 0, st
        assert SECRET not in st.stdout + st.stderr, st
    if how == "manifest":
        data = json.loads(run_forge("--json", "status", cwd=forge_root).stdout)
        assert data["upstream"]["url"] == "http://***@127.0.0.1:1/x.git"
