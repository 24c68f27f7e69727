"""Flat XML tool calls: a wrapper, invokes with a name, one tag per parameter, text values.

Shared by ``minimax-m2`` (``<minimax:tool_call><invoke name="f"><parameter name="k">v
</parameter></invoke></minimax:tool_call>``) and ``qwen3-coder`` (``<tool_call>
<function=f><parameter=k>\\nv\\n</parameter></function></tool_call>``); a
:class:`Dialect` names the tags. The rules of every XML format hold (wrappers, invokes, when a
parameter's closer ends a value, the end of output: see _xml_calls); and, pinned:

- with ``Dialect.quoted_attrs`` (``minimax-m2``) a tag may carry other attributes, the name
  among them anywhere (``<invoke name="f" description="a > b">``, ``<parameter name="k"
  type="string">``); a quoted attribute value may hold ``>``.

With ``Dialect.lenient_values`` (``qwen3-coder``) a value is also read the way vLLM, SGLang
and llama.cpp read it (a model may leave a parameter unclosed; a coding agent writes files
whose content is tool-call markup):

- a value left unclosed ends, with a warning, at the next parameter opener, and at the
  invoke's or the wrapper's closer when what follows that (after whitespace) ends a call:
  the wrapper's closer, a new wrapper or invoke, or the end of output;
- where the request declares the tool with properties (its schema), a parameter opener
  whose name the tool does not declare, or the value's own name, is data of the value, and
  a parameter closer followed by such an opener does not end the value; without a schema a
  parameter opener inside a value is data and the closer rule above decides, as before;
- tool-call markup inside a value nests: a wrapper opener, an invoke header and a parameter
  opener that is data are counted, and while one is open its closer is data (inside a
  nested invoke a parameter closer closes the nested parameter); a parameter closer that
  is not inside a nested invoke still ends the value when the closer rule says so.

Every rule looks only at the text up to a bounded distance past the marker (a header, or
whitespace and the next marker), so streamed output parses as the whole output does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._format import IdFactory
from ._scan import quoted_end
from ._schema import Schema, ToolSet, coerce_text, declared_names
from ._xml_calls import PARAM, TaggedCallParser, Tags

_HEADER_LIMIT = 512


@dataclass(frozen=True)
class Dialect:
    wrap_open: str
    wrap_close: str
    invoke_prefix: str
    invoke_header: re.Pattern[str]
    invoke_close: str
    param_prefix: str
    param_header: re.Pattern[str]
    param_close: str
    strip_newlines: bool = False  # one leading and one trailing newline around each value
    bool_words: bool = False
    # headers hold attributes whose quoted values may contain ">"; the name is the first
    # group of the header pattern that matched (see the module rules)
    quoted_attrs: bool = False
    # unclosed values end at the next tag, nested tool-call markup is data, the schema
    # tells a parameter from data (see the module rules)
    lenient_values: bool = False


class FlatXmlParser(TaggedCallParser):
    """The incremental parser for one :class:`Dialect`."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory, dialect: Dialect) -> None:
        d = dialect
        super().__init__(
            tools,
            id_factory,
            Tags.of((d.wrap_open,), (d.wrap_close,), d.invoke_prefix, d.invoke_close, d.param_prefix, d.param_close),
        )
        self.d = dialect
        self.bool_words = dialect.bool_words
        self._value_started = False
        self._trail_nl = False
        self._value_markers: tuple[str, ...] = (
            (d.param_close, d.param_prefix, d.invoke_close, d.wrap_close, d.invoke_prefix, d.wrap_open)
            if d.lenient_values
            else (d.param_close,)
        )
        # longest first: of two markers at one place the longer wins, as in TextBuffer.scan
        self._value_markers = tuple(sorted(self._value_markers, key=len, reverse=True))
        self._value_longest = len(self._value_markers[0])
        self._lt_scan = all(m.startswith("<") for m in self._value_markers)
        self._ends = (d.wrap_close, d.wrap_open, d.invoke_prefix)
        # nested tool-call markup open inside the value: parameters, invokes, wrappers
        self._np = self._nf = self._nt = 0
        self._names_for = -1
        self._names: frozenset[str] | None = None
        # the parameters the open call has given so far (its open one included)
        self._given_for = -1
        self._given: set[str] = set()

    # -- headers -----------------------------------------------------------------------
    def _header(self, pattern: re.Pattern[str], start: int = 0) -> tuple[str, int, str]:
        """Read a tag header at ``start`` in the buffer: ("need"|"no"|"ok", length, name)."""
        text = self.buf.text
        limit = start + _HEADER_LIMIT
        end = text.find(">", start, limit)  # bounded: no rescans of a long buffer
        if end < 0:
            if not self.buf.eof and len(text) < limit:
                return "need", 0, ""
            return "no", 0, ""
        m = pattern.fullmatch(text, start, end + 1)
        if m is None and self.d.quoted_attrs:  # a ">" inside a quoted attribute value
            end = quoted_end(text, start, limit)
            if end < 0:
                if not self.buf.eof and len(text) < limit:
                    return "need", 0, ""
                return "no", 0, ""
            m = pattern.fullmatch(text, start, end + 1)
        if m is None:
            return "no", 0, ""
        name = next((g for g in m.groups() if g is not None), "").strip()
        if not name:
            return "no", 0, ""
        return "ok", end + 1 - start, name

    def _invoke_header(self, start: int) -> tuple[str, int, str]:
        return self._header(self.d.invoke_header, start)

    def _param_header(self) -> tuple[str, int, str]:
        return self._header(self.d.param_header)

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        return coerce_text(raw, schema, self.bool_words)

    def _declared(self) -> frozenset[str] | None:
        """The open call's declared parameter names (None: its schema does not say)."""
        assert self._call is not None
        if self._names_for != self._call.index:
            self._names_for = self._call.index
            self._names = declared_names(self.schema(self._call.name))
        return self._names

    # -- values ------------------------------------------------------------------------
    def _literal_given(self, name: str) -> bool:
        """Whether parameter markup for ``name`` inside the open value is data: the call has
        given ``name`` already and the open value is a string (a file being written that
        holds such markup; a string parameter is never given twice by the template)."""
        assert self._call is not None
        return self._call.mode == "stream" and self._given_for == self._call.index and name in self._given

    def _open_param(self, key: str) -> None:
        assert self._call is not None
        if self._given_for != self._call.index:
            self._given_for = self._call.index
            self._given = set()
        self._given.add(key)
        self._call.open(key)
        self._value = []
        self._value_started = False
        self._trail_nl = False
        self._np = self._nf = self._nt = 0
        self._state = PARAM

    def _piece(self, text: str) -> None:
        if not text:
            return
        assert self._call is not None
        self._call_raw.append(text)
        if not self._value_started:
            self._value_started = True
            if self.d.strip_newlines and text.startswith("\n"):
                text = text[1:]
        if self._call.mode != "stream":
            self._value.append(text)
            return
        if self._trail_nl:
            text = "\n" + text
            self._trail_nl = False
        if self.d.strip_newlines and text.endswith("\n"):
            text = text[:-1]
            self._trail_nl = True
        self._call.stream(text)

    def _step_param(self) -> bool:
        if self.d.lenient_values:
            return self._step_value()
        return self._step_closer(self._tags.param_close, self._tags.follows)

    # -- values, read leniently (Dialect.lenient_values) -----------------------------
    def _scan_value(self) -> tuple[str, str | None]:
        """``TextBuffer.scan`` for value markers that all start with ``<`` (as the known
        dialects' do): only the ``<`` positions are looked at (values are long, the markers
        many)."""
        buf = self.buf
        text = buf.text
        pos = text.find("<")
        while pos >= 0:
            for marker in self._value_markers:
                if text.startswith(marker, pos):
                    buf.text = text[pos:]
                    return text[:pos], marker
            if not buf.eof and len(text) - pos < self._value_longest:
                tail = text[pos:]
                if any(m.startswith(tail) for m in self._value_markers):
                    buf.text = tail  # may still grow into a marker
                    return text[:pos], None
            pos = text.find("<", pos + 1)
        buf.text = ""
        return text, None

    def _step_value(self) -> bool:
        d = self.d
        before, marker = self._scan_value() if self._lt_scan else self.buf.scan(self._value_markers)
        self._piece(before)
        if marker is None:
            return False
        if marker == d.param_close:
            return self._value_closer(marker)
        if marker == d.param_prefix:
            return self._value_opener(marker)
        if marker == d.invoke_prefix:
            status, length, _ = self._header(d.invoke_header)
            if status == "need":
                return False
            if status == "ok":
                self._nf += 1
                self._piece(self.buf.take(length))
            else:
                self._piece(self.buf.take(len(marker)))
            return True
        if marker == d.wrap_open:
            self._nt += 1
        elif marker == d.invoke_close and self._nf:
            self._nf -= 1
        elif marker == d.wrap_close and self._nt:
            self._nt -= 1
        else:  # the invoke's or the wrapper's closer, with nothing of its kind nested
            ends = self._ends_call(len(marker))
            if ends is None:
                return False
            if ends:
                self._unclosed(marker)
                return True
        self._piece(self.buf.take(len(marker)))
        return True

    def _unclosed(self, at: str) -> None:
        """The open value ends implicitly at ``at`` (read again, in the invoke)."""
        assert self._call is not None
        self.warn(f"tool call {self._call.index}: parameter {self._call.key!r} was not closed; it ends at {at}")
        self._close_param()

    def _value_opener(self, marker: str) -> bool:
        status, length, name = self._header(self.d.param_header)
        if status == "need":
            return False
        if status == "no":
            self._piece(self.buf.take(len(marker)))
            return True
        assert self._call is not None
        if not (self._nf or self._nt):
            names = self._declared()
            if names is None:  # no schema: data, as a closer-less value always was
                self._piece(self.buf.take(length))
                return True
            if name in names and name != self._call.key and not self._literal_given(name):
                self._unclosed(self.buf.text[:length])
                return True
        self._np += 1  # a nested call's parameter, or a name the tool does not declare
        self._piece(self.buf.take(length))
        return True

    def _value_closer(self, marker: str) -> bool:
        if self._np and (self._nf or self._nt):  # closes a parameter of a nested call
            self._np -= 1
            self._piece(self.buf.take(len(marker)))
            return True
        ends = self._closer_ends_value(len(marker))
        if ends is None:
            return False
        if ends:
            self._call_raw.append(self.buf.take(len(marker)))
            self._close_param()
            return True
        if self._np:
            self._np -= 1
        self._piece(self.buf.take(len(marker)))
        return True

    def _closer_ends_value(self, n: int) -> bool | None:
        """Whether the parameter closer (``n`` characters at the buffer start) ends the value,
        by what follows it; None: not known yet."""
        d = self.d
        text = self.buf.text
        rest = text[n:].lstrip()
        if not rest:
            return True if self.buf.eof else None
        if rest.startswith(d.param_prefix):
            names = self._declared()
            if names is None:
                return True
            status, _, name = self._header(d.param_header, len(text) - len(rest))
            if status == "need":
                return None
            # inside parameter markup the value holds, a closer before another given
            # parameter closes that markup (a file holding a call's parameters)
            return status == "ok" and name in names and not (self._np and self._literal_given(name))
        if rest.startswith((d.invoke_close, d.wrap_close, d.invoke_prefix)):
            return True
        if not self.buf.eof and any(f.startswith(rest) for f in self._tags.follows):
            return None
        return False

    def _ends_call(self, n: int) -> bool | None:
        """Whether what follows an invoke or wrapper closer (``n`` characters at the buffer
        start) ends a call: a wrapper closer or opener, an invoke, the end of output."""
        rest = self.buf.text[n:].lstrip()
        if not rest:
            return True if self.buf.eof else None
        if rest.startswith(self._ends):
            return True
        if not self.buf.eof and any(e.startswith(rest) for e in self._ends):
            return None
        return False

    def _param_raw(self) -> str:
        value = "".join(self._value)
        if self.d.strip_newlines and value.endswith("\n"):
            value = value[:-1]
        return value
