"""GBNF grammars that force a tool call in a format's own syntax (``tool_choice: required``).

The primitives of :func:`splitserve.chat.tool_call_grammar` (in ``_forced``, which joins them to a
format; this module knows no format, so formats can import it).  The grammar is, for one request,
a grammar for llama.cpp's ``grammar`` field whose sentences are exactly: optional reasoning (where the format has reasoning
markers; required when the prompt pre-filled the opener), then one tool call (or one or
more when ``parallel``) to one of the allowed tools, in the format's exact syntax, then
nothing. Each format supplies the call syntax through its ``call_grammar`` hook, written
with the :class:`GrammarBuilder` primitives here:

- JSON arguments follow the tool's schema where it is simple (properties in declaration
  order, required ones present, optional ones optional; string / number / integer /
  boolean / null / enum / const / array / object, anyOf / oneOf, type lists), anything
  else (``$ref``, ``allOf``, a schema without a type) is any JSON value;
- XML-parameter formats restrict parameter names to the tool's properties and string
  values to text that cannot contain the value's closer; typed values are JSON literals;
- a ``forbid`` string keeps marker text out of a value (JSON strings included), so the
  parser never reads a marker inside an argument.

The grammar only uses the GBNF subset llama.cpp has always parsed: quoted literals, char
classes (escaped with ``\\x``/``\\u``), rule references, groups, ``?``, ``*``, ``{m,n}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._errors import SplitserveError

_MAX_DEPTH = 6
_JSON_BAD = frozenset('"\\') | frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_ESCAPE_LAST = frozenset('"\\/bfnrtu0123456789abcdefABCDEF')


class GrammarError(SplitserveError, ValueError):
    """A grammar cannot be built for this request (no allowed tool, a bad forbid string); a
    ``ValueError`` too, as it was before it joined the tree."""


@dataclass(frozen=True)
class GrammarTool:
    """One tool the grammar may call: its name and its ``parameters`` JSON Schema."""

    name: str
    parameters: dict[str, Any] | None = None

    def properties(self) -> list[tuple[str, Any, bool]]:
        """(name, schema, required) of each declared property, in declaration order."""
        params = self.parameters if isinstance(self.parameters, dict) else {}
        props = params.get("properties")
        if not isinstance(props, dict):
            return []
        required = params.get("required")
        req = set(required) if isinstance(required, list) else set()
        return [(str(k), v, k in req) for k, v in props.items()]


CallGrammar = Callable[["GrammarBuilder", list[GrammarTool], bool], str]


def lit(text: str) -> str:
    """A GBNF quoted literal for ``text``."""
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _class_char(ch: str) -> str:
    if ch.isascii() and ch.isalnum():
        return ch
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02X}"
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def char_class(chars: set[str] | frozenset[str], negate: bool = False) -> str:
    """``[...]`` (or ``[^...]``) of the given characters, each escaped, runs as ranges."""
    codes = sorted(ord(c) for c in chars)
    parts: list[str] = []
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{_class_char(chr(codes[i]))}-{_class_char(chr(codes[j]))}")
        else:
            parts.extend(_class_char(chr(c)) for c in codes[i : j + 1])
        i = j + 1
    return ("[^" if negate else "[") + "".join(parts) + "]"


class _Automaton:
    """Aho-Corasick over a few short strings: states are the text's longest live suffix."""

    def __init__(self, strings: tuple[str, ...]) -> None:
        if not strings or any(not s for s in strings):
            raise GrammarError("a forbidden string must not be empty")
        self.strings = strings
        self.alphabet = frozenset("".join(strings))
        prefixes = {s[:i] for s in strings for i in range(len(s))}
        self.states: list[str] = [""]
        self.delta: dict[tuple[int, str], int | None] = {}  # None: a forbidden string matched
        index = {"": 0}
        todo = [""]
        while todo:
            state = todo.pop()
            for ch in sorted(self.alphabet):
                text = state + ch
                if any(text.endswith(s) for s in strings):
                    self.delta[(index[state], ch)] = None
                    continue
                nxt = next(text[i:] for i in range(len(text) + 1) if text[i:] in prefixes)
                if nxt not in index:
                    index[nxt] = len(self.states)
                    self.states.append(nxt)
                    todo.append(nxt)
                self.delta[(index[state], ch)] = index[nxt]


class GrammarBuilder:
    """Collects named rules; the format hooks and :func:`tool_call_grammar` use it."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._cache: dict[Any, str] = {}

    # -- rules ---------------------------------------------------------------------
    def rule(self, hint: str, rhs: str) -> str:
        """Add a rule (a fresh name made from ``hint``); returns its name."""
        base = re.sub(r"[^a-z0-9]+", "-", hint.lower()).strip("-") or "r"
        name, n = base, 1
        while name in self._rules:
            n += 1
            name = f"{base}-{n}"
        self._rules[name] = rhs
        return name

    def _cached(self, key: Any, make: Callable[[], str]) -> str:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {rhs}" for name, rhs in self._rules.items()]
        return "\n".join(lines) + "\n"

    lit = staticmethod(lit)

    def calls(self, one: str, parallel: bool, sep: str = "") -> str:
        """One call, or one or more separated by the literal ``sep`` when ``parallel``."""
        if not parallel:
            return one
        if not re.fullmatch(r"[A-Za-z0-9-]+", one):
            one = self.rule("tool-call", one)
        between = f"{lit(sep)} " if sep else ""
        return f"{one} ({between}{one})*"

    @staticmethod
    def choice(alternatives: list[str]) -> str:
        return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"

    # -- text ----------------------------------------------------------------------
    def text(self, forbid: str | tuple[str, ...]) -> str:
        """Raw text (anything, newlines included) that contains none of ``forbid``."""
        strings = (forbid,) if isinstance(forbid, str) else tuple(forbid)
        return self._cached(("text", strings), lambda: self._excluding(strings, json=False))

    def until(self, closer: str) -> str:
        """Raw text up to and including the first ``closer`` (so it contains just that one)."""
        return self._cached(("until", closer), lambda: self._including(closer))

    def _excluding(self, strings: tuple[str, ...], json: bool) -> str:
        auto = _Automaton(strings)
        if json:
            bad = auto.alphabet & _JSON_BAD
            if bad or any(s[0] in _ESCAPE_LAST for s in strings):
                raise GrammarError(f"cannot keep {strings!r} out of JSON strings")
        prefix = self._fresh("Jtext" if json else "Text")
        names = [prefix if i == 0 else f"{prefix}-{i}" for i in range(len(auto.states))]
        for q in range(len(auto.states)):
            groups: dict[int, set[str]] = {}
            specific: set[str] = set()
            for ch in auto.alphabet:
                d = auto.delta[(q, ch)]
                if d is None or d != 0:
                    specific.add(ch)
                if d is not None and d != 0:
                    groups.setdefault(d, set()).add(ch)
            alts = [f"{char_class(chars)} {names[d]}" for d, chars in sorted(groups.items())]
            other = specific | (_JSON_BAD if json else set())
            alts.append(f"{char_class(frozenset(other), negate=True)} {names[0]}")
            if json:
                alts.append(f"{self._json_escape()} {names[0]}")
            self._rules[names[q]] = "(" + " | ".join(alts) + ")?"
        return prefix

    def _including(self, closer: str) -> str:
        auto = _Automaton((closer,))
        prefix = self._fresh("Until")
        names = [prefix if i == 0 else f"{prefix}-{i}" for i in range(len(auto.states))]
        for q in range(len(auto.states)):
            groups: dict[int, set[str]] = {}
            done: set[str] = set()
            for ch in auto.alphabet:
                d = auto.delta[(q, ch)]
                if d is None:
                    done.add(ch)
                elif d != 0:
                    groups.setdefault(d, set()).add(ch)
            specific = done | {c for chars in groups.values() for c in chars}
            alts = [char_class(done)] if done else []
            alts += [f"{char_class(chars)} {names[d]}" for d, chars in sorted(groups.items())]
            alts.append(f"{char_class(frozenset(specific), negate=True)} {names[0]}")
            self._rules[names[q]] = " | ".join(alts)
        return prefix

    def _fresh(self, base: str) -> str:
        n = 1
        while f"{base}{n}" in self._rules:
            n += 1
        name = f"{base}{n}"
        self._rules[name] = ""  # reserved; filled by the caller
        return name

    # -- JSON ----------------------------------------------------------------------
    def _json_escape(self) -> str:
        return self._cached("jesc", lambda: self.rule("json-escape", '"\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})'))

    def json_number(self) -> str:
        return self._cached(
            "jnum",
            lambda: self.rule(
                "json-number", '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?'
            ),
        )

    def json_integer(self) -> str:
        return self._cached("jint", lambda: self.rule("json-integer", '"-"? ("0" | [1-9] [0-9]{0,15})'))

    def json_string(self, forbid: str | None = None) -> str:
        """A JSON string; with ``forbid``, one whose raw text never contains that string."""

        def make() -> str:
            if forbid is None:
                char = self._cached(
                    "jchar",
                    lambda: self.rule("json-char", f"{char_class(_JSON_BAD, negate=True)} | {self._json_escape()}"),
                )
                return self.rule("json-string", f'"\\"" {char}* "\\""')
            body = self._excluding((forbid,), json=True)
            return self.rule("json-string", f'"\\"" {body} "\\""')

        return self._cached(("jstr", forbid), make)

    def json_any(self, forbid: str | None = None) -> str:
        """Any JSON value (objects and arrays nest freely)."""
        key = ("jany", forbid)
        if key in self._cache:
            return self._cache[key]
        value = self.rule("json-value", "")
        self._cache[key] = value
        s = self.json_string(forbid)
        obj = self.rule("json-object", f'"{{" ({s} ": " {value} (", " {s} ": " {value})*)? "}}"')
        arr = self.rule("json-array", f'"[" ({value} (", " {value})*)? "]"')
        self._rules[value] = f'{obj} | {arr} | {s} | {self.json_number()} | "true" | "false" | "null"'
        self._cache[("jobj", forbid)] = obj
        return value

    def json_object_any(self, forbid: str | None = None) -> str:
        self.json_any(forbid)
        return self._cache[("jobj", forbid)]

    def json_value(self, schema: Any, forbid: str | None = None, hint: str = "value", depth: int = 0) -> str:
        """A grammar expression for a JSON value valid under ``schema`` (where simple)."""
        if depth > _MAX_DEPTH or not isinstance(schema, dict):
            return self.json_any(forbid)
        if "$ref" in schema or "allOf" in schema or "not" in schema:
            return self.json_any(forbid)
        if "const" in schema:
            return self._json_literal(schema["const"], forbid) or self.json_any(forbid)
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            alts = [a for a in (self._json_literal(v, forbid) for v in schema["enum"]) if a]
            return self.choice(alts) if alts else self.json_any(forbid)
        for key in ("anyOf", "oneOf"):
            subs = schema.get(key)
            if isinstance(subs, list) and subs:
                return self.choice([self.json_value(s, forbid, hint, depth + 1) for s in subs])
        types = schema.get("type")
        if isinstance(types, list) and types:
            return self.choice([self.json_value({**schema, "type": t}, forbid, hint, depth) for t in types])
        if types is None:
            if isinstance(schema.get("properties"), dict):
                types = "object"
            elif "items" in schema:
                types = "array"
            else:
                return self.json_any(forbid)
        if types == "string":
            return self.json_string(forbid)
        if types == "integer":
            return self.json_integer()
        if types == "number":
            return self.json_number()
        if types == "boolean":
            return '("true" | "false")'
        if types == "null":
            return '"null"'
        if types == "array":
            items = schema.get("items")
            if not isinstance(items, dict) or "prefixItems" in schema:
                item = self.json_any(forbid)
            else:
                item = self.json_value(items, forbid, hint + "-item", depth + 1)
            body = f'{item} (", " {item})*'
            min_items = schema.get("minItems")
            if not (isinstance(min_items, int) and min_items >= 1):
                body = f"({body})?"
            return self.rule(hint, f'"[" {body} "]"')
        if types == "object":
            return self.json_object(schema, forbid, hint, depth)
        return self.json_any(forbid)

    def _json_literal(self, value: Any, forbid: str | None) -> str | None:
        text = json.dumps(value, ensure_ascii=False)
        if forbid is not None and forbid in text:
            return None
        return lit(text)

    def json_object(
        self, schema: dict[str, Any], forbid: str | None = None, hint: str = "object", depth: int = 0
    ) -> str:
        """An object with the schema's properties in order (required present), or any object."""
        props = schema.get("properties")
        if not isinstance(props, dict):
            return self.json_object_any(forbid)
        if not props:
            return '"{}"'
        required = schema.get("required")
        req = set(required) if isinstance(required, list) else set()
        kvs: list[tuple[str, bool]] = []
        for key, sub in props.items():
            key_lit = self._json_literal(str(key), forbid)
            if key_lit is None:
                continue
            value = self.json_value(sub, forbid, f"{hint}-{key}", depth + 1)
            kvs.append((self.rule(f"{hint}-{key}-kv", f'{key_lit} ": " {value}'), key in req))
        if not kvs:
            return self.json_object_any(forbid)

        def after(i: int) -> str:  # the rest, after at least one pair was written
            parts = [f'", " {kv}' if r else f'(", " {kv})?' for kv, r in kvs[i:]]
            return " ".join(parts)

        alts: list[str] = []
        for i, (kv, is_req) in enumerate(kvs):  # the first pair written is kvs[i]
            alts.append(f"{kv} {after(i + 1)}".strip())
            if is_req:
                break
        else:
            alts.append("")  # every property optional: {} too
        body = " | ".join(a if a else '""' for a in alts)
        return self.rule(hint, f'"{{" ({body}) "}}"')

    def json_args(self, tool: GrammarTool, forbid: str | None = None) -> str:
        """The arguments object of a call to ``tool``."""
        params = tool.parameters
        hint = f"{tool.name}-args"
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            return self.json_object_any(forbid)
        return self.json_object(params, forbid, hint)

    # -- XML parameters ------------------------------------------------------------
    def xml_value(self, schema: Any, forbid: str, json_forbid: str | None, hint: str) -> str:
        """A parameter value written as the XML formats write it: strings raw, others JSON.

        ``forbid`` is kept out of raw text; ``json_forbid`` out of JSON strings inside.
        """
        types = _plain_types(schema)
        if types == {"string"}:
            enum = schema.get("enum") if isinstance(schema, dict) else None
            if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
                alts = [lit(v) for v in enum if v and forbid not in v]
                if alts:
                    return self.choice(alts)
            return self.text(forbid)
        if types in ({"integer"}, {"number"}, {"boolean"}):
            # written as JSON text: an enum's (or const's) values as their literals, as in JSON
            allowed = [schema["const"]] if "const" in schema else schema.get("enum")
            if isinstance(allowed, list) and allowed and not any(isinstance(v, str) for v in allowed):
                alts = [a for a in (self._json_literal(v, forbid) for v in allowed) if a]
                if alts:
                    return self.choice(alts)
        if types == {"integer"}:
            return self.json_integer()
        if types == {"number"}:
            return self.json_number()
        if types == {"boolean"}:
            return '("true" | "false")'
        if types in ({"object"}, {"array"}):
            return self.json_value(schema, json_forbid, hint)
        return self.text(forbid)

    def xml_params(
        self,
        tool: GrammarTool,
        param: Callable[[str, str], str],
        valid: Callable[[str], bool],
        forbid: str,
        json_forbid: str | None,
    ) -> str:
        """The tool's parameters in declaration order, optional ones optional.

        ``param(key, value_expr)`` writes one parameter (its separators included); keys
        ``valid`` rejects (they cannot be written in the format) are left out.
        """
        parts = []
        for key, schema, required in tool.properties():
            if not valid(key):
                continue
            value = self.xml_value(schema, forbid, json_forbid, f"{tool.name}-{key}")
            one = self.rule(f"{tool.name}-{key}-param", param(key, value))
            parts.append(one if required else f"{one}?")
        return " ".join(parts)

    def xml_calls(
        self,
        tools: list[GrammarTool],
        head: Callable[[str], str],
        param: Callable[[str, str], str],
        valid: Callable[[str], bool],
        end: str,
        forbid: str,
        parallel: bool,
        kind: str = "invoke",
    ) -> str:
        """Calls in an XML format: per tool the literal ``head(name)``, its parameters
        (:meth:`xml_params`, ``forbid`` kept out of raw and JSON values), the literal ``end``;
        one of the tools, or one or more when ``parallel`` (rules named ``<tool>-<kind>``)."""
        alts = []
        close = self.lit(end)
        for t in tools:
            params = self.xml_params(t, param, valid, forbid=forbid, json_forbid=forbid)
            alts.append(self.rule(f"{t.name}-{kind}", f"{self.lit(head(t.name))} {params} {close}"))
        return self.calls(self.choice(alts), parallel)


def _plain_types(schema: Any) -> set[str] | None:
    """The schema's types when it is a plain typed node (no combinators), else None."""
    if not isinstance(schema, dict):
        return None
    if any(k in schema for k in ("$ref", "allOf", "anyOf", "oneOf", "not")):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if t is None:
        if isinstance(schema.get("properties"), dict):
            return {"object"}
        if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
            return {"string"}
    return None


def tools_for_grammar(tools: list[dict[str, Any]] | None, name: str | None = None) -> list[GrammarTool]:
    """The request's OpenAI tool dicts as :class:`GrammarTool`, only ``name`` when given."""
    out = []
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        if name is not None and fn["name"] != name:
            continue
        params = fn.get("parameters")
        out.append(GrammarTool(fn["name"], params if isinstance(params, dict) else None))
    return out


__all__ = [
    "CallGrammar",
    "GrammarBuilder",
    "GrammarError",
    "GrammarTool",
    "char_class",
    "lit",
    "tools_for_grammar",
]
