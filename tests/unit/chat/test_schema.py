"""Schema-driven coercion: the pinned rules of splitserve.chat._schema."""

from __future__ import annotations

from typing import Any

import pytest

from splitserve.chat._schema import Schema, coerce_text, coerce_value, loads_json, misfits, raw


def S(node: Any, root: Any = None) -> Schema:
    return Schema(node, node if root is None else root)


@pytest.mark.parametrize(
    ("text", "schema", "want"),
    [
        ("007", {"type": "string"}, "007"),
        ("3", {"type": "string"}, "3"),
        ("null", {"type": "string"}, "null"),
        (" padded ", {"type": "string"}, " padded "),
        ("null", {"type": ["string", "null"]}, None),
        ("42", {"type": "integer"}, 42),
        ("-7", {"type": "integer"}, -7),
        ("3.0", {"type": "integer"}, 3),
        ("3.5", {"type": "integer"}, "3.5"),
        ("007", {"type": "integer"}, "007"),
        ("2.5", {"type": "number"}, 2.5),
        ("1e3", {"type": "number"}, 1000.0),
        ("true", {"type": "boolean"}, True),
        ("false", {"type": "boolean"}, False),
        ("False", {"type": "boolean"}, "False"),
        ("yes", {"type": "boolean"}, "yes"),
        ("1", {"type": "boolean"}, "1"),
        ("", {"type": "array"}, []),
        ("", {"type": "object"}, {}),
        ("", {"type": "string"}, ""),
        ("[1, 2]", {"type": "array", "items": {"type": "integer"}}, [1, 2]),
        ("solo", {"type": "array", "items": {"type": "string"}}, ["solo"]),
        ('{"a": "1"}', {"type": "object", "properties": {"a": {"type": "integer"}}}, {"a": 1}),
        ("b", {"enum": ["a", "b"]}, "b"),
        ("2", {"enum": [1, 2]}, 2),
        ("7", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, 7),
        ("007", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "007"),
        ("null", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, None),
        ("5", {"oneOf": [{"type": "integer"}, {"type": "array"}]}, 5),
        ("5", {"type": "integer", "nullable": True}, 5),
        ("null", {"type": "integer", "nullable": True}, None),
        ("3", None, 3),
        ("true", None, True),
        ("007", None, "007"),
        ("words", None, "words"),
        ("[1]", None, [1]),
        ('{"a": 1}', None, {"a": 1}),
        ("null", None, None),
    ],
)
def test_coerce_text(text: str, schema: Any, want: Any) -> None:
    got = coerce_text(text, None if schema is None else S(schema))
    assert got == want and _kind(got) is _kind(want)


def test_refs_allof_additional_and_prefix_items() -> None:
    root = {
        "type": "object",
        "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}, "Loop": {"$ref": "#/$defs/Loop"}},
        "properties": {
            "p": {"$ref": "#/$defs/P"},
            "loop": {"$ref": "#/$defs/Loop"},
            "both": {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "boolean"}}}]},
            "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": {"type": "boolean"},
            },
        },
    }
    value = {
        "p": {"x": raw("1.5")},
        "loop": raw("7"),
        "both": {"a": raw("1"), "b": raw("true")},
        "extra": {"k": raw("2")},
        "pair": [raw("9"), raw("9"), raw("false")],
    }
    assert coerce_value(value, S(root)) == {
        "p": {"x": 1.5},
        "loop": 7,
        "both": {"a": 1, "b": True},
        "extra": {"k": 2},
        "pair": ["9", 9, False],
    }


def test_json_values_keep_their_types_unless_the_schema_disallows_them() -> None:
    schema = S(
        {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "i": {"type": "integer"},
                "u": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
        }
    )
    assert coerce_value({"s": "007", "i": "42", "u": "3", "x": "9"}, schema) == {
        "s": "007",
        "i": 42,
        "u": "3",
        "x": "9",
    }


@pytest.mark.parametrize(
    ("json_text", "schema", "want"),
    [
        ("7", {"type": "string"}, "7"),
        ("1.50", {"type": "string"}, "1.50"),  # the text as written, not 1.5
        ("-2e3", {"type": ["string", "null"]}, "-2e3"),
        ("true", {"type": "string"}, "true"),
        ("false", {"type": "string", "enum": ["true", "false"]}, "false"),
        ("null", {"type": "string"}, None),  # a JSON null is not the string "null"
        ("3.0", {"type": "integer"}, 3),
        ("3.5", {"type": "integer"}, 3.5),
        ("7", {"type": "number"}, 7),
        ("true", {"type": "integer"}, True),  # booleans are not numbers
        ("1", {"type": "boolean"}, 1),
        (
            '{"zip": 1, "n": [2, true]}',
            {
                "type": "object",
                "properties": {"zip": {"type": "string"}, "n": {"type": "array", "items": {"type": "string"}}},
            },
            {"zip": "1", "n": ["2", "true"]},
        ),
        ("7", None, 7),
    ],
)
def test_coerce_value_typed_json_is_kept_or_made_a_string_losslessly(json_text: str, schema: Any, want: Any) -> None:
    got = coerce_value(loads_json(json_text), None if schema is None else S(schema))
    assert got == want and _kind(got) is _kind(want)


def _kind(value: Any) -> type:
    return float if isinstance(value, float) else type(value)  # a float that keeps its text


def test_misfits_name_every_place_that_does_not_fit() -> None:
    schema = S(
        {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "e": {"enum": ["a", 1]},
                "n": {"type": "number"},
                "rows": {"type": "array", "items": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
                "free": {},
            },
        }
    )
    value = {"s": None, "e": "c", "n": 3, "rows": [{"ok": True}, {"ok": "yes"}], "free": [1, None], "other": 5}
    assert misfits(value, schema) == [
        "s is null where the schema allows string",
        'e ("c") is not one of the schema\'s enum values',
        'rows[1].ok is a string ("yes") where the schema allows boolean',
    ]
    assert misfits({"s": "x", "e": 1, "n": 2.5}, schema) == []
    assert misfits({"e": True}, schema) == ["e is a boolean (true) where the schema allows integer or string"]
    assert misfits({"anything": [None]}, None) == []
