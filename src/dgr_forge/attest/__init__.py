"""Provenance: signing keys, DSSE, SLSA statements, build reports, hardware certification."""
