"""Flat XML tool calls: a wrapper, invokes with a name, one tag per parameter, text values.

Shared by ``minimax-m2`` (``<minimax:tool_call><invoke name="f"><parameter name="k">v
</parameter></invoke></minimax:tool_call>``) and ``qwen3-coder`` (``<tool_call>
<function=f><parameter=k>\\nv\\n</parameter></function></tool_call>``); a
:class:`Dialect` names the tags. Rules, pinned:

- a parameter's closer only ends the value when what follows it (after whitespace) is the
  next parameter, the invoke's closer, the wrapper's closer, another invoke or the end of
  output; otherwise it is data (a value may contain ``</parameter>``);
- an invoke outside any wrapper is accepted as if wrapped;
- an invoke left open when the wrapper closes or the next invoke starts is closed there;
- a wrapper with no invoke: its raw text is content, with a warning; an empty one is dropped;
- the end of output inside an invoke drops that call (earlier calls are kept).

:class:`WrappedCallParser` is the part every XML format shares (``minimax-m3`` too): the
wrapper and invoke bookkeeping, one call per invoke, and what the end of output resolves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._args import ArgsWriter
from ._format import IdFactory, ToolParser
from ._schema import Schema, ToolSet, coerce_text

# the states of an XML tool-call parser: in content, in a wrapper, in an invoke, in a value
TEXT, WRAP, INVOKE, PARAM = range(4)
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


class WrappedCallParser(ToolParser):
    """Wrappers holding invokes, one call per invoke: the bookkeeping the XML formats share.

    A subclass reads its own tags in :meth:`_step` and calls :meth:`_open_wrap`,
    :meth:`_close_wrap`, :meth:`_start` and :meth:`_end_call`; it supplies :meth:`_coerce`
    (a parameter's raw value and schema -> the typed value). The raw text of the wrapper
    (``_wrap_raw``), of the open call (``_call_raw``) and of what in the wrapper is not a
    call (``_garbage``) is kept for the warnings and for a block that turns out to be content.
    """

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = TEXT
        self._implicit = False  # the wrapper was implied by an invoke outside one
        self._wrap_raw: list[str] = []
        self._wrap_calls = 0
        self._garbage: list[str] = []
        self._call: ArgsWriter | None = None
        self._call_raw: list[str] = []

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        raise NotImplementedError

    def _open_wrap(self, raw: str, implicit: bool) -> None:
        self._state = WRAP
        self._implicit = implicit
        self._wrap_raw = [raw]
        self._wrap_calls = 0
        self._garbage = []

    def _close_wrap(self, closer: str) -> None:
        self._state = TEXT
        raw = "".join(self._wrap_raw) + closer
        junk = "".join(self._garbage)
        if self._wrap_calls == 0:
            if junk.strip():
                self.warn("a tool-call block held no call; its text is kept as content", raw)
                self.content(raw)
            else:
                self.warn("an empty tool-call block was dropped", raw)
        elif junk.strip():
            self.warn("text inside a tool-call block that is not a call was ignored", junk)
        self._wrap_raw, self._garbage = [], []

    def _start(self, name: str, raw: str) -> None:
        self._wrap_raw.append(raw)
        self._wrap_calls += 1
        index = self.start_call(name)
        self._call = ArgsWriter(self, index, name, self._coerce)
        self._call_raw = [raw]
        self._state = INVOKE

    def _end_call(self) -> None:
        """The open invoke is complete: its held arguments, then its end (back in the wrapper)."""
        assert self._call is not None
        self._call.finish()
        self.end_call(self._call.index)
        self._call = None
        self._call_raw = []
        self._state = WRAP

    def _at_eof(self) -> None:
        if self._state in (INVOKE, PARAM) and self._call is not None:
            self.drop_call(self._call.index, "".join(self._call_raw))
            self._call = None
            self._state = WRAP
        if self._state == WRAP:
            if self._wrap_calls == 0:
                self._close_wrap("")
            elif "".join(self._garbage).strip():
                self.warn("text inside a tool-call block that is not a call was ignored",
                          "".join(self._garbage))
            self._state = TEXT


class FlatXmlParser(WrappedCallParser):
    """The incremental parser for one :class:`Dialect`."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory, dialect: Dialect) -> None:
        super().__init__(tools, id_factory)
        self.d = dialect
        self.bool_words = dialect.bool_words
        self._value: list[str] = []
        self._value_started = False
        self._trail_nl = False

    # -- headers -----------------------------------------------------------------------
    def _header(self, pattern: re.Pattern[str]) -> tuple[str, int, str]:
        """Read a tag header at the buffer start: ("need"|"no"|"ok", length, name)."""
        text = self.buf.text
        end = text.find(">", 0, _HEADER_LIMIT)  # bounded: no rescans of a long buffer
        if end < 0:
            if not self.buf.eof and len(text) < _HEADER_LIMIT:
                return "need", 0, ""
            return "no", 0, ""
        m = pattern.fullmatch(text[:end + 1])
        if not m or not m.group(1).strip():
            return "no", 0, ""
        return "ok", end + 1, m.group(1).strip()

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        return coerce_text(raw, schema, self.bool_words)

    # -- the state machine -------------------------------------------------------------
    def _step(self) -> bool:
        if self._state == TEXT:
            return self._step_text()
        if self._state == WRAP:
            return self._step_wrap()
        if self._state == INVOKE:
            return self._step_invoke()
        return self._step_param()

    def _step_text(self) -> bool:
        d = self.d
        before, marker = self.buf.scan((d.wrap_open, d.invoke_prefix))
        self.content(before)
        if marker is None:
            return False
        if marker == d.wrap_open:
            self.buf.take(len(marker))
            self._open_wrap(marker, implicit=False)
            return True
        status, length, name = self._header(d.invoke_header)
        if status == "need":
            return False
        if status == "no":
            self.content(self.buf.take(len(marker)))
            return True
        self._open_wrap("", implicit=True)
        self._start(name, self.buf.take(length))
        return True

    def _step_wrap(self) -> bool:
        d = self.d
        before, marker = self.buf.scan((d.invoke_prefix, d.wrap_close))
        self._wrap_raw.append(before)
        self._garbage.append(before)
        if marker is None:
            return False
        if marker == d.wrap_close:
            self.buf.take(len(marker))
            self._close_wrap(marker)
            return True
        status, length, name = self._header(d.invoke_header)
        if status == "need":
            return False
        if status == "no":
            junk = self.buf.take(len(marker))
            self._wrap_raw.append(junk)
            self._garbage.append(junk)
            return True
        self._start(name, self.buf.take(length))
        return True

    def _step_invoke(self) -> bool:
        d = self.d
        before, marker = self.buf.scan((d.param_prefix, d.invoke_close, d.wrap_close,
                                        d.invoke_prefix))
        self._call_raw.append(before)
        self._garbage.append(before)  # whitespace too: chunking must not matter
        if marker is None:
            return False
        if marker == d.param_prefix:
            status, length, key = self._header(d.param_header)
            if status == "need":
                return False
            if status == "no":
                junk = self.buf.take(len(marker))
                self._call_raw.append(junk)
                self._garbage.append(junk)
                return True
            self._call_raw.append(self.buf.take(length))
            self._open_param(key)
            return True
        if marker == d.invoke_close:
            self.buf.take(len(marker))
            self._end_call()
            if self._implicit:
                self._close_wrap("")
            else:
                self._state = WRAP
            return True
        self._end_call()  # wrapper closer or a new invoke: the open invoke ends here
        self._state = WRAP
        return True

    def _open_param(self, key: str) -> None:
        assert self._call is not None
        self._call.open(key)
        self._value = []
        self._value_started = False
        self._trail_nl = False
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
        d = self.d
        before, marker = self.buf.scan((d.param_close,))
        self._piece(before)
        if marker is None:
            return False
        rest = self.buf.text[len(marker):].lstrip()
        follows = (d.param_prefix, d.invoke_close, d.wrap_close, d.invoke_prefix)
        if not rest:
            if not self.buf.eof:
                return False
        elif not any(rest.startswith(f) for f in follows):
            if not self.buf.eof and any(f.startswith(rest) for f in follows):
                return False
            self._piece(self.buf.take(len(marker)))  # a closer inside the value: data
            return True
        self._call_raw.append(self.buf.take(len(marker)))
        self._close_param()
        return True

    def _close_param(self) -> None:
        assert self._call is not None
        value = "".join(self._value)
        if self.d.strip_newlines and value.endswith("\n"):
            value = value[:-1]
        self._call.close(value)
        self._value = []
        self._state = INVOKE
