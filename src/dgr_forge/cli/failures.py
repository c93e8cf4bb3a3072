"""Exceptions that are not bugs, as the one-line message and exit code a person reads.

Used by the CLI boundary (`cli.main`) and by `cli.app.run`: an `OSError` names the path,
with a hint (exit 2 when the path is unusable as given: missing, not a directory,
permissions, read-only; exit 1 when the operation failed: disk full, I/O error); a NUL
byte, another `ValueError` or a too-deep input (`RecursionError`) is exit 2; a network
error is exit 1 (an invalid URL exit 2). ``DGR_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import errno
import os

from dgr_forge.core.errors import BadInput, Details, ForgeError, OperationFailed
from dgr_forge.core.urls import mask_text


def debug_enabled() -> bool:
    """DGR_DEBUG=1 (any value but empty or 0): show tracebacks as well."""
    return os.environ.get("DGR_DEBUG", "").strip() not in ("", "0")


# errno values that mean "this path cannot be used as given" (exit 2): the user fixes the
# path or its permissions. Anything else (ENOSPC, EIO, ...) is an operation that failed.
_PATH_ERRNOS = {
    errno.ENOENT: "check that the path exists (a directory on the way may be missing)",
    errno.ENOTDIR: "a component of the path is a file, not a directory",
    errno.EISDIR: "a directory is where a file is expected: move it away",
    errno.EACCES: "check the path's permissions, or choose another --workspace / --root",
    errno.EPERM: "check the path's permissions, or choose another --workspace / --root",
    errno.EROFS: "the file system is read-only: make it writable or choose another "
    "--workspace / --root",
    errno.ELOOP: "too many symbolic links (a link loop?): fix the links on the path",
    errno.ENAMETOOLONG: "shorten the path",
    errno.EEXIST: "something is already there: move it away",
    errno.ENXIO: "the path names a device or socket, not a file",
}
_FAILED_HINTS = {
    errno.ENOSPC: "free disk space (or raise the quota), then re-run",
    errno.EDQUOT: "free disk space (or raise the quota), then re-run",
    errno.EMFILE: "raise the open-files limit (ulimit -n), then re-run",
}


_URL_ERRORS = ("InvalidURL", "MissingSchema", "InvalidSchema", "URLRequired", "LocationParseError")


def _shown_path(name: object) -> str:
    text = os.fsdecode(name) if isinstance(name, str | bytes) else str(name)
    return repr(text) if any(ord(c) < 32 for c in text) else text


def as_forge_error(err: BaseException) -> ForgeError | None:
    """The message and exit code for an exception that is not a bug, else None."""
    module = type(err).__module__ or ""
    if module.startswith(("requests", "urllib3")):  # requests' errors are OSErrors too
        name = type(err).__name__
        text = mask_text(str(err))
        if name in _URL_ERRORS:
            return BadInput(
                f"invalid URL: {text}", hint="check the URL (and any redirect it gives)"
            )
        return OperationFailed(
            f"network error ({name}): {text}",
            hint="check the network and the server, then re-run: partial downloads resume",
        )
    if isinstance(err, OSError):
        code = err.errno or 0
        path = err.filename
        where = f"{_shown_path(path)}: " if path is not None else ""
        also = f" -> {_shown_path(err.filename2)}" if err.filename2 is not None else ""
        what = err.strerror or str(err)
        message = mask_text(f"{where}{what}{also}")  # a path may be a URL with a password
        if code in _PATH_ERRNOS and path is not None:
            return BadInput(message, hint=_PATH_ERRNOS[code], details={"path": _shown_path(path)})
        hint = _FAILED_HINTS.get(
            code, "re-run; if it persists, re-run with DGR_DEBUG=1 and report the output"
        )
        details: Details = {"path": _shown_path(path)} if path is not None else {}
        return OperationFailed(message, hint=hint, details=details)
    if isinstance(err, RecursionError):
        return BadInput(
            "an input is nested too deeply to read",
            hint="check the files and values given: no real input nests this deep",
        )
    if isinstance(err, ValueError):
        text = mask_text(str(err))
        if "null byte" in text or "NUL" in text:
            return BadInput(
                "a path or value contains a NUL byte", hint="remove the NUL byte from the argument"
            )
        return BadInput(f"invalid value: {text}", hint="check the arguments and input files")
    return None
