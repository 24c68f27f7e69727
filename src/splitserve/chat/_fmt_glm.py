"""``glm-4.5`` and ``glm-4.7``: GLM-4.5 / 4.6 / 4.7 tool calls, ``<arg_key>``/``<arg_value>`` pairs.

GLM-4.5 and GLM-4.6 write a newline after the name and after every tag::

    <tool_call>get_weather
    <arg_key>location</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

GLM-4.7 writes the same tags with nothing between them::

    <tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value></tool_call>

One parser reads both (whitespace between the tags is ignored, whatever the template). The
two formats differ in what they write for a forced call (grammar, example) and in the
reasoning default: GLM-4.7's generation prompt ends with ``<think>`` (thinking on) or
``</think>`` (off), GLM-4.5/4.6's ends with the ``<|assistant|>`` header (the model writes
``<think>`` itself; ``\\n<think></think>`` when thinking is off). Strings are written raw,
other values as JSON (the templates' ``tojson``). Rules, pinned:

- one call per ``<tool_call>`` block; the name is the block's text up to the first tag,
  stripped; a name with whitespace or brackets in it is not a call (the block is content,
  with a warning);
- an ``</arg_value>`` only ends the value when what follows it (after whitespace) is the next
  ``<arg_key>``, ``</tool_call>``, another ``<tool_call>`` or the end of output; otherwise it
  is data (a value may contain ``</arg_value>``);
- a key not followed by an ``<arg_value>``, or a value without a key, is ignored with a
  warning;
- a call left open when the next ``<tool_call>`` starts is closed there;
- the end of output inside a call (before its ``</tool_call>``) drops that call.

Detection: a template that writes ``<tool_call>`` with ``<arg_key>`` and ``<arg_value>`` is
GLM's; GLM-4.7's (asked first) when a probe call rendered with it has no newline inside its
block. Other models' templates write GLM's calls too (Spark 2.5, Laguna, Ling 3.0), so their
end-of-turn tokens are among the end markers.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from ._format import IdFactory, ToolCallFormat
from ._grammar import CallGrammar, GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._render import render_chat
from ._schema import Schema, ToolSet, coerce_text
from ._xml_calls import INVOKE, PARAM, TEXT, WRAP, WrappedCallParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY_OPEN, KEY_CLOSE = "<arg_key>", "</arg_key>"
VALUE_OPEN, VALUE_CLOSE = "<arg_value>", "</arg_value>"
_LIMIT = 512  # the longest name or key read; longer is not a call
_BAD_NAME = re.compile(r"[\s<>{}\"'`]")
_FOLLOWS = (KEY_OPEN, CLOSE, OPEN)  # what may follow a value's closer


class GlmParser(WrappedCallParser):
    """``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>``."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._named = False  # the open block's name was read (a call, or junk)

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        return coerce_text(raw, schema)

    def _junk(self, text: str) -> None:
        if self._state == WRAP:
            self._wrap_raw.append(text)
        else:
            self._call_raw.append(text)
        self._garbage.append(text)

    def _step(self) -> bool:
        if self._state == TEXT:
            return self._step_text()
        if self._state == WRAP:
            return self._step_name() if not self._named else self._step_junk_block()
        if self._state == INVOKE:
            return self._step_invoke()
        return self._step_closer(VALUE_CLOSE, _FOLLOWS)

    def _step_text(self) -> bool:
        before, marker = self.buf.scan((OPEN,))
        self.content(before)
        if marker is None:
            return False
        self._open_wrap(self.buf.take(len(OPEN)), implicit=False)
        self._named = False
        return True

    def _step_name(self) -> bool:
        text = self.buf.text
        end = text.find("<", 0, _LIMIT)
        if end < 0:
            if not self.buf.eof and len(text) < _LIMIT:
                return False
            self._named = True  # no tag after it: not a call (at the end: cut off)
            return True
        head = text[:end]
        name = head.strip()
        self._named = True
        if not name or _BAD_NAME.search(name):
            return True  # the block's text is junk up to its closer
        self._start(name, self.buf.take(end))
        return True

    def _step_junk_block(self) -> bool:
        """A block whose head is not a name: its text up to the closer (or the next block)."""
        before, marker = self.buf.scan((CLOSE, OPEN))
        self._junk(before)
        if marker is None:
            return False
        if marker == CLOSE:
            self._close_wrap(self.buf.take(len(CLOSE)))
        else:
            self._close_wrap("")
        return True

    def _step_invoke(self) -> bool:
        before, marker = self.buf.scan((KEY_OPEN, CLOSE, OPEN, VALUE_OPEN))
        self._junk(before)  # whitespace too: chunking must not matter
        if marker is None:
            return False
        if marker == KEY_OPEN:
            return self._read_key()
        if marker == VALUE_OPEN:  # a value without a key
            self._junk(self.buf.take(len(marker)))
            return True
        self._end_call()
        self._close_wrap(self.buf.take(len(CLOSE)) if marker == CLOSE else "")
        return True

    def _read_key(self) -> bool:
        text = self.buf.text
        start = len(KEY_OPEN)
        close = text.find(KEY_CLOSE, start, start + _LIMIT + len(KEY_CLOSE))
        if close < 0:
            if not self.buf.eof and len(text) < start + _LIMIT + len(KEY_CLOSE):
                return False
            self._junk(self.buf.take(start))
            return True
        key = text[start:close].strip()
        if not key or "<" in key:  # not a key: only its opener is junk
            self._junk(self.buf.take(start))
            return True
        after = close + len(KEY_CLOSE)
        rest = text[after:]
        gap = len(rest) - len(rest.lstrip())
        rest = rest[gap:]
        if not rest.startswith(VALUE_OPEN):
            if not self.buf.eof and VALUE_OPEN.startswith(rest):
                return False
            self._junk(self.buf.take(after))  # a key with no value
            return True
        self._call_raw.append(self.buf.take(after + gap + len(VALUE_OPEN)))
        assert self._call is not None
        self._call.open(key)
        self._value = []
        self._state = PARAM
        return True

    def _at_eof(self) -> None:
        if self._state == WRAP and not self._named:
            self._junk(self.buf.take(len(self.buf.text)))
        super()._at_eof()


def _parser(tools: ToolSet, id_factory: IdFactory) -> GlmParser:
    return GlmParser(tools, id_factory)


def _valid_key(key: str) -> bool:
    return bool(key) and key == key.strip() and "<" not in key


def _grammar_for(sep: str) -> CallGrammar:
    def grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
        """One block per call as the template writes it (``sep`` after the name and after
        each tag), blocks back to back (text between them would be content)."""
        close = g.lit(VALUE_CLOSE + sep)

        def param(key: str, value: str) -> str:
            opener = g.lit(f"{KEY_OPEN}{key}{KEY_CLOSE}{sep}{VALUE_OPEN}")
            return f"{opener} {value} {close}"

        return g.xml_calls(
            tools, lambda name: f"{OPEN}{name}{sep}", param, _valid_key, CLOSE, VALUE_CLOSE, parallel, kind="call"
        )

    return grammar


def is_glm(template: str) -> bool:
    """A GLM template: it writes ``<tool_call>`` blocks of ``<arg_key>``/``<arg_value>`` pairs."""
    return OPEN in template and KEY_OPEN in template and VALUE_OPEN in template


_PROBE_NAME = "probe_fn"
_PROBE: list[dict[str, Any]] = [
    {"role": "user", "content": "go"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": _PROBE_NAME, "arguments": '{"a": "x", "b": 1}'}}
        ],
    },
]
_PROBE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_NAME,
            "parameters": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        },
    }
]
# the compact form in the template's text, where it cannot be rendered
_COMPACT = re.compile(r"</arg_value>(?:\{%[^%]*%\})*</tool_call>")


@functools.lru_cache(maxsize=32)
def _compact(template: str) -> bool:
    """Whether the template writes a call's tags back to back (GLM-4.7) rather than one per
    line (GLM-4.5/4.6): a probe call is rendered and its block read."""
    for tools in (None, _PROBE_TOOLS):
        try:
            text = render_chat(template, _PROBE, tools, add_generation_prompt=False)
        except Exception:  # noqa: BLE001 (a template that cannot render: read its text)
            continue
        start = text.rfind(OPEN + _PROBE_NAME)
        end = text.find(CLOSE, start)
        if start >= 0 and end >= 0:
            return not text[start:end].count("\n")
    return bool(_COMPACT.search(template)) or "{function-name}<arg_key>" in template


def detects_glm47(template: str) -> bool:
    """GLM-4.7 (and the templates that write its compact tags: Spark 2.5, Laguna S 2.1)."""
    return is_glm(template) and _compact(template)


def detects_glm45(template: str) -> bool:
    """GLM-4.5 / 4.6 and the other GLM-style templates (GLM-4.7 is asked first)."""
    return is_glm(template)


_THINK = ("<think>", "</think>")
# GLM's turn ends, and those of the other templates that write GLM's calls: Spark 2.5
# (DeepSeek's token), Ling 3.0, Laguna
END_MARKERS = ("<|user|>", "<|observation|>", "<|endoftext|>", "<｜end▁of▁sentence｜>", "<|role_end|>", "</assistant>")

GLM45 = ToolCallFormat(
    name="glm-4.5",
    description="GLM-4.5/4.6: <tool_call>name\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value></tool_call>, <think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec(*_THINK, prefilled_default=False),
    end_markers=END_MARKERS,
    call_grammar=_grammar_for("\n"),
    example=(
        "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    ),
    detect=detects_glm45,
    aliases=("glm45", "glm-4.6"),
    call_openers=(OPEN,),
)

GLM47 = ToolCallFormat(
    name="glm-4.7",
    description="GLM-4.7: <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>"
    "</tool_call>, <think> pre-filled by default",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec(*_THINK, prefilled_default=True),
    end_markers=END_MARKERS,
    call_grammar=_grammar_for(""),
    example=(
        "<tool_call>get_weather<arg_key>location</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"
    ),
    detect=detects_glm47,
    aliases=("glm47",),
    call_openers=(OPEN,),
)
