"""Per-field options that `msgspec.Struct` does not have, written out once.

The records on a no-op command's import path are Structs, not dataclasses: a dataclass
costs 0.4-1.1 ms to create (its methods are generated and exec'd), a Struct about 0.02 ms.
A dataclass field could be left out of `repr` (a credential), of `hash` (an unhashable
dict) or of `==`; a Struct whose dataclass did that defines the method with these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _values(obj: Any, left_out: frozenset[str]) -> Iterator[tuple[str, Any]]:
    for name in obj.__struct_fields__:
        if name not in left_out:
            yield name, getattr(obj, name)


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


def asdict(obj: Any) -> dict[str, Any]:
    """`dataclasses.asdict` for a Struct: nested Structs, lists, tuples and dicts become
    new plain ones, anything else a deep copy (`msgspec.structs.asdict` is shallow)."""
    return {name: _copied(value) for name, value in _values(obj, frozenset())}


# what copy.deepcopy hands back as it is
_ATOMIC = frozenset({str, int, float, bool, bytes, type(None)})


def _copied(value: Any) -> Any:
    if type(value) in _ATOMIC:
        return value
    if hasattr(type(value), "__struct_fields__"):
        return asdict(value)
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        items = [_copied(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return type(value)((_copied(k), _copied(v)) for k, v in value.items())
    import copy  # what dataclasses.asdict does with a leaf (and copy is loaded by then)

    return copy.deepcopy(value)
