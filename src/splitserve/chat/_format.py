"""What a tool-call format is, the parser pipeline, and the base every format parser extends.

A :class:`ToolCallFormat` is a value: its name, its reasoning markers, a factory for its
tool-call parser, the markers that identify its templates, and the end-of-turn tokens its
templates write. ``fmt.parser(tools=...)`` returns a :class:`ChatParser`: the reasoning
splitter feeding the tool-call parser, with the ``feed(text) -> events`` /
``finish() -> events`` shape and no I/O.

Pinned policies every format parser follows (see docs/chat.md):

- never raise on model output; malformed output becomes content (with the raw text) and a
  :class:`ParseWarning`;
- a call cut off by the end of output is dropped (no :class:`ToolCallEnd`), earlier
  complete calls are kept;
- a call to a tool the request did not declare is kept, its arguments inferred without a
  schema, and a warning names it;
- an argument value that does not fit its schema (after lossless coercion) is kept as
  written, and a warning names its path;
- argument fragments concatenate to a JSON object equal to the final arguments.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._events import (
    ContentDelta,
    Event,
    ParseWarning,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ._reasoning import ReasoningSpec, ReasoningSplitter
from ._scan import TextBuffer
from ._schema import Schema, ToolSet, coerce_value, loads_json, misfits

if TYPE_CHECKING:
    from ._grammar import CallGrammar

IdFactory = Callable[[int], str]
_SLICE = 2048


def random_call_id(index: int) -> str:
    """The default tool-call id: ``call_`` and 24 random hex digits (unique per call)."""
    return "call_" + secrets.token_hex(12)


class ToolParser:
    """Base of the per-format tool-call parsers: content in, events out, never raises.

    Subclasses implement :meth:`_step` (make progress on ``self.buf``; return False when
    more input is needed) and :meth:`_at_eof` (resolve whatever state the output ended in).
    """

    bool_words = False  # accept True/False (any case) as booleans

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        self.tools = tools
        self.buf = TextBuffer()
        self._id_factory = id_factory
        self._events: list[Event] = []
        self._count = 0

    # -- the public shape ------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        # A long text is read in slices: the parsers consume their buffer by slicing it, so
        # the buffer must stay short for the cost to stay linear (results do not depend on
        # how the text is cut; the tests check every cut).
        for start in range(0, len(text), _SLICE):
            self.buf.text += text[start : start + _SLICE]
            self._drive()
        return self._flush()

    def finish(self) -> list[Event]:
        self.buf.eof = True
        self._drive()
        self._at_eof()
        return self._flush()

    def _drive(self) -> None:
        guard = 0
        while self._step():
            guard += 1
            if guard > 10_000_000:  # a parser defect; stop rather than spin
                break

    def _flush(self) -> list[Event]:
        out, self._events = self._events, []
        return out

    # -- hooks -------------------------------------------------------------------------
    def _step(self) -> bool:
        raise NotImplementedError

    def _at_eof(self) -> None:
        raise NotImplementedError

    # -- helpers for subclasses --------------------------------------------------------
    def content(self, text: str) -> None:
        if text:
            self._events.append(ContentDelta(text))

    def warn(self, message: str, raw: str = "") -> None:
        self._events.append(ParseWarning(message, raw))

    def start_call(self, name: str) -> int:
        index = self._count
        self._count += 1
        self._events.append(ToolCallStart(index, self._id_factory(index), name))
        if self.tools and not self.tools.known(name):
            self.warn(
                f"tool call {index}: the request declares no tool named {name!r}; "
                "kept, arguments inferred without a schema"
            )
        return index

    def args(self, index: int, text: str) -> None:
        if text:
            self._events.append(ToolCallArgsDelta(index, text))

    def end_call(self, index: int) -> None:
        self._events.append(ToolCallEnd(index))

    def drop_call(self, index: int, raw: str) -> None:
        self.warn(f"tool call {index} was cut off by the end of the output; dropped (earlier calls kept)", raw)

    def end_block(self, what: str, calls: int, raw: str, junk: str, empty: bool = True) -> None:
        """A block of calls ends (``what`` names it in the warnings; ``junk`` is its text that
        is not a call): with no call its ``raw`` text is content, with a warning, or dropped
        where the junk is blank (with a warning where ``empty``); beside calls the junk is
        ignored, with a warning."""
        if calls == 0 and junk.strip():
            self.warn(f"a {what} held no valid call; its text is kept as content", raw)
            self.content(raw)
        elif calls == 0:
            if empty:
                self.warn(f"an empty {what} was dropped", raw)
        elif junk.strip():
            self.warn(f"text inside a {what} that is not a call was ignored", junk)

    def whole_call(self, name: str, arguments: dict[str, Any]) -> None:
        """Emit a complete call at once (formats whose arguments arrive as one JSON value)."""
        index = self.start_call(name)
        for problem in misfits(arguments, self.schema(name)):
            self.warn(f"tool call {index}: argument {problem}; kept as written")
        self.args(index, json.dumps(arguments, ensure_ascii=False))
        self.end_call(index)

    def json_calls(self, text: str, args_keys: tuple[str, ...] = ("arguments", "parameters")) -> int | None:
        """Emit the calls of a JSON value read whole (one call object or a list, see
        :func:`calls_from_json`), each coerced by its schema; how many, or None (and nothing
        emitted) when the text is not JSON or not calls."""
        try:
            calls = calls_from_json(loads_json(text), args_keys)
        except ValueError:
            return None
        if calls is None:
            return None
        for name, arguments in calls:
            self.whole_call(name, coerce_value(arguments, self.schema(name)))
        return len(calls)

    def schema(self, name: str) -> Schema | None:
        return self.tools.parameters(name)


@dataclass(frozen=True)
class ToolCallFormat:
    """A model family's tool-call and reasoning syntax, as a value."""

    name: str
    description: str
    make_tool_parser: Callable[[ToolSet, IdFactory], ToolParser]
    reasoning: ReasoningSpec | None = None
    end_markers: tuple[str, ...] = ()
    example: str = ""
    aliases: tuple[str, ...] = field(default=())
    # the GBNF of this format's tool calls, for a forced call (see _grammar); None: none
    call_grammar: CallGrammar | None = None
    # whether a chat template renders assistant tool calls in this format (markers it writes,
    # not merely mentions); the registry asks every format in registration order, the first
    # that claims a template wins (see _registry.detect_format). None: never detected.
    detect: Callable[[str], bool] | None = None
    # the markers that start a tool call in this format's output: a call opener met while the
    # reasoning is only assumed open (a pre-filled opener) ends the reasoning (see _reasoning)
    call_openers: tuple[str, ...] = ()
    # the ids this format's templates accept for the calls of a history (Mistral's: 9
    # alphanumerics); None: ``call_`` and 24 hex digits
    call_id: IdFactory | None = None

    def parser(
        self,
        tools: list[dict[str, Any]] | None = None,
        *,
        prefilled: bool | None = None,
        id_factory: IdFactory | None = None,
    ) -> ChatParser:
        """A fresh incremental parser for one response.

        ``tools`` are the request's tools (OpenAI shape) for schema-driven coercion;
        ``prefilled`` says whether the prompt ended with the reasoning opener (see
        :meth:`prefilled_by`; the gateway always says). None: pre-filled where the format's
        prompts usually pre-fill it, else unknown, decided by the output (a closer with no
        opener ends implicit reasoning; see _reasoning). ``id_factory(index)`` makes call ids.
        """
        splitter = None
        if self.reasoning is not None:
            pre = prefilled
            if pre is None and self.reasoning.prefilled_default:
                pre = True
            splitter = ReasoningSplitter(self.reasoning, pre, self.call_openers)
        return ChatParser(splitter, self.make_tool_parser(ToolSet(tools), id_factory or self.call_id or random_call_id))

    def prefilled_by(self, prompt: str) -> bool:
        """Whether a rendered prompt ends with this format's reasoning opener."""
        return self.reasoning is not None and prompt.rstrip().endswith(self.reasoning.open)


class ChatParser:
    """Reasoning splitter -> tool-call parser; ``feed(text)`` and ``finish()`` give events."""

    def __init__(self, splitter: ReasoningSplitter | None, tools: ToolParser) -> None:
        self._splitter = splitter
        self._tools = tools
        self._finished = False

    def feed(self, text: str) -> list[Event]:
        """Read the next piece of model output; return the events it completes."""
        if self._finished:
            return [ParseWarning("feed() after finish(); text ignored", text)]
        if self._splitter is None:
            return self._tools.feed(text)
        return self._route(self._splitter.feed(text), final=False)

    def finish(self) -> list[Event]:
        """The output has ended: flush held-back text, resolve open calls."""
        if self._finished:
            return []
        self._finished = True
        if self._splitter is None:
            return self._tools.finish()
        return self._route(self._splitter.finish(), final=True)

    def _route(self, pieces: list[tuple[str, str]], final: bool) -> list[Event]:
        out: list[Event] = []
        for kind, text in pieces:
            if kind == "reasoning":
                out.append(ReasoningDelta(text))
            else:
                out.extend(self._tools.feed(text))
        if final:
            out.extend(self._tools.finish())
        return out


def calls_from_json(
    value: Any, args_keys: tuple[str, ...] = ("arguments", "parameters")
) -> list[tuple[str, dict[str, Any]]] | None:
    """``{"name", "arguments"}`` objects (one, or a list) as (name, arguments); None if not."""
    items = value if isinstance(value, list) else [value]
    out: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        inner = item.get("function")
        fn: dict[str, Any] = inner if isinstance(inner, dict) else item
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            return None
        args: Any = {}
        for key in args_keys:
            if key in fn:
                args = fn[key]
                break
        if isinstance(args, str):
            try:
                args = loads_json(args) if args.strip() else {}
            except ValueError:
                return None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None
        out.append((name, args))
    return out or None
