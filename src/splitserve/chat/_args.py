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

A JSON format opens a ``stream`` parameter lazily (``open(key, lazy=True)``): nothing is
written until :meth:`ArgsWriter.begin_stream` (the value is a JSON string), or
:meth:`ArgsWriter.demote` turns it into a ``close`` parameter (the value is a number,
``true``, ``null``, ...: read whole and coerced like any typed value, never emptied).
A written value that still does not fit its schema is kept as it is, with a warning
(:func:`misfits`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from ._schema import (
    Schema,
    allows_array,
    has_enum,
    is_plain_string,
    misfits,
    property_schema,
)

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
        self._pending = False  # a lazily opened stream parameter, nothing written yet
        # the text of a streamed parameter whose schema is an enum (checked when it closes)
        self._enum_text: list[str] | None = None
        self._enum_escaped = False

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

    def open(self, key: str, lazy: bool = False) -> str:
        """A parameter begins; returns its mode (see module docstring).

        ``lazy``: a ``stream`` parameter writes nothing until :meth:`begin_stream`, so that
        :meth:`demote` can still make it a ``close`` parameter.
        """
        self.key = key
        self._pending = False
        self._enum_text = None
        schema = self.param_schema(key)
        if key in self._written:
            self.mode = "drop"
        elif key in self._held:
            self.mode = "end"
        elif is_plain_string(schema):
            self.mode = "stream"
            if has_enum(schema):
                self._enum_text, self._enum_escaped = [], False
            if lazy:
                self._pending = True
            else:
                self._emit(self._key_prefix(key) + '"')
        elif allows_array(schema):
            self.mode = "end"
        else:
            self.mode = "close"
        return self.mode

    def begin_stream(self) -> None:
        """A lazily opened ``stream`` parameter's value is a string: write its opening."""
        if self._pending and self.key is not None:
            self._pending = False
            self._emit(self._key_prefix(self.key) + '"')

    def demote(self) -> None:
        """A lazily opened ``stream`` parameter's value is not a string: read it whole."""
        if self._pending:
            self._pending = False
            self.mode = "close"

    def _check(self, key: str, value: Any, schema: Schema | None) -> None:
        for problem in misfits(value, schema, key):
            self._p.warn(f"tool call {self.index}: argument {problem}; kept as written")

    def stream(self, text: str) -> None:
        """More characters of a ``stream`` parameter's value."""
        if text:
            self._emit(encode_basestring(text)[1:-1])  # json.dumps(ensure_ascii=False), faster
            if self._enum_text is not None:
                self._enum_text.append(text)

    def stream_raw(self, escaped: str) -> None:
        """More of a ``stream`` value that is already JSON-escaped (from a JSON format)."""
        if escaped:
            self._emit(escaped)
            if self._enum_text is not None:
                self._enum_text.append(escaped)
                self._enum_escaped = True

    def close(self, raw: Any = None) -> None:
        """The open parameter ends; ``raw`` is its whole value (ignored in ``stream`` mode)."""
        key, mode = self.key, self.mode
        self.key, self.mode = None, ""
        if key is None:
            return
        if mode == "stream":
            self.begin_stream()
            self._emit('"')
            if self._enum_text is not None:
                text = "".join(self._enum_text)
                self._enum_text = None
                if self._enum_escaped:
                    text = json.loads(f'"{text}"', strict=False)
                self._check(key, text, self.param_schema(key))
        elif mode == "close":
            schema = self.param_schema(key)
            value = self._coerce(raw, schema)
            self._check(key, value, schema)
            self._emit(self._key_prefix(key) + json.dumps(value, ensure_ascii=False))
        elif mode == "end":
            self._held.setdefault(key, []).append(raw)
        elif mode == "drop":
            self._p.warn(f"tool call {self.index}: parameter {key!r} given twice; the first value is kept")

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
            self._check(key, value, schema)
            self._emit(self._key_prefix(key) + json.dumps(value, ensure_ascii=False))
        self._held = {}
        if self._opened:
            self._p.args(self.index, "}")
        else:
            self._opened = True
            self._p.args(self.index, "{}")
