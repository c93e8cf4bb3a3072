"""The shapes of identifiers every package checks: git object ids, sha256 digests, names."""

from __future__ import annotations

import re

HEX40 = re.compile(r"^[0-9a-f]{40}$")  # a git object id (sha1)
HEX64 = re.compile(r"^[0-9a-f]{64}$")  # a sha256 digest
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a plain directory or file name
