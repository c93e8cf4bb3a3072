"""URLs are data, never options: every URL the forge reads passes `check_url` before it
reaches git or requests, and everything shown to a person (messages, ``--json``, logs,
reports, a child's words) passes `mask_text` (`shown` also escapes control characters),
so a credential in a URL never leaves the process.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

from dgr_forge.core.errors import BadInput

GIT_SCHEMES = ("https", "http", "ssh", "git", "file")
HTTP_SCHEMES = ("https", "http")
MAX_URL_LEN = 8192

# [user@]host:path, the scp-like form git accepts; the host may not start with "-"
_SCP = r"(?:[A-Za-z0-9._~-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:(?!//)[^\s]*"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# A query parameter whose name holds one of these words (any case) carries a secret:
# token, private_token, hf_token, api_key, X-Amz-Signature, sig, password, ...
_SECRET_WORDS = ("token", "key", "secret", "sig", "password", "passwd", "auth", "credential")
_SECRET_PREFIXES = ("x-amz-", "x-goog-")
# a URL inside free text (git's "unable to access 'http://…?token=…/'"): up to a quote,
# a space or a bracket
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>`]+")
_USERINFO_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s@'\"]+)@")
# name=value pairs in text that is no URL (a query string alone, an environment dump)
_PAIR_IN_TEXT = re.compile(r"(?i)(?<![A-Za-z0-9_.])([A-Za-z0-9_.-]+)=([^&\s'\"#;,]+)")


# Secrets seen in URLs this process checked, which `mask_text` hides anywhere: a child may
# print one without its URL (git drops the user info, then shows "?session=VALUE").
_KNOWN_SECRETS: set[str] = set()
# shorter values would mask ordinary words everywhere ("main", "1"): a secret from 6
# characters, any other query value of a URL with user info from 12
_MIN_SECRET = 6
_MIN_OTHER = 12
_MIN_ENCODED = 8  # an encoded form shorter than this would mask ordinary text
_URLSAFE = str.maketrans("+/", "-_")


def remember_secrets(url: str) -> None:
    """Note `url`'s password, secret query values and (with user info) every long query
    value, to be masked in any later text."""
    if "@" not in url and "=" not in url:
        return  # the common case: nothing to remember
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    found: list[tuple[str, int]] = []
    if credentials := "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        user, colon, password = userinfo.partition(":")
        found += [(userinfo, _MIN_SECRET), (password if colon else user, _MIN_SECRET)]
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if secret_name(k):
            found.append((v, _MIN_SECRET))
        elif credentials:
            found.append((v, _MIN_OTHER))
    for value, minimum in found:
        for form in {value, unquote(value)}:
            if len(form) >= minimum:
                remember_secret(form)


def remember_secret(value: str) -> None:
    """Mask `value` from now on as is, URL-encoded, hex, and base64 (standard and URL-safe,
    at any alignment, as in a Basic auth header): DESIGN, no secret in any encoding."""
    if len(value) < _MIN_SECRET:
        return
    import base64  # only when a secret is seen: most runs see none

    raw = value.encode("utf-8", "surrogateescape")
    forms = {value, quote(value, safe=""), quote_plus(value, safe=""), raw.hex(), raw.hex().upper()}
    for lead in range(3):  # the secret's bytes start at offset 0, 1 or 2 of a 3-byte group
        enc = base64.b64encode(bytes(lead) + raw).decode("ascii")
        # only the characters whose 6 bits all come from the secret: whatever stands
        # before or after it in the echoed text changes the others
        core = enc[-(-4 * lead // 3) : 8 * (lead + len(raw)) // 6]
        forms |= {core, core.translate(_URLSAFE)}
    _KNOWN_SECRETS.update(f for f in forms if len(f) >= _MIN_ENCODED)


def secret_name(name: str) -> bool:
    low = name.lower()
    return low.startswith(_SECRET_PREFIXES) or any(w in low for w in _SECRET_WORDS)


def check_url(value: str, where: str, *, schemes: tuple[str, ...] = GIT_SCHEMES) -> str:
    """`value` if it is a URL of `schemes` (for git also scp-like and absolute paths), else
    BadInput naming `where` (``"--mirror"``)."""
    shown = mask(value) if isinstance(value, str) else repr(value)  # mask remembers its secrets

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
    if any(ord(c) < 32 or 127 <= ord(c) <= 159 for c in value):
        raise refuse("contains a control character (C0, DEL or C1) or NUL", "remove it")
    if value.startswith("-"):
        raise refuse("starts with '-' (git would read it as an option)", f"give a URL ({allowed})")
    if "::" in value.split("/", 1)[0]:
        raise refuse(
            "names a git remote helper transport ('<transport>::'), which can run commands",
            f"give a URL ({allowed})",
        )
    if m := _SCHEME.match(value):
        if (scheme := m.group(1).lower()) not in schemes:
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
    if git and (value.startswith("/") or re.fullmatch(_SCP, value)):
        return value
    raise refuse("is not an allowed URL", f"use {allowed}")


def mask(url: str) -> str:
    """`url` with user info, secret-named query values, and all query values of a URL with
    user info (whoever put a credential there may have put more) as ``***``."""
    remember_secrets(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or not parts.scheme or not parts.netloc:
        return _mask_pairs(_USERINFO_IN_TEXT.sub(lambda m: m.group(1) + "***@", url))
    netloc = parts.netloc
    if credentials := "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    if query := parts.query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if credentials or any(secret_name(k) for k, _ in pairs):
            masked = [(k, "***" if credentials or secret_name(k) else v) for k, v in pairs]
            query = urlencode(masked, safe="*")
        elif not pairs:  # no name=value form at all: nothing to tell secret from not
            query = _mask_pairs(query)
    fragment = _mask_pairs(parts.fragment) if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _mask_pairs(text: str) -> str:
    return _PAIR_IN_TEXT.sub(
        lambda m: f"{m.group(1)}=***" if secret_name(m.group(1)) else m.group(0), text
    )


def mask_text(text: str) -> str:
    """Free text with every credential masked: known secrets, each URL through `mask`, user
    info anywhere, and secret `name=value` pairs."""
    if not text:
        return text
    for secret in sorted(_KNOWN_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    text = _URL_IN_TEXT.sub(lambda m: mask(m.group(0)), text)
    text = _USERINFO_IN_TEXT.sub(lambda m: m.group(1) + "***@", text)
    return _mask_pairs(text)


def escape_controls(text: str) -> str:
    """C0 (but new line and tab), DEL and C1 controls as ``\\x1b``: input can neither move
    the cursor nor start an escape sequence."""
    if text.isprintable() or not any(_unsafe(c) for c in text):
        return text
    return "".join(f"\\x{ord(c):02x}" if _unsafe(c) else c for c in text)


def one_line(text: str) -> str:
    """A newline or tab in a path shown, never a second line."""
    return escape_controls(text.replace("\n", "\\n").replace("\t", "\\t"))


def _unsafe(c: str) -> bool:
    o = ord(c)
    return (o < 32 and c not in "\n\t") or 127 <= o <= 159


def shown(text: str) -> str:
    return escape_controls(mask_text(text))
