"""Certification: a lane's suite run on this host, judged, signed and advertised.

`suite` (a recipe's `[certify]`, as data), `run` (the steps, bounded, on the report's own
binaries), `parsers` (test-backend-ops, llama-bench, ctest), `hardware` (the one probe and
the hardware-class rule), `shapes` (what a record and the `--json` outputs hold), `records`
(the one record format, written and read), `trust` (the report check, the bound inputs, the
trust anchors), `advertise` (what `lanes` shows), `sequence` (the order of one `certify`).
"""
