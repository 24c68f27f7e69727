"""``kimi-k3``: Kimi K3's tagged ("XTML") messages: think, response, tools sections.

Every structural tag is written with three special tokens, ``<|open|>name attrs<|sep|>`` and
``<|close|>name<|sep|>``; an assistant message is an optional think section, a response
section, then an optional tools section, then ``<|close|>message<|sep|><|end_of_msg|>``::

    Let me think.<|close|>think<|sep|><|open|>response<|sep|>I'll check.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="location" type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>

The generation prompt ends with ``<|open|>think<|sep|>`` (thinking on, the template's
default: pre-filled reasoning) or ``<|open|>response<|sep|>``. One tag per argument: its
``type`` attribute is the JSON type of the value, a string written raw, anything else as
JSON; arguments that were a JSON string in the request are one ``<|open|>json
type="object"<|sep|>{...}<|close|>json<|sep|>`` block instead. Attribute values escape
``&`` and ``"``. Rules, pinned:

- the response section's tags, the message closer and ``<|end_of_msg|>`` are structure:
  dropped; the text between is content; another tag outside the tools section is text;
- an argument typed ``string`` stays the string it is wherever the schema allows one (the
  string ``"null"`` is not null here, nor ``"007"`` a number without a schema: the type says
  which); any other value is coerced from its text as in the XML formats; repeated keys
  follow the XML formats too (a list, or the first wins);
- only ``<|close|>argument<|sep|>`` closes a value; a value left open is closed by the next
  argument or call, the call's, the section's or the message's closer;
- a call outside a tools section is accepted; a tools section with no call: its text is
  content, with a warning; the end of output inside a call drops it.
"""

from __future__ import annotations

import re
from typing import Any

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import Schema, ToolSet, allowed_types, coerce_text, coerce_value, loads_json
from ._xml_calls import INVOKE, PARAM, TEXT, WRAP, WrappedCallParser

OPEN = "<|open|>"
CLOSE = "<|close|>"
SEP = "<|sep|>"
END_OF_MSG = "<|end_of_msg|>"
THINK_OPEN, THINK_CLOSE = OPEN + "think" + SEP, CLOSE + "think" + SEP
MESSAGE_CLOSE = CLOSE + "message" + SEP
_JSON = 4  # in a json block (after the shared TEXT, WRAP, INVOKE, PARAM)
_TAG_LIMIT = 512
_TAG = re.compile(r"([A-Za-z_][\w.-]*)((?:\s+[\w.-]+\s*=\s*\"[^\"]*\")*)\s*")
_ATTR = re.compile(r"([\w.-]+)\s*=\s*\"([^\"]*)\"")
_STRUCTURE = {("open", "response"), ("close", "response"), ("close", "message"), ("open", "message"), ("eom", "")}
_VALUE_ENDS = {
    ("close", "argument"),
    ("open", "argument"),
    ("open", "call"),
    ("close", "call"),
    ("close", "tools"),
    ("close", "message"),
    ("eom", ""),
}

Token = tuple[str, str, dict[str, str], str]  # kind, name, attributes, raw text


def unescape(value: str) -> str:
    return value.replace("&quot;", '"').replace("&amp;", "&")


def escape(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


class KimiK3Parser(WrappedCallParser):
    """The incremental parser for Kimi K3 output (after the think section is split off)."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._type: str | None = None
        self._json: list[str] = []

    # -- lexer: text, or one tag ---------------------------------------------------------
    def _lex(self) -> Token | None:
        before, marker = self.buf.scan((OPEN, CLOSE, END_OF_MSG))
        if before:
            return ("text", before, {}, before)
        if marker is None:
            return None
        if marker == END_OF_MSG:
            return ("eom", "", {}, self.buf.take(len(marker)))
        after = self.buf.text[len(marker) : len(marker) + _TAG_LIMIT]
        end = after.find(SEP)
        if end < 0:
            if not self.buf.eof and len(after) < _TAG_LIMIT and OPEN not in after and CLOSE not in after:
                return None
        else:
            inside = after[:end]
            m = None if OPEN in inside or CLOSE in inside else _TAG.fullmatch(inside)
            if m and (marker == OPEN or not m.group(2)):
                rawtext = self.buf.take(len(marker) + end + len(SEP))
                attrs = {k: unescape(v) for k, v in _ATTR.findall(m.group(2))}
                return ("open" if marker == OPEN else "close", m.group(1), attrs, rawtext)
        token = self.buf.take(len(marker))  # not a tag: the marker is text
        return ("text", token, {}, token)

    def _step(self) -> bool:
        tok = self._lex()
        if tok is None:
            return False
        if self._state == TEXT:
            self._on_text(tok)
        elif self._state == WRAP:
            self._on_wrap(tok)
        elif self._state == INVOKE:
            self._on_invoke(tok)
        elif self._state == PARAM:
            self._on_param(tok)
        else:
            self._on_json(tok)
        return True

    # -- states ------------------------------------------------------------------------
    def _on_text(self, tok: Token) -> None:
        kind, name, attrs, rawtext = tok
        if (kind, name) in _STRUCTURE:
            return
        if kind == "open" and name == "tools":
            self._open_wrap(rawtext, implicit=False)
            return
        if kind == "open" and name == "call" and attrs.get("tool"):
            self._open_wrap("", implicit=True)
            self._start(attrs["tool"], rawtext)
            return
        self.content(rawtext)

    def _on_wrap(self, tok: Token) -> None:
        kind, name, attrs, rawtext = tok
        if kind == "open" and name == "call" and attrs.get("tool"):
            self._start(attrs["tool"], rawtext)
            return
        if kind == "close" and name == "tools":
            self._close_wrap(rawtext)
            return
        if (kind, name) in (("close", "message"), ("eom", "")):  # the section never closed
            self._close_wrap("")
            self._on_text(tok)
            return
        self._wrap_raw.append(rawtext)
        self._garbage.append(rawtext)

    def _on_invoke(self, tok: Token) -> None:
        kind, name, attrs, rawtext = tok
        assert self._call is not None
        self._call_raw.append(rawtext)
        if kind == "open" and name == "argument" and "key" in attrs:
            self._call.open(attrs["key"])
            self._type = attrs.get("type")
            self._value = []
            self._state = PARAM
            return
        if kind == "open" and name == "json":
            self._json = []
            self._state = _JSON
            return
        if kind == "close" and name == "call":
            self._end_call()
            if self._implicit:
                self._close_wrap("")
            return
        if kind == "open" and name == "call" and attrs.get("tool"):
            self._end_call()
            self._start(attrs["tool"], rawtext)
            return
        if (kind, name) in (("close", "tools"), ("close", "message"), ("eom", "")):
            self._end_call()
            self._state = WRAP
            self._on_wrap(tok)
            return
        self._garbage.append(rawtext)  # whitespace too: chunking must not matter

    def _on_param(self, tok: Token) -> None:
        kind, name, _, rawtext = tok
        if (kind, name) in _VALUE_ENDS:
            self._close_param()
            if (kind, name) == ("close", "argument"):
                self._call_raw.append(rawtext)
            else:
                self._on_invoke(tok)
            return
        self._piece(rawtext)

    def _on_json(self, tok: Token) -> None:
        kind, name, _, rawtext = tok
        if (kind == "close" and name == "json") or (kind, name) in _VALUE_ENDS:
            self._json_block("".join(self._json))
            self._state = INVOKE
            if kind == "close" and name == "json":
                assert self._call is not None
                self._call_raw.append(rawtext)
            else:
                self._on_invoke(tok)
            return
        assert self._call is not None
        self._call_raw.append(rawtext)
        self._json.append(rawtext)

    def _json_block(self, text: str) -> None:
        """A json block's object: its keys written as if they were argument tags."""
        call = self._call
        assert call is not None
        try:
            value = loads_json(text, strict=False)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            self.warn(f"tool call {call.index}: a json block that is not a JSON object was ignored", text)
            return
        for key, item in value.items():
            mode = call.open(key, lazy=True)
            if mode == "stream" and isinstance(item, str):
                call.begin_stream()
                call.stream(item)
                call.close()
                continue
            call.demote()
            call.close(("value", item))

    def _param_raw(self) -> tuple[str, str, str | None]:
        return "text", "".join(self._value), self._type

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        """An argument's value: ("text", text, type attribute) or ("value", JSON value)."""
        if raw[0] == "value":
            return coerce_value(raw[1], schema)
        _, text, kind = raw
        if kind == "string":  # the model says string: kept wherever a string is allowed
            types = allowed_types(schema)
            if types is None or "string" in types:
                return text
        return coerce_text(text, schema)

    def _at_eof(self) -> None:
        if self._state in (PARAM, _JSON):
            self._state = INVOKE
        super()._at_eof()


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return KimiK3Parser(tools, id_factory)


def _xtml_type(schema: Any) -> str:
    """The ``type`` attribute the grammar writes for a property (what its value will be)."""
    if not isinstance(schema, dict) or any(k in schema for k in ("$ref", "allOf", "anyOf", "oneOf", "not")):
        return "string"
    kind = schema.get("type")
    if kind is None and isinstance(schema.get("properties"), dict):
        kind = "object"
    return {"integer": "number", "number": "number", "boolean": "boolean", "object": "object", "array": "array"}.get(
        kind if isinstance(kind, str) else "", "string"
    )


_MARK = "<|"  # every marker starts so: kept out of values


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """The tools section as the template writes it, after the (empty) response section that
    the generation prompt may have opened; the message closer may follow::

        <|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call
        tool="f" index="1"<|sep|><|open|>argument key="k" type="string"<|sep|>v
        <|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>
    """
    index = g.rule("kimi-index", "[1-9] [0-9]{0,3}")
    close_arg = g.lit(CLOSE + "argument" + SEP)
    alts = []
    for t in tools:
        types = {key: _xtml_type(schema) for key, schema, _ in t.properties()}

        def param(key: str, value: str, types: dict[str, str] = types) -> str:
            head = g.lit(f'{OPEN}argument key="{escape(key)}" type="{types[key]}"{SEP}')
            return f"{head} {value} {close_arg}"

        params = g.xml_params(t, param, lambda key: bool(key) and _MARK not in key, forbid=_MARK, json_forbid=_MARK)
        opener = g.lit(OPEN + 'call tool="' + escape(t.name) + '" index="')
        head = f"{opener} {index} {g.lit(chr(34) + SEP)}"
        alts.append(g.rule(f"{t.name}-call", f"{head} {params} {g.lit(CLOSE + 'call' + SEP)}"))
    calls = g.calls(g.choice(alts), parallel)
    response = f"{g.lit(OPEN + 'response' + SEP)}? {g.lit(CLOSE + 'response' + SEP)}?"
    tools_section = f"{g.lit(OPEN + 'tools' + SEP)} {calls} {g.lit(CLOSE + 'tools' + SEP)}"
    return f"{response} {tools_section} {g.lit(MESSAGE_CLOSE)}?"


def detects(template: str) -> bool:
    """Kimi K3: the ``<|open|>`` / ``<|close|>`` tag tokens and ``<|end_of_msg|>``."""
    return OPEN in template and CLOSE in template and END_OF_MSG in template


FORMAT = ToolCallFormat(
    name="kimi-k3",
    description='Kimi K3: <|open|>tools<|sep|><|open|>call tool="name"<|sep|><|open|>argument '
    'key="k" type="t"<|sep|>v<|close|>argument<|sep|>..., pre-filled '
    "<|open|>think<|sep|> reasoning",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec(THINK_OPEN, THINK_CLOSE, prefilled_default=True),
    end_markers=(MESSAGE_CLOSE, END_OF_MSG),
    call_grammar=_grammar,
    example=(
        f'{OPEN}tools{SEP}{OPEN}call tool="get_weather" index="1"{SEP}{OPEN}argument '
        f'key="location" type="string"{SEP}Paris{CLOSE}argument{SEP}{OPEN}argument '
        f'key="days" type="number"{SEP}3{CLOSE}argument{SEP}{CLOSE}call{SEP}{CLOSE}tools'
        f"{SEP}"
    ),
    detect=detects,
    # the response opener too: it ends pre-filled reasoning whose closer the model skipped
    # (llama.cpp's K3 parser accepts that); the tool parser drops it
    call_openers=(OPEN + "tools" + SEP, OPEN + 'call tool="', OPEN + "response" + SEP),
)
