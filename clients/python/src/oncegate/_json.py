"""JSON conversions the client needs on both sides of a call.

Arguments go to the gateway and results are stored there as JSON, so Python values are
converted once, here, with rules chosen for intents: a ``Decimal`` becomes its exact
text (the gateway's money normaliser reads ``"12.50"``; a float could not say it), a
dataclass, a pydantic model or an SDK object with ``to_dict()`` becomes its fields, and
anything ambiguous (bytes, a float that is not finite, a mapping with non-string keys)
is a ``TypeError`` rather than a guess.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["to_json", "resolve_pointer", "effect_ref_at", "PointerError"]


class PointerError(LookupError):
    """A JSON pointer that does not resolve against a document (RFC 6901)."""


def to_json(value: Any) -> Any:
    """Returns ``value`` as plain JSON data (dict, list, str, int, float, bool, None).

    Raises ``TypeError`` naming the first value that has no faithful JSON form, so a
    result that cannot be stored is found where it is made, not replayed as garbage.
    """
    return _convert(value, "$")


def _convert(value: Any, where: str) -> Any:
    # bool before int: bool is an int subclass, and both are JSON as they are.
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where}: {value!r} is not a finite number and has no JSON form")
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"{where}: {value!r} is not a finite number and has no JSON form")
        # The exact text, not a float: "12.50" stays 12.50 for the money normaliser.
        return str(value)
    if isinstance(value, enum.Enum):
        return _convert(value.value, where)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: key {k!r} is not a string; JSON objects have string keys")
            out[k] = _convert(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_convert(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [_convert(v, f"{where}[]") for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{where}: bytes have no single JSON form; decode or encode them first")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _convert(getattr(value, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(value)
        }
    # pydantic v2, the to_dict() that payment SDKs (stripe, ...) offer, pydantic v1.
    for method in ("model_dump", "to_dict", "dict"):
        fn = getattr(value, method, None)
        if callable(fn) and not isinstance(value, type):
            dumped = fn(mode="json") if method == "model_dump" else fn()
            return _convert(dumped, where)
    raise TypeError(
        f"{where}: {type(value).__name__} is not JSON-serialisable; "
        "return plain data or pass result=/arguments= to convert it"
    )


def resolve_pointer(document: Any, pointer: str) -> Any:
    """Returns the value ``pointer`` (RFC 6901, e.g. ``"/charge/id"``) names in ``document``."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise PointerError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping):
            if token not in current:
                raise PointerError(f"{pointer!r}: no member {token!r}")
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
                raise PointerError(f"{pointer!r}: {token!r} is not an array index")
            index = int(token)
            if index >= len(current):
                raise PointerError(f"{pointer!r}: index {index} is past the end")
            current = current[index]
        else:
            raise PointerError(f"{pointer!r}: cannot step into {type(current).__name__}")
    return current


def effect_ref_at(document: Any, pointer: str) -> str | None:
    """The effect reference at ``pointer``, or None when there is none to record.

    A missing member is not an error: the effect happened whether or not the provider
    answered with an id, and an ``applied`` without a reference is still the truth.
    Integers become their text; anything that is not a scalar id is no reference.
    """
    try:
        value = resolve_pointer(document, pointer)
    except PointerError:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (str, int)):
        text = str(value)
        return text or None
    return None
