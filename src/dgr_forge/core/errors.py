"""Exit codes and the one exception type every command raises (DESIGN.md, "Commands")."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the operation failed: build failed, verification failed
    BAD_INPUT = 2  # bad manifest, bad flag, missing file, lane not buildable here
    NEEDS_HUMAN = 3  # patch/rebase conflict, dirty workspace


class ForgeError(Exception):
    """A refusal or failure the user should read: what, where, and how to fix it."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        exit_code: ExitCode | None = None,
        details: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code
        # machine-readable extras for --json (files, patch names, ...)
        self.details: dict[str, object] = details or {}

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class OperationFailed(ForgeError):
    exit_code = ExitCode.FAILED


class BadInput(ForgeError):
    exit_code = ExitCode.BAD_INPUT


class NeedsHuman(ForgeError):
    exit_code = ExitCode.NEEDS_HUMAN
