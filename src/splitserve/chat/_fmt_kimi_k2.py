"""``kimi-k2``: Kimi K2 / K2-Instruct-0905 / K2-Thinking tool calls with special tokens.

    Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"location": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The call's header is Kimi's own call id, ``functions.<name>:<counter>`` (the counter runs
over the whole conversation); the name is read out of it (names may hold dots and colons:
the ``functions.`` prefix and a trailing ``:<digits>`` are cut, nothing else). The id the
parser hands out still comes from the id factory, like every format's. Reasoning is
``<think>`` (K2-Thinking; K2-Instruct never opens it). Rules, pinned:

- the markers are special tokens, so they never occur inside arguments; the section's
  singular spelling ``<|tool_call_section_begin|>`` is accepted, and so is a call begin
  without the section around it (the section is then that call: text after it is content);
- the call starts when its header is read and its string arguments stream (see _json_args);
  a call whose arguments are not a JSON object is dropped with a warning; text in the
  section that is not a call is ignored with one (the section is content if it held no call
  at all); an empty header is not a call;
- a section never closed keeps its complete calls; the end of output inside a call drops it.
"""

from __future__ import annotations

import re

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallParser, start_json_call
from ._reasoning import ReasoningSpec
from ._schema import ToolSet

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
# the singular spelling some Kimi checkpoints write (vLLM accepts both)
_SECTION_BEGIN_1 = "<|tool_call_section_begin|>"
_SECTION_END_1 = "<|tool_call_section_end|>"
_BEGINS = (SECTION_BEGIN, _SECTION_BEGIN_1)
_SECTION_ENDS = (SECTION_END, _SECTION_END_1)
_ENDS = (CALL_END, *_SECTION_ENDS, CALL_BEGIN)
_TEXT, _SECTION, _HEAD, _ARGS, _CLOSE, _SKIP = range(6)
_COUNTER = re.compile(r":\d+$")


def name_from_id(call_id: str) -> str:
    """The function name in a Kimi call id: ``functions.a.b:3`` -> ``a.b``; ``""`` when it
    names none (empty, or a bare counter such as ``0``)."""
    text = call_id.strip()
    if text.startswith("functions."):
        text = text[len("functions.") :]
    m = _COUNTER.search(text)
    if m:
        text = text[: m.start()]
    text = text.strip()
    return "" if text.isdigit() else text


class KimiK2Parser(JsonCallParser):
    _ends = _ENDS
    _close_state, _skip_state = _CLOSE, _SKIP

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._implicit = False  # a call begin outside a section: the section is that call

    def _step(self) -> bool:
        state = self._state
        if state == _TEXT:
            return self._step_text()
        if state == _SECTION:
            return self._step_section()
        if state == _HEAD:
            return self._step_head()
        if state == _ARGS:
            return self._step_args()
        if state == _CLOSE:
            return self._step_close()
        return self._step_skip()

    def _step_text(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((*_BEGINS, CALL_BEGIN))
        self.content(before)
        if marker is None:
            return False
        self._raw, self._junk, self._calls = [], [], 0
        self._implicit = marker == CALL_BEGIN
        if not self._implicit:
            self._raw.append(buf.take(len(marker)))
        self._state = _SECTION
        return True

    def _step_section(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((CALL_BEGIN, *_SECTION_ENDS))
        self._raw.append(before)
        self._junk.append(before)
        if marker is None:
            return False
        self._raw.append(buf.take(len(marker)))
        if marker == CALL_BEGIN:
            self._head = []
            self._state = _HEAD
        else:
            self._end_section()
        return True

    def _step_head(self) -> bool:
        """The call id, up to the argument marker."""
        buf = self.buf
        before, marker = buf.scan((ARGS_BEGIN, *_ENDS))
        self._head.append(before)
        self._raw.append(before)
        if marker is None:
            return False
        head = "".join(self._head)
        name = name_from_id(head)
        if marker == ARGS_BEGIN and not name:
            self._junk.append(head)
            self._state = _SKIP
            return True
        if marker != ARGS_BEGIN:  # a header with no arguments: not a call
            self._junk.append(head)
            self._state = _SECTION
            if marker == CALL_END:
                self._raw.append(buf.take(len(marker)))
                if self._implicit:
                    self._end_section()
            return True
        self._raw.append(buf.take(len(marker)))
        self._index, self._streamer = start_json_call(self, name)
        self._state = _ARGS
        return True

    def _after_call(self, dropped: bool) -> None:
        self._state = _SECTION
        if self._implicit:  # a dropped call's warning was given already: the section's is quiet
            self._end_section(quiet=dropped)

    def _end_section(self, quiet: bool = False) -> None:
        """The section ends; ``quiet``: its one call was dropped with a warning already."""
        self.end_block("tool-call section", self._calls, "".join(self._raw), "".join(self._junk), empty=not quiet)
        self._raw, self._junk = [], []
        self._state = _TEXT

    def _at_eof(self) -> None:
        cut_off = self._state in (_HEAD, _ARGS, _CLOSE, _SKIP)
        if self._state in (_ARGS, _CLOSE):
            self.drop_call(self._index, "".join(self._raw))
        elif self._state == _HEAD:  # cut off before its arguments: not text, not a call
            self.warn(
                "a tool call was cut off by the end of the output; dropped (earlier calls kept)", "".join(self._head)
            )
        if self._state != _TEXT:
            self._end_section(quiet=cut_off)


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return KimiK2Parser(tools, id_factory)


_MARK = "<|tool_call"  # every tool marker starts so: kept out of argument strings


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """The template's form, every call in one section::

        <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
        <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>

    The counter is any number (the template's runs over the whole conversation).
    """
    counter = g.rule("kimi-counter", "[0-9]{1,6}")
    alts = []
    for t in tools:
        head = g.lit(f"{CALL_BEGIN}functions.{t.name}:")
        body = f"{head} {counter} {g.lit(ARGS_BEGIN)} {g.json_args(t, forbid=_MARK)} {g.lit(CALL_END)}"
        alts.append(g.rule(f"{t.name}-call", body))
    calls = g.calls(g.choice(alts), parallel)
    return f"{g.lit(SECTION_BEGIN)} {calls} {g.lit(SECTION_END)}"


def detects(template: str) -> bool:
    """Kimi K2: the call begin and argument begin special tokens."""
    return CALL_BEGIN in template and ARGS_BEGIN in template


FORMAT = ToolCallFormat(
    name="kimi-k2",
    description="Kimi K2 / K2-Thinking: <|tool_call_begin|>functions.name:0"
    "<|tool_call_argument_begin|>{json}<|tool_call_end|>, <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    end_markers=("<|im_end|>",),
    call_grammar=_grammar,
    example=(
        f'{SECTION_BEGIN}{CALL_BEGIN}functions.get_weather:0{ARGS_BEGIN}{{"location": "Paris"}}{CALL_END}{SECTION_END}'
    ),
    detect=detects,
    aliases=("kimi_k2",),
    call_openers=(*_BEGINS, CALL_BEGIN),
)
