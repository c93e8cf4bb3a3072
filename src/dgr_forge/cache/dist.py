"""sccache-dist from the client's side: the scheduler its config names, and `check()`,
which asks it with the client's own token (`sccache --dist-status` asks a page that needs
none, so a wrong token passes it and fails every compile). The token is never shown.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from msgspec import Struct

from dgr_forge.core.structs import repr_without
from dgr_forge.core.urls import mask, mask_text, remember_secret

# sccache's client token when the config has no [dist.auth] (a DANGEROUSLY_INSECURE pool)
INSECURE_TOKEN = "dangerously_insecure_client"
TIMEOUT = 5.0  # seconds for each request to the scheduler
_ALLOC = "/api/v1/scheduler/alloc_job"
_STATUS = "/api/v1/scheduler/status"


class DistClient(Struct, frozen=True):
    """The `[dist]` table of sccache's client config, as sccache reads it."""

    url: str  # may hold user info: shown only through `shown`
    shown: str
    auth: str  # token | oauth2_code_grant_pkce | oauth2_implicit | insecure
    token: str | None = None

    def __repr__(self) -> str:  # the url and token never shown
        return repr_without(self, frozenset({"url", "token"}))


class DistCheck(Struct):
    """What the scheduler said. `status`: ok | no-servers | unauthorized | unreachable |
    error | unchecked."""

    scheduler: str  # masked
    status: str
    detail: str
    fix: str | None = None
    servers: int | None = None
    cpus: int | None = None

    def line(self) -> str:
        text = f"sccache-dist scheduler {self.scheduler}: {self.detail}"
        return text + (f"\n  fix: {self.fix}" if self.fix else "")


def client(config: Mapping[str, Any]) -> DistClient | None:
    """The scheduler and credentials of sccache's parsed config; None without a scheduler."""
    dist = config.get("dist")
    url = dist.get("scheduler_url") if isinstance(dist, dict) else None
    if not isinstance(dist, dict) or not isinstance(url, str) or not url:
        return None
    auth = dist.get("auth")
    kind = auth.get("type") if isinstance(auth, dict) else None
    if not isinstance(auth, dict) or kind is None:
        return DistClient(url, mask(url), "insecure", INSECURE_TOKEN)
    if kind == "token" and isinstance(token := auth.get("token"), str):
        remember_secret(token)  # doctor, --json, build errors: masked in any encoding
        return DistClient(url, mask(url), "token", token)
    return DistClient(url, mask(url), str(kind))


_FIX_AUTH = (
    'set [dist.auth] type = "token" and token = the scheduler\'s client token (its '
    "[client_auth] token, or a JWT it validates) in the file SCCACHE_CONF names; or build "
    "without the pool (--cache ccache, or SCCACHE_CONF unset)"
)
_FIX_UNREACHABLE = (
    "start the scheduler (sccache-dist scheduler --config scheduler.conf) or fix "
    "scheduler_url; the scheduler itself speaks plain HTTP: use http:// on loopback or a "
    "trusted network, https:// only through a TLS proxy in front of it"
)


def clean(text: str, client: DistClient | None, limit: int = 200) -> str:
    """A scheduler's or sccache's own words, short, the token (and any URL user info) masked."""
    if client is not None and client.token:
        remember_secret(client.token)  # and its encodings, in every later message too
        text = text.replace(client.token, "***")  # as is, however short
    return mask_text(" ".join(text.split()))[:limit]


def check(client: DistClient, timeout: float = TIMEOUT) -> DistCheck:
    """Ask the scheduler: reachable, does it take this client's token, how many servers."""
    # (imported here: every build imports this module, few ask a scheduler)
    import ssl
    from http.client import HTTPConnection, HTTPException, HTTPSConnection

    shown = client.shown
    parts = urlsplit(client.url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return DistCheck(
            shown,
            "error",
            "scheduler_url is not http(s)://host:port/ (sccache accepts no other form)",
            fix="write scheduler_url as http://HOST:10600 (or https:// through a TLS proxy)",
        )
    if client.token is not None and any(ord(c) < 32 or ord(c) == 127 for c in client.token):
        return DistCheck(
            shown,
            "unauthorized",
            "the client token has a control character or a line break: no scheduler takes it",
            fix=_FIX_AUTH,
        )

    def request(method: str, path: str) -> tuple[int, bytes, str]:
        connect = HTTPSConnection if parts.scheme == "https" else HTTPConnection
        conn = connect(parts.hostname or "", parts.port, timeout=timeout)
        headers = {"Content-Length": "0"}
        if client.token is not None and path == _ALLOC:
            headers["Authorization"] = f"Bearer {client.token}"
        try:
            conn.request(method, path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read(4096), resp.reason
        finally:
            conn.close()

    try:
        code, body, reason = request("POST", _ALLOC)
        status = request("GET", _STATUS)
    except (OSError, HTTPException) as err:
        # https:// at a plain-HTTP port: a protocol error, or a handshake nobody answers
        if isinstance(err, ssl.SSLError) or (
            isinstance(err, TimeoutError) and "handshake" in str(err)
        ):
            why = clean(str(getattr(err, "reason", None) or err), client)
            what = f"TLS handshake failed ({why})"
        else:
            what = f"cannot be reached ({clean(str(err) or type(err).__name__, client)})"
        return DistCheck(
            shown, "unreachable", f"{what}; compiles will run locally", fix=_FIX_UNREACHABLE
        )
    said = clean(body.decode("utf-8", "replace"), client) or reason
    if code in (401, 403):
        if client.auth in ("oauth2_code_grant_pkce", "oauth2_implicit"):
            return DistCheck(
                shown,
                "unchecked",
                f"authentication is {client.auth}: sccache fetches its token interactively "
                "(`sccache --dist-auth`); the forge cannot check it",
            )
        what = "the default insecure token" if client.auth == "insecure" else "the client token"
        return DistCheck(
            shown,
            "unauthorized",
            f"refused {what} (HTTP {code}: {said}); every compile would fail",
            fix=_FIX_AUTH,
        )
    if code != 400:
        return DistCheck(
            shown,
            "error",
            f"answered HTTP {code} ({said}) to a job request: not an sccache-dist scheduler?",
            fix="point scheduler_url at the scheduler's public_addr (http://HOST:PORT)",
        )
    servers = cpus = None
    if status[0] == 200 and len(status[1]) == 24:  # bincode: num_servers, num_cpus, in_progress
        servers, cpus, _ = struct.unpack("<QQQ", status[1])
    if servers == 0:
        return DistCheck(
            shown,
            "no-servers",
            "accepts the token but has no build server; compiles will run locally",
            fix="start a build server (sudo sccache-dist server --config server.conf) whose "
            "scheduler_url names this scheduler",
            servers=0,
            cpus=cpus,
        )
    counted = f"{servers} build server(s), {cpus} CPUs" if servers is not None else "servers: ?"
    return DistCheck(shown, "ok", f"accepts the token; {counted}", servers=servers, cpus=cpus)
