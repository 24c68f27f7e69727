"""XML tool calls: wrappers holding invokes, one call per invoke, and the steps of the formats
whose tags are told by their prefixes.

:class:`WrappedCallParser` is the part every XML format shares (``minimax-m2``, ``qwen3-coder``,
``seed-oss``, ``minimax-m3``, GLM, Kimi K3, DSML): the wrapper and invoke bookkeeping, one call
per invoke, and what the end of output resolves; :class:`TaggedCallParser` adds the steps of the
formats whose tags are told by their prefixes (the flat XML dialects of _xml_flat, DSML). Rules,
pinned:

- a parameter's closer only ends the value when what follows it (after whitespace) is the
  next parameter, the invoke's closer, the wrapper's closer, another invoke or the end of
  output; otherwise it is data (a value may contain ``</parameter>``);
- an invoke outside any wrapper is accepted as if wrapped; the implied wrapper lasts while
  whitespace, further invokes or the wrapper's closer follow, so a wrapper closer right
  after the implied wrapper's calls is its own and is dropped (a stray closer anywhere else
  is content);
- an invoke left open when the wrapper closes or the next invoke starts is closed there;
- a wrapper with no invoke: its raw text is content, with a warning; an empty one is dropped;
- the end of output inside an invoke drops that call (earlier calls are kept).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._args import ArgsWriter
from ._format import IdFactory, ToolParser
from ._schema import Schema, ToolSet

# the states of an XML tool-call parser: in content, in a wrapper, in an invoke, in a value
TEXT, WRAP, INVOKE, PARAM = range(4)


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
