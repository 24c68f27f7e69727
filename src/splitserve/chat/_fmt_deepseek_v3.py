"""``deepseek-v3``: DeepSeek V3 / V3.1 / R1 tool calls with the special ``｜tool▁...｜`` tokens.

V3.1 and later::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"location": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3 / R1 (a type, the name on its own line, a fenced JSON block)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"location": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Reasoning is ``<think>``. Rules, pinned: the markers are special tokens, so they never occur
inside arguments; a call begin without the calls-begin wrapper is accepted; the call starts
when its name is read and its string arguments stream; a call whose arguments are not a JSON
object is dropped with a warning, text in the block that is not a call is ignored with one
(content if the block held no call at all); the end of output inside a call drops it.
"""

from __future__ import annotations

import re

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallParser, start_json_call
from ._reasoning import ReasoningSpec
from ._schema import ToolSet

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_TEXT, _CALLS, _HEAD, _NAME, _FENCE, _ARGS, _CLOSE, _SKIP = range(8)
_ENDS = (CALL_END, CALLS_END, CALL_BEGIN)
_FENCE_OPEN = re.compile(r"\s*(?:```(?:json)?)?\s*(?=\{)")
_FENCE_PARTIAL = re.compile(r"\s*(?:`{1,3}(?:j(?:s(?:o(?:n)?)?)?)?)?\s*")


class DeepseekV3Parser(JsonCallParser):
    _ends = _ENDS
    _close_state, _skip_state = _CLOSE, _SKIP

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _TEXT
        self._name = ""

    def _step(self) -> bool:
        state = self._state
        if state == _TEXT:
            return self._step_text()
        if state == _CALLS:
            return self._step_calls()
        if state == _HEAD:
            return self._step_head()
        if state == _NAME:
            return self._step_name()
        if state == _FENCE:
            return self._step_fence()
        if state == _ARGS:
            return self._step_args()
        if state == _CLOSE:
            return self._step_close()
        return self._step_skip()

    def _step_text(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((CALLS_BEGIN, CALL_BEGIN))
        self.content(before)
        if marker is None:
            return False
        self._raw, self._calls, self._junk = [], 0, []
        if marker == CALLS_BEGIN:
            self._raw.append(buf.take(len(marker)))
        self._state = _CALLS
        return True

    def _step_calls(self) -> bool:
        buf = self.buf
        before, marker = buf.scan((CALL_BEGIN, CALLS_END))
        self._raw.append(before)
        self._junk.append(before)
        if marker is None:
            return False
        self._raw.append(buf.take(len(marker)))
        if marker == CALLS_END:
            self._end_block()
        else:
            self._head = []
            self._state = _HEAD
        return True

    def _step_head(self) -> bool:
        """The name (V3.1) or the type "function" (V3), up to the separator."""
        buf = self.buf
        before, marker = buf.scan((SEP, *_ENDS))
        self._head.append(before)
        self._raw.append(before)
        if marker is None:
            return False
        if marker != SEP:
            self._junk.append("".join(self._head))
            self._state = _CALLS
            return True
        self._raw.append(buf.take(len(SEP)))
        head = "".join(self._head).strip()
        if head in ("", "function"):
            self._head = []
            self._state = _NAME
        else:
            self._start(head)
        return True

    def _step_name(self) -> bool:
        """V3: the name on its own line, then a fenced JSON block."""
        buf = self.buf
        before, marker = buf.scan(("\n", *_ENDS))
        self._head.append(before)
        self._raw.append(before)
        if marker is None:
            return False
        if marker != "\n" or not "".join(self._head).strip():
            self._junk.append("".join(self._head))
            self._state = _CALLS
            return True
        self._raw.append(buf.take(1))
        self._start("".join(self._head).strip())
        return True

    def _step_fence(self) -> bool:
        """Optional ```json before the arguments object."""
        buf = self.buf
        m = _FENCE_OPEN.match(buf.text)
        if m is None:
            if not buf.eof and _FENCE_PARTIAL.fullmatch(buf.text):
                return False
            self._drop_args()
            return True
        self._raw.append(buf.take(m.end()))
        self._state = _ARGS
        return True

    def _is_junk(self, tail: str) -> bool:
        return bool(tail.strip().strip("`").strip())  # an optional closing fence is not junk

    def _after_call(self, dropped: bool) -> None:
        self._state = _CALLS

    def _start(self, name: str) -> None:
        self._index, self._streamer = start_json_call(self, name)
        self._state = _FENCE

    def _end_block(self) -> None:
        self.end_block("tool-call block", self._calls, "".join(self._raw), "".join(self._junk), empty=False)
        self._raw, self._junk = [], []
        self._state = _TEXT

    def _at_eof(self) -> None:
        if self._state in (_FENCE, _ARGS, _CLOSE, _SKIP):
            if self._state != _SKIP:
                self.warn(
                    "a tool call was cut off by the end of the output; dropped (earlier calls kept)", "".join(self._raw)
                )
            self._state = _CALLS
        elif self._state in (_HEAD, _NAME):
            self._junk.append("".join(self._head))
            self._state = _CALLS
        if self._state == _CALLS:
            self._end_block()


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return DeepseekV3Parser(tools, id_factory)


_MARK = "<｜tool▁"  # every marker starts so: kept out of argument strings


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """The V3.1 form, ``<｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``, in the
    calls wrapper; a tool named ``function`` in the V3 form (``function<｜tool▁sep｜>f``
    followed by a fenced block), which the parser would otherwise read as the V3 type."""
    alts = []
    for t in tools:
        args = g.json_args(t, forbid=_MARK)
        if t.name == "function":
            head = g.lit(f"{CALL_BEGIN}function{SEP}{t.name}\n```json\n")
            fence_end = g.lit("\n```" + CALL_END)
            body = f"{head} {args} {fence_end}"
        else:
            body = f"{g.lit(CALL_BEGIN + t.name + SEP)} {args} {g.lit(CALL_END)}"
        alts.append(g.rule(f"{t.name}-call", body))
    calls = g.calls(g.choice(alts), parallel)
    return f"{g.lit(CALLS_BEGIN)} {calls} {g.lit(CALLS_END)}"


def detects(template: str) -> bool:
    """DeepSeek V3 / V3.1 / R1: the ``tool▁call▁begin`` and ``tool▁sep`` special tokens."""
    return "tool\u2581call\u2581begin" in template and "tool\u2581sep" in template


FORMAT = ToolCallFormat(
    name="deepseek-v3",
    description="DeepSeek V3/V3.1/R1: <｜tool▁call▁begin｜>name<｜tool▁sep｜>{json}<｜tool▁call▁end｜>, <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<think>", "</think>", prefilled_default=False),
    end_markers=("<｜end▁of▁sentence｜>",),
    call_grammar=_grammar,
    example=(f'{CALLS_BEGIN}{CALL_BEGIN}get_weather{SEP}{{"location": "Paris"}}{CALL_END}{CALLS_END}'),
    detect=detects,
    aliases=("deepseek_v3", "deepseek_v31"),
    call_openers=(CALLS_BEGIN, CALL_BEGIN),
)
