"""`d(text)`: a JSON key's meaning, written where the key is declared. The `--json` types
(`cli.results`) and the records whose shapes they share (`attest.certshapes`: a
certification's figures, hardware identity and steps) declare each key once with it;
`python -m dgr_forge.cli.schemas` writes it into docs/json-schema/ and docs/json.md.
"""

from __future__ import annotations

from msgspec import Meta


def d(text: str) -> Meta:
    return Meta(description=text)


SHA = d("a sha256, hex")
