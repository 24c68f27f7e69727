"""``llama3-json``: Llama 3.1 / 3.2 / 3.3 JSON tool calls, the whole reply one JSON object.

    {"name": "get_weather", "parameters": {"location": "Paris", "days": 3}}

optionally after ``<|python_tag|>``, several separated by ``;``. Rules, pinned:

- only output that starts (after whitespace) with ``{"`` is held back as a possible call;
  anything else streams as content at once, and so does a ``{`` in prose;
- ``<|python_tag|>`` (a special token the model writes only to call a tool) starts a call
  anywhere: the text before it is content, the JSON after it is read as at the start; a
  tag not followed by JSON is content, with a warning;
- a JSON object with a string ``name`` and an object ``parameters`` (or ``arguments``) is a
  call; any other JSON is content; invalid JSON is content (its raw text) with a warning;
- ``{"name": ..., "parameters": {`` starts the call at once and its string arguments
  stream (see _json_args); other shapes are read whole;
- text after the calls is content; the end of output inside the JSON drops that call when
  what was written is valid JSON so far (a call cut off), and keeps it as content with a
  warning when it is not.
"""

from __future__ import annotations

import json
import re

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._json_args import JsonCallReader
from ._schema import ToolSet

PYTHON_TAG = "<|python_tag|>"
_START, _JSON, _AFTER, _PASS = range(4)
_OPENING = re.compile(r'\s*(?:<\|python_tag\|>)?\s*\{\s*"')
_STRING = re.compile(r'"(?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_PARTIAL_STRING = re.compile(
    r'"(?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*'
    r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?"
)
_TOKEN = re.compile(r'[^\s,:\]}"{\[]+')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_PARTIAL_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)?(?:\.\d*)?(?:[eE][+-]?\d*)?")
_LITERALS = ("true", "false", "null")
_VALUE, _ITEM_OR_END, _KEY_OR_END, _KEY, _COLON, _NEXT = range(6)


def json_prefix(text: str) -> bool:
    """Whether ``text`` is valid JSON or the start of some (what a cut-off value looks like)."""
    stack: list[str] = []
    state, i, n = _VALUE, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if state == _NEXT:  # after a value: a separator or a closer
            if not stack:
                return False  # text after a complete value
            if ch == ",":
                state = _KEY if stack[-1] == "{" else _VALUE
            elif ch == ("}" if stack[-1] == "{" else "]"):
                stack.pop()
            else:
                return False
            i += 1
        elif state == _COLON:
            if ch != ":":
                return False
            state, i = _VALUE, i + 1
        elif state in (_KEY_OR_END, _KEY):
            if ch == "}" and state == _KEY_OR_END:
                stack.pop()
                state, i = _NEXT, i + 1
                continue
            if ch != '"':
                return False
            m = _STRING.match(text, i)
            if m is None:
                return _PARTIAL_STRING.fullmatch(text, i) is not None
            state, i = _COLON, m.end()
        else:  # a value (or, first in an array, its closer)
            if ch == "]" and state == _ITEM_OR_END:
                stack.pop()
                state, i = _NEXT, i + 1
            elif ch in "{[":
                stack.append(ch)
                state, i = (_KEY_OR_END if ch == "{" else _ITEM_OR_END), i + 1
            elif ch == '"':
                m = _STRING.match(text, i)
                if m is None:
                    return _PARTIAL_STRING.fullmatch(text, i) is not None
                state, i = _NEXT, m.end()
            else:
                m = _TOKEN.match(text, i)
                if m is None:
                    return False
                token = m.group()
                if m.end() == n:  # the last token may be cut off
                    return (
                        any(lit.startswith(token) for lit in _LITERALS) or _PARTIAL_NUMBER.fullmatch(token) is not None
                    )
                if token not in _LITERALS and _NUMBER.fullmatch(token) is None:
                    return False
                state, i = _NEXT, m.end()
    return True


def _could_open(text: str) -> bool:
    """Whether ``text`` is a proper prefix of something _OPENING would match."""
    s = text.lstrip()
    if PYTHON_TAG.startswith(s):
        return True
    if s.startswith(PYTHON_TAG):
        s = s[len(PYTHON_TAG) :].lstrip()
    return s == "" or (s.startswith("{") and s[1:].strip() == "")


class Llama3JsonParser(ToolParser):
    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._state = _START
        self._raw: list[str] = []
        self._reader = JsonCallReader(self)
        self._calls = 0

    def _open_json(self, m: re.Match[str]) -> None:
        brace = self.buf.text.index("{", 0, m.end())
        self._raw = [self.buf.take(brace)]
        self._reader = JsonCallReader(self)
        self._state = _JSON

    def _step(self) -> bool:
        buf = self.buf
        if self._state == _PASS:  # content, until a python tag
            before, marker = buf.scan((PYTHON_TAG,))
            self.content(before)
            if marker is None:
                return False
            m = _OPENING.match(buf.text)
            if m is not None:
                self._open_json(m)
                return True
            if not buf.eof and _could_open(buf.text):
                return False
            self.warn(f"the text after {PYTHON_TAG} is not a JSON tool call; kept as content", marker)
            self.content(buf.take(len(marker)))
            return True
        if self._state == _START:
            m = _OPENING.match(buf.text)
            if m is None:
                if not buf.eof and _could_open(buf.text):
                    return False
                self._state = _PASS
                return True
            self._open_json(m)
            return True
        if self._state == _JSON:
            outcome = self._reader.read(buf, self._raw)
            if not outcome:
                return False
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
            calls = self.json_calls(text, ("parameters", "arguments"))
            if calls is None:
                if not json_prefix(text):
                    self.warn("a JSON object that is not valid JSON was kept as content", rawtext)
                self.content(rawtext)
                self._state = _PASS
                return True
            self._calls += calls
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
            body = rawtext.strip().removeprefix(PYTHON_TAG)
            streamer = self._reader.streamer
            if streamer is not None and streamer.failed:  # its arguments went wrong
                self._reader.close()  # says so
                self.content(rawtext)
            elif not json_prefix(body):
                self.warn("the output ended inside a JSON object that is not valid JSON; kept as content", rawtext)
                self.content(rawtext)
            elif re.match(r'\s*\{\s*"name"', body):
                self.warn("a tool call was cut off by the end of the output; dropped (earlier calls kept)", rawtext)
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


_TEMPLATE_CALL = re.compile(
    r"\{\"name\": \"'\s*\+\s*tool_call\.name\s*\+\s*'\", '\s*\}\}\s*"
    r"\{\{-?\s*'\"parameters\": '"
)


def detects(template: str) -> bool:
    """Llama 3.x: its header tokens and a ``"parameters": `` object written for a call."""
    return "<|start_header_id|>" in template and ('"parameters": ' in template or bool(_TEMPLATE_CALL.search(template)))


FORMAT = ToolCallFormat(
    name="llama3-json",
    description='Llama 3.1/3.2/3.3: the reply is {"name", "parameters"} (optionally after <|python_tag|>)',
    make_tool_parser=_parser,
    reasoning=None,
    end_markers=("<|eot_id|>", "<|eom_id|>"),
    call_grammar=_grammar,
    example='{"name": "get_weather", "parameters": {"location": "Paris"}}',
    detect=detects,
    aliases=("llama3_json", "llama4_json"),
)
