"""``mistral``: Mistral's ``[TOOL_CALLS]`` tool calls, both generations, and ``[THINK]``.

Mistral Small 3.1+/3.2, Devstral, Magistral, Ministral 3 (one call per marker, the name
before ``[ARGS]``; Small 3.2's template puts a ``[CALL_ID]`` in between)::

    Let me check.[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}

Mistral Nemo, 7B v0.3 (a JSON list of call objects after one marker; an ``id`` beside the
name and arguments is ignored)::

    [TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris"}, "id": "a1b2c3d4e"}]

Reasoning (Magistral, Ministral 3 Reasoning) is ``[THINK]...[/THINK]`` at the start.
Rules, pinned:

- there is no end marker: a call ends with its JSON arguments object (read by its own
  brackets and strings, so a marker inside a string is data); text after it is content;
- the name form's call starts when ``[ARGS]`` follows a name (no spaces, brackets, braces
  or quotes; 256 characters at most) and its string arguments stream; a ``[CALL_ID]``
  between is skipped; in the list form each object streams as Hermes's do (see _json_args);
- a marker that is not followed by a call (no name, a name with a space, no ``[ARGS]`` before
  the end): the text is content, with a warning; arguments that are not a JSON object drop
  the call, the text is content, with a warning; the end of output inside a call drops it.
"""

from __future__ import annotations

import json
import re
import secrets
import string

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonArgsStreamer, JsonCallReader, start_json_call
from ._reasoning import ReasoningSpec
from ._schema import ToolSet

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_NAME_LIMIT = 256
_NAME_OK = re.compile(r"[^\s\[\]{}\"'<>,:]*\s*")
_ID_OK = re.compile(r"\s*[A-Za-z0-9_-]{0,64}\s*")
_TEXT, _AFTER, _NAME, _ID, _ARGS, _LIST, _ITEM, _SEP, _OBJ = range(9)


class MistralParser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._raw: list[str] = []
        self._head: list[str] = []
        self._name = ""
        self._index = -1
        self._streamer: JsonArgsStreamer | None = None
        self._reader = JsonCallReader(self)
        self._in_list = False
        self._list_calls = 0

    # -- helpers -----------------------------------------------------------------------
    def _not_a_call(self, why: str) -> None:
        """The text since the marker is content after all."""
        rawtext = "".join(self._raw)
        self.warn(f"{why}; the text is kept as content", rawtext)
        self.content(rawtext)
        self._raw = []
        self._state = _TEXT

    def _check_head(self, pattern: re.Pattern[str], limit: int) -> bool:
        """Whether the name (or id) read so far can still be one; if not, the part that
        could is raw text of a non-call and the rest goes back to be read as content."""
        head = "".join(self._head)
        m = pattern.match(head)
        cut = min(m.end() if m else 0, limit)
        if cut >= len(head):
            return True
        self._raw.append(head[:cut])
        self.buf.text = head[cut:] + self.buf.text
        self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
        return False

    # -- the state machine -------------------------------------------------------------
    def _step(self) -> bool:
        state = self._state
        if state == _TEXT:
            return self._step_text()
        if state == _AFTER:
            return self._step_form()
        if state == _NAME:
            return self._step_name()
        if state == _ID:
            return self._step_id()
        if state == _ARGS:
            return self._step_args()
        if state in (_LIST, _SEP):
            return self._step_list()
        if state == _ITEM:
            return self._step_item()
        return self._step_object()

    def _step_text(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((TOOL_CALLS,))
        self.content(before)
        if marker is None:
            return False
        self._raw = [buf.take(len(marker))]
        self._state = _AFTER
        return True

    def _step_form(self) -> bool:
        """Which form: a name, a JSON list, a JSON object."""
        buf = self.buf
        self._raw.append(buf.skip_ws())
        text = buf.text
        if not text:
            if buf.eof:
                self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
                return True
            return False
        if text[0] == "{":
            self._reader = JsonCallReader(self)
            self._in_list = False
            self._state = _OBJ
            return True
        if text[0] == "[":
            rest = text[1:].lstrip()
            if not rest and not buf.eof:
                return False
            if rest[:1] in ("{", "]"):
                self._raw.append(buf.take(1))
                self._in_list = True
                self._list_calls = 0
                self._state = _LIST
                return True
        self._head = []
        self._state = _NAME
        return True

    def _step_name(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((ARGS, CALL_ID, TOOL_CALLS))
        self._head.append(before)
        if not self._check_head(_NAME_OK, _NAME_LIMIT):
            return True
        name = "".join(self._head).strip()
        if marker is None:
            if buf.eof:
                self._raw.append("".join(self._head))
                self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
                return True
            return False
        self._raw.append("".join(self._head))
        if marker == TOOL_CALLS or not name:
            self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
            return True
        self._raw.append(buf.take(len(marker)))
        self._name = name
        if marker == CALL_ID:
            self._head = []
            self._state = _ID
        else:
            self._start()
        return True

    def _step_id(self) -> bool:
        """Small 3.2's call id, up to [ARGS]: skipped."""
        buf = self.buf
        before, marker = buf.scan((ARGS, TOOL_CALLS))
        self._head.append(before)
        if not self._check_head(_ID_OK, 64):
            return True
        if marker is None and not buf.eof:
            return False
        self._raw.append("".join(self._head))
        if marker != ARGS:
            self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
            return True
        self._raw.append(buf.take(len(marker)))
        self._start()
        return True

    def _step_args(self) -> bool:
        buf = self.buf
        assert self._streamer is not None
        used = self._streamer.feed(buf.text)
        self._raw.append(buf.take(used))
        if self._streamer.done:
            self._streamer.finish()
            self.end_call(self._index)
            self._raw = []
            self._state = _TEXT
            return True
        if self._streamer.failed:
            self._not_a_call(f"tool call {self._index}: its arguments are not a JSON object; dropped")
            return True
        return False

    def _step_list(self) -> bool:
        """In the JSON list: an object (or "]"), then "," or "]"."""
        buf = self.buf
        state = self._state
        self._raw.append(buf.skip_ws())
        if not buf.text:
            return False
        ch = buf.text[0]
        if ch == "]":
            self._raw.append(buf.take(1))
            self._end_list()
            return True
        if state == _SEP and ch == ",":
            self._raw.append(buf.take(1))
            self._state = _ITEM
            return True
        if state == _LIST and ch == "{":
            self._reader = JsonCallReader(self)
            self._state = _OBJ
            return True
        self._not_a_call("a tool-call list holds something that is not a call")
        return True

    def _step_item(self) -> bool:
        buf = self.buf
        self._raw.append(buf.skip_ws())
        if not buf.text:
            return False
        if buf.text[0] == "{":
            self._reader = JsonCallReader(self)
            self._state = _OBJ
            return True
        self._not_a_call("a tool-call list holds something that is not a call")
        return True

    def _step_object(self) -> bool:
        """One call object."""
        buf = self.buf
        outcome = self._reader.read(buf, self._raw)
        if not outcome:
            return False
        if outcome == "whole":
            if self.json_calls(self._reader.text) is None:
                self._not_a_call("a [TOOL_CALLS] value is not a call")
                return True
        elif outcome == "failed":  # the reader warned
            self.content("".join(self._raw))
            self._raw = []
            self._state = _TEXT
            return True
        self._list_calls += 1
        self._raw = []
        self._state = _SEP if self._in_list else _TEXT
        return True

    def _start(self) -> None:
        self._index, self._streamer = start_json_call(self, self._name)
        self._state = _ARGS

    def _end_list(self) -> None:
        if self._list_calls == 0:
            self.warn("an empty tool-call list was dropped", "".join(self._raw))
        self._raw = []
        self._state = _TEXT

    def _at_eof(self) -> None:
        rawtext = "".join(self._raw)
        if self._state == _ARGS:
            self.drop_call(self._index, rawtext)
        elif self._state == _OBJ:
            if self._reader.index >= 0:
                self.drop_call(self._reader.index, rawtext)
            else:
                self.warn("a tool call was cut off by the end of the output; dropped (earlier calls kept)", rawtext)
        elif self._state in (_LIST, _ITEM, _SEP) and rawtext.strip():
            if self._list_calls == 0:
                self._not_a_call("a [TOOL_CALLS] marker not followed by a call")
            else:
                self.warn("text in a tool-call list that is not a call was ignored", rawtext)
        self._raw = []
        self._state = _TEXT


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return MistralParser(tools, id_factory)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """Either form, as the templates write them: ``[TOOL_CALLS]f[ARGS]{...}`` per call (an
    optional nine-character ``[CALL_ID]`` before ``[ARGS]``, as Small 3.2 writes), or one
    ``[TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]`` list (Nemo)."""
    call_id = g.rule("mistral-call-id", f"({g.lit(CALL_ID)} [a-zA-Z0-9]{{9}})?")
    named, objects = [], []
    for t in tools:
        args = g.json_args(t)
        named.append(g.rule(f"{t.name}-call", f"{g.lit(TOOL_CALLS + t.name)} {call_id} {g.lit(ARGS)} {args}"))
        head = g.lit(f'{{"name": {json.dumps(t.name)}, "arguments": ')
        objects.append(g.rule(f"{t.name}-object", f'{head} {args} "}}"'))
    name_form = g.calls(g.choice(named), parallel)
    list_form = f'{g.lit(TOOL_CALLS + "[")} {g.calls(g.choice(objects), parallel, ", ")} "]"'
    return f"({g.rule('named-calls', name_form)} | {g.rule('call-list', list_form)})"


def detects(template: str) -> bool:
    """Mistral's ``[TOOL_CALLS]`` control token, either generation."""
    return TOOL_CALLS in template


_ID_CHARS = string.ascii_letters + string.digits


def mistral_call_id(index: int) -> str:
    """Nine random alphanumerics: the only call ids Mistral's templates accept in a history."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(9))


FORMAT = ToolCallFormat(
    name="mistral",
    description="Mistral Small 3.x / Devstral / Magistral / Ministral 3: [TOOL_CALLS]name"
    '[ARGS]{json}; Nemo / 7B v0.3: [TOOL_CALLS][{"name", "arguments"}]; '
    "[THINK]",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("[THINK]", "[/THINK]", prefilled_default=False),
    end_markers=("</s>",),
    call_grammar=_grammar,
    example='[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}',
    detect=detects,
    call_openers=(TOOL_CALLS,),
    call_id=mistral_call_id,
)
