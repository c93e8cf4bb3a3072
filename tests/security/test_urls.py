"""URLs are data, never options (core/urls.py): the validator and the masking function."""

from __future__ import annotations

import pytest

from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.urls import HTTP_SCHEMES, check_url, mask, mask_text

GOOD = [
    "https://github.com/ggml-org/llama.cpp.git",
    "http://127.0.0.1:8080/x.git",
    "ssh://git@example.org/x.git",
    "git://example.org/x.git",
    "file:///srv/mirror/llama.cpp.git",
    "git@github.com:ggml-org/llama.cpp.git",
    "/srv/mirror/llama.cpp.git",
]

HOSTILE = [
    ("--upload-pack=touch /tmp/x;git-upload-pack", "starts with '-'"),
    ("-oProxyCommand=touch /tmp/x", "starts with '-'"),
    ("ext::sh -c touch% /tmp/x", "remote helper transport"),
    ("fd::17", "remote helper transport"),
    ("https://example.org/\x00x", "control character"),
    ("https://example.org/x\ny", "control character"),
    ("ftp://example.org/x", "scheme ftp://"),
    ("http://[::1", "not a valid URL"),
    ("https:///nohost", "no host"),
    ("relative/path", "not an allowed URL"),
    ("../../etc", "not an allowed URL"),
    ("", "not a URL"),
]


@pytest.mark.parametrize("url", GOOD)
def test_allowed_forms(url: str) -> None:
    assert check_url(url, "t") == url


@pytest.mark.parametrize(("url", "why"), HOSTILE)
def test_hostile_urls_are_bad_input_naming_the_source(url: str, why: str) -> None:
    with pytest.raises(BadInput) as err:
        check_url(url, "manifests/llama.cpp.toml: [upstream] url")
    assert err.value.exit_code == ExitCode.BAD_INPUT
    assert why in str(err.value)
    assert "manifests/llama.cpp.toml: [upstream] url" in str(err.value)


def test_huge_url_is_refused() -> None:
    with pytest.raises(BadInput, match="longer than"):
        check_url("https://h/" + "a" * 100_000, "t")


def test_download_urls_take_http_only() -> None:
    assert check_url("https://h/m.gguf", "t", schemes=HTTP_SCHEMES)
    for url in ("file:///etc/passwd", "git@h:x", "/etc/passwd"):
        with pytest.raises(BadInput):
            check_url(url, "t", schemes=HTTP_SCHEMES)


def test_refusal_never_echoes_the_secret() -> None:
    with pytest.raises(BadInput) as err:
        check_url("ftp://user:SECRET@h/x", "t")
    assert "SECRET" not in str(err.value)


def test_mask_hides_user_info_and_secret_query_values() -> None:
    assert mask("https://user:SECRET@h/x") == "https://***@h/x"
    assert mask("https://TOKEN@h/x") == "https://***@h/x"
    masked = mask("https://h/m.gguf?token=SECRET&X-Amz-Signature=S2&part=1")
    assert "SECRET" not in masked and "S2" not in masked and "part=1" in masked
    assert mask("git@github.com:x/y.git") == "git@github.com:x/y.git"
    assert mask("/srv/m") == "/srv/m"


def test_mask_text_hides_user_info_in_free_text() -> None:
    text = "fatal: unable to access 'https://u:SECRET@h/x.git/': 403"
    assert "SECRET" not in mask_text(text)
