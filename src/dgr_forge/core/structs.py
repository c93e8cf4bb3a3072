"""What every typed record shares: `Form` (a command's result: the same Struct is its
`--json` object, the source of its schema and of docs/json.md), `Nested`, `d(text)` (a
key's meaning, written where it is declared), and the per-field options that
`msgspec.Struct` does not have, written out once.

A form's fields come after the envelope (`ok`, `exit_code`, `command`, added by the CLI);
a field without a default is required, `UNSET` marks one that may be absent, `X | None`
one that may be null. A form is closed (`forbid_unknown_fields`); a nested object is open
to new keys, and its docstring is its meaning (a field of that type says it only to
differ).

The records on a no-op command's import path are Structs, not dataclasses: a dataclass
costs 0.4-1.1 ms to create (its methods are generated and exec'd), a Struct about 0.02 ms.
A dataclass field could be left out of `repr` (a credential), of `hash` (an unhashable
dict) or of `==`; a Struct whose dataclass did that defines the method with these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, TypeVar

import msgspec
from msgspec import Meta, Struct


def d(text: str) -> Meta:
    """A JSON key's meaning (`python -m dgr_forge.cli.schemas` writes it into the docs)."""
    return Meta(description=text)


SHA = d("a sha256, hex")
COMMIT = d("a full git commit id")


T = TypeVar("T", bound=Struct)


class Form(Struct, kw_only=True, forbid_unknown_fields=True):
    """One shape of a command's `--json` object (its keys after the envelope)."""

    title: ClassVar[str] = ""
    may_fail: ClassVar[bool] = False  # `ok` may be false with these keys
    note: ClassVar[str] = ""


class Nested(Struct, kw_only=True):
    """A nested object: described and typed, open to new siblings."""


def _values(obj: Any, left_out: frozenset[str]) -> Iterator[tuple[str, Any]]:
    for name in obj.__struct_fields__:
        if name not in left_out:
            yield name, getattr(obj, name)


def lenient(cls: type[T], data: Any) -> T | None:
    """`data` decoded as `cls` (`msgspec.convert`) field by field, for a file the forge
    wrote and never trusts (state.json): a field whose value does not decode as its type
    (a hand edit, a damaged or older file) takes its default; None when a required field
    is missing or wrong, or `data` is no object. Unknown keys are ignored."""
    if not isinstance(data, dict):
        return None
    values: dict[str, object] = {}
    for f in msgspec.structs.fields(cls):
        if f.encode_name in data:
            try:
                values[f.name] = msgspec.convert(data[f.encode_name], f.type)
            except msgspec.ValidationError:
                if f.required:
                    return None
    try:
        return cls(**values)
    except TypeError:  # a required field absent
        return None


def repr_without(obj: Any, hidden: frozenset[str]) -> str:
    """The dataclass-style repr, `Name(a=1, b='x')`, without the `hidden` fields."""
    shown = ", ".join(f"{name}={value!r}" for name, value in _values(obj, hidden))
    return f"{type(obj).__qualname__}({shown})"


def values_without(obj: Any, left_out: frozenset[str]) -> tuple[Any, ...]:
    """The fields' values in order, less `left_out`: what a dataclass's `==` compares."""
    return tuple(value for _, value in _values(obj, left_out))


def hash_without(obj: Any, skipped: frozenset[str]) -> int:
    """The hash a frozen dataclass gives: of its fields' values in order, less `skipped`."""
    return hash(values_without(obj, skipped))
