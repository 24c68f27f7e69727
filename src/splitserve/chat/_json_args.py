"""Streaming the arguments object of a JSON tool call (``{"name": ..., "arguments": {...}}``).

JSON formats write ``{"name": "f", "arguments": {"k": "v", "n": 3}}``. Once the name has been
read and ``"arguments": {`` follows, the call starts and :class:`JsonArgsStreamer` reads the
arguments object as it arrives: a string value under a plain-string schema is passed through
as it is written (it is already JSON-escaped text), so it streams; other values are read whole,
coerced by the schema and written (:class:`ArgsWriter` decides, as for the XML formats). A
number or boolean under a plain-string schema is read whole too and becomes its text as
written (``7`` -> ``"7"``); ``null`` there stays null, with a warning.
Anything that is not a JSON object of key/value pairs stops the streamer (``failed``): the
caller then drops the call and keeps the raw text as content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ._args import ArgsWriter
from ._format import IdFactory, ToolParser
from ._scan import JsonScanner, TextBuffer
from ._schema import Schema, ToolSet, coerce_value, loads_json

# The opening of a call object up to its arguments object, within its first 512 characters.
PREFIX_LIMIT = 512
_PREFIX = re.compile(
    r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*'
    r":\s*(?=\{)"
)
_STRING_END = re.compile(r'["\\]')
_SCALAR_END = re.compile(r"[\s,}]")
_CONTROL = re.compile(r"[\x00-\x1f]")
_HEX = frozenset("0123456789abcdefABCDEF")

_OPEN, _KEY_OR_END, _KEY, _COLON, _VALUE, _STREAM, _RAW, _AFTER, _DONE, _FAILED = range(10)


def match_prefix(text: str) -> tuple[str, int] | None:
    """(name, offset of the arguments ``{``) when ``text`` opens a streamable call object."""
    m = _PREFIX.match(text, 0, PREFIX_LIMIT)
    if m is None or m.end() >= len(text):
        return None
    try:
        name = json.loads(f'"{m.group(1)}"')
    except ValueError:
        return None
    return (name, m.end()) if name else None


def json_coerce(raw: Any, schema: Schema | None) -> Any:
    return coerce_value(loads_json(raw, strict=False), schema)


def _escape_controls(text: str) -> str:
    """Raw control characters (invalid inside a JSON string) as escapes."""
    return _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)


class JsonArgsStreamer:
    """Reads one arguments object incrementally and writes it through an :class:`ArgsWriter`."""

    def __init__(self, writer: ArgsWriter) -> None:
        self.w = writer
        self.state = _OPEN
        self._key: list[str] = []
        self._raw: list[str] = []
        self._scanner: JsonScanner | None = None
        self._escape = False
        self._esc = ""

    @property
    def done(self) -> bool:
        return self.state == _DONE

    @property
    def failed(self) -> bool:
        return self.state == _FAILED

    def feed(self, text: str) -> int:
        """Read ``text``; returns how many characters were used (all, unless done or failed)."""
        pos, end = 0, len(text)
        while pos < end and self.state not in (_DONE, _FAILED):
            pos = self._step(text, pos)
        return pos

    def _step(self, text: str, pos: int) -> int:
        ch = text[pos]
        state = self.state
        if state in (_OPEN, _KEY_OR_END, _COLON, _AFTER) and ch.isspace():
            return pos + 1
        if state == _OPEN:
            self.state = _KEY_OR_END if ch == "{" else _FAILED
            return pos + 1
        if state == _KEY_OR_END:
            if ch == "}":
                self.state = _DONE
            elif ch == '"':
                self._key = []
                self.state = _KEY
            else:
                self.state = _FAILED
            return pos + 1
        if state == _KEY:
            m = _STRING_END.search(text, pos)
            if self._escape:
                self._key.append(ch)
                self._escape = False
                return pos + 1
            if m is None:
                self._key.append(text[pos:])
                return len(text)
            self._key.append(text[pos : m.start()])
            if text[m.start()] == "\\":
                self._key.append("\\")
                self._escape = True
                return m.start() + 1
            try:
                key = json.loads('"' + "".join(self._key) + '"')
            except ValueError:
                self.state = _FAILED
                return m.start() + 1
            self.w.open(key, lazy=True)
            self.state = _COLON
            return m.start() + 1
        if state == _COLON:
            self.state = _VALUE if ch == ":" else _FAILED
            return pos + 1
        if state == _VALUE:
            if ch.isspace():
                return pos + 1
            if self.w.mode == "stream":
                if ch == '"':
                    self.w.begin_stream()
                    self.state = _STREAM
                    self._esc = ""
                    return pos + 1
                self.w.demote()  # a number, true, null, ... under a string schema
            self._raw = []
            self._scanner = JsonScanner() if ch in '"{[' else None
            self.state = _RAW
            return pos
        if state == _STREAM:
            if self._esc:  # inside an escape: checked before it is written
                self._esc += ch
                kind = self._esc[1]
                if kind == "u":
                    if len(self._esc) == 2 or ch in _HEX:
                        if len(self._esc) == 6:
                            self.w.stream_raw(self._esc)
                            self._esc = ""
                        return pos + 1
                    # not \uXXXX: the backslash was literal; read ch again as ordinary text
                    self.w.stream_raw("\\\\" + self._esc[1:-1])
                    self._esc = ""
                    return pos
                if kind in '"\\/bfnrt':
                    self.w.stream_raw(self._esc)
                    self._esc = ""
                    return pos + 1
                self.w.stream_raw("\\\\")  # a literal backslash; ch is read again
                self._esc = ""
                return pos
            m = _STRING_END.search(text, pos)
            if m is None:
                self.w.stream_raw(_escape_controls(text[pos:]))
                return len(text)
            self.w.stream_raw(_escape_controls(text[pos : m.start()]))
            if text[m.start()] == "\\":
                self._esc = "\\"
                return m.start() + 1
            self.w.close()
            self.state = _AFTER
            return m.start() + 1
        if state == _RAW:
            if self._scanner is not None:
                n = self._scanner.feed(text[pos:])
                self._raw.append(text[pos : pos + n])
                if not self._scanner.done:
                    return pos + n
                return self._close_raw(pos + n)
            m = _SCALAR_END.search(text, pos)
            if m is None:
                self._raw.append(text[pos:])
                return len(text)
            self._raw.append(text[pos : m.start()])
            return self._close_raw(m.start())
        if state == _AFTER:
            if ch == ",":
                self.state = _KEY_OR_END
            elif ch == "}":
                self.state = _DONE
            else:
                self.state = _FAILED
            return pos + 1
        return pos + 1

    def _close_raw(self, pos: int) -> int:
        raw = "".join(self._raw)
        try:
            json.loads(raw, strict=False)
        except ValueError:
            self.state = _FAILED
            return pos
        self.w.close(raw)
        self.state = _AFTER
        return pos

    def finish(self) -> None:
        """The object is complete: write held values and the closing brace."""
        self.w.finish()

    def read(self, buf: TextBuffer, ends: Sequence[str], raw: list[str]) -> str:
        """Feed ``buf`` up to the earliest of ``ends`` (markers that never occur inside the
        object); the text used goes to ``raw``, the rest stays unread. Returns "ok" when the
        object is complete (then finished), "failed" when it is not a JSON object (or a
        marker came first), "" when more text is needed."""
        before, marker = buf.scan(ends)
        used = self.feed(before)
        raw.append(before[:used])
        buf.text = before[used:] + buf.text
        if self.state == _DONE:
            self.finish()
            return "ok"
        if self.state == _FAILED or marker is not None:
            return "failed"
        return ""


def start_json_call(parser: Any, name: str) -> tuple[int, JsonArgsStreamer]:
    """Start the call ``name`` on ``parser`` (a ToolParser): its index, and a streamer for its
    arguments object that writes them to it."""
    index = int(parser.start_call(name))
    return index, JsonArgsStreamer(ArgsWriter(parser, index, name, json_coerce))


class JsonCallParser(ToolParser):
    """A parser of calls written ``NAME ... {arguments} ... <call end>`` (DeepSeek V3, Kimi K2):
    the steps from the arguments object to the call's end are shared. A format names its
    markers and state numbers in the class attributes and says what follows a call
    (:meth:`_after_call`)."""

    _ends: tuple[str, ...] = ()
    """The markers that end a call's text (its own end first)."""
    _close_state = _skip_state = -1  # the format's state numbers after the arguments

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = 0
        self._raw: list[str] = []
        self._junk: list[str] = []
        self._head: list[str] = []
        self._calls = 0
        self._index = -1
        self._streamer: JsonArgsStreamer | None = None
        self._tail: list[str] = []

    def _step_args(self) -> bool:
        """The arguments object, up to a marker (a marker first: not an object, dropped)."""
        assert self._streamer is not None
        outcome = self._streamer.read(self.buf, self._ends, self._raw)
        if outcome == "ok":
            self._tail = []
            self._state = self._close_state
        elif outcome == "failed":
            self._drop_args()
        return bool(outcome)

    def _drop_args(self) -> None:
        """The call's arguments are not a JSON object: warned, and the rest of the call skipped."""
        self.warn(f"tool call {self._index}: its arguments are not a JSON object; dropped", "".join(self._raw))
        self._state = self._skip_state

    def _step_close(self) -> bool:
        """After the arguments object, up to the call's end (text between is junk)."""
        before, marker = self._to_call_end()
        self._tail.append(before)  # all of it, whitespace too: chunking must not matter
        if marker is None:
            return False
        tail = "".join(self._tail)
        if self._is_junk(tail):
            self._junk.append(tail)
        self.end_call(self._index)
        self._calls += 1
        self._after_call(dropped=False)
        return True

    def _step_skip(self) -> bool:
        """What is left of a dropped call, up to its end."""
        _, marker = self._to_call_end()
        if marker is None:
            return False
        self._after_call(dropped=True)
        return True

    def _to_call_end(self) -> tuple[str, str | None]:
        """The text up to the first marker (to the raw text too) and the marker met (None: none
        yet); the call's own end is taken, any other marker left for the next step."""
        before, marker = self.buf.scan(self._ends)
        self._raw.append(before)
        if marker == self._ends[0]:
            self._raw.append(self.buf.take(len(marker)))
        return before, marker

    def _is_junk(self, tail: str) -> bool:
        """Whether the text between the arguments and the call's end is more than spacing."""
        return bool(tail.strip())

    def _after_call(self, dropped: bool) -> None:
        """The call ended (``dropped``: with a warning already): the state that follows."""
        raise NotImplementedError


def next_block_item(buf: TextBuffer, raw: list[str], close: str) -> str:
    """Between the items of a block of JSON calls: the whitespace to ``raw``, then what comes:
    ``"json"`` (a value opens), ``"close"`` (the block's closer, taken to ``raw``), ``"junk"`` (any
    other text), or ``""`` while more text is needed to tell."""
    raw.append(buf.skip_ws())
    if not buf.text:
        return ""
    if buf.text[0] in "{[":
        return "json"
    if buf.text.startswith(close):
        raw.append(buf.take(len(close)))
        return "close"
    if not buf.eof and close.startswith(buf.text):
        return ""
    return "junk"


class JsonCallReader:
    """One call object (``{"name", "arguments"}``), read incrementally.

    When the object opens with its name and then ``"arguments": {`` (within its first 512
    characters), the call starts at once and its arguments stream; otherwise the object is
    read whole and :attr:`text` holds it for the caller to parse. Which way is decided by the
    text alone, so it does not depend on how the output was chunked.
    """

    def __init__(self, parser: Any) -> None:
        self._p = parser
        self.scanner = JsonScanner()
        self._parts: list[str] = []
        self._undecided = True
        self.streamer: JsonArgsStreamer | None = None
        self.index = -1

    @property
    def done(self) -> bool:
        return self.scanner.done

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def feed(self, text: str) -> int:
        """Read up to the end of the object; returns how many characters were used."""
        n = self.scanner.feed(text)
        piece = text[:n]
        self._parts.append(piece)
        if self.streamer is not None:
            self.streamer.feed(piece)
        elif self._undecided:
            acc = self.text
            found = match_prefix(acc)
            if found is not None:
                name, offset = found
                self._undecided = False
                self.index, self.streamer = start_json_call(self._p, name)
                self.streamer.feed(acc[offset:])
            elif len(acc) >= PREFIX_LIMIT or self.scanner.done:
                self._undecided = False
        return n

    def read(self, buf: TextBuffer, raw: list[str]) -> str:
        """Feed ``buf`` up to the end of the object, the text used also to ``raw``; then
        :meth:`close`'s outcome, "" while the object is incomplete."""
        raw.append(buf.take(self.feed(buf.text)))
        return self.close() if self.scanner.done else ""

    def close(self) -> str:
        """At the end of the object: "whole" (parse :attr:`text`), "ok" or "failed"."""
        if self.streamer is None:
            return "whole"
        if self.streamer.done:
            self.streamer.finish()
            self._p.end_call(self.index)
            return "ok"
        self._p.warn(
            f"tool call {self.index}: its arguments are not a JSON object of "
            "key/value pairs; dropped, the text is kept as content",
            self.text,
        )
        return "failed"
