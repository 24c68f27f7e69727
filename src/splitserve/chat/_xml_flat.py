"""Flat XML tool calls: a wrapper, invokes with a name, one tag per parameter, text values.

Shared by ``minimax-m2`` (``<minimax:tool_call><invoke name="f"><parameter name="k">v
</parameter></invoke></minimax:tool_call>``) and ``qwen3-coder`` (``<tool_call>
<function=f><parameter=k>\\nv\\n</parameter></function></tool_call>``); a
:class:`Dialect` names the tags. Rules, pinned:

- a parameter's closer only ends the value when what follows it (after whitespace) is the
  next parameter, the invoke's closer, the wrapper's closer, another invoke or the end of
  output; otherwise it is data (a value may contain ``</parameter>``);
- an invoke outside any wrapper is accepted as if wrapped; the implied wrapper lasts while
  whitespace, further invokes or the wrapper's closer follow, so a wrapper closer right
  after the implied wrapper's calls is its own and is dropped (a stray closer anywhere else
  is content);
- an invoke left open when the wrapper closes or the next invoke starts is closed there;
- a wrapper with no invoke: its raw text is content, with a warning; an empty one is dropped;
- the end of output inside an invoke drops that call (earlier calls are kept);
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

:class:`WrappedCallParser` is the part every XML format shares (``minimax-m3`` too): the
wrapper and invoke bookkeeping, one call per invoke, and what the end of output resolves;
:class:`TaggedCallParser` adds the steps of the formats whose tags are told by their
prefixes (these dialects, DSML).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._args import ArgsWriter
from ._format import IdFactory, ToolParser
from ._scan import quoted_end
from ._schema import Schema, ToolSet, coerce_text, declared_names

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
    # headers hold attributes whose quoted values may contain ">"; the name is the first
    # group of the header pattern that matched (see the module rules)
    quoted_attrs: bool = False
    # unclosed values end at the next tag, nested tool-call markup is data, the schema
    # tells a parameter from data (see the module rules)
    lenient_values: bool = False


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
        self._value: list[str] = []  # the open parameter's text, where it does not stream

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

    def _piece(self, text: str) -> None:
        """More of the open parameter's value: streamed, or kept until it closes."""
        if not text:
            return
        assert self._call is not None
        self._call_raw.append(text)
        if self._call.mode == "stream":
            self._call.stream(text)
        else:
            self._value.append(text)

    def _step_closer(self, closer: str, follows: tuple[str, ...]) -> bool:
        """A value up to its ``closer``, which ends it only when what follows (after
        whitespace) starts with one of ``follows`` or is the end of output; else it is data."""
        before, marker = self.buf.scan((closer,))
        self._piece(before)
        if marker is None:
            return False
        rest = self.buf.text[len(marker) :].lstrip()
        if not rest:
            if not self.buf.eof:
                return False
        elif not rest.startswith(follows):
            if not self.buf.eof and any(f.startswith(rest) for f in follows):
                return False
            self._piece(self.buf.take(len(marker)))  # a closer inside the value: data
            return True
        self._call_raw.append(self.buf.take(len(marker)))
        self._close_param()
        return True

    def _param_raw(self) -> Any:
        """The open parameter's raw value, as :meth:`_coerce` reads it."""
        return "".join(self._value)

    def _close_param(self) -> None:
        """The open parameter's value is complete (back in the invoke)."""
        assert self._call is not None
        self._call.close(self._param_raw())
        self._value = []
        self._state = INVOKE

    def _at_eof(self) -> None:
        if self._state in (INVOKE, PARAM) and self._call is not None:
            self.drop_call(self._call.index, "".join(self._call_raw))
            self._call = None
            self._state = WRAP
        if self._state == WRAP:
            if self._wrap_calls == 0:
                self._close_wrap("")
            elif "".join(self._garbage).strip():
                self.warn("text inside a tool-call block that is not a call was ignored", "".join(self._garbage))
            self._state = TEXT


class Tags(NamedTuple):
    """The tags of a :class:`TaggedCallParser` and the marker sets its steps scan for."""

    wrap_closes: tuple[str, ...]
    invoke_prefix: str
    invoke_close: str
    param_prefix: str
    param_close: str
    text_marks: tuple[str, ...]  # what opens a block in content
    wrap_marks: tuple[str, ...]  # what ends a wrapper's text
    follows: tuple[str, ...]  # what ends an invoke's text, and may follow a parameter's closer

    @classmethod
    def of(
        cls,
        wrap_opens: tuple[str, ...],
        wrap_closes: tuple[str, ...],
        invoke_prefix: str,
        invoke_close: str,
        param_prefix: str,
        param_close: str,
    ) -> Tags:
        return cls(
            wrap_closes,
            invoke_prefix,
            invoke_close,
            param_prefix,
            param_close,
            (*wrap_opens, invoke_prefix),
            (invoke_prefix, *wrap_closes),
            (param_prefix, invoke_close, *wrap_closes, invoke_prefix),
        )


class TaggedCallParser(WrappedCallParser):
    """Wrapper, invoke and parameter tags told by their prefixes: the steps the flat XML
    dialects and DSML share (the module rules on wrappers, invokes and closers).

    A subclass gives its :class:`Tags` (several wrappers may be accepted: DSML's), reads an
    invoke's header (:meth:`_invoke_header`) and a parameter's (:meth:`_param_header`), and
    opens the parameter (:meth:`_open_param`).
    """

    def __init__(self, tools: ToolSet, id_factory: IdFactory, tags: Tags) -> None:
        super().__init__(tools, id_factory)
        # one attribute, not eight: past about 30 attributes CPython reads an instance's
        # attributes more slowly (its shared-key limit), and FlatXmlParser holds many
        self._tags = tags

    def _invoke_header(self, start: int) -> tuple[str, int, str]:
        """The invoke header at ``start`` in the buffer: ("need"|"no"|"ok", length, name)."""
        raise NotImplementedError

    def _param_header(self) -> tuple[str, int, Any]:
        """The parameter header at the buffer's start: ("need"|"no"|"ok", length, what
        :meth:`_open_param` is given)."""
        raise NotImplementedError

    def _open_param(self, head: Any) -> None:
        raise NotImplementedError

    def _step(self) -> bool:
        if self._state == TEXT:
            return self._step_text()
        if self._state == WRAP:
            return self._step_implied() if self._implicit else self._step_wrap()
        if self._state == INVOKE:
            return self._step_invoke()
        return self._step_param()

    def _step_param(self) -> bool:
        return self._step_closer(self._tags.param_close, self._tags.follows)

    def _step_text(self) -> bool:
        before, marker = self.buf.scan(self._tags.text_marks)
        self.content(before)
        if marker is None:
            return False
        if marker != self._tags.invoke_prefix:
            self.buf.take(len(marker))
            self._open_wrap(marker, implicit=False)
            return True
        status, length, name = self._invoke_header(0)
        if status == "need":
            return False
        if status == "no":
            self.content(self.buf.take(len(marker)))
            return True
        self._open_wrap("", implicit=True)
        self._start(name, self.buf.take(length))
        return True

    def _step_wrap(self) -> bool:
        t = self._tags
        before, marker = self.buf.scan(t.wrap_marks)
        self._wrap_raw.append(before)
        self._garbage.append(before)
        if marker is None:
            return False
        if marker != t.invoke_prefix:
            self.buf.take(len(marker))
            self._close_wrap(marker)
            return True
        status, length, name = self._invoke_header(0)
        if status == "need":
            return False
        if status == "no":
            junk = self.buf.take(len(marker))
            self._wrap_raw.append(junk)
            self._garbage.append(junk)
            return True
        self._start(name, self.buf.take(length))
        return True

    def _step_implied(self) -> bool:
        """After a call of an implied wrapper: whitespace, then another invoke or a
        wrapper's closer continue the block; anything else ends it (and is content)."""
        t = self._tags
        text = self.buf.text
        rest = text.lstrip()
        ws = len(text) - len(rest)
        closer = next((c for c in t.wrap_closes if rest.startswith(c)), None)
        if closer is not None:
            self._close_wrap(self.buf.take(ws + len(closer)))
            return True
        if rest.startswith(t.invoke_prefix):
            status, length, name = self._invoke_header(ws)
            if status == "need":
                return False
            if status == "ok":
                self._wrap_raw.append(self.buf.take(ws))
                self._start(name, self.buf.take(length))
                return True
        elif not self.buf.eof and any(m.startswith(rest) for m in t.wrap_marks):
            return False  # only whitespace, or the start of a marker, so far
        self._close_wrap("")  # the whitespace and what follows are content
        return True

    def _step_invoke(self) -> bool:
        t = self._tags
        before, marker = self.buf.scan(t.follows)
        self._call_raw.append(before)
        self._garbage.append(before)  # whitespace too: chunking must not matter
        if marker is None:
            return False
        if marker == t.param_prefix:
            status, length, head = self._param_header()
            if status == "need":
                return False
            if status == "no":
                junk = self.buf.take(len(marker))
                self._call_raw.append(junk)
                self._garbage.append(junk)
                return True
            self._call_raw.append(self.buf.take(length))
            self._open_param(head)
            return True
        if marker == t.invoke_close:
            self.buf.take(len(marker))
        self._end_call()  # its closer, a wrapper's closer or a new invoke ends the invoke
        return True


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
