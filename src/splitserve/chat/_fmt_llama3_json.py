"""``llama3-json``: Llama 3.1 / 3.2 / 3.3 JSON tool calls, the whole reply one JSON object.

    {"name": "get_weather", "parameters": {"location": "Paris", "days": 3}}

optionally after ``<|python_tag|>``, several separated by ``;``. Rules, pinned:

- only output that starts (after whitespace) with ``{"`` is held back as a possible call;
  anything else streams as content at once, and so does a ``{`` in prose;
- a JSON object with a string ``name`` and an object ``parameters`` (or ``arguments``) is a
  call; any other JSON, or invalid JSON, is content;
- ``{"name": ..., "parameters": {`` starts the call at once and its string arguments
  stream (see _json_args); other shapes are read whole;
- text after the calls is content; the end of output inside the JSON drops that call.
"""

from __future__ import annotations

import json
import re

from ._format import IdFactory, ToolCallFormat, ToolParser, calls_from_json
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallReader
from ._schema import ToolSet, coerce_value, loads_json

PYTHON_TAG = "<|python_tag|>"
_START, _JSON, _AFTER, _PASS = range(4)
_OPENING = re.compile(r'\s*(?:<\|python_tag\|>)?\s*\{\s*"')


def _could_open(text: str) -> bool:
    """Whether ``text`` is a proper prefix of something _OPENING would match."""
    s = text.lstrip()
    if PYTHON_TAG.startswith(s):
        return True
    if s.startswith(PYTHON_TAG):
        s = s[len(PYTHON_TAG):].lstrip()
    return s == "" or (s.startswith("{") and s[1:].strip() == "")


class Llama3JsonParser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _START
        self._raw: list[str] = []
        self._reader = JsonCallReader(self)
        self._calls = 0

    def _step(self) -> bool:
        buf = self.buf
        if self._state == _PASS:
            self.content(buf.take(len(buf.text)))
            return False
        if self._state == _START:
            m = _OPENING.match(buf.text)
            if m is None:
                if not buf.eof and _could_open(buf.text):
                    return False
                self._state = _PASS
                return True
            lead = buf.text[:m.end()]
            brace = lead.index("{")
            self._raw = [buf.take(brace)]
            self._reader = JsonCallReader(self)
            self._state = _JSON
            return True
        if self._state == _JSON:
            self._raw.append(buf.take(self._reader.feed(buf.text)))
            if not self._reader.done:
                return False
            outcome = self._reader.close()
            if outcome == "ok":
                self._calls += 1
                self._raw = []
                self._state = _AFTER
                return True
            rawtext = "".join(self._raw)
            if outcome == "failed":
                self.content(rawtext)
                self._state = _PASS
                return True
            text = rawtext.strip()
            text = text.removeprefix(PYTHON_TAG)
            try:
                calls = calls_from_json(loads_json(text), ("parameters", "arguments"))
            except ValueError:
                calls = None
            if calls is None:
                self.content(rawtext)
                self._state = _PASS
                return True
            for name, arguments in calls:
                self.whole_call(name, coerce_value(arguments, self.schema(name)))
            self._calls += len(calls)
            self._raw = []
            self._state = _AFTER
            return True
        # _AFTER: ';' and another call, or the rest is content
        rest = buf.text.lstrip()
        if not rest and not buf.eof:
            return False
        if rest.startswith(";"):
            buf.text = rest[1:]
            self._state = _START
            return True
        self._state = _PASS
        return True

    def _at_eof(self) -> None:
        if self._state == _JSON:
            rawtext = "".join(self._raw)
            if re.match(r'\s*(?:<\|python_tag\|>)?\s*\{\s*"name"', rawtext):
                self.warn("a tool call was cut off by the end of the output; dropped "
                          "(earlier calls kept)", rawtext)
            else:
                self.content(rawtext)
        self._state = _PASS


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return Llama3JsonParser(tools, id_factory)


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """``{"name": "f", "parameters": {...}}``, several joined by ``; ``."""
    alts = []
    for t in tools:
        head = g.lit(f'{{"name": {json.dumps(t.name)}, "parameters": ')
        alts.append(g.rule(f"{t.name}-call", f'{head} {g.json_args(t)} "}}"'))
    return g.calls(g.choice(alts), parallel, "; ")


_TEMPLATE_CALL = re.compile(r"\{\"name\": \"'\s*\+\s*tool_call\.name\s*\+\s*'\", '\s*\}\}\s*"
                            r"\{\{-?\s*'\"parameters\": '")


def detects(template: str) -> bool:
    """Llama 3.x: its header tokens and a ``"parameters": `` object written for a call."""
    return "<|start_header_id|>" in template and ('"parameters": ' in template
                                                  or bool(_TEMPLATE_CALL.search(template)))


FORMAT = ToolCallFormat(
    name="llama3-json",
    description="Llama 3.1/3.2/3.3: the reply is {\"name\", \"parameters\"} (optionally after "
                "<|python_tag|>)",
    make_tool_parser=_parser,
    reasoning=None,
    end_markers=("<|eot_id|>", "<|eom_id|>"),
    call_grammar=_grammar,
    example='{"name": "get_weather", "parameters": {"location": "Paris"}}',
    detect=detects,
    aliases=("llama3_json", "llama4_json"),
)
