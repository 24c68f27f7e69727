"""``deepseek-v3``: DeepSeek V3 / V3.1 / R1 tool calls with the special ``｜tool▁...｜`` tokens.

V3.1 and later::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3 / R1 (a type, the name on its own line, a fenced JSON block)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"location": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Reasoning is ``<think>``. Rules, pinned: the markers are special tokens, so they never occur
inside arguments; a call begin without the calls-begin wrapper is accepted; a call whose
body is not a name and a JSON object is skipped with a warning (content if the block held no
call at all); the end of output inside a call drops it.
"""

from __future__ import annotations

import json
import re

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._reasoning import ReasoningSpec
from ._schema import ToolSet, coerce_value

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_TEXT, _CALLS, _CALL = range(3)
_FENCED = re.compile(r"\s*([^\n`]+?)\s*\n\s*```(?:json)?\s*(.*?)\s*```\s*", re.DOTALL)


def _parse_body(body: str) -> tuple[str, dict[str, object]] | None:
    if SEP not in body:
        return None
    head, rest = body.split(SEP, 1)
    head = head.strip()
    if head == "function" or not head:
        m = _FENCED.fullmatch(rest)
        if m:
            name, args_text = m.group(1), m.group(2)
        else:
            first, _, args_text = rest.strip().partition("\n")
            name = first
    else:
        name, args_text = head, rest
        m = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", rest, re.DOTALL)
        if m:
            args_text = m.group(1)
    name = name.strip()
    if not name:
        return None
    try:
        args = json.loads(args_text) if args_text.strip() else {}
    except ValueError:
        return None
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name, args


class DeepseekV3Parser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._raw: list[str] = []
        self._body: list[str] = []
        self._calls = 0
        self._junk: list[str] = []

    def _step(self) -> bool:
        buf = self.buf
        if self._state == _TEXT:
            before, marker = buf.scan((CALLS_BEGIN, CALL_BEGIN))
            self.content(before)
            if marker is None:
                return False
            self._raw, self._calls, self._junk = [], 0, []
            if marker == CALLS_BEGIN:
                self._raw.append(buf.take(len(marker)))
            self._state = _CALLS
            return True
        if self._state == _CALLS:
            before, marker = buf.scan((CALL_BEGIN, CALLS_END))
            self._raw.append(before)
            self._junk.append(before)
            if marker is None:
                return False
            self._raw.append(buf.take(len(marker)))
            if marker == CALLS_END:
                self._end_block()
            else:
                self._body = []
                self._state = _CALL
            return True
        before, marker = buf.scan((CALL_END, CALLS_END, CALL_BEGIN))
        self._body.append(before)
        self._raw.append(before)
        if marker is None:
            return False
        if marker == CALL_END:
            self._raw.append(buf.take(len(marker)))
        self._emit("".join(self._body))
        self._state = _CALLS
        return True

    def _emit(self, body: str) -> None:
        parsed = _parse_body(body)
        if parsed is None:
            self._junk.append(body)
            return
        name, args = parsed
        self.whole_call(name, coerce_value(args, self.schema(name)))
        self._calls += 1

    def _end_block(self) -> None:
        rawtext = "".join(self._raw)
        junk = "".join(self._junk)
        if self._calls == 0 and junk.strip():
            self.warn("a tool-call block held no valid call; its text is kept as content",
                      rawtext)
            self.content(rawtext)
        elif junk.strip():
            self.warn("text inside a tool-call block that is not a call was ignored", junk)
        self._raw, self._junk = [], []
        self._state = _TEXT

    def _at_eof(self) -> None:
        if self._state == _CALL:
            self.warn("a tool call was cut off by the end of the output; dropped "
                      "(earlier calls kept)", "".join(self._body))
            self._state = _CALLS
        if self._state == _CALLS:
            self._end_block()


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return DeepseekV3Parser(tools, id_factory)


FORMAT = ToolCallFormat(
    name="deepseek-v3",
    description="DeepSeek V3/V3.1/R1: <｜tool▁call▁begin｜>name<｜tool▁sep｜>{json}"
                "<｜tool▁call▁end｜>, <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    end_markers=("<｜end▁of▁sentence｜>",),
    example=(f"{CALLS_BEGIN}{CALL_BEGIN}get_weather{SEP}{{\"location\": \"Paris\"}}{CALL_END}"
             f"{CALLS_END}"),
)
