"""``minimax-m3``: MiniMax-M3's namespaced XML tool calls and ``<mm:think>`` reasoning.

    I'll check.]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">
    ]<]minimax[>[<location>Paris]<]minimax[>[</location>
    ]<]minimax[>[<days>3]<]minimax[>[</days>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

The namespace token ``]<]minimax[>[`` (one vocabulary token) precedes every structural tag,
closing tags included, so a tag without it is data. The parameter name is the tag name;
values are encoded by the template's ``to_xml`` macro: a mapping as child tags, a list as
``<item>`` children, a string raw, other scalars as JSON, None omitted. Rules, pinned:

- whitespace may sit between the token and ``<``; a token not followed by a tag is data;
- a value's children decide its shape with the schema: an array schema (or, without one,
  children all named ``item``) gives a list, otherwise an object (repeated keys -> list);
- inside a string-schema value only the value's own closer (or the invoke/wrapper closer)
  is structural: other namespaced tags are kept as text;
- a closer for a tag that is open further out closes the inner ones; a closer for nothing
  open is data;
- an invoke outside a wrapper is accepted; the end of output inside an invoke drops it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ._format import IdFactory, ToolCallFormat, ToolParser
from ._grammar import GrammarBuilder, GrammarTool
from ._reasoning import ReasoningSpec
from ._schema import Schema, ToolSet, allowed_types, coerce_value, item_schema, property_schema, raw
from ._xml_calls import INVOKE, PARAM, TEXT, WRAP, WrappedCallParser

NS = "]<]minimax[>["
_TAG = re.compile(r"\s*<(/?)([^\s<>/=\"]+)((?:\s[^<>]*)?)>")
_PARTIAL = re.compile(r"\s*(?:<(?:/?(?:[^\s<>/=\"]+(?:\s[^<>]*)?)?)?)?")
_NAME_ATTR = re.compile(r"""\s*name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))\s*""")
_TAG_LIMIT = 512

Token = tuple[str, str]  # ("text", s) | ("open", name) | ("close", name)


@dataclass
class _Node:
    texts: list[str] = field(default_factory=list)
    children: list[tuple[str, _Node]] = field(default_factory=list)


def _tree(tokens: list[Token]) -> _Node:
    root = _Node()
    stack = [root]
    for kind, value in tokens:
        if kind == "text":
            stack[-1].texts.append(value)
        elif kind == "open":
            child = _Node()
            stack[-1].children.append((value, child))
            stack.append(child)
        elif len(stack) > 1:
            stack.pop()
    return root


def _shape(node: _Node, schema: Schema | None) -> Any:
    """The value of a node: a raw leaf, a list or a dict, by its children and the schema."""
    if not node.children:
        return raw("".join(node.texts))
    types = allowed_types(schema)
    all_items = all(name == "item" for name, _ in node.children)
    if types is not None and "array" in types and "object" not in types:
        as_list = True
    elif types is not None and "object" in types and "array" not in types:
        as_list = False
    else:
        as_list = all_items
    if as_list:
        return [_shape(child, item_schema(schema, i)) for i, (_, child) in enumerate(node.children)]
    out: dict[str, Any] = {}
    for name, child in node.children:
        value = _shape(child, property_schema(schema, name))
        if name in out:
            prev = out[name]
            out[name] = (prev if isinstance(prev, _Dup) else _Dup([prev])) + [value]
        else:
            out[name] = value
    return {k: list(v) if isinstance(v, _Dup) else v for k, v in out.items()}


class _Dup(list[Any]):
    """Values of a repeated key, collected into a list."""


def coerce_tokens(tokens: list[Token], schema: Schema | None) -> Any:
    """The typed value of one parameter from its tokens."""
    return coerce_value(_shape(_tree(tokens), schema), schema)


class MinimaxM3Parser(WrappedCallParser):
    """The incremental parser for MiniMax-M3 output (after reasoning is split off)."""

    def __init__(self, tools: ToolSet, id_factory: IdFactory) -> None:
        super().__init__(tools, id_factory)
        self._tokens: list[Token] = []
        self._stack: list[str] = []

    # -- lexer: text, or one namespaced tag ----------------------------------------------
    def _lex(self) -> tuple[str, str, str, str] | None:
        """("text", s, "", raw) or ("open"|"close", name, attrs, raw); None: need more."""
        before, marker = self.buf.scan((NS,))
        if before:
            return ("text", before, "", before)
        if marker is None:
            return None
        after = self.buf.text[len(NS) : len(NS) + _TAG_LIMIT]
        m = _TAG.match(after)
        if m:
            rawtext = self.buf.take(len(NS) + m.end())
            return ("close" if m.group(1) else "open", m.group(2), m.group(3), rawtext)
        if not self.buf.eof and len(after) < _TAG_LIMIT and _PARTIAL.fullmatch(after):
            return None
        token = self.buf.take(len(NS))
        return ("text", token, "", token)

    @staticmethod
    def _name(attrs: str) -> str | None:
        m = _NAME_ATTR.fullmatch(attrs)
        if not m:
            return None
        name = next(g for g in m.groups() if g is not None).strip()
        return name or None

    def _step(self) -> bool:
        tok = self._lex()
        if tok is None:
            return False
        kind, value, attrs, rawtext = tok
        if self._state == TEXT:
            self._on_text(kind, value, attrs, rawtext)
        elif self._state == WRAP:
            self._on_wrap(kind, value, attrs, rawtext)
        elif self._state == INVOKE:
            self._on_invoke(kind, value, attrs, rawtext)
        else:
            self._on_param(kind, value, attrs, rawtext)
        return True

    def _on_text(self, kind: str, value: str, attrs: str, rawtext: str) -> None:
        if kind == "open" and value == "tool_call":
            self._open_wrap(rawtext, implicit=False)
            return
        if kind == "open" and value == "invoke":
            name = self._name(attrs)
            if name is not None:
                self._open_wrap("", implicit=True)
                self._start(name, rawtext)
                return
        self.content(rawtext)

    def _coerce(self, raw: Any, schema: Schema | None) -> Any:
        return coerce_tokens(raw, schema)

    def _on_wrap(self, kind: str, value: str, attrs: str, rawtext: str) -> None:
        if kind == "open" and value == "invoke":
            name = self._name(attrs)
            if name is not None:
                self._start(name, rawtext)
                return
        if kind == "close" and value == "tool_call":
            self._close_wrap(rawtext)
            return
        self._wrap_raw.append(rawtext)
        self._garbage.append(rawtext)

    def _on_invoke(self, kind: str, value: str, attrs: str, rawtext: str) -> None:
        self._call_raw.append(rawtext)
        if kind == "text":
            self._garbage.append(value)  # whitespace too: chunking must not matter
            return
        if kind == "close" and value == "invoke":
            self._end_call()
            if self._implicit:
                self._close_wrap("")
            return
        if kind == "close" and value == "tool_call":
            self._end_call()
            self._close_wrap(rawtext)
            return
        if kind == "open" and value == "invoke":
            name = self._name(attrs)
            if name is not None:
                self._end_call()
                self._start(name, rawtext)
                return
        if kind == "open":
            assert self._call is not None
            self._call.open(value)
            self._tokens, self._stack = [], []
            self._state = PARAM
            return
        self._garbage.append(rawtext)  # a closer for nothing open

    def _on_param(self, kind: str, value: str, attrs: str, rawtext: str) -> None:
        call = self._call
        assert call is not None and call.key is not None
        self._call_raw.append(rawtext)
        key = call.key
        if kind == "close" and value in ("invoke", "tool_call") and value not in self._stack:
            self._close_param()
            self._state = INVOKE
            self._call_raw.pop()
            self._on_invoke(kind, value, attrs, rawtext)
            return
        if call.mode == "stream":
            if kind == "close" and value == key:
                self._close_param()
            else:
                call.stream(rawtext)
            return
        if kind == "text":
            self._tokens.append(("text", value))
        elif kind == "open":
            self._stack.append(value)
            self._tokens.append(("open", value))
        elif self._stack and self._stack[-1] == value:
            self._stack.pop()
            self._tokens.append(("close", value))
        elif value in self._stack:
            while self._stack:
                top = self._stack.pop()
                self._tokens.append(("close", top))
                if top == value:
                    break
        elif value == key:
            self._close_param()
        else:
            self._tokens.append(("text", rawtext))

    def _close_param(self) -> None:
        assert self._call is not None
        self._call.close(self._tokens)
        self._tokens, self._stack = [], []
        self._state = INVOKE


def _parser(tools: ToolSet, id_factory: IdFactory) -> ToolParser:
    return MinimaxM3Parser(tools, id_factory)


_KEY = re.compile(r"[^\s<>/=\"]+")


def _grammar(g: GrammarBuilder, tools: list[GrammarTool], parallel: bool) -> str:
    """Every call's invoke in one wrapper, as the template writes it (no spaces)::

        NS<tool_call>\\n NS<invoke name="f"> NS<k>v NS</k> ... NS</invoke>\\n NS</tool_call>

    Values never contain the namespace token (so no nested tags): strings raw, numbers and
    booleans as JSON, objects and arrays as JSON text (the schema coercion reads it back).
    """

    def param(key: str, value: str) -> str:
        return f"{g.lit(f'{NS}<{key}>')} {value} {g.lit(f'{NS}</{key}>')}"

    def valid(key: str) -> bool:
        return bool(_KEY.fullmatch(key)) and key not in ("invoke", "tool_call")

    calls = g.xml_calls(
        tools, lambda name: f'{NS}<invoke name="{name}">', param, valid, f"{NS}</invoke>\n", NS, parallel
    )
    wrap_open = g.lit(f"{NS}<tool_call>\n")
    return f"{wrap_open} {calls} {g.lit(f'{NS}</tool_call>')}"


def detects(template: str) -> bool:
    """M3's own template: the namespace token around ``<invoke``, no M2 wrapper."""
    return "]<]minimax[>[" in template and "<invoke" in template and "<minimax:tool_call>" not in template


FORMAT = ToolCallFormat(
    name="minimax-m3",
    description="MiniMax-M3: ]<]minimax[>[ before every tag, <invoke>, <param>value</param>, <mm:think>",
    make_tool_parser=_parser,
    reasoning=ReasoningSpec("<mm:think>", "</mm:think>", prefilled_default=False),
    end_markers=("[e~[",),
    example=(
        f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<location>Paris'
        f"{NS}</location>{NS}<days>3{NS}</days>{NS}</invoke>\n{NS}</tool_call>"
    ),
    call_grammar=_grammar,
    detect=detects,
    call_openers=(NS + "<tool_call>", NS + "<invoke"),
)
