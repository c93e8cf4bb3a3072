"""The compiler cache a lane build uses: which tool, backend and mode, decided by `select()`
alone (the rules: docs/compiler-cache.md); remote settings are only ever shown masked.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sysconfig
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge.cache import dist as sccache_dist
from dgr_forge.cache.dist import DistCheck
from dgr_forge.core import proc
from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import refuse_shared
from dgr_forge.core.structs import d, repr_without
from dgr_forge.core.urls import mask, mask_text

if TYPE_CHECKING:
    from dgr_forge.host.doctor import Doctor


CHOICES = ("auto", "ccache", "sccache", "off")
MODES = ("rw", "ro")
INSTALL_HINT = "pip install 'dgr-forge[cache]'"

# sccache's remote backends: the variable that turns each on (sccache's own names), and
# whether its value names a place (shown masked; the others only say which backend is on)
_SCCACHE_BACKENDS: tuple[tuple[str, str, bool], ...] = (
    ("SCCACHE_REDIS_ENDPOINT", "redis", True),
    ("SCCACHE_REDIS_CLUSTER_ENDPOINTS", "redis", False),
    ("SCCACHE_REDIS", "redis", True),
    ("SCCACHE_MEMCACHED_ENDPOINT", "memcached", True),
    ("SCCACHE_MEMCACHED", "memcached", True),
    ("SCCACHE_BUCKET", "s3", True),
    ("SCCACHE_GCS_BUCKET", "gcs", True),
    ("SCCACHE_AZURE_CONNECTION_STRING", "azure", False),
    ("SCCACHE_WEBDAV_ENDPOINT", "webdav", True),
    ("SCCACHE_GHA_ENABLED", "gha", False),
    ("SCCACHE_OSS_BUCKET", "oss", True),
    ("SCCACHE_COS_BUCKET", "cos", True),
)
_KINDS = ("local", *dict.fromkeys(kind for _, kind, _ in _SCCACHE_BACKENDS))
_SCCACHE_RW_MODES = tuple(f"SCCACHE_{kind.upper()}_RW_MODE" for kind in _KINDS)
_FALSE = ("0", "false", "no", "disable")  # CCACHE_READONLY's values that are not set
_MAX_CONFIG = 1 << 20  # bytes of an sccache config file we read
_MAX_UDS = 107  # a unix socket path longer than this does not fit sockaddr_un


class CacheSetup(Struct, frozen=True):
    tool: str | None = None  # "ccache" | "sccache" | None (no cache)
    launcher: str | None = None  # absolute path of the launcher binary
    version: str = ""
    backend: str = "none"  # "local", or the remote backend, masked (never a credential)
    mode: str = "off"  # "rw" | "ro" | "off"
    distributed: str | None = None  # sccache-dist scheduler, masked
    # for the configure and build processes: may hold a credential, so never shown
    env: dict[str, str] = field(default_factory=dict)
    # for the sccache server alone (cache/session.py starts it): where the sccache-dist
    # client keeps its toolchain packages (XDG_CACHE_HOME, under DGR_CACHE_DIR)
    server_env: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # the environments never shown
        return repr_without(self, frozenset({"env", "server_env"}))


class Distributed(Struct, kw_only=True, rename="camel"):
    """what ran on the sccache-dist pool in this build"""

    scheduler: Annotated[str, d("the scheduler, masked")]
    remote_compiles: Annotated[int | None, d("compiles run on the pool")]
    local_compiles: Annotated[int | None, d("compiles run here")]


class Cache(Struct, kw_only=True):
    """the compiler cache this build used; the same object is the report's `compilerCache`
    (see docs/distributed-compilation.md)"""

    tool: Annotated[str | None, d("`ccache`, `sccache`, or null: no cache")]
    version: Annotated[str, d('the tool\'s version (`""` when none)')]
    backend: Annotated[str, d("`none`, `local`, or `local + remote <masked URL or kind>`")]
    mode: Annotated[str, d("`rw`, `ro` or `off`")]
    hits: Annotated[
        int | UnsetType | None,
        d("this build's cache hits (with a cache; null when the tool would not say)"),
    ] = UNSET
    misses: Annotated[int | UnsetType | None, d("this build's cache misses (with a cache)")] = UNSET
    distributed: Annotated[
        Distributed | str | UnsetType | None,
        d(
            "with an sccache-dist scheduler: after a compile `scheduler` (masked), "
            "`remoteCompiles`, `localCompiles`; before one (a lane that stopped earlier), the "
            "scheduler alone"
        ),
    ] = UNSET

    @classmethod
    def of(cls, setup: CacheSetup) -> Cache:
        """What the report says of the cache before a compile: no credential, no path."""
        shared = {k: getattr(setup, k) for k in ("tool", "version", "backend", "mode")}
        return cls(**shared, distributed=setup.distributed or UNSET)


OFF = CacheSetup()


def check_choice(
    choice: str, mode: str, where: str = "--cache", mode_where: str = "--cache-mode"
) -> None:
    if choice not in CHOICES:
        raise BadInput(
            f"{where} {choice!r}: not a compiler cache choice",
            hint="use one of " + ", ".join(CHOICES) + " (flag --cache or DGR_CACHE)",
            details={"cache": choice},
        )
    if mode not in MODES:
        raise BadInput(
            f"{mode_where} {mode!r}: not a cache mode",
            hint="use rw (read and write) or ro (read only) (flag --cache-mode or DGR_CACHE_MODE)",
            details={"cache_mode": mode},
        )


def select(
    doctor: Doctor,
    choice: str = "auto",
    mode: str = "rw",
    *,
    workspace: Path | None = None,
    root: Path | None = None,
    environ: Mapping[str, str] | None = None,
    worker: Path | None = None,
) -> CacheSetup:
    """The cache for this build. `auto` takes sccache when a remote backend or scheduler of
    it is configured, else ccache, else sccache, else none; `workspace`, `root` and a path
    `worker` are the base directories that make cache keys path-independent."""
    check_choice(choice, mode)
    if choice == "off":
        return OFF
    environ = os.environ if environ is None else environ
    if choice == "auto":
        dist = sccache_dist.client(sccache_config(environ))
        remote = _sccache_backend(environ) is not None or dist is not None
        order = ("sccache", "ccache") if remote else ("ccache", "sccache")
        choice, path = next(((n, p) for n in order if (p := locate(doctor, n))), ("", None))
        if path is None:
            return OFF
    elif (path := locate(doctor, choice)) is None:
        raise BadInput(
            f"--cache/DGR_CACHE {choice}: {choice} is not installed (not on PATH, not in this "
            "Python's scripts directory)",
            hint=f"{INSTALL_HINT}, or install {choice} on PATH, or build with --cache auto|off",
            details={"cache": choice},
        )
    version = doctor.version(choice) or ""
    # workspace, root and a path worker, resolved as `build` maps them; one that cannot be
    # written in SCCACHE_BASEDIRS is left out (its hits then need the same path)
    found = dict.fromkeys(p.resolve() for p in (workspace, root, worker) if p is not None)
    bases = [p for p in found if not {os.pathsep, "\0", "\n"} & set(str(p))]
    # the user's own read-only setting is never weakened, and is recorded
    if choice == "ccache" and environ.get("CCACHE_READONLY", "0").lower() not in _FALSE:
        mode = "ro"
    if choice == "sccache" and environ.get("SCCACHE_LOCAL_RW_MODE", "").upper() == "READ_ONLY":
        mode = "ro"
    if choice == "ccache":
        env, backend = _ccache_env(path, mode, bases, environ)
        return CacheSetup(choice, path, version, backend, mode, None, env)
    env, backend, scheduler = _sccache_env(mode, bases, workspace, environ)
    server_env = {"XDG_CACHE_HOME": str(where)} if (where := cache_dir(environ, workspace)) else {}
    if where is not None and "SCCACHE_DIR" not in environ:
        # unless the config file names sccache's local cache directory itself (read only now)
        caches = sccache_config(environ).get("cache")
        disk = caches.get("disk") if isinstance(caches, dict) else None
        if not (isinstance(disk, dict) and disk.get("dir")):
            env["SCCACHE_DIR"] = str(where / "sccache")
    return CacheSetup(choice, path, version, backend, mode, scheduler, env, server_env)


def locate(doctor: Doctor, name: str) -> str | None:
    """The tool on PATH (the doctor's probe), else from the 'cache' extra's wheel beside
    this Python (on PATH only in an activated venv), recorded in the doctor's result."""
    if name not in doctor.probes.tools:
        return None
    if (result := doctor.tool(name)).found and result.path:
        return result.path
    scripts = Path(sysconfig.get_path("scripts"))
    for exe in doctor.probes.tools[name].executables:
        if (candidate := scripts / exe).is_file() and os.access(candidate, os.X_OK):
            result.found, result.path = True, str(candidate)
            result.detail = f"{candidate} (the 'cache' extra's wheel)"
            return result.path
    return None


def cache_dir(environ: Mapping[str, str], workspace: Path | None) -> Path | None:
    """Where sccache's local cache and the sccache-dist client's packages go: DGR_CACHE_DIR,
    else `<workspace>/cache` (never the home directory of whoever runs the build)."""
    if not (raw := environ.get("DGR_CACHE_DIR", "")):
        if workspace is None:
            return None
        path = workspace.absolute() / "cache"
        if path.is_symlink():  # the forge writes here: never through a planted link
            raise BadInput(
                f"{path}: the workspace's cache directory is a symbolic link",
                hint="remove the link (the forge recreates the directory), or set DGR_CACHE_DIR",
            )
        # trusted as DGR_CACHE_DIR is: whoever can write it chooses the object files
        refuse_shared(workspace.absolute(), "workspace")
        refuse_shared(path, "cache directory")
        return path
    if any(ord(c) < 32 or ord(c) == 127 for c in raw) or len(raw) > 4096:
        raise BadInput(
            "DGR_CACHE_DIR: has a control character or NUL, or is too long",
            hint="set DGR_CACHE_DIR to a directory path (or unset it: <workspace>/cache)",
        )
    path = Path(os.path.abspath(raw)).resolve()
    try:
        st = path.stat()
    except FileNotFoundError:
        return path
    except OSError as err:
        raise BadInput(f"DGR_CACHE_DIR {raw!r}: {err.strerror}", hint="fix DGR_CACHE_DIR") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"DGR_CACHE_DIR {raw!r}: not a directory", hint="name a directory")
    if st.st_uid != os.getuid() or st.st_mode & 0o002:
        # whoever can write the cache chooses the object files this build links
        raise BadInput(
            f"DGR_CACHE_DIR {raw!r}: owned by another user or writable by everyone",
            hint=f"use a directory of your own (chmod o-w {path}), or unset DGR_CACHE_DIR",
        )
    return path


def _ccache_env(
    path: str, mode: str, bases: list[Path], environ: Mapping[str, str]
) -> tuple[dict[str, str], str]:
    env: dict[str, str] = {}
    if bases and "CCACHE_BASEDIR" not in environ:
        # one base directory only: the common parent, unless "/" (even /usr/include relative)
        common = Path(os.path.commonpath([str(b) for b in bases]))
        env["CCACHE_BASEDIR"] = str(common if common.parent != common else bases[0])
    if "CCACHE_COMPILERCHECK" not in environ:
        env["CCACHE_COMPILERCHECK"] = "content"  # same compiler on another machine hits
    if not {"CCACHE_DEPEND", "CCACHE_NODEPEND"} & environ.keys():
        # depend mode: a miss takes the includes from the compiler's own -MD depfile (CMake's
        # Ninja generator always asks for one) instead of running the preprocessor first,
        # the cost of a cold build with the cache (about 1.2x raw without it)
        env["CCACHE_DEPEND"] = "1"
    remote = _ccache_remote(path, environ)
    if mode == "ro":
        env["CCACHE_READONLY"] = "1"
        if remote:
            remote = " ".join(
                e if "read-only" in e.split("|")[1:] else e + "|read-only" for e in remote.split()
            )
            env["CCACHE_REMOTE_STORAGE"] = remote
    backend = "local"
    if remote:
        # each URL masked, its attributes (a bearer token, a header) dropped but read-only
        shown = [e.split("|") for e in remote.split()]
        backend = "local + remote " + " ".join(
            mask(url) + ("|read-only" if "read-only" in attrs else "") for url, *attrs in shown
        )
        if environ.get("CCACHE_REMOTE_ONLY", "").lower() in ("1", "true"):
            backend = backend.replace("local + ", "", 1)
    return env, backend


_CCACHE_SCHEMES = ("http", "https", "redis", "redis+unix", "file", "crsh")


def _check_remote(value: str, where: str) -> str:
    """Each space-separated `URL|attributes` entry has a scheme ccache knows (exit 2, not a
    failing compile on every file)."""
    if len(value) > 65536 or any(ord(c) < 32 and c not in " \t" for c in value):
        raise BadInput(
            f"{where}: too long or has a control character",
            hint="fix the remote storage setting (ccache: URL[|attr=value...], space-separated)",
        )
    for entry in value.split():
        url = entry.split("|", 1)[0]
        scheme, sep, rest = url.partition(":")
        if not sep or scheme.lower() not in _CCACHE_SCHEMES or not rest or url.startswith("-"):
            raise BadInput(
                f"{where}: {mask(url)!r} is not a remote storage URL",
                hint="use " + ", ".join(f"{s}:" for s in _CCACHE_SCHEMES) + " URLs",
                details={"setting": where},
            )
    return value


def _ccache_remote(path: str, environ: Mapping[str, str]) -> str:
    """ccache's remote storage as it will use it: the variable, else its config files."""
    for var in ("CCACHE_REMOTE_STORAGE", "CCACHE_SECONDARY_STORAGE"):
        if environ.get(var, "").strip():
            return _check_remote(environ[var].strip(), var)
    try:
        done = proc.capture([path, "--get-config", "remote_storage"], env=environ, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    value = done.stdout.strip() if done.returncode == 0 else ""
    return _check_remote(value, "ccache.conf remote_storage") if value else ""


def sccache_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """sccache's config file (SCCACHE_CONF, else ~/.config/sccache/config), or {}."""
    if not (conf := environ.get("SCCACHE_CONF")):
        dot_config = Path(environ.get("HOME", "~")).expanduser() / ".config"
        conf = str(Path(environ.get("XDG_CONFIG_HOME") or dot_config) / "sccache" / "config")
    try:
        with Path(conf).open("rb") as fh:
            data = fh.read(_MAX_CONFIG + 1)
        return {} if len(data) > _MAX_CONFIG else tomllib.loads(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _sccache_backend(environ: Mapping[str, str]) -> str | None:
    """The remote backend sccache will use, masked; None when only the local disk."""
    for var, kind, shown in _SCCACHE_BACKENDS:
        value = environ.get(var, "").strip()
        if value and not (kind == "gha" and value.lower() in ("0", "false", "off")):
            return f"{kind} {', '.join(mask(v) for v in value.split(','))}" if shown else kind
    if isinstance(caches := sccache_config(environ).get("cache"), dict):
        for kind, table in caches.items():
            if kind == "disk" or not isinstance(table, dict):
                continue
            where = table.get("url") or table.get("endpoint") or table.get("bucket")
            return f"{kind} {mask(where)}" if isinstance(where, str) else str(kind)
    return None


def _sccache_env(
    mode: str, bases: list[Path], workspace: Path | None, environ: Mapping[str, str]
) -> tuple[dict[str, str], str, str | None]:
    env: dict[str, str] = {}
    # only directories that exist: sccache refuses to start on a missing one
    if "SCCACHE_BASEDIRS" not in environ and (found := [str(b) for b in bases if b.is_dir()]):
        env["SCCACHE_BASEDIRS"] = os.pathsep.join(found)
    if mode == "ro":
        env.update(dict.fromkeys(_SCCACHE_RW_MODES, "READ_ONLY"))
    # A server reads its configuration when it starts: one per configuration, on a socket
    # in the workspace, makes the settings above the ones used.
    if workspace is not None and "SCCACHE_SERVER_UDS" not in environ:
        import tempfile  # not on a no-op's path

        own = {k: v for k, v in environ.items() if k.startswith("SCCACHE_")}
        key = hashlib.sha256(repr(sorted({**own, **env}.items())).encode()).hexdigest()[:16]
        # for a workspace path too long for a socket, a private directory in the system's tmp
        dirs = (
            workspace.resolve() / "sccache",
            Path(tempfile.gettempdir()) / f"dgr-sccache-{os.getuid()}",
        )
        for sock in (d / f"{key}.sock" for d in dirs):
            if len(str(sock)) <= _MAX_UDS and _private_dir(sock.parent):
                env["SCCACHE_SERVER_UDS"] = str(sock)
                break
    backend = _sccache_backend(environ)
    dist = sccache_dist.client(sccache_config(environ))
    return env, f"local + remote {backend}" if backend else "local", dist.shown if dist else None


def _private_dir(path: Path) -> bool:
    """`path` is (now) a real directory of ours nobody else can enter: a socket there cannot
    be swapped for someone else's server (who would then serve object files)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


class CacheTool(Struct):
    """a compiler cache tool on this host"""

    found: Annotated[bool, d("found on this host")]
    path: Annotated[str | None, d("the launcher")]
    version: Annotated[str | None, d("its version")]


class DoctorCache(Struct, kw_only=True):
    """what `build` would use now as compiler cache (from `DGR_CACHE` / `DGR_CACHE_MODE`,
    default `auto` / `rw`); never a credential: URLs are masked"""

    choice: Annotated[
        str,
        d(
            "`auto`, `ccache`, `sccache` or `off` (as asked; an unknown word is reported in "
            "`problem`)"
        ),
    ]
    tool: Annotated[str | UnsetType | None, d("`ccache` or `sccache`; null: no cache")] = UNSET
    launcher: Annotated[str | UnsetType | None, d("the launcher's file name")] = UNSET
    path: Annotated[
        str | UnsetType | None, d("where the launcher was found (absent when `problem` is set)")
    ] = UNSET
    version: Annotated[str | UnsetType, d('the tool\'s version (`""` when none)')] = UNSET
    backend: Annotated[
        str | UnsetType,
        d(
            "`none`, `local`, or `local + remote <masked URL or backend kind>` (`|read-only` "
            "marks a read-only ccache remote)"
        ),
    ] = UNSET
    mode: Annotated[str | UnsetType, d("`rw`, `ro` or `off`")] = UNSET
    distributed: Annotated[str | UnsetType | None, d("the sccache-dist scheduler URL, masked")] = (
        UNSET
    )
    dist: Annotated[
        DistCheck | UnsetType | None,
        d(
            "with a scheduler: what it answered when asked with the client's token: "
            "`scheduler` (masked), `status` (`ok`, `no-servers`, `unauthorized`, "
            "`unreachable`, `error`, `unchecked`), `detail`, `fix` (null when ok), "
            "`servers`, `cpus` (null when unknown); never the token"
        ),
    ] = UNSET
    tools: Annotated[dict[str, CacheTool], d("per tool: `ccache`, `sccache`")]
    problem: Annotated[
        str | None,
        d(
            "why `build` would refuse the cache settings (exit 2 there), e.g. an explicit tool "
            "that is not installed"
        ),
    ]


def describe(doctor: Doctor) -> DoctorCache:
    """What `doctor` says about the cache: every tool found, and what `build` would use."""
    paths = {name: locate(doctor, name) for name in ("ccache", "sccache")}
    tools = {n: CacheTool(bool(p), p, doctor.version(n) if p else None) for n, p in paths.items()}
    choice = os.environ.get("DGR_CACHE") or "auto"
    mode = os.environ.get("DGR_CACHE_MODE") or "rw"
    problem = None
    try:
        setup = select(doctor, choice, mode, environ=os.environ)
    except BadInput as err:
        setup, problem = OFF, mask_text(str(err))
    # asks the scheduler, with the client's token
    client = sccache_dist.client(sccache_config(os.environ)) if setup.distributed else None
    return DoctorCache(
        choice=choice,
        tool=setup.tool,
        launcher=Path(setup.launcher).name if setup.launcher else None,
        path=UNSET if problem else setup.launcher,
        version=setup.version,
        backend=setup.backend,
        mode=setup.mode,
        distributed=setup.distributed,
        tools=tools,
        problem=problem,
        dist=UNSET if problem else sccache_dist.check(client) if client else None,
    )


def summary(info: DoctorCache) -> str:
    if info.problem:
        return f"compiler cache: {info.problem}"
    if not info.tool:
        found = [n for n, t in info.tools.items() if t.found]
        why = "off (--cache off / DGR_CACHE=off)" if info.choice == "off" else "none found"
        return f"compiler cache: {why}" + ("" if found else f"; install: {INSTALL_HINT}")
    line = (
        f"compiler cache: {info.tool} {info.version} ({info.path}), "
        f"backend {info.backend}, mode {info.mode}"
    )
    if info.distributed:
        line += f", distributed via {info.distributed}"
    return line + (f"\n  {info.dist.line()}" if info.dist else "")
