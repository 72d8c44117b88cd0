"""JSON conversion of arguments and results, and the JSON pointers effect refs use."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
from decimal import Decimal
from typing import Any

import pytest

from oncegate._json import PointerError, effect_ref_at, resolve_pointer, to_json


def test_plain_json_passes_unchanged() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": False}}
    assert to_json(value) == value


def test_decimal_keeps_its_exact_text() -> None:
    # "12.50" must reach the money normaliser as written: a float would be 12.5.
    assert to_json({"amount": Decimal("12.50")}) == {"amount": "12.50"}


def test_non_finite_numbers_are_refused() -> None:
    for bad in (math.nan, math.inf, Decimal("NaN")):
        with pytest.raises(TypeError):
            to_json({"amount": bad})


def test_dataclass_enum_datetime_uuid() -> None:
    class Currency(enum.Enum):
        USD = "USD"

    @dataclasses.dataclass
    class Charge:
        id: str
        currency: Currency
        at: datetime.datetime
        ref: uuid.UUID

    when = datetime.datetime(2026, 12, 1, 17, 0, tzinfo=datetime.timezone.utc)
    ref = uuid.UUID(int=5)
    assert to_json(Charge("ch_1", Currency.USD, when, ref)) == {
        "id": "ch_1",
        "currency": "USD",
        "at": "2026-12-01T17:00:00+00:00",
        "ref": str(ref),
    }


def test_sdk_objects_with_to_dict_and_model_dump() -> None:
    class StripeLike:
        def to_dict(self) -> dict[str, Any]:
            return {"id": "pi_1", "amount": 1250}

    class PydanticLike:
        def model_dump(self, mode: str = "python") -> dict[str, Any]:
            assert mode == "json"
            return {"id": "ch_2"}

    assert to_json(StripeLike()) == {"id": "pi_1", "amount": 1250}
    assert to_json([PydanticLike()]) == [{"id": "ch_2"}]


def test_ambiguous_values_are_refused_with_their_path() -> None:
    with pytest.raises(TypeError, match=r"\$\.body"):
        to_json({"body": b"bytes"})
    with pytest.raises(TypeError, match="key 1"):
        to_json({1: "x"})
    with pytest.raises(TypeError, match="object"):
        to_json({"x": object()})


def test_sets_are_sorted_for_a_stable_body() -> None:
    assert to_json({"tags": {"b", "a", "c"}}) == {"tags": ["a", "b", "c"]}


def test_pointer_resolution_rfc6901() -> None:
    doc = {"charge": {"id": "ch_1", "a/b": 1, "m~n": 2}, "list": [10, 20], "": 3}
    assert resolve_pointer(doc, "") == doc
    assert resolve_pointer(doc, "/charge/id") == "ch_1"
    assert resolve_pointer(doc, "/charge/a~1b") == 1
    assert resolve_pointer(doc, "/charge/m~0n") == 2
    assert resolve_pointer(doc, "/list/1") == 20
    assert resolve_pointer(doc, "/") == 3
    for bad in ("charge", "/missing", "/list/2", "/list/01", "/list/x", "/charge/id/deeper"):
        with pytest.raises(PointerError):
            resolve_pointer(doc, bad)


def test_effect_ref_is_a_scalar_id_or_nothing() -> None:
    assert effect_ref_at({"id": "ch_1"}, "/id") == "ch_1"
    assert effect_ref_at({"id": 42}, "/id") == "42"
    assert effect_ref_at({"id": None}, "/id") is None
    assert effect_ref_at({"id": {"nested": 1}}, "/id") is None
    assert effect_ref_at({"id": True}, "/id") is None
    assert effect_ref_at({"other": 1}, "/id") is None
    assert effect_ref_at(["ch_9"], "/0") == "ch_9"
