"""``hermes``: Hermes / Qwen 2.5 / Qwen3 JSON tool calls, ``<tool_call>{json}</tool_call>``.

    Let me check.
    <tool_call>
    {"name": "get_weather", "arguments": {"location": "Paris", "days": 3}}
    </tool_call>

Optional ``<think>`` reasoning (Qwen3). Rules, pinned:

- the JSON value is read by its own brackets and strings, so ``</tool_call>`` inside a
  string argument is data;
- a call is emitted as soon as its JSON value is complete (a block never closed keeps it);
  several objects, or a JSON list of them, in one block are several calls;
- a block whose body is not a call (not JSON, no name): its raw text is content, a warning;
- a call that opens ``{"name": ..., "arguments": {`` starts at once and its string arguments
  stream (see _json_args); any other shape is read whole, then emitted;
- the end of output inside the JSON drops that call.
"""

from __future__ import annotations

import json
import re

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallReader, next_block_item
from ._reasoning import ReasoningSpec
from ._schema import ToolSet

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_TEXT, _BODY, _JSON, _AFTER, _RAW = range(5)


class HermesParser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._raw: list[str] = []
        self._reader = JsonCallReader(self)
        self._block_calls = 0

    def _step(self) -> bool:
        buf = self.buf
        if self._state == _TEXT:
            before, marker = buf.scan((OPEN,))
            self.content(before)
            if marker is None:
                return False
            self._raw = [buf.take(len(OPEN))]
            self._block_calls = 0
            self._state = _BODY
            return True
        if self._state in (_BODY, _AFTER):
            item = next_block_item(buf, self._raw, CLOSE)
            if item == "json":
                self._reader = JsonCallReader(self)
                self._state = _JSON
            elif item == "close":
                self._end_block()
            elif item == "junk":
                self._state = _RAW
            return bool(item)
        if self._state == _JSON:
            outcome = self._reader.read(buf, self._raw)
            if not outcome:
                return False
            if outcome == "whole":
                self._on_json(self._reader.text)
            elif outcome == "ok":
                self._block_calls += 1
                self._raw = []
                self._state = _AFTER
            else:
                self._state = _RAW
            return True
        # _RAW: text in the block that is not JSON, up to the closer
        before, marker = buf.scan((CLOSE,))
        self._raw.append(before)
        if marker is None:
            return False
        self._raw.append(buf.take(len(CLOSE)))
        self._end_block()
        return True

    def _on_json(self, text: str) -> None:
        calls = self.json_calls(text)
        if calls is None:
            self._state = _RAW
            return
        self._block_calls += calls
        self._raw = []
        self._state = _AFTER

    def _end_block(self) -> None:
        rawtext = "".join(self._raw)
        if self._block_calls == 0:
            self.warn("a <tool_call> block held no valid call; its text is kept as content", rawtext)
            self.content(rawtext)
        elif rawtext.strip() not in ("", CLOSE):
            self.warn("text inside a <tool_call> block that is not a call was ignored", rawtext)
        self._raw = []
        self._state = _TEXT

    def _at_eof(self) -> None:
        if self._state == _JSON:
            self.warn(
                "a tool call was cut off by the end of the output; dropped (earlier calls kept)", "".join(self._raw)
            )
        elif self._state in (_BODY, _RAW) or (self._state == _AFTER and self._block_calls == 0):
            self._end_block()
        elif self._state == _AFTER:
            leftover = "".join(self._raw)
            if leftover.strip():
                self.warn("text inside a <tool_call> block that is not a call was ignored", leftover)
        self._state = _TEXT


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return HermesParser(tools, id_factory)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """``<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>``, one block per call."""
    tail = g.lit("}\n" + CLOSE)
    alts = []
    for t in tools:
        head = g.lit(f'{OPEN}\n{{"name": {json.dumps(t.name)}, "arguments": ')
        alts.append(g.rule(f"{t.name}-call", f"{head} {g.json_args(t)} {tail}"))
    return g.calls(g.choice(alts), parallel)  # back to back: a newline between is content


_TEMPLATE_CALL = re.compile(r"<tool_call>(?:\\n|\n|\s|'|\"|\+|~|\{\{-?)*\{\s*\\?\"name\\?\"")


def detects(template: str) -> bool:
    """``<tool_call>`` followed by a JSON ``name`` (or ``"arguments": `` beside it), not GLM's
    ``<arg_key>`` nor Qwen3-Coder's ``<function=``."""
    if "<arg_key>" in template or "<function=" in template:
        return False
    if "<tool_calls>" in template and not _TEMPLATE_CALL.search(template):
        return False  # <tool_call> only in instructions; the calls go in <tool_calls> (Apriel)
    return bool(_TEMPLATE_CALL.search(template)) or ("<tool_call>" in template and '"arguments": ' in template)


FORMAT = ToolCallFormat(
    name="hermes",
    description='Hermes 2 Pro/3, Qwen 2.5, Qwen3, QwQ: <tool_call>{"name", "arguments"}</tool_call>, optional <think>',
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    # ChatML's, Llama 3's (Hermes 3), Granite 4's and Reka's end of turn
    end_markers=("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<sep>"),
    call_grammar=_grammar,
    example='<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>',
    detect=detects,
    call_openers=(OPEN,),
)
