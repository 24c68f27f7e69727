"""Schema-driven coercion: the pinned rules of splitserve.chat._schema."""

from __future__ import annotations

from typing import Any

import pytest

from splitserve.chat import Schema, coerce_text, coerce_value
from splitserve.chat._schema import raw


def S(node: Any, root: Any = None) -> Schema:
    return Schema(node, node if root is None else root)


@pytest.mark.parametrize(("text", "schema", "want"), [
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
    ("3", None, 3), ("true", None, True), ("007", None, "007"), ("words", None, "words"),
    ("[1]", None, [1]), ("{\"a\": 1}", None, {"a": 1}), ("null", None, None),
])
def test_coerce_text(text: str, schema: Any, want: Any) -> None:
    got = coerce_text(text, None if schema is None else S(schema))
    assert got == want and type(got) is type(want)


def test_refs_allof_additional_and_prefix_items() -> None:
    root = {"type": "object", "$defs": {"P": {"type": "object", "properties": {
        "x": {"type": "number"}}}, "Loop": {"$ref": "#/$defs/Loop"}}, "properties": {
        "p": {"$ref": "#/$defs/P"},
        "loop": {"$ref": "#/$defs/Loop"},
        "both": {"allOf": [{"properties": {"a": {"type": "integer"}}},
                           {"properties": {"b": {"type": "boolean"}}}]},
        "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                 "items": {"type": "boolean"}}}}
    value = {"p": {"x": raw("1.5")}, "loop": raw("7"), "both": {"a": raw("1"), "b": raw("true")},
             "extra": {"k": raw("2")}, "pair": [raw("9"), raw("9"), raw("false")]}
    assert coerce_value(value, S(root)) == {
        "p": {"x": 1.5}, "loop": 7, "both": {"a": 1, "b": True}, "extra": {"k": 2},
        "pair": ["9", 9, False]}


def test_json_values_keep_their_types_unless_the_schema_disallows_them() -> None:
    schema = S({"type": "object", "properties": {"s": {"type": "string"},
                                                 "i": {"type": "integer"},
                                                 "u": {"anyOf": [{"type": "integer"},
                                                                 {"type": "string"}]}}})
    assert coerce_value({"s": "007", "i": "42", "u": "3", "x": "9"}, schema) == {
        "s": "007", "i": 42, "u": "3", "x": "9"}
