"""The `--json` form of `certify`: the record's shape is `certify.shapes`'."""

from __future__ import annotations

from dgr_forge.certify.shapes import Certified
from dgr_forge.cli.results.base import Form


class Certify(Form, Certified, kw_only=True):
    title = "certify --lane L | --attested FILE --build-report R"
    note = "an `attested` record is shown `attested, not checked`: never advertised"
