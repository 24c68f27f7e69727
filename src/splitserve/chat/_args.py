"""Streaming one call's arguments as JSON text, parameter by parameter.

XML-style formats deliver arguments one parameter at a time. :class:`ArgsWriter` turns that
into :class:`ToolCallArgsDelta` fragments that always concatenate to a JSON object equal to
the final arguments. Each parameter gets a mode from its schema:

- ``stream``: the schema allows only a string, so the text is streamed character by
  character as it arrives (JSON-escaped), never re-typed;
- ``close``: a typed value that cannot repeat (integer, boolean, object, ...): written
  when the parameter closes;
- ``end``: no schema, or an array is allowed: held until the call ends, because a repeated
  parameter of that name becomes a list (duplicate keys -> list);
- ``drop``: a repeat of a ``stream``/``close`` parameter; the first value wins, a warning
  says so (a list would break the schema).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from ._schema import Schema, allows_array, is_plain_string, property_schema

if TYPE_CHECKING:
    from ._format import ToolParser

Coerce = Callable[[Any, "Schema | None"], Any]


class ArgsWriter:
    """The JSON text of one call's arguments, written as parameters open and close."""

    def __init__(self, parser: ToolParser, index: int, name: str, coerce: Coerce) -> None:
        self._p = parser
        self.index = index
        self.name = name
        self._schema = parser.schema(name)
        self._coerce = coerce
        self._opened = False
        self._written: set[str] = set()
        self._held: dict[str, list[Any]] = {}
        self.key: str | None = None
        self.mode = ""

    def _emit(self, text: str) -> None:
        if not self._opened:
            self._opened = True
            text = "{" + text
        self._p.args(self.index, text)

    def _key_prefix(self, key: str) -> str:
        sep = ", " if self._written else ""
        self._written.add(key)
        return f"{sep}{json.dumps(key, ensure_ascii=False)}: "

    def param_schema(self, key: str) -> Schema | None:
        return property_schema(self._schema, key)

    def open(self, key: str) -> str:
        """A parameter begins; returns its mode (see module docstring)."""
        self.key = key
        schema = self.param_schema(key)
        if key in self._written:
            self.mode = "drop"
        elif key in self._held:
            self.mode = "end"
        elif is_plain_string(schema):
            self.mode = "stream"
            self._emit(self._key_prefix(key) + '"')
        elif allows_array(schema):
            self.mode = "end"
        else:
            self.mode = "close"
        return self.mode

    def stream(self, text: str) -> None:
        """More characters of a ``stream`` parameter's value."""
        if text:
            self._emit(encode_basestring(text)[1:-1])  # json.dumps(ensure_ascii=False), faster

    def stream_raw(self, escaped: str) -> None:
        """More of a ``stream`` value that is already JSON-escaped (from a JSON format)."""
        if escaped:
            self._emit(escaped)

    def close(self, raw: Any = None) -> None:
        """The open parameter ends; ``raw`` is its whole value (ignored in ``stream`` mode)."""
        key, mode = self.key, self.mode
        self.key, self.mode = None, ""
        if key is None:
            return
        if mode == "stream":
            self._emit('"')
        elif mode == "close":
            value = self._coerce(raw, self.param_schema(key))
            self._emit(self._key_prefix(key) + json.dumps(value, ensure_ascii=False))
        elif mode == "end":
            self._held.setdefault(key, []).append(raw)
        elif mode == "drop":
            self._p.warn(f"tool call {self.index}: parameter {key!r} given twice; "
                         "the first value is kept")

    def finish(self) -> None:
        """The call ends: write held parameters and the closing brace."""
        for key, raws in self._held.items():
            schema = self.param_schema(key)
            if len(raws) == 1:
                value = self._coerce(raws[0], schema)
            else:
                value = []
                for item in raws:
                    coerced = self._coerce(item, schema)
                    if isinstance(coerced, list):
                        value.extend(coerced)
                    else:
                        value.append(coerced)
            self._emit(self._key_prefix(key) + json.dumps(value, ensure_ascii=False))
        self._held = {}
        if self._opened:
            self._p.args(self.index, "}")
        else:
            self._opened = True
            self._p.args(self.index, "{}")
