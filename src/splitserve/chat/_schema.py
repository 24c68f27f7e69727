"""Schema-driven argument coercion: raw model text (or loose JSON) -> the types a tool declares.

XML-style formats write every argument as text (``<days>3</days>``); what the value *is*
comes from the request's JSON Schema for that tool. The rules, pinned:

- a string schema keeps the text exactly (``"007"``, ``"3"``, ``"null"`` stay strings);
- integer / number accept JSON numbers only (``"3.0"`` under integer is 3); anything else
  stays the raw string, so nothing is lost;
- boolean only from ``true`` / ``false`` (``bool_words`` widens that for a format whose own
  template writes ``True``/``False``); anything else stays a string;
- null from ``null`` (or empty text) where the schema allows null;
- object / array from JSON text, coerced recursively (properties, additionalProperties,
  items, prefixItems); under an array-only schema, empty text is ``[]`` and one bare value is
  a one-item list; under an object-only schema, empty text is ``{}``;
- anyOf / oneOf: the non-string alternatives are tried first, then string; allOf is merged;
  ``$ref`` (``#/...`` pointers inside the tool's parameters) is followed, cycles cut;
- no schema (unknown parameter or tool): JSON literals are inferred (``true``, ``3``,
  ``null``, ``[...]``, ``{...}``); other text stays a string.

Values that are already typed (JSON formats, JSON text inside an XML value) are kept as the
model wrote them, except where the change is lossless: a number or boolean under a schema
that allows a string but not its type becomes its JSON text as written (``7`` -> ``"7"``,
``1.50`` -> ``"1.50"``, ``true`` -> ``"true"``), and an integral number under an
integer-only schema an integer (``3.0`` -> ``3``). ``null`` stays null (a JSON null is not the
string "null"). :func:`misfits` names what still does not fit, for a warning.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Self

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_SCALAR_ORDER = ("integer", "number", "boolean", "null", "object", "array")


@dataclass(frozen=True)
class Schema:
    """A schema node together with the root its ``$ref`` pointers resolve against."""

    node: Any
    root: Any

    def child(self, node: Any) -> Schema:
        return Schema(node, self.root)


def _resolve(schema: Schema, depth: int = 0) -> dict[str, Any]:
    """The node with ``$ref`` followed and ``allOf`` merged into one dict."""
    node = schema.node
    if not isinstance(node, dict) or depth > 16:
        return {}
    if "$ref" in node and isinstance(node["$ref"], str):
        target = _pointer(schema.root, node["$ref"])
        rest = {k: v for k, v in node.items() if k != "$ref"}
        merged = dict(_resolve(schema.child(target), depth + 1))
        merged.update(rest)
        node = merged
    if isinstance(node.get("allOf"), list):
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for part in node["allOf"]:
            sub = _resolve(schema.child(part), depth + 1)
            for key, value in sub.items():
                if key == "properties" and isinstance(merged.get("properties"), dict):
                    merged["properties"] = {**merged["properties"], **value}
                elif key == "required" and isinstance(merged.get("required"), list):
                    merged["required"] = merged["required"] + list(value)
                else:
                    merged.setdefault(key, value)
        node = merged
    return dict(node)


def _pointer(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return {}
    return node


def _alternatives(schema: Schema) -> list[dict[str, Any]]:
    node = _resolve(schema)
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            out: list[dict[str, Any]] = []
            base = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
            for alt in node[key]:
                for sub in _alternatives(schema.child(alt)):
                    out.append({**base, **sub})
            return out or [base]
    return [node]


def allowed_types(schema: Schema | None) -> set[str] | None:
    """The JSON types a schema allows, or None when it does not say (anything goes)."""
    if schema is None:
        return None
    types: set[str] = set()
    for node in _alternatives(schema):
        t = node.get("type")
        if isinstance(t, str):
            types.add(t)
        elif isinstance(t, list):
            types.update(x for x in t if isinstance(x, str))
        elif "enum" in node and isinstance(node["enum"], list):
            types.update(json_type(v) for v in node["enum"])
        elif "const" in node:
            types.add(json_type(node["const"]))
        elif "properties" in node:
            types.add("object")
        elif "items" in node or "prefixItems" in node:
            types.add("array")
        else:
            return None
        if node.get("nullable") is True:
            types.add("null")
    if "number" in types:
        types.add("integer")
    return types


def declared_names(schema: Schema | None) -> frozenset[str] | None:
    """The parameter names a tool's schema declares; None where it does not enumerate them
    (no schema, no properties, or typed or allowed additional properties)."""
    if schema is None:
        return None
    names: set[str] = set()
    for node in _alternatives(schema):
        props = node.get("properties")
        if isinstance(props, dict):
            names.update(k for k in props if isinstance(k, str))
        extra = node.get("additionalProperties")
        if extra is True or isinstance(extra, dict):
            return None
    return frozenset(names) or None


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value (booleans are not integers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def is_plain_string(schema: Schema | None) -> bool:
    """True when the schema allows a string and nothing else (such values can be streamed)."""
    return allowed_types(schema) == {"string"}


def has_enum(schema: Schema | None) -> bool:
    """True when the schema lists the values it allows (``enum``/``const``)."""
    return schema is not None and _enum_values(schema) is not None


def allows_array(schema: Schema | None) -> bool:
    types = allowed_types(schema)
    return types is None or "array" in types


def property_schema(schema: Schema | None, key: str) -> Schema | None:
    """The schema of ``key`` inside an object schema (properties, then additionalProperties)."""
    if schema is None:
        return None
    for node in _alternatives(schema):
        props = node.get("properties")
        if isinstance(props, dict) and key in props:
            return schema.child(props[key])
    for node in _alternatives(schema):
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return schema.child(extra)
    return None


def item_schema(schema: Schema | None, position: int) -> Schema | None:
    """The schema of the item at ``position`` of an array schema (prefixItems, then items)."""
    if schema is None:
        return None
    for node in _alternatives(schema):
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and position < len(prefix):
            return schema.child(prefix[position])
        items = node.get("items")
        if isinstance(items, list) and position < len(items):  # draft-04 tuple form
            return schema.child(items[position])
        if isinstance(items, dict):
            return schema.child(items)
    return None


def _enum_values(schema: Schema) -> list[Any] | None:
    values: list[Any] = []
    for node in _alternatives(schema):
        if isinstance(node.get("enum"), list):
            values.extend(node["enum"])
        elif "const" in node:
            values.append(node["const"])
        else:
            return None
    return values


def _literal(text: str) -> tuple[bool, Any]:
    """Parse text as a JSON literal (number, true/false/null, array, object)."""
    s = text.strip()
    if not s:
        return False, None
    if s in ("true", "false", "null") or _NUMBER.fullmatch(s) or s[0] in "[{":
        try:
            return True, loads_json(s)
        except ValueError:
            return False, None
    return False, None


def coerce_text(text: str, schema: Schema | None, bool_words: bool = False) -> Any:
    """Turn one raw argument text into the value its schema describes (see module rules)."""
    text = str(text)
    types = allowed_types(schema)
    if types is None:
        ok, value = _literal(text)
        return value if ok else text
    assert schema is not None
    stripped = text.strip()
    enum = _enum_values(schema)
    if enum is not None:
        if text in enum:
            return text
        if stripped in enum:
            return stripped
        ok, value = _literal(stripped)
        if ok:
            for candidate in enum:
                if json_type(candidate) == json_type(value) and candidate == value:
                    return candidate
    if types <= {"string", "null"}:
        if "null" in types and (stripped == "null" or (not stripped and "string" not in types)):
            return None
        return text
    for kind in _SCALAR_ORDER:
        if kind not in types:
            continue
        if kind == "integer" and _INTEGER.fullmatch(stripped):
            return int(stripped)
        if kind == "integer" and "number" not in types and _NUMBER.fullmatch(stripped):
            number = float(stripped)
            if number.is_integer():
                return int(number)
        if kind == "number" and _NUMBER.fullmatch(stripped):
            return json.loads(stripped)
        if kind == "boolean":
            word = stripped.lower() if bool_words else stripped
            if word in ("true", "false"):
                return word == "true"
        if kind == "null" and stripped in ("null", "None" if bool_words else "null"):
            return None
        if kind == "null" and not stripped and "string" not in types:
            return None
        if kind in ("object", "array") and stripped[:1] in ("{", "["):
            ok, value = _literal(stripped)
            if ok and isinstance(value, dict if kind == "object" else list):
                return coerce_value(value, schema, bool_words)
    if "string" in types:
        return text
    if types == {"array"} or types == {"array", "null"}:
        if not stripped:
            return []
        return [coerce_text(text, item_schema(schema, 0), bool_words)]
    if (types == {"object"} or types == {"object", "null"}) and not stripped:
        return {}
    return text


class _JsonFloat(float):
    """A JSON number with a fraction or exponent that remembers how the model wrote it."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, text: str) -> Self:
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


def loads_json(text: str, strict: bool = True) -> Any:
    """``json.loads``, except that non-integer numbers keep their text (for :func:`coerce_value`)."""
    return json.loads(text, strict=strict, parse_float=_JsonFloat)


def _json_text(value: float) -> str:
    """A JSON number or boolean as the model wrote it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _JsonFloat):
        return value.text
    return json.dumps(value)


def _coerce_scalar(value: Any, schema: Schema | None) -> Any:
    """A typed JSON scalar (number, boolean, null) under a schema; lossless changes only."""
    types = allowed_types(schema)
    if types is None or value is None:
        return value
    kind = json_type(value)
    if kind in types:
        return value
    if (
        kind == "number"
        and "integer" in types
        and isinstance(value, float)
        and value.is_integer()
        and abs(value) < 2**53
    ):
        return int(value)
    if "string" in types:
        return _json_text(value)
    return value


def coerce_value(value: Any, schema: Schema | None, bool_words: bool = False) -> Any:
    """Coerce an already-structured value (JSON, or an XML tree's dicts/lists/texts)."""
    if value is None or isinstance(value, (bool, int, float)):
        return _coerce_scalar(value, schema)
    if isinstance(value, str):
        if isinstance(value, _Raw):
            return coerce_text(str(value), schema, bool_words)
        types = allowed_types(schema)
        if types is None or "string" in types:
            return value
        return coerce_text(value, schema, bool_words)
    if isinstance(value, dict):
        return {k: coerce_value(v, property_schema(schema, k), bool_words) for k, v in value.items()}
    if isinstance(value, list):
        types = allowed_types(schema)
        if types is not None and "array" not in types and "object" in types:
            return (
                {"item": [coerce_value(v, property_schema(schema, "item"), bool_words) for v in value]} if value else {}
            )
        return [coerce_value(v, item_schema(schema, i), bool_words) for i, v in enumerate(value)]
    return value


def _fits_enum(value: Any, schema: Schema) -> bool:
    enum = _enum_values(schema)
    if enum is None:
        return True
    return any(
        c == value and isinstance(c, bool) == isinstance(value, bool) and isinstance(c, str) == isinstance(value, str)
        for c in enum
    )


def _preview(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def misfits(value: Any, schema: Schema | None, path: str = "") -> list[str]:
    """Where a (coerced) value does not fit its schema: one line per place, naming its path.

    A value fits when its JSON type is one the schema allows (an integer fits ``number``)
    and, for an ``enum``/``const`` schema, it is one of the values; objects and arrays are
    checked item by item. No schema (None, or one that names no type) fits anything.
    """
    types = allowed_types(schema)
    here = path or "the arguments"
    if types is not None:
        assert schema is not None
        kind = json_type(value)
        if kind not in types:
            shown = "" if value is None else f" ({_preview(value)})"
            allowed = " or ".join(sorted(types))
            return [f"{here} is {_ARTICLE[kind]}{shown} where the schema allows {allowed}"]
        if not _fits_enum(value, schema):
            return [f"{here} ({_preview(value)}) is not one of the schema's enum values"]
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += misfits(item, property_schema(schema, key), f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += misfits(item, item_schema(schema, i), f"{path}[{i}]")
    return out


_ARTICLE = {
    "null": "null",
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "array": "an array",
    "object": "an object",
}


class _Raw(str):
    """Text that came from the model verbatim (an XML leaf): inferred when no schema says."""

    __slots__ = ()


def raw(text: str) -> str:
    """Mark text as a raw model leaf, so :func:`coerce_value` infers its type without a schema."""
    return _Raw(text)


class ToolSet:
    """The request's tools, by name: their parameter schemas for coercion."""

    def __init__(self, tools: list[dict[str, Any]] | None) -> None:
        self._schemas: dict[str, Any] = {}
        for tool in tools or []:
            if not isinstance(tool, dict):
                continue
            fn = tool.get("function", tool)
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                params = fn.get("parameters")
                self._schemas[fn["name"]] = params if isinstance(params, dict) else {}

    def __bool__(self) -> bool:
        return bool(self._schemas)

    def names(self) -> list[str]:
        return list(self._schemas)

    def known(self, name: str) -> bool:
        return name in self._schemas

    def parameters(self, name: str) -> Schema | None:
        """The tool's parameters schema, or None for a tool the request did not declare."""
        if name not in self._schemas:
            return None
        params = self._schemas[name]
        return Schema(params, params)

    def parameter(self, name: str, key: str) -> Schema | None:
        return property_schema(self.parameters(name), key)
