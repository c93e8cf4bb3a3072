"""URLs are data, never options: one validator and one masking function for every URL.

Every repository or download URL the forge reads (the manifest's ``url``, ``--mirror`` /
``DGR_MIRROR``, ``rebase --url``, the worker manifest, model file URLs) passes
`check_url` before it reaches git or requests, and every URL shown to a person (messages,
``--json``, logs, ``status``, reports) passes `mask` (or `mask_text` for free text such as
git's stderr), so a credential in a URL never leaves the process.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dgr_forge.core.errors import BadInput

GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
HTTP_SCHEMES = ("https", "http")
MAX_URL_LEN = 8192

# [user@]host:path, the scp-like form git accepts; the host may not start with "-"
_SCP = re.compile(r"(?:[A-Za-z0-9._~-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^\s]*")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SECRET_QUERY = re.compile(
    r"(?i)^(token|access_token|auth|sig|signature|key|api_key|secret|password|"
    r"credential|x-amz-.*|x-goog-.*)$"
)
_USERINFO_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s@]+)@")


def check_url(value: str, where: str, *, schemes: tuple[str, ...] = GIT_SCHEMES) -> str:
    """`value` if it is a URL the forge may hand to git or requests, else BadInput.

    `where` names the source for the message: ``"manifests/llama.cpp.toml: [upstream] url"``,
    ``"--mirror"``, ``"DGR_MIRROR"``. Allowed: the `schemes` as ``scheme://...``; for git
    URLs also scp-like ``user@host:path`` and absolute local paths.
    """
    shown = mask(value) if isinstance(value, str) else repr(value)

    def refuse(why: str, fix: str) -> BadInput:
        return BadInput(f"{where}: {shown!r} {why}", hint=fix)

    allowed = ", ".join(f"{s}://" for s in schemes)
    git = schemes == GIT_SCHEMES
    if git:
        allowed += ", user@host:path, or an absolute path"
    if not isinstance(value, str) or not value:
        raise refuse("is not a URL", f"give a URL ({allowed})")
    if len(value) > MAX_URL_LEN:
        raise BadInput(f"{where}: URL longer than {MAX_URL_LEN} characters", hint="shorten it")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise refuse("contains a control character or NUL", "remove it")
    if value.startswith("-"):
        raise refuse("starts with '-' (git would read it as an option)", f"give a URL ({allowed})")
    if "::" in value.split("/", 1)[0]:
        raise refuse(
            "names a git remote helper transport ('<transport>::'), which can run commands",
            f"give a URL ({allowed})",
        )
    m = _SCHEME.match(value)
    if m:
        scheme = m.group(1).lower()
        if scheme not in schemes:
            raise refuse(f"uses the scheme {scheme}://, which is not allowed", f"use {allowed}")
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError as err:
            raise refuse(f"is not a valid URL ({err})", f"use {allowed}") from None
        if scheme != "file" and not parts.hostname:
            raise refuse("has no host", f"use {allowed}")
        if (parts.hostname or "").startswith("-"):
            raise refuse("has a host starting with '-'", "fix the host name")
        return value
    if git and value.startswith("/"):
        return value
    if git and _SCP.fullmatch(value):
        return value
    raise refuse("is not an allowed URL", f"use {allowed}")


def mask(url: str) -> str:
    """`url` with any password or token replaced by ``***`` (user info, secret query keys)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_text(url)
    if not parts.scheme or not parts.netloc:
        return mask_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_QUERY.match(k) for k, _ in pairs):
            masked = [(k, "***" if _SECRET_QUERY.match(k) else v) for k, v in pairs]
            query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def mask_text(text: str) -> str:
    """Free text (git's stderr, an exception) with user info in any URL masked."""
    return _USERINFO_IN_TEXT.sub(lambda m: m.group(1) + "***@", text)
