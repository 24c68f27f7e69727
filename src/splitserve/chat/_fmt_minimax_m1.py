"""``minimax-m1``: MiniMax-M1's JSON-lines tool calls and ``<think>`` reasoning.

    <think>
    reasoning
    </think>

    Let me look.
    <tool_calls>
    {"name": "get_weather", "arguments": {"location": "Paris"}}
    {"name": "get_weather", "arguments": {"location": "Rome"}}
    </tool_calls>

One ``{"name", "arguments"}`` object per line inside ``<tool_calls>`` (the template's
``tojson``). The generation prompt (``<beginning_of_sentence>ai name=assistant\\n``) does not
pre-fill ``<think>``; the model opens it. Rules, pinned:

- a JSON value is read by its own brackets and strings, so ``</tool_calls>`` inside a
  string argument is data; several objects (or a JSON list of them) are several calls;
- a call that opens ``{"name": ..., "arguments": {`` starts at once and its string arguments
  stream (see _json_args); any other shape is read whole, then emitted;
- text in the block that is not a call (up to the end of its line) and JSON that is not a
  call are ignored with a warning; a block with no call at all is content, with a warning
  (an empty one is dropped);
- a block never closed keeps its complete calls; the end of output inside a JSON value
  drops that call.
"""

from __future__ import annotations

import json

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallReader, next_block_item
from ._reasoning import ReasoningSpec
from ._schema import ToolSet

OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
_TEXT, _BLOCK, _JSON, _JUNK = range(4)


class MinimaxM1Parser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._raw: list[str] = []
        self._junk: list[str] = []
        self._calls = 0
        self._reader = JsonCallReader(self)

    def _step(self) -> bool:
        buf = self.buf
        if self._state == _TEXT:
            before, marker = buf.scan((OPEN,))
            self.content(before)
            if marker is None:
                return False
            self._raw, self._junk, self._calls = [buf.take(len(OPEN))], [], 0
            self._state = _BLOCK
            return True
        if self._state == _BLOCK:  # between items: whitespace, a JSON value, junk, the closer
            item = next_block_item(buf, self._raw, CLOSE)
            if item == "json":
                self._reader = JsonCallReader(self)
                self._state = _JSON
            elif item == "close":
                self._end_block()
            elif item == "junk":
                self._state = _JUNK
            return bool(item)
        if self._state == _JSON:
            outcome = self._reader.read(buf, self._raw)
            if not outcome:
                return False
            if outcome == "whole":
                calls = self.json_calls(self._reader.text)
                if calls is None:
                    self._junk.append(self._reader.text)
                else:
                    self._calls += calls
            elif outcome == "ok":
                self._calls += 1
            else:  # the reader warned; the text is content only if the block holds no call
                self._junk.append(self._reader.text)
            self._state = _BLOCK
            return True
        # _JUNK: text that is not a call, up to the end of its line (or the closer)
        before, marker = buf.scan(("\n", CLOSE))
        self._raw.append(before)
        self._junk.append(before)
        if marker is None:
            return False
        if marker == "\n":
            self._raw.append(buf.take(1))
        self._state = _BLOCK
        return True

    def _end_block(self) -> None:
        self.end_block("<tool_calls> block", self._calls, "".join(self._raw), "".join(self._junk))
        self._raw, self._junk = [], []
        self._state = _TEXT

    def _at_eof(self) -> None:
        if self._state == _JSON:
            self.warn(
                "a tool call was cut off by the end of the output; dropped (earlier calls kept)", self._reader.text
            )
            self._state = _BLOCK
        if self._state in (_BLOCK, _JUNK):
            self._end_block()


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return MinimaxM1Parser(tools, id_factory)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """``<tool_calls>\\n{"name": "f", "arguments": {...}}\\n...</tool_calls>``: one block,
    one call per line, as the template writes it."""
    tail = g.lit("}")
    alts = []
    for t in tools:
        head = g.lit(f'{{"name": {json.dumps(t.name, ensure_ascii=False)}, "arguments": ')
        alts.append(g.rule(f"{t.name}-call", f"{head} {g.json_args(t)} {tail}"))
    calls = g.calls(g.choice(alts), parallel, sep="\n")
    return f"{g.lit(OPEN + chr(10))} {calls} {g.lit(chr(10) + CLOSE)}"


def detects(template: str) -> bool:
    """MiniMax-M1: ``<tool_calls>`` around JSON lines with ``"arguments": `` (not Apriel's
    ``<tool_calls>[`` list)."""
    return OPEN in template and CLOSE in template and '"arguments": ' in template and OPEN + "[" not in template


FORMAT = ToolCallFormat(
    name="minimax-m1",
    description='MiniMax-M1: <tool_calls>\\n{"name", "arguments"} per line</tool_calls>, <think>',
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    end_markers=("<end_of_sentence>",),
    example='<tool_calls>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_calls>',
    call_grammar=_grammar,
    detect=detects,
    aliases=("minimax", "minimax_m1"),
    call_openers=(OPEN,),
)
