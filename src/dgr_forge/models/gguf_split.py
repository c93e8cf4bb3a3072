"""Split consistency of a GGUF model, read from the headers with the `gguf` package.

llama.cpp splits a model into `P-00001-of-0000N.gguf` ... and writes `split.no` (0-based),
`split.count` and `split.tensors.count` into every part's KV header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile


def _kv_int(reader: Any, key: str) -> int | None:
    """An integer KV value; None when absent or not an integer (a string would read as bytes)."""
    import gguf

    field_ = reader.get_field(key)
    if field_ is None or not field_.data or len(field_.types) != 1:
        return None
    if field_.types[0] in (gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY):
        return None
    if field_.types[0] in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
        return None
    value = field_.parts[field_.data[0]]
    try:
        return int(value[0])
    except (TypeError, ValueError, IndexError):
        return None


def check(dest: Path, files: list[ModelFile]) -> dict[str, list[str]]:
    """Split consistency from the GGUF headers of the present `.gguf` files.

    Each part's `split.no` (0-based) and `split.count` must match its name
    `P-0000K-of-0000N.gguf`; no two parts may claim one `split.no`; all parts of a set
    must agree on `split.tensors.count`, and when all are present their tensors must add
    up to it. A `.gguf` whose name is not a split must not claim to be one.
    """
    import gguf  # numpy-backed; only loaded when a model is checked

    problems: dict[str, list[str]] = {}
    by_no: dict[str, dict[int, list[str]]] = {}
    tensor_totals: dict[str, dict[str, int]] = {}
    tensor_counts: dict[str, int] = {}
    for f in files:
        if not f.name.endswith(".gguf"):
            continue
        path = dest / f.name
        if not path.is_file():
            continue
        found = problems.setdefault(f.name, [])
        try:
            reader = gguf.GGUFReader(path, "r")
            no = _kv_int(reader, "split.no")
            count = _kv_int(reader, "split.count")
            total = _kv_int(reader, "split.tensors.count")
            n_tensors = len(reader.tensors)
        except Exception as err:  # the gguf parser raises many kinds on a bad header
            text = str(err) or type(err).__name__
            found.append(f"unreadable GGUF header: {text[:200]}")
            continue
        s = models.split_name(f.name)
        if s is None:
            if count is not None and count > 1:
                found.append(
                    f"split mismatch: header says part {(no or 0) + 1} of {count} "
                    "(split.no/split.count) but the name is not P-0000K-of-0000N.gguf"
                )
            continue
        if count is None or no is None:
            found.append(
                f"split mismatch: no integer split.no/split.count in the header, the name says "
                f"part {s.no} of {s.count}"
            )
            continue
        if count != s.count:
            found.append(f"split mismatch: split.count is {count}, the name says {s.count} parts")
        if no != s.no - 1:
            found.append(
                f"split mismatch: split.no is {no} (part {no + 1}), the name says part {s.no}"
            )
        by_no.setdefault(s.prefix, {}).setdefault(no, []).append(f.name)
        tensor_counts[f.name] = n_tensors
        if total is not None:
            tensor_totals.setdefault(s.prefix, {})[f.name] = total
        else:
            found.append("split mismatch: no integer split.tensors.count in the header")
    for prefix, parts in by_no.items():
        for no, names in parts.items():
            if len(names) > 1:
                for name in names:
                    others = ", ".join(n for n in names if n != name)
                    problems[name].append(
                        f"split mismatch: duplicate split.no {no} (also claimed by {others})"
                    )
        totals = tensor_totals.get(prefix, {})
        if len(set(totals.values())) > 1:
            for name, total in totals.items():
                problems[name].append(
                    f"split mismatch: split.tensors.count {total} differs between the parts"
                )
        else:
            names = [n for ns in parts.values() for n in ns]
            first = models.split_name(names[0])
            complete = first is not None and len(names) == first.count
            if totals and complete and len(totals) == len(names):
                declared = next(iter(totals.values()))
                actual = sum(tensor_counts[n] for n in names)
                if actual != declared:
                    for name in names:
                        problems[name].append(
                            f"split mismatch: the parts hold {actual} tensors, "
                            f"split.tensors.count says {declared}"
                        )
    return {k: v for k, v in problems.items() if v}
