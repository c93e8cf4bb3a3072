"""Rewriting the upstream manifest in place with tomlkit: values change, the user's
comments, blank lines and key order stay (docs/design.md, "Manifest").
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import tomlkit
from tomlkit.items import AoT, Comment, Table, Whitespace

from dgr_forge.core.errors import BadInput
from dgr_forge.upstream.manifest import PatchEntry

_NUMBER = re.compile(r"^\d{4}-")


def _parse(text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except Exception as err:  # tomlkit raises several unrelated types
        raise BadInput(f"manifest is not valid TOML: {err}") from None


def with_build_number(text: str, number: int) -> str:
    doc = _parse(text)
    upstream = doc["upstream"]
    assert isinstance(upstream, Table)
    if upstream.get("build_number") != number:
        upstream["build_number"] = number
    return tomlkit.dumps(doc)


def updated_text(
    text: str,
    series: Sequence[PatchEntry],
    result_tree: str,
    *,
    upstream_commit: str | None = None,
    upstream_tree: str | None = None,
    upstream_url: str | None = None,
    upstream_build_number: int | None = None,
) -> str:
    """The manifest text with the series, result tree (and optionally the pin) replaced.
    A [[patches.series]] table is reused for the entry of the same slug, else of the same
    position, so comments written next to a patch stay with it."""
    doc = _parse(text)
    pin: dict[str, str | int | None] = {
        "commit": upstream_commit,
        "tree": upstream_tree,
        "url": upstream_url,
        "build_number": upstream_build_number,
    }
    if given := {key: value for key, value in pin.items() if value is not None}:
        upstream = doc["upstream"]
        assert isinstance(upstream, Table)
        moved = upstream_commit is not None and upstream.get("commit") != upstream_commit
        if moved and upstream_build_number is None and "build_number" in upstream:
            del upstream["build_number"]  # the old pin's number: never a wrong one
        upstream.update(given)

    patches = doc.setdefault("patches", tomlkit.table())
    assert isinstance(patches, Table)
    old = patches.get("series")
    old_tables: list[Table] = list(old) if isinstance(old, AoT) else []

    by_slug: dict[str, list[Table]] = {}
    for t in old_tables:
        by_slug.setdefault(_NUMBER.sub("", str(t.get("file", ""))), []).append(t)
    chosen: list[Table | None] = []
    for entry in series:
        free = by_slug.get(_NUMBER.sub("", entry.file))
        chosen.append(free.pop(0) if free else None)
    taken = {id(t) for t in chosen}
    for pos, table in enumerate(chosen):
        if table is None and pos < len(old_tables) and id(old_tables[pos]) not in taken:
            chosen[pos] = old_tables[pos]

    unchanged = [id(t) for t in chosen] == [id(t) for t in old_tables]
    tables: list[Table] = []
    for entry, maybe in zip(series, chosen, strict=True):
        table = maybe if maybe is not None else tomlkit.table()
        for key, value in (("file", entry.file), ("sha256", entry.sha256), ("tree", entry.tree)):
            if value is not None and table.get(key) != value:
                table[key] = value
        tables.append(table)
    if not unchanged:
        _carry_comments(patches, old_tables)
        for prev, table in itertools.pairwise(tables):
            if not any(table is t for t in old_tables):
                # a new table brings its own blank line: the one that ended the previous
                # table (above [patches.result], say) would make two
                body = prev.value.body
                while body and body[-1][0] is None and isinstance(body[-1][1], Whitespace):
                    body.pop()
        patches.pop("series", None)
        if tables:
            aot = tomlkit.aot()
            aot.extend(tables)
            # before [patches.result], for readability (tomlkit appends at the end)
            result = patches.pop("result", None)
            patches["series"] = aot
            if result is not None:
                patches["result"] = result

    if not isinstance(result := patches.get("result"), Table):
        patches["result"] = result = tomlkit.table()
    if result.get("tree") != result_tree:
        result["tree"] = result_tree
    return _drop_stale_comments(tomlkit.dumps(doc), has_series=bool(series))


_SECTION = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?", re.M)
_TREE_KEY = re.compile(r"^\s*tree\s*=", re.M)
_TREE_PLACEHOLDER = re.compile(r"^\s*#\s*tree\s*=.*\n?", re.M)
_EMPTY_SERIES_NOTE = re.compile(r"^\s*#[^\n]*series is empty[^\n]*\n?", re.M)


def _drop_stale_comments(text: str, *, has_series: bool) -> str:
    """Comments false after this write: the `# tree = ...` placeholder once [upstream] has
    a `tree`, the "series is empty" note once it is not."""
    if has_series:
        text = _EMPTY_SERIES_NOTE.sub("", text)
    heads = list(_SECTION.finditer(text))
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        if head.group(1) == "upstream":
            start, end = head.end(), after.start() if after else len(text)
            body = text[start:end]
            if _TREE_KEY.search(body):
                text = text[:start] + _TREE_PLACEHOLDER.sub("", body) + text[end:]
            break
    return text


def _carry_comments(patches: Table, tables: Sequence[Table]) -> None:
    """Comments above a [[patches.series]] header, which tomlkit stores at the end of the
    previous table, moved into the entry's own leading text: they travel with it."""
    if tables:
        body = patches.value.body
        at = next(i for i, (k, _v) in enumerate(body) if k is not None and k.key == "series")
        start = at
        while start > 0 and body[start - 1][0] is None:
            if not isinstance(body[start - 1][1], Comment | Whitespace):
                break
            start -= 1
        if any(isinstance(v, Comment) for _k, v in body[start:at]):
            lead = "".join(v.as_string() for _k, v in body[start:at])
            del body[start:at]
            # indexes shifted: rebuild tomlkit's key map
            patches.value._map = {k: i for i, (k, _v) in enumerate(body) if k is not None}
            tables[0].trivia.indent = lead.lstrip("\n") + tables[0].trivia.indent
    for prev, table in itertools.pairwise(tables):
        body = prev.value.body
        moved: list[str] = []
        while body and body[-1][0] is None and isinstance(body[-1][1], Comment | Whitespace):
            moved.insert(0, body.pop()[1].as_string())
        table.trivia.indent = "".join(moved) + table.trivia.indent
