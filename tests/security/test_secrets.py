"""Secrets in any form stay inside (issue 21 #1, #9): a key variable that is neither a path
nor PEM is never echoed; one masking function covers the forge's words and every child
process's output (git's "unable to access '...?token=SECRET/'"), for every secret query
name, on every output channel (stderr, --json, logs, reports); C1 controls are refused in
URLs and escaped on the terminal."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_forge
from support.git import Upstream
from support.roots import manifest_text
from support.server import FaultyServer, write_split_gguf

from dgr_forge.attest import keys
from dgr_forge.core import urls as core_urls
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import check_url, mask, mask_text
from dgr_forge.host import worker
from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile

SECRET = "Zq9xSECRETv4lue"
# every shape a credential takes in a URL's query, and user info with a harmless-looking query
SHAPES = [
    "token=" + SECRET,
    "private_token=" + SECRET,
    "hf_token=" + SECRET,
    "access_token=" + SECRET,
    "X-Amz-Signature=" + SECRET + "&X-Amz-Credential=AKIA" + SECRET,
    "X-Goog-Signature=" + SECRET,
    "sig=" + SECRET,
    "api_key=" + SECRET,
    "Password=" + SECRET,
    "client_secret=" + SECRET,
    "Authorization=" + SECRET,
]
USERINFO = f"http://user:{SECRET}@127.0.0.1:1/x.git?session={SECRET}"


def urls(base: str) -> list[str]:
    return [f"{base}?{q}" for q in SHAPES]


@pytest.mark.parametrize("query", SHAPES)
def test_mask_hides_every_secret_query_name(query: str) -> None:
    url = f"https://h/m.gguf?part=1&{query}"
    assert SECRET not in mask(url)
    assert "part=1" in mask(url)
    assert SECRET not in mask_text(f"fatal: unable to access '{url}/': 403")
    assert SECRET not in mask_text(f"Max retries exceeded with url: /m.gguf?{query} (x)")


def test_mask_hides_every_query_value_of_a_url_with_user_info() -> None:
    assert SECRET not in mask(USERINFO)
    assert SECRET not in mask_text(f"unable to access '{USERINFO}'")


def test_c1_controls_are_refused_in_urls_and_escaped_on_the_terminal(
    capfd: pytest.CaptureFixture[str],
) -> None:
    for c in ("\u0085", "\u009b", "\x7f"):
        with pytest.raises(BadInput, match="control character"):
            check_url(f"https://h/x{c}y", "t")
    assert core_urls.escape_controls("a\u009b31mb\x1b[2Jc\u0085d\te\nf") == (
        "a\\x9b31mb\\x1b[2Jc\\x85d\te\nf"
    )
    Reporter().error(f"bad {chr(0x9B)}31m name\x1b]0;title\x07 in https://h/?token={SECRET}")
    err = capfd.readouterr().err
    assert "\u009b" not in err and "\x1b" not in err and "\x07" not in err
    assert "\\x9b31m" in err and SECRET not in err


# ----------------------------------------------------------------------------- signing key


def _pem(tmp_path: Path) -> bytes:
    keys.generate(tmp_path / "k.pem")
    return (tmp_path / "k.pem").read_bytes()


@pytest.mark.parametrize("variable", ["DGR_SIGNING_KEY", "DGR_VERIFY_KEY"])
def test_a_key_variable_neither_path_nor_pem_is_never_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    encoded = base64.b64encode(_pem(tmp_path)).decode()  # `base64 -w0 signing-key.pem`
    for value in (encoded, "short-garbage", "x" * 600):
        monkeypatch.setenv(variable, value)
        with pytest.raises(BadInput) as info:
            if variable == "DGR_SIGNING_KEY":
                keys.resolve_signer(None, Reporter())
            else:
                keys.resolve_verifier(None)
        text = str(info.value) + json.dumps(info.value.details)
        assert value not in text and value[:12] not in text, text
        assert variable in text and "PEM" in text and "path" in text
        if value is encoded:
            assert "base64" in text


def test_signing_key_garbage_through_the_cli_is_exit_2_without_the_value(
    tmp_path: Path, forge_root: Path
) -> None:
    pem = _pem(tmp_path)
    encoded = base64.b64encode(pem).decode()
    for flags in ([], ["--json"]):
        res = run_forge(
            *flags, "certify", "--report", str(tmp_path / "nope"), "--evidence",
            str(tmp_path / "nope"), "--report-key", str(tmp_path / "k.pem.pub"),
            cwd=forge_root, env={"DGR_SIGNING_KEY": encoded},
        )  # fmt: skip
        assert res.code == 2, res
        assert "DGR_SIGNING_KEY" in res.stdout + res.stderr, res
        assert encoded[:12] not in res.stdout + res.stderr, res


# ----------------------------------------------------------------------------- child output


def _set_url(root: Path, upstream: Upstream, url: str) -> None:
    commit = upstream.head
    (root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text(url, commit, upstream.tree(commit))
    )


def _workspace_text(root: Path) -> str:
    """Every log, report, journal and state file the forge wrote (not git's own repos)."""
    out = []
    for p in (root / ".dgr").rglob("*") if (root / ".dgr").exists() else []:
        if p.is_file() and not p.is_symlink() and "/src/" not in str(p) and "/.git/" not in str(p):
            out.append(p.read_text(errors="replace"))
    return "\n".join(out)


def test_fetch_and_rebase_never_show_a_secret_in_gits_words(
    upstream: Upstream, forge_root: Path
) -> None:
    every = [*urls("http://127.0.0.1:1/x.git"), USERINFO]
    for i, url in enumerate(every):
        _set_url(forge_root, upstream, url)
        runs = [["fetch"]]  # every shape through fetch; rebase and --mirror take two
        if i in (1, len(every) - 1):
            runs += [["rebase", "--onto", "main", "--url", url], ["fetch", "--mirror", url]]
        for args in runs:
            res = run_forge("--json", *args, cwd=forge_root)  # stderr and the JSON object
            assert res.code in (1, 2), res
            assert "127.0.0.1" in res.stdout + res.stderr, res
            assert SECRET not in res.stdout + res.stderr, (url, res)
            assert SECRET not in _workspace_text(forge_root), url


def test_worker_fetch_never_shows_a_secret(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    for url in [*urls("http://127.0.0.1:1/w.git"), USERINFO]:
        spec = worker.WorkerSpec(source_dir=tmp_path / "w", url=url, commit="a" * 40)
        with pytest.raises(OperationFailed) as info:
            worker.ensure_worker(spec, Reporter())
        text = str(info.value) + capfd.readouterr().err
        assert "unable to access" in text or "127.0.0.1" in text, text
        assert SECRET not in text, text


def test_provision_never_shows_a_secret(tmp_path: Path) -> None:
    write_split_gguf(tmp_path / "src", "tiny", 1, tensor_elems=64)
    (name,) = [p.name for p in (tmp_path / "src").iterdir()]
    size = (tmp_path / "src" / name).stat().st_size
    with FaultyServer(tmp_path / "src") as server:
        for i, query in enumerate(SHAPES):
            server.faults.fail["missing.gguf"] = 1  # a retried 500, then a 404
            url = f"{server.url('missing.gguf')}?{query}"
            m = tmp_path / f"m{i}.toml"
            m.write_text(models.dumps("tiny", [ModelFile("missing.gguf", size, "0" * 64, url)]))
            res = run_forge(  # --json: the human lines on stderr, the object on stdout
                "--json", "artifacts", "provision", str(m), "--dest", str(tmp_path / f"d{i}"),
                env={"DGR_ARTIFACTS_BACKOFF": "0.01", "DGR_ARTIFACTS_TRIES": "2"},
            )  # fmt: skip
            assert res.code == 1, res
            assert "HTTP 500" in res.stderr and "HTTP 404" in res.stdout + res.stderr, res
            assert SECRET not in res.stdout + res.stderr, (query, res)


@pytest.mark.parametrize("option", ["--key", "--report-key"])
def test_key_text_passed_to_a_key_option_is_never_echoed(
    tmp_path: Path, forge_root: Path, option: str
) -> None:
    encoded = base64.b64encode(_pem(tmp_path)).decode()
    keys.generate(tmp_path / "other.pem")
    other = (
        ["--key", str(tmp_path / "other.pem")]
        if option == "--report-key"
        else ["--report-key", str(tmp_path / "other.pem.pub")]
    )
    res = run_forge(
        "--json", "certify", "--report", str(tmp_path / "r"), "--evidence", str(tmp_path / "e"),
        option, encoded, *other, cwd=forge_root,
    )  # fmt: skip
    assert res.code == 2, res
    assert encoded[:12] not in res.stdout + res.stderr, res
    assert "not shown" in res.stderr, res


def test_a_childs_words_in_a_build_log_are_masked(tmp_path: Path) -> None:
    import io
    import os
    import sys

    from dgr_forge.lanes.logs import run_logged

    said = f"fatal: unable to access 'http://h/x.git?private_token={SECRET}/'"
    log = io.StringIO()
    seen: list[str] = []
    code, lines = run_logged(
        [sys.executable, "-c", f"print({said!r})", f"--auth-token={SECRET}"],
        log,
        dict(os.environ),
        seen.append,
    )
    assert code == 0
    assert SECRET not in log.getvalue() + "".join(lines) + "".join(seen), log.getvalue()
    assert "private_token=***" in log.getvalue()


# ----------------------------------------------------------------------------- issue 33 #8
# a server may echo a secret in another encoding: base64 (any alignment, URL-safe too),
# URL-encoded, hex; each is masked as the secret itself is


def _echo_server(body: bytes) -> tuple[Any, str]:
    import http.server
    import threading

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _encodings(token: str) -> dict[str, str]:
    from urllib.parse import quote

    raw = token.encode()
    return {
        "base64": base64.b64encode(raw).decode(),
        "base64 in a Basic header": base64.b64encode(b"user:" + raw).decode(),
        "base64url": base64.urlsafe_b64encode(b"x" + raw).decode().rstrip("="),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "url-encoded": quote(token, safe=""),
    }


@pytest.mark.parametrize("encoding", list(_encodings("t")))
def test_a_scheduler_echoing_the_token_encoded_never_shows_it(encoding: str) -> None:
    from dgr_forge.cache import dist as sccache_dist

    token = "s3cr3t/tok+en=" + "q" * 20
    echoed = _encodings(token)[encoding]
    server, url = _echo_server(f"bad credentials: {echoed}".encode())
    try:
        result = sccache_dist.check(sccache_dist.DistClient(url, url, "token", token), 5)
    finally:
        server.shutdown()
    assert result.status == "unauthorized", result
    shown = result.detail
    # nothing of the encoded token is left but a few characters at its ends
    assert echoed[6:-6] not in shown, (encoding, shown)


@pytest.mark.parametrize("encoding", list(_encodings("t")))
def test_a_url_secret_is_masked_in_every_encoding(encoding: str) -> None:
    """The variant: a secret from a URL (`?private_token=`), echoed by a child encoded."""
    token = "glpat-" + "Zx9" * 8
    mask(f"https://gitlab.invalid/x.git?private_token={token}")
    echoed = _encodings(token)[encoding]
    assert echoed[6:-6] not in mask_text(f"remote: auth {echoed} refused"), encoding
