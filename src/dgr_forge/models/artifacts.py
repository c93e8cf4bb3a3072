"""Exact model artifacts on the right disk: the names `artifacts` commands use, in one place.

The work lives in modules by concern:

* `dest`: the destination (the /home rule, free space, the provision lock, opening files
  without following planted symlinks);
* `hashing`: sha256 at disk speed, progress, the `.dgr-verified.json` cache;
* `download`: one file, resumable, retried, rate-bounded, atomic (`http`: the header
  deadline of every request); `provision`: all files, or those a `--layers` range needs
  (`subset`, also the destination's record of provisioned ranges);
* `verify`: size + sha256 + split headers (+ the layer map); `make_manifest`: a manifest
  from a directory; `map_headers`: the layer map added to a manifest (`remote`: split
  headers over HTTP Range requests);
* `gguf_split`: the bounded GGUF header reader and split consistency; `layermap` (ranges,
  tensor groups) and `mapping` (the map from the headers, checked).
"""

from __future__ import annotations

from dgr_forge.models.dest import (
    FORBIDDEN_ROOTS,
    LOCK_FILE,
    DestDir,
    check_destination,
    check_space,
    dest_lock,
    missing_bytes,
    nearest_existing,
)
from dgr_forge.models.download import FileOutcome, RetryPolicy
from dgr_forge.models.hashing import (
    CACHE_FILE,
    READ_BLOCK,
    VerifiedCache,
    default_jobs,
    hash_file,
    hash_many,
    human,
)
from dgr_forge.models.make_manifest import BuiltManifest, build_manifest, write_manifest
from dgr_forge.models.map_headers import ArtifactsMap, map_manifest
from dgr_forge.models.provision import ArtifactsProvision, provision
from dgr_forge.models.sources import check_mirror, source_url
from dgr_forge.models.verify import ArtifactsVerify, FileCheck, verify

__all__ = [
    "CACHE_FILE",
    "FORBIDDEN_ROOTS",
    "LOCK_FILE",
    "READ_BLOCK",
    "ArtifactsMap",
    "ArtifactsProvision",
    "ArtifactsVerify",
    "BuiltManifest",
    "DestDir",
    "FileCheck",
    "FileOutcome",
    "RetryPolicy",
    "VerifiedCache",
    "build_manifest",
    "check_destination",
    "check_mirror",
    "check_space",
    "default_jobs",
    "dest_lock",
    "hash_file",
    "hash_many",
    "human",
    "map_manifest",
    "missing_bytes",
    "nearest_existing",
    "provision",
    "source_url",
    "verify",
    "write_manifest",
]
