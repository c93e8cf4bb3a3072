"""Shared foundations: errors and exit codes, output, file system, locks, git, TOML checks."""
