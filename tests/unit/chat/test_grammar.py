"""tool_call_grammar: the generated GBNF, read back by a small GBNF reader of its own subset.

The reader below parses the grammar text (literals, char classes with escapes, rule
references, groups, ``?``/``*``/``+``/``{m,n}``), decides membership of a string and samples
random sentences. Every sampled sentence is then parsed by the format's real parser, which
must read exactly the tool calls the grammar allows. That the real llama.cpp grammar parser
accepts every grammar is checked against a real engine in
tests/integration/test_gateway_required.py.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitserve.chat import ContentDelta, GrammarError, get_format, list_formats, parse_complete, tool_call_grammar
from splitserve.chat._grammar import GrammarBuilder

sys.setrecursionlimit(20000)  # the reader recurses once per character of a sentence

# -- a reader for the GBNF subset the builder writes ------------------------------------------


@dataclass(frozen=True)
class Node:
    kind: str  # lit | cls | ref | seq | alt | rep
    value: Any = None  # lit: str; cls: (negate, ranges); ref: name
    items: tuple[Node, ...] = ()
    lo: int = 0
    hi: int | None = None


def _char(s: str, i: int) -> tuple[str, int]:
    if s[i] != "\\":
        return s[i], i + 1
    c = s[i + 1]
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width:
        return chr(int(s[i + 2 : i + 2 + width], 16)), i + 2 + width
    return {"n": "\n", "t": "\t", "r": "\r"}.get(c, c), i + 2


class Grammar:
    def __init__(self, text: str) -> None:
        self.rules: dict[str, Node] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            name, _, rhs = line.partition(" ::= ")
            assert re.fullmatch(r"[A-Za-z0-9-]+", name), name
            assert name not in self.rules, f"rule {name} defined twice"
            self._s, self._i = rhs, 0
            node = self._alt()
            assert self._i == len(rhs), f"trailing text in {line!r}"
            self.rules[name] = node
        for name in self.rules:
            for ref in self._refs(self.rules[name]):
                assert ref in self.rules, f"undefined rule {ref}"
        self._memo: dict[tuple[int, int], frozenset[int]] = {}

    def _refs(self, n: Node) -> list[str]:
        out = [n.value] if n.kind == "ref" else []
        for c in n.items:
            out += self._refs(c)
        return out

    def _ws(self) -> None:
        while self._i < len(self._s) and self._s[self._i] == " ":
            self._i += 1

    def _alt(self) -> Node:
        alts = [self._seq()]
        while self._i < len(self._s) and self._s[self._i] == "|":
            self._i += 1
            alts.append(self._seq())
        return alts[0] if len(alts) == 1 else Node("alt", items=tuple(alts))

    def _seq(self) -> Node:
        items = []
        while True:
            self._ws()
            if self._i >= len(self._s) or self._s[self._i] in "|)":
                break
            items.append(self._item())
        return items[0] if len(items) == 1 else Node("seq", items=tuple(items))

    def _item(self) -> Node:
        s = self._s
        c = s[self._i]
        if c == '"':
            self._i += 1
            out = []
            while s[self._i] != '"':
                ch, self._i = _char(s, self._i)
                out.append(ch)
            self._i += 1
            atom = Node("lit", "".join(out))
        elif c == "[":
            self._i += 1
            negate = s[self._i] == "^"
            self._i += negate
            ranges = []
            while s[self._i] != "]":
                a, self._i = _char(s, self._i)
                b = a
                if s[self._i] == "-" and s[self._i + 1] != "]":
                    b, self._i = _char(s, self._i + 1)
                ranges.append((a, b))
            self._i += 1
            atom = Node("cls", (negate, tuple(ranges)))
        elif c == "(":
            self._i += 1
            atom = self._alt()
            assert s[self._i] == ")"
            self._i += 1
        else:
            m = re.compile(r"[A-Za-z0-9-]+").match(s, self._i)
            assert m, f"unexpected {s[self._i :]!r}"
            self._i = m.end()
            atom = Node("ref", m.group())
        while self._i < len(s) and s[self._i] in "?*+{":
            q = s[self._i]
            if q == "{":
                end = s.index("}", self._i)
                lo_s, _, hi_s = s[self._i + 1 : end].partition(",")
                lo = int(lo_s)
                hi = (None if hi_s == "" else int(hi_s)) if "," in s[self._i : end] else lo
                self._i = end + 1
            else:
                lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[q]
                self._i += 1
            atom = Node("rep", items=(atom,), lo=lo, hi=hi)
        return atom

    # -- membership ------------------------------------------------------------------------
    @staticmethod
    def _in_class(node: Node, ch: str) -> bool:
        negate, ranges = node.value
        inside = any(a <= ch <= b for a, b in ranges)
        return inside != negate

    def _ends(self, n: Node, s: str, i: int) -> frozenset[int]:
        key = (id(n), i)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()  # no left recursion in these grammars
        out: set[int] = set()
        if n.kind == "lit":
            if s.startswith(n.value, i):
                out.add(i + len(n.value))
        elif n.kind == "cls":
            if i < len(s) and self._in_class(n, s[i]):
                out.add(i + 1)
        elif n.kind == "ref":
            out |= self._ends(self.rules[n.value], s, i)
        elif n.kind == "alt":
            for c in n.items:
                out |= self._ends(c, s, i)
        elif n.kind == "seq":
            cur = {i}
            for c in n.items:
                cur = {e for p in cur for e in self._ends(c, s, p)}
            out |= cur
        else:  # rep
            cur, count = {i}, 0
            if n.lo == 0:
                out.add(i)
            while cur and (n.hi is None or count < n.hi):
                cur = {e for p in cur for e in self._ends(n.items[0], s, p)} - {p for p in cur}
                count += 1
                if count >= n.lo:
                    out |= cur
        self._memo[key] = frozenset(out)
        return self._memo[key]

    def accepts(self, s: str, rule: str = "root") -> bool:
        self._memo = {}
        return len(s) in self._ends(self.rules[rule], s, 0)

    # -- sampling --------------------------------------------------------------------------
    PALETTE = list('abcxyz019 \n\t<>/]]][["\\{}:,.-_=') + ["é"]

    def sample(self, rng: random.Random, rule: str = "root", budget: int = 400) -> str:
        out: list[str] = []
        self._gen(self.rules[rule], rng, out, [budget])
        return "".join(out)

    def _gen(self, n: Node, rng: random.Random, out: list[str], budget: list[int]) -> None:
        budget[0] -= 1
        tight = budget[0] < 0
        if n.kind == "lit":
            out.append(n.value)
        elif n.kind == "cls":
            choices = [c for c in self.PALETTE if self._in_class(n, c)]
            if not choices:
                negate, ranges = n.value
                assert not negate
                a, b = ranges[0]
                choices = [a, b]
            out.append(rng.choice(choices))
        elif n.kind == "ref":
            self._gen(self.rules[n.value], rng, out, budget)
        elif n.kind == "seq":
            for c in n.items:
                self._gen(c, rng, out, budget)
        elif n.kind == "alt":
            items = list(n.items)
            if tight:  # head for an end: the alternative with the shortest expansion
                items.sort(key=lambda c: _shortest(self, c))
                self._gen(items[0], rng, out, budget)
            else:
                self._gen(rng.choice(items), rng, out, budget)
        else:
            hi = n.hi if n.hi is not None else n.lo + 3
            count = n.lo if tight else rng.randint(n.lo, hi)
            for _ in range(count):
                self._gen(n.items[0], rng, out, budget)


def _shortest(g: Grammar, n: Node) -> int:
    """The length of the shortest expansion (rule lengths by fixed-point iteration, cached)."""
    table: dict[str, int] | None = getattr(g, "_short", None)
    if table is None:
        table = dict.fromkeys(g.rules, 10**6)
        changed = True
        while changed:
            changed = False
            for name, node in g.rules.items():
                length = _node_len(node, table)
                if length < table[name]:
                    table[name], changed = length, True
        g._short = table  # type: ignore[attr-defined]
    return _node_len(n, table)


def _node_len(x: Node, table: dict[str, int]) -> int:
    if x.kind == "lit":
        return len(x.value)
    if x.kind == "cls":
        return 1
    if x.kind == "ref":
        return table[x.value]
    if x.kind == "seq":
        return sum(_node_len(c, table) for c in x.items)
    if x.kind == "alt":
        return min(_node_len(c, table) for c in x.items)
    return x.lo * _node_len(x.items[0], table)


# -- fixtures ---------------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "detail": {"type": "boolean"},
                    "ratio": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "where": {
                        "type": "object",
                        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat"],
                    },
                },
                "required": ["location", "unit"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    },
    {"type": "function", "function": {"name": "ping"}},
]
FORMATS = [f.name for f in list_formats()]
NS = "]<]minimax[>["


def check_args(name: str, args: dict[str, Any]) -> None:
    """The arguments hold to the tool's schema as far as the grammar promises."""
    if name == "get_weather":
        assert isinstance(args["location"], str)
        assert args["unit"] in ("celsius", "fahrenheit")
        assert set(args) <= {"location", "days", "unit", "detail", "ratio", "tags", "where"}
        if "days" in args:
            assert isinstance(args["days"], int) and not isinstance(args["days"], bool)
        if "detail" in args:
            assert isinstance(args["detail"], bool)
        if "ratio" in args:
            assert isinstance(args["ratio"], (int, float))
        if "tags" in args:
            assert isinstance(args["tags"], list) and all(isinstance(t, str) for t in args["tags"])
        if "where" in args:
            assert isinstance(args["where"]["lat"], (int, float))
    elif name == "get_time":
        assert set(args) <= {"city"}
        if "city" in args:
            assert isinstance(args["city"], str)
    else:
        assert isinstance(args, dict)


# -- every sampled sentence parses to the allowed calls ---------------------------------------


@pytest.mark.parametrize("fmt_name", FORMATS)
@pytest.mark.parametrize(
    "named,parallel,prefilled",
    [(None, True, False), (None, False, False), ("get_time", True, False), ("get_weather", False, True)],
)
def test_sampled_sentences_parse_to_allowed_calls(
    fmt_name: str, named: str | None, parallel: bool, prefilled: bool
) -> None:
    fmt = get_format(fmt_name)
    text = tool_call_grammar(fmt, TOOLS, name=named, parallel=parallel, prefilled=prefilled)
    g = Grammar(text)
    rng = random.Random(f"{fmt_name}-{named}-{parallel}-{prefilled}")
    pre = prefilled and fmt.reasoning is not None
    seen_many = False
    for _ in range(40):
        sentence = g.sample(rng)
        assert g.accepts(sentence), sentence
        parser = fmt.parser(TOOLS, prefilled=pre)
        events = parser.feed(sentence) + parser.finish()
        assert not [e for e in events if isinstance(e, ContentDelta)], (sentence, events)
        msg = parse_complete(fmt, sentence, TOOLS, prefilled=pre)
        assert msg.warnings == [] and msg.dropped_calls == 0, (sentence, msg)
        calls = msg.tool_calls
        assert calls, sentence
        if not parallel:
            assert len(calls) == 1, sentence
        seen_many |= len(calls) > 1
        for call in calls:
            name = call["function"]["name"]
            assert name == named if named else name in ("get_weather", "get_time", "ping")
            check_args(name, json.loads(call["function"]["arguments"]))
    if parallel:
        assert seen_many


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_the_format_example_is_a_sentence(fmt_name: str) -> None:
    """The call the template itself writes (the format's example) is in the grammar."""
    fmt = get_format(fmt_name)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
                },
            },
        }
    ]
    g = Grammar(tool_call_grammar(fmt, tools, reasoning=False))
    assert g.accepts(fmt.example), fmt.example
    assert not g.accepts("Sure. " + fmt.example)  # no content before the call
    assert not g.accepts(fmt.example + " done")  # nor after it
    assert not g.accepts(fmt.example.replace("get_weather", "get_wether"))


def test_named_choice_allows_only_that_function() -> None:
    fmt = get_format("minimax-m3")
    g = Grammar(tool_call_grammar(fmt, TOOLS, name="get_time", reasoning=False))
    ok = f'{NS}<tool_call>\n{NS}<invoke name="get_time">{NS}<city>Oslo{NS}</city>{NS}</invoke>\n{NS}</tool_call>'
    assert g.accepts(ok)
    assert not g.accepts(ok.replace("get_time", "get_weather"))


def test_single_call_when_not_parallel() -> None:
    fmt = get_format("hermes")
    one = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>'
    assert Grammar(tool_call_grammar(fmt, TOOLS, reasoning=False)).accepts(one + one)
    assert not Grammar(tool_call_grammar(fmt, TOOLS, parallel=False, reasoning=False)).accepts(one + one)


def test_required_properties_must_be_present_and_in_order() -> None:
    g = Grammar(tool_call_grammar(get_format("hermes"), TOOLS, name="get_weather", reasoning=False))
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {}}}\n</tool_call>'
    assert g.accepts(call.format('{"location": "P", "unit": "celsius"}'))
    assert g.accepts(call.format('{"location": "P", "days": 3, "unit": "fahrenheit", "where": {"lat": 1.5}}'))
    assert not g.accepts(call.format('{"location": "P"}'))  # unit missing
    assert not g.accepts(call.format('{"location": "P", "unit": "kelvin"}'))  # not in enum
    assert not g.accepts(call.format('{"location": "P", "days": 2.5, "unit": "celsius"}'))
    assert not g.accepts(call.format('{"location": "P", "unit": "celsius", "x": 1}'))


def test_reasoning_optional_prefilled_or_off() -> None:
    fmt = get_format("hermes")
    call = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    optional = Grammar(tool_call_grammar(fmt, TOOLS, name="ping"))
    assert optional.accepts(call) and optional.accepts(f"<think>hmm</think>\n\n{call}")
    assert not optional.accepts(f"<think>a</think>b</think>{call}")  # one closer only
    pre = Grammar(tool_call_grammar(fmt, TOOLS, name="ping", prefilled=True))
    assert pre.accepts(f"hmm</think>\n\n{call}") and not pre.accepts(call)
    off = Grammar(tool_call_grammar(fmt, TOOLS, name="ping", reasoning=False))
    assert off.accepts(call) and not off.accepts(f"<think>hmm</think>{call}")
    msg = parse_complete(fmt, f"hmm</think>\n\n{call}", TOOLS, prefilled=True)
    assert msg.reasoning_content == "hmm" and msg.tool_calls[0]["function"]["name"] == "ping"


def test_xml_string_values_cannot_hold_the_closer() -> None:
    m2 = Grammar(tool_call_grammar(get_format("minimax-m2"), TOOLS, name="get_time", reasoning=False))
    call = (
        '<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="city">{}'
        "</parameter>\n</invoke>\n</minimax:tool_call>"
    )
    assert m2.accepts(call.format("a <b> </param"))
    assert not m2.accepts(call.format('a</parameter>\n<parameter name="city">b'))
    m3 = Grammar(tool_call_grammar(get_format("minimax-m3"), TOOLS, name="get_time", reasoning=False))
    call3 = f'{NS}<tool_call>\n{NS}<invoke name="get_time">{NS}<city>{{}}{NS}</city>{NS}</invoke>\n{NS}</tool_call>'
    assert m3.accepts(call3.format("x ]<]minimax[> y"))
    assert not m3.accepts(call3.format(f"x {NS}<b>y{NS}</b>"))


@pytest.mark.parametrize("fmt_name", ["minimax-m3", "qwen3-coder"])
def test_xml_integer_number_and_boolean_enums_allow_only_their_values(fmt_name: str) -> None:
    props = {
        "days": {"type": "integer", "enum": [1, 2, 3]},
        "ratio": {"type": "number", "enum": [0.5, 2]},
        "strict": {"type": "boolean", "const": True},
        "count": {"type": "integer"},
    }
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": props, "required": list(props)}},
        }
    ]
    g = Grammar(tool_call_grammar(get_format(fmt_name), tools, reasoning=False))
    if fmt_name == "minimax-m3":
        one = f"{NS}<{{k}}>{{v}}{NS}</{{k}}>"
        call = f'{NS}<tool_call>\n{NS}<invoke name="f">{{}}{NS}</invoke>\n{NS}</tool_call>'
    else:
        one = "<parameter={k}>\n{v}\n</parameter>\n"
        call = "<tool_call>\n<function=f>\n{}</function>\n</tool_call>"

    def sentence(days: str, ratio: str = "0.5", strict: str = "true", count: str = "12") -> str:
        values = {"days": days, "ratio": ratio, "strict": strict, "count": count}
        return call.format("".join(one.format(k=k, v=v) for k, v in values.items()))

    assert g.accepts(sentence("2")) and g.accepts(sentence("3", ratio="2"))
    assert not g.accepts(sentence("4")) and not g.accepts(sentence("12"))
    assert not g.accepts(sentence("1", ratio="1.5")) and not g.accepts(sentence("1", strict="false"))
    assert g.accepts(sentence("1", count="1234567"))  # no enum: any integer
    parsed = parse_complete(get_format(fmt_name), sentence("3", ratio="2"), tools)
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {
        "days": 3,
        "ratio": 2,
        "strict": True,
        "count": 12,
    }


def test_json_strings_in_xml_values_cannot_hold_the_marker() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"o": {"type": "object"}}, "required": ["o"]},
            },
        }
    ]
    g = Grammar(tool_call_grammar(get_format("qwen3-coder"), tools, reasoning=False))
    call = "<tool_call>\n<function=f>\n<parameter=o>\n{}\n</parameter>\n</function>\n</tool_call>"
    assert g.accepts(call.format('{"k": "v </param \\" x", "n": [1, true, null]}'))
    assert not g.accepts(call.format('{"k": "</parameter>"}'))
    assert not g.accepts(call.format('{"k": v}'))


def test_errors() -> None:
    from splitserve.gateway import PLAIN

    with pytest.raises(GrammarError, match="no tool named 'nope'"):
        tool_call_grammar(get_format("hermes"), TOOLS, name="nope")
    with pytest.raises(GrammarError, match="no tools"):
        tool_call_grammar(get_format("hermes"), [])
    with pytest.raises(GrammarError, match="writes no tool calls"):
        tool_call_grammar(PLAIN, TOOLS)
    with pytest.raises(GrammarError):
        GrammarBuilder().json_string(forbid='a"b')


# -- the text automata, against their definition ------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="<>/pam\n]x", max_size=24))
def test_text_excludes_exactly_the_forbidden_string(s: str) -> None:
    for forbid in ("</param>", "]]>", "aa"):
        g = GrammarBuilder()
        rule = g.text(forbid)
        gram = Grammar(g.render(rule))
        assert gram.accepts(s) == (forbid not in s), (forbid, s)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="</think>ab\n", max_size=24))
def test_until_ends_at_the_first_closer(s: str) -> None:
    for closer in ("</think>", "aab"):
        g = GrammarBuilder()
        gram = Grammar(g.render(g.until(closer)))
        first = s.find(closer)
        assert gram.accepts(s) == (first >= 0 and first + len(closer) == len(s)), (closer, s)


def test_rendered_grammar_is_plain_gbnf() -> None:
    text = tool_call_grammar(get_format("deepseek-v3"), TOOLS)
    names = [line.split(" ::= ")[0] for line in text.splitlines()]
    assert names[0] == "root" and len(names) == len(set(names))
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", n) for n in names)
    assert "<｜tool▁calls▁begin｜>" in text
    # markers are quoted literals: outside literals and classes there is no GBNF token syntax
    bare = re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', "", text)
    assert "<" not in bare and "!" not in bare


def test_deepseek_tool_named_function_uses_the_v3_form() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "function",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            },
        }
    ]
    g = Grammar(tool_call_grammar(get_format("deepseek-v3"), tools, reasoning=False))
    rng = random.Random(7)
    for _ in range(10):
        sentence = g.sample(rng)
        calls = parse_complete("deepseek-v3", sentence, tools).tool_calls
        assert calls and all(c["function"]["name"] == "function" for c in calls), sentence
        assert all(isinstance(json.loads(c["function"]["arguments"])["a"], int) for c in calls)


def test_xml_parameter_names_the_format_cannot_write_are_left_out() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {'a"b': {"type": "string"}, "ok": {"type": "string"}},
                    "required": ['a"b', "ok"],
                },
            },
        }
    ]
    text = tool_call_grammar(get_format("minimax-m2"), tools, reasoning=False)
    assert 'name=\\"ok\\"' in text and 'a\\"b' not in text
    m3 = tool_call_grammar(
        get_format("minimax-m3"),
        [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "a b": {"type": "string"},
                            "invoke": {"type": "string"},
                            "k": {"type": "string"},
                        },
                    },
                },
            }
        ],
        reasoning=False,
    )
    assert "<k>" in m3 and "<a b>" not in m3 and "<invoke>" not in m3
