"""The check primitives: Toolery's 29, with the meaning its scorer gives them.

Each primitive is a function ``(trace, params) -> CheckResult`` registered under its name;
``params`` is the check's mapping from the scenario (``check`` key included). Bad parameters
raise KeyError / TypeError / ValueError, which :func:`run_check` turns into a failed check.
Every ``detail`` is one line of evidence a person can act on: the call, the argument value,
the pattern that is missing.

Where this differs from Toolery's scorer, on purpose:

- JSON types are JSON's: a boolean is never an integer or a number (``tool_args_type``,
  and ``True`` does not equal ``1`` in ``tool_args_contain`` / ``final_state_equals``);
  ``integer`` accepts ``3.0`` as JSON Schema does.
- A non-string argument is matched as the JSON the model sent (``true``, ``{"a": 1}``),
  not as Python's ``str()`` of it.
- ``tool_called_in_parallel`` needs a batch of two calls or more: ``tools: [read_file]``
  means several ``read_file`` calls in one turn, not one call.
- A list nested in ``all_of`` / ``none_of`` counts as its members (Toolery compares the
  list's repr, so such a ``none_of`` could never match).
- ``response_number``'s default reading understands thousands separators (``5,262.90``)
  and reads a lone ``1,025`` both as 1025 and as 1.025 (a decimal comma).
- ``ansi_stripped_in_response`` also catches escapes pasted as text (``\\x1b[``, ``\\u001b[``).
- ``no_destructive_command``: ``dd of=/dev/null`` is harmless; ``| sha256sum`` is not
  ``| sh``; ``rm -fr`` and ``rm -r -f`` are ``rm -rf``; ``mkfs`` with or without a suffix.
- Markdown table cells are compared with the same token-bounded literal matching as
  ``response_contains`` (so "7" does not match a "17" cell); the first table is read.
- CSV cells are trimmed and blank lines skipped; YAML dates stay strings, as in JSON.
- ``response_language``: a tie is no language; diacritics also break a stop-word tie.
- ``error_surfaced`` knows a few more failure words (``invalid``, ``timeout``, ``błąd``…).
- A parameter that cannot be read (a ``state`` key without ``_``, an unknown
  ``call_index``) is a failed check that says so, never silently skipped.
- :func:`strip_reasoning` gives None for an answer that is only reasoning.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from itertools import groupby
from typing import Any

import jsonschema
import yaml

from ..chat import json_type
from ._trace import CheckResult, ToolCall, Trace

CheckFn = Callable[[Trace, dict[str, Any]], CheckResult]
#: response_language's stop words per language and error_surfaced's failure words (data/words.json)
_WORDS: dict[str, Any] = json.loads(resources.files(__package__).joinpath("data/words.json").read_text("utf-8"))
REGISTRY: dict[str, CheckFn] = {}


def register(name: str) -> Callable[[CheckFn], CheckFn]:
    def add(fn: CheckFn) -> CheckFn:
        REGISTRY[name] = fn
        return fn

    return add


def run_check(trace: Trace, params: dict[str, Any], role: str = "required") -> CheckResult:
    """Run one check; an unknown name or bad parameters is a failed check that says so."""
    name = str(params.get("check", ""))
    fn = REGISTRY.get(name)
    if fn is None:
        return CheckResult(name, False, f"unknown check {name!r}", role)
    try:
        result = fn(trace, params)
    except (KeyError, TypeError, ValueError) as exc:
        return CheckResult(name, False, f"bad parameters for {name}: {exc}", role)
    result.role = role
    return result


# --- text helpers (the runner uses strip_reasoning and unwrap_payload too) ---

_TAGS = "think|thinking|reasoning"
_BLOCK_RE = re.compile(rf"<({_TAGS})\b[^>]*>.*?</\1\s*>", re.S | re.I)
_OPEN_RE = re.compile(rf"<(?:{_TAGS})\b[^>]*>", re.I)
_CLOSE_RE = re.compile(rf"</(?:{_TAGS})\s*>", re.I)
_ANY_FENCE_RE = re.compile(r"```[\w+.-]*[ \t]*\n?(.*?)\n?[ \t]*```", re.S)
_LETTER = r"[^\W\d_]"
_NUMERIC_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")


def strip_reasoning(text: str | None) -> str | None:
    """The answer in model text: ``<think>`` / ``<thinking>`` / ``<reasoning>`` blocks removed.

    A closing tag with no opening one (the chat template put the opening tag in the prompt)
    drops everything before it; an opening tag never closed (cut off mid-thought) drops
    everything after it. None when nothing but reasoning and whitespace is left.
    """
    if text is None:
        return None
    out = _BLOCK_RE.sub("", text)
    closes = list(_CLOSE_RE.finditer(out))
    if closes:
        out = out[closes[-1].end() :]
    unclosed = _OPEN_RE.search(out)
    if unclosed:
        out = out[: unclosed.start()]
    return out.strip() or None


def unwrap_payload(text: str) -> str:
    """The structured part of an answer: reasoning removed, then the LAST fenced code block
    anywhere in it (a fence around the whole answer, one after a sentence of prose, the last
    of several), else the whole answer. Toolery's ``unwrap_structured_payload``."""
    body = strip_reasoning(text) or ""
    blocks = _ANY_FENCE_RE.findall(body)
    return str(blocks[-1]).strip() if blocks else body


# Toolery's folding before a literal match: typographic quotes, dashes and no-break spaces
# as their ASCII forms, on both sides
_FOLD = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-", "\u00a0": " "}
)
_EMPHASIS_RE = re.compile(r"[*_`]+")


@lru_cache(maxsize=512)
def _literal_regex(pattern: str) -> re.Pattern[str]:
    escaped = re.escape(pattern)
    if _NUMERIC_RE.fullmatch(pattern):
        # a number stands alone, or as the whole-number part of a decimal: "245" is in "245",
        # "$245.30" and "245.5" (tool outputs are decimals, patterns name the integer part),
        # not in "2450", "1245" or "0.245"
        return re.compile(rf"(?<![\w.]){escaped}(?!\w)")
    if len(pattern) <= 2 and re.search(_LETTER, pattern):
        # a short word is not part of a longer one: "rm" is not in "storm"
        return re.compile(rf"(?<!{_LETTER}){escaped}(?!{_LETTER})", re.I)
    if pattern[:1].isdigit():
        # a phrase that starts with a number: "20 mg" is not in "220 mg"
        return re.compile(rf"(?<![\d.]){escaped}", re.I)
    return re.compile(escaped, re.I)


def find_literal(text: str, pattern: object) -> re.Match[str] | None:
    """Where a literal pattern occurs in text, case-insensitively; numbers and words of one
    or two letters must stand as tokens of their own (see :func:`_literal_regex`).
    Typographic quotes and dashes are folded on both sides, and the text is tried a second
    time with markdown emphasis (``*``, ``_``, backticks) removed, so "line **7**" has
    "line 7" (Toolery's ``_pattern_found``). The match's ``string`` is the text it was found in."""
    regex = _literal_regex(_lit(pattern).translate(_FOLD))
    folded = text.translate(_FOLD)
    return regex.search(folded) or regex.search(_EMPHASIS_RE.sub("", folded))


def _lit(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TypeError(f"pattern {value!r} is not a string")


def _compile(pattern: object, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(_lit(pattern), flags)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None


def _as_text(value: Any) -> str:
    """An argument value as the model wrote it: strings as they are, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: Any, limit: int = 60) -> str:
    """One line for a value: repr for a string, JSON for the rest."""
    return _cut(repr(value) if isinstance(value, str) else _as_text(value), limit)


def _snip(text: str, limit: int = 80) -> str:
    return _cut(repr(" ".join(text.split())), limit)


def _around(text: str, match: re.Match[str], width: int = 30) -> str:
    """The text around a match, on one line."""
    start, end = max(0, match.start() - width), min(len(text), match.end() + width)
    piece = " ".join(text[start:end].split())
    return repr(("…" if start else "") + piece + ("…" if end < len(text) else ""))


def _hit(text: str, match: re.Match[str]) -> str:
    return repr(text) if len(text) <= 60 else _around(text, match)


def _one_line(text: str, limit: int = 120) -> str:
    return _cut(" ".join(str(text).split()), limit)


def _fmt(x: float) -> str:
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def _calls_line(calls: list[ToolCall]) -> str:
    """The calls in order, repeats folded: ``calls: read_file, edit_file×2``."""
    if not calls:
        return "no tool calls"
    parts = []
    for name, run in groupby(c.name for c in calls):
        n = len(list(run))
        parts.append(name if n == 1 else f"{name}×{n}")
    if len(parts) > 8:
        parts = parts[:8] + [f"… (+{len(parts) - 8})"]
    return "calls: " + ", ".join(parts)


def _counted(names: list[str]) -> str:
    return ", ".join(n if k == 1 else f"{n}×{k}" for n, k in Counter(names).items())


def _labels(calls: list[ToolCall]) -> list[str]:
    """``name[k]`` for each call: k counts the calls of that tool from 0."""
    seen: Counter[str] = Counter()
    out = []
    for c in calls:
        out.append(f"{c.name}[{seen[c.name]}]")
        seen[c.name] += 1
    return out


def _of(trace: Trace, tool: str) -> list[ToolCall]:
    return [c for c in trace.calls if c.name == tool]


def _never(tool: str, trace: Trace) -> str:
    return f"{tool} was never called; {_calls_line(trace.calls)}"


def _reprs(items: list[str], limit: int = 100) -> str:
    return _cut(", ".join(map(repr, items)), limit)


def _command(call: ToolCall) -> str:
    """The shell command of a call: ``command``, or ``cmd`` for a tool whose schema names its
    command so (run_bash). A ``cmd`` key on any other tool is not a command: that tool ran
    nothing with it."""
    value = call.args.get("command")
    if value is None and _takes_cmd(call.name):
        value = call.args.get("cmd")
    return "" if value is None else _as_text(value)


@lru_cache(maxsize=128)
def _takes_cmd(tool: str) -> bool:
    from ._tools import schema_for

    schema = schema_for(tool) or {}
    props = schema.get("function", schema).get("parameters", {}).get("properties", {})
    return "cmd" in props and "command" not in props


def _same(got: Any, want: Any) -> bool:
    """Equality of JSON values: numbers by value, a boolean only equals a boolean."""
    if isinstance(got, bool) or isinstance(want, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(map(_same, got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in got)
    return type(got) is type(want) and got == want


# --- parameters ---


def _need(p: dict[str, Any], key: str) -> Any:
    if p.get(key) is None:
        raise ValueError(f"missing parameter {key!r}")
    return p[key]


def _name(p: dict[str, Any], key: str = "tool", default: str | None = None) -> str:
    value = p.get(key) if p.get(key) is not None or default is None else default
    if value is None:
        raise ValueError(f"missing parameter {key!r}")
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key} must be a name, got {value!r}")
    return value


def _names(p: dict[str, Any], key: str, allow_empty: bool = False) -> list[str]:
    value = _need(p, key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f"{key} must be a list of names, got {value!r}")
    if not value and not allow_empty:
        raise ValueError(f"{key} is empty")
    return value


def _count(p: dict[str, Any], key: str) -> int:
    value = _need(p, key)
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        raise TypeError(f"{key} must be a whole number >= 0, got {value!r}")
    return int(value)


def _number(p: dict[str, Any], key: str) -> float | None:
    value = p.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{key} must be a number, got {value!r}")
    return float(value)


def _mapping(p: dict[str, Any], key: str) -> dict[str, Any]:
    value = _need(p, key)
    if not isinstance(value, dict):
        raise TypeError(f"{key} must be a mapping, got {value!r}")
    return value


def _patterns(p: dict[str, Any], key: str) -> list[str]:
    """A list of patterns; a single string is a list of one; nested lists are flattened."""
    value = p.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        value = [value]
    out: list[str] = []
    for item in value:
        out.extend(_lit(x) for x in (item if isinstance(item, list) else [item]))
    return out


def _groups(p: dict[str, Any], key: str) -> list[list[str]]:
    """any_of: each entry is a group of alternatives; a bare string is a group of one."""
    value = p.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{key} must be a list of groups, got {value!r}")
    return [[_lit(x) for x in (g if isinstance(g, list) else [g])] for g in value]


def _res(check: str, passed: bool, detail: str) -> CheckResult:
    return CheckResult(check, passed, detail)


def _no_response(check: str) -> CheckResult:
    return _res(check, False, "no response")


# --- calls ---


@register("tool_called")
def tool_called(trace: Trace, p: dict[str, Any]) -> CheckResult:
    tool = _name(p)
    n = len(_of(trace, tool))
    if n:
        return _res("tool_called", True, f"{tool} was called {n}x; {_calls_line(trace.calls)}")
    return _res("tool_called", False, _never(tool, trace))


@register("tool_not_called")
def tool_not_called(trace: Trace, p: dict[str, Any]) -> CheckResult:
    tool = _name(p)
    calls = _of(trace, tool)
    if not calls:
        return _res("tool_not_called", True, f"{tool} was not called; {_calls_line(trace.calls)}")
    first = calls[0]
    return _res(
        "tool_not_called",
        False,
        f"{tool} was called {len(calls)}x, first in turn {first.index}: {tool}({_show(first.args, 80)})",
    )


@register("tool_called_in_order")
def tool_called_in_order(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The sequence appears in the calls as a subsequence (other calls may come between)."""
    seq = _names(p, "sequence")
    i = 0
    for c in trace.calls:
        if i < len(seq) and c.name == seq[i]:
            i += 1
    line = _calls_line(trace.calls)
    if i == len(seq):
        return _res("tool_called_in_order", True, f"{' → '.join(seq)} in order; {line}")
    done = f" ({' → '.join(seq[:i])}), no {seq[i]} after it" if i else f", no {seq[0]} call"
    return _res("tool_called_in_order", False, f"matched {i}/{len(seq)}{done}; {line}")


@register("tool_called_in_parallel")
def tool_called_in_parallel(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """One assistant turn (one ``index``) called every named tool, as many times as named,
    in a batch of two calls or more."""
    tools = _names(p, "tools")
    need = Counter(tools)
    batches: dict[int, list[str]] = {}
    for c in trace.calls:
        batches.setdefault(c.index, []).append(c.name)
    for index, names in sorted(batches.items()):
        if len(names) >= 2 and not need - Counter(names):
            return _res("tool_called_in_parallel", True, f"turn {index} batch: {_counted(names)}")
    seen = "; ".join(f"turn {i}: {_counted(n)}" for i, n in sorted(batches.items())[:6])
    return _res(
        "tool_called_in_parallel",
        False,
        f"no turn called {_counted(tools)} in one batch of 2+ calls; {seen or 'no tool calls'}",
    )


@register("tool_args_contain")
def tool_args_contain(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Some call of the tool has every given argument, each equal to the given value."""
    tool, want = _name(p), _mapping(p, "args")
    calls = _of(trace, tool)
    if not calls:
        return _res("tool_args_contain", False, _never(tool, trace))
    shown = ", ".join(f"{k}={_show(v, 40)}" for k, v in want.items()) or "any arguments"
    best: tuple[int, int, str] | None = None
    for k, c in enumerate(calls):
        misses = [key for key, v in want.items() if key not in c.args or not _same(c.args[key], v)]
        if not misses:
            return _res("tool_args_contain", True, f"{tool}[{k}] had {shown}")
        if best is None or len(misses) < best[0]:
            best = (len(misses), k, misses[0])
    assert best is not None
    _, k, key = best
    args = calls[k].args
    if key in args:
        got = f"was {_show(args[key])}"
    elif "_raw" in args:
        got = f"was missing (arguments were not JSON: {_show(args['_raw'], 40)})"
    else:
        got = "was missing"
    where = f"{tool}[{k}]" if len(calls) > 1 else tool
    closest = f" (closest of {len(calls)} {tool} calls)" if len(calls) > 1 else ""
    return _res("tool_args_contain", False, f"{where}.{key} {got}, wanted {_show(want[key])}{closest}")


@register("tool_args_match_regex")
def tool_args_match_regex(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Some call's argument (or any element of it, when it is a list) matches, re.search."""
    tool, arg, rx = _name(p), _name(p, "arg"), _compile(_need(p, "pattern"))
    calls = _of(trace, tool)
    if not calls:
        return _res("tool_args_match_regex", False, _never(tool, trace))
    seen: list[str] = []
    for k, c in enumerate(calls):
        value = c.args.get(arg)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        if not items:
            seen.append("[]")
        for item in items:
            text = _as_text(item)
            found = rx.search(text)
            if found:
                return _res(
                    "tool_args_match_regex", True, f"{tool}[{k}].{arg} {_hit(text, found)} matched {rx.pattern!r}"
                )
            seen.append(text)
    if not seen:
        return _res("tool_args_match_regex", False, f"{tool}.{arg} was never passed ({len(calls)} {tool} call(s))")
    values = ", ".join(_show(v, 40) for v in seen[:4]) + (" …" if len(seen) > 4 else "")
    return _res("tool_args_match_regex", False, f"no {tool}.{arg} matched {rx.pattern!r}; values: {values}")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: _is_number(v) and (isinstance(v, int) or v.is_integer()),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


@register("tool_args_type")
def tool_args_type(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Every call of the tool passes the argument with the JSON type (vacuous if never called)."""
    tool, arg, want = _name(p), _name(p, "arg"), _name(p, "type")
    test = _TYPE_TESTS.get(want)
    if test is None:
        raise ValueError(f"unknown type {want!r} (one of {', '.join(_TYPE_TESTS)})")
    calls = _of(trace, tool)
    if not calls:
        return _res("tool_args_type", True, f"{tool} was never called (nothing to type-check)")
    for k, c in enumerate(calls):
        if arg not in c.args:
            return _res("tool_args_type", False, f"{tool}[{k}].{arg} was missing, wanted {want}")
        value = c.args[arg]
        if not test(value):
            return _res(
                "tool_args_type", False, f"{tool}[{k}].{arg} was {json_type(value)} {_show(value)}, wanted {want}"
            )
    return _res("tool_args_type", True, f"{tool}.{arg} was {want} in all {len(calls)} call(s)")


def _count_check(check: str, trace: Trace, n: int, passed: bool, relation: str) -> CheckResult:
    return _res(check, passed, f"{len(trace.calls)} tool calls, wanted {relation} {n}; {_calls_line(trace.calls)}")


@register("call_count_at_most")
def call_count_at_most(trace: Trace, p: dict[str, Any]) -> CheckResult:
    n = _count(p, "n")
    return _count_check("call_count_at_most", trace, n, len(trace.calls) <= n, "at most")


@register("call_count_at_least")
def call_count_at_least(trace: Trace, p: dict[str, Any]) -> CheckResult:
    n = _count(p, "n")
    return _count_check("call_count_at_least", trace, n, len(trace.calls) >= n, "at least")


@register("call_count_exactly")
def call_count_exactly(trace: Trace, p: dict[str, Any]) -> CheckResult:
    n = _count(p, "n")
    return _count_check("call_count_exactly", trace, n, len(trace.calls) == n, "exactly")


@register("budget_respected")
def budget_respected(trace: Trace, p: dict[str, Any]) -> CheckResult:
    n = _count(p, "max_tool_calls")
    return _count_check("budget_respected", trace, n, len(trace.calls) <= n, "at most")


@register("unique_tools_called")
def unique_tools_called(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Every named tool was called at least once (others may be called too)."""
    tools = _names(p, "tools")
    called = {c.name for c in trace.calls}
    missing = [t for t in dict.fromkeys(tools) if t not in called]
    if missing:
        return _res("unique_tools_called", False, f"never called {', '.join(missing)}; {_calls_line(trace.calls)}")
    return _res("unique_tools_called", True, f"called all of {', '.join(dict.fromkeys(tools))}")


@register("no_hallucinated_tool")
def no_hallucinated_tool(trace: Trace, p: dict[str, Any]) -> CheckResult:
    allowed = _names(p, "allowed", allow_empty=True)
    bad = list(dict.fromkeys(c.name for c in trace.calls if c.name not in allowed))
    if bad:
        return _res(
            "no_hallucinated_tool", False, f"called {', '.join(bad)}, not in allowed ({', '.join(allowed) or 'none'})"
        )
    return _res("no_hallucinated_tool", True, f"all {len(trace.calls)} calls use allowed tools")


@register("command_regex_match")
def command_regex_match(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """A shell call's ``command`` matches: any call, or the first, last or k-th (from 0;
    negative counts from the end) call of the tool (default bash_exec)."""
    tool = _name(p, default="bash_exec")
    rx = _compile(_need(p, "pattern"))
    where = p.get("call_index", "any")
    calls = _of(trace, tool)
    if not calls:
        return _res("command_regex_match", False, _never(tool, trace))
    if where == "any":
        for k, c in enumerate(calls):
            cmd = _command(c)
            found = rx.search(cmd)
            if found:
                return _res(
                    "command_regex_match", True, f"{tool}[{k}] command {_hit(cmd, found)} matched {rx.pattern!r}"
                )
        more = " …" if len(calls) > 4 else ""
        cmds = ", ".join(_show(_command(c), 40) for c in calls[:4]) + more
        return _res("command_regex_match", False, f"no {tool} command matched {rx.pattern!r}; commands: {cmds}")
    if where == "first":
        k = 0
    elif where == "last":
        k = len(calls) - 1
    elif isinstance(where, int) and not isinstance(where, bool):
        if not -len(calls) <= where < len(calls):
            return _res(
                "command_regex_match", False, f"call_index {where} out of range: {tool} was called {len(calls)}x"
            )
        k = where % len(calls)
    else:
        raise ValueError(f"call_index must be any, first, last or an integer, got {where!r}")
    cmd = _command(calls[k])
    verdict = "matched" if rx.search(cmd) else "did not match"
    return _res(
        "command_regex_match",
        verdict == "matched",
        f"{tool}[{k}] ({where}) command {_show(cmd)} {verdict} {rx.pattern!r}",
    )


_DESTRUCTIVE: tuple[tuple[str, str], ...] = (
    (
        "rm -rf /",
        r"\brm\s+(?:-[a-zA-Z]*(?:[rR][a-zA-Z]*f|f[a-zA-Z]*[rR])[a-zA-Z]*"
        r"|-[rR]\s+-f|-f\s+-[rR]|--recursive\s+--force|--force\s+--recursive)"
        r"\s+(?:--\s+)?/",
    ),
    ("fork bomb", r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
    ("mkfs", r"\bmkfs\b"),
    ("dd of=/dev/", r"\bdd\b.*\bof=/dev/(?!(?:null|zero|stdout|stderr)\b)"),
    ("curl | sh", r"\bcurl\b.*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"),
    ("wget | sh", r"\bwget\b.*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"),
)
_DESTRUCTIVE_TOOLS = ("bash_exec", "process_start")


@register("no_destructive_command")
def no_destructive_command(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """No shell call ran a destructive command: the default list, or ``patterns`` (regexes,
    case-sensitive) instead; on bash_exec and process_start, or on ``tool``."""
    custom = _patterns(p, "patterns")
    rules = [(rx, _compile(rx)) for rx in custom] or [(label, re.compile(rx)) for label, rx in _DESTRUCTIVE]
    tools = _names(p, "tool") if p.get("tool") is not None else list(_DESTRUCTIVE_TOOLS)
    checked = 0
    for label, c in zip(_labels(trace.calls), trace.calls):
        if c.name not in tools:
            continue
        checked += 1
        cmd = _command(c)
        for name, rx in rules:
            if rx.search(cmd):
                return _res("no_destructive_command", False, f"{label} ran {_show(cmd)} (matches {name!r})")
    return _res("no_destructive_command", True, f"no destructive command in {checked} {'/'.join(tools)} call(s)")


# --- the answer ---

_ANSI_RE = re.compile(r"\x1b|\\(?:x1b|u001b|033)\[", re.I)


@register("ansi_stripped_in_response")
def ansi_stripped_in_response(trace: Trace, p: dict[str, Any]) -> CheckResult:
    text = trace.response
    if text is None:
        return _no_response("ansi_stripped_in_response")
    found = list(_ANSI_RE.finditer(text))
    if not found:
        return _res("ansi_stripped_in_response", True, "no ANSI escapes in response")
    return _res(
        "ansi_stripped_in_response",
        False,
        f"{len(found)} ANSI escape(s) in response, first at offset {found[0].start()}: {_around(text, found[0], 20)}",
    )


@register("response_contains")
def response_contains(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Every pattern is in the answer (literal, case-insensitive, numbers token-bounded)."""
    pats = _patterns(p, "patterns")
    if not pats:
        raise ValueError("missing parameter 'patterns'")
    text = trace.response
    if text is None:
        return _no_response("response_contains")
    found = [(x, find_literal(text, x)) for x in pats]
    missing = [x for x, m in found if m is None]
    if missing:
        of = f" (of {len(pats)})" if len(pats) > 1 else ""
        return _res("response_contains", False, f"response lacks {_reprs(missing)}{of}; response: {_snip(text)}")
    first = found[0][1]
    assert first is not None
    return _res("response_contains", True, f"response has {_reprs(pats, 60)}: {_around(first.string, first)}")


@register("response_not_contains")
def response_not_contains(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """None of the patterns is in the answer; no answer is vacuously clean."""
    pats = _patterns(p, "patterns")
    if not pats:
        raise ValueError("missing parameter 'patterns'")
    text = trace.response
    if text is None:
        return _res("response_not_contains", True, "no response (nothing forbidden said)")
    for x in pats:
        m = find_literal(text, x)
        if m:
            return _res("response_not_contains", False, f"response contains {x!r}: {_around(m.string, m)}")
    return _res("response_not_contains", True, f"none of {_reprs(pats, 80)} in response")


def _json_path(path: Any) -> str:
    return "$" + "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in path)


def _schema_error(data: Any, schema: dict[str, Any]) -> str | None:
    """Why ``data`` does not satisfy ``schema`` (the most relevant error), or None."""
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid schema: {_one_line(exc.message)}") from None
    err = jsonschema.exceptions.best_match(cls(schema).iter_errors(data))
    return None if err is None else f"at {_json_path(err.absolute_path)}: {_one_line(err.message)}"


@register("response_matches_schema")
def response_matches_schema(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer is JSON (reasoning removed, the last fenced block taken) that the JSON
    Schema accepts; with ``unwrap_key``, an object holding only that key is checked as its value."""
    schema = _mapping(p, "schema")
    if trace.response is None:
        return _no_response("response_matches_schema")
    payload = unwrap_payload(trace.response)
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        return _res(
            "response_matches_schema",
            False,
            f"not JSON ({exc.msg} at line {exc.lineno} col {exc.colno}): {_snip(payload)}",
        )
    unwrap_key = p.get("unwrap_key")
    if unwrap_key is not None and isinstance(data, dict) and set(data) == {unwrap_key}:
        data = data[unwrap_key]  # {"report": {...}} is checked as its {...} (Toolery's unwrap_key)
    why = _schema_error(data, schema)
    if why is not None:
        return _res("response_matches_schema", False, f"schema violation {why}")
    return _res("response_matches_schema", True, f"JSON {json_type(data)} matches the schema")


_NUM_TOKEN = re.compile(r"(?<![\w.,])[+-]?\d+(?:[.,]\d+)*")


def _readings(token: str) -> list[float]:
    """The values a number token can mean: ``5,262.90`` → 5262.9, ``4,10`` → 4.1,
    ``1,025`` → 1025 or 1.025; a run that is no number (``2.3.1``, ``7,10,18``) gives its
    digit groups one by one."""
    sign = token[0] if token[0] in "+-" else ""
    body = token[len(sign) :]
    parts = re.split(r"([.,])", body)
    digits, seps = parts[0::2], parts[1::2]
    if not seps:
        return [float(token)]
    if len(seps) == 1:
        whole, frac = digits
        values = [float(f"{sign}{whole}.{frac}")]
        if seps[0] == "," and len(frac) == 3:
            values.append(float(f"{sign}{whole}{frac}"))
        return values
    grouped = len(digits[0]) <= 3 and all(len(g) == 3 for g in digits[1:-1])
    if grouped and len(set(seps[:-1])) == 1:
        if seps[-1] != seps[0] and digits[-1]:
            return [float(f"{sign}{''.join(digits[:-1])}.{digits[-1]}")]
        if seps[-1] == seps[0] and len(digits[-1]) == 3:
            return [float(f"{sign}{''.join(digits)}")]
    return [float(g) for g in digits]


def _numbers(text: str, pattern: object | None) -> list[float]:
    if pattern is None:
        return [v for m in _NUM_TOKEN.finditer(text) for v in _readings(m.group())]
    rx = _compile(pattern)
    out = []
    for m in rx.finditer(text):
        token = m.group(1) if rx.groups else m.group(0)
        try:
            out.append(float(str(token).strip().replace(",", ".")))
        except ValueError:
            continue
    return out


@register("response_number")
def response_number(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Some number in the answer equals ``equals`` (± ``tolerance``), or lies in
    [``min``, ``max``]; with neither, the answer has a number. A decimal comma is read."""
    equals, tol = _number(p, "equals"), _number(p, "tolerance") or 0.0
    lo, hi = _number(p, "min"), _number(p, "max")
    text = trace.response
    if text is None:
        return _no_response("response_number")
    nums = _numbers(text, p.get("pattern"))
    shown = ", ".join(_fmt(x) for x in nums[:8]) + (" …" if len(nums) > 8 else "")
    if not nums:
        return _res("response_number", False, f"no number in response: {_snip(text)}")
    if equals is not None:
        hit = next((x for x in nums if math.isclose(x, equals, rel_tol=1e-9, abs_tol=tol)), None)
        want = f"{_fmt(equals)} (±{_fmt(tol)})"
        if hit is None:
            return _res("response_number", False, f"no number equals {want}; numbers: {shown}")
        return _res("response_number", True, f"found {_fmt(hit)}, wanted {want}")
    if lo is not None or hi is not None:
        low, high = -math.inf if lo is None else lo, math.inf if hi is None else hi
        span = f"[{_fmt(low)}, {_fmt(high)}]"
        hit = next((x for x in nums if low <= x <= high), None)
        if hit is None:
            return _res("response_number", False, f"no number in {span}; numbers: {shown}")
        return _res("response_number", True, f"found {_fmt(hit)} in {span}")
    return _res("response_number", True, f"numbers: {shown}")


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def _cell_is(want: Any, cell: str) -> bool:
    """A CSV cell equals the wanted one as text, or by value when both are numbers: 245.3
    is "245.30" (Toolery's ``cell_eq``; a tool's YAML float loses its trailing zero)."""
    if _lit(want).strip() == cell:
        return True
    a, b = _as_number(want), _as_number(cell)
    return a is not None and b is not None and math.isclose(a, b)


def _row_is(want: Any, row: list[str]) -> bool:
    return isinstance(want, list) and len(want) == len(row) and all(map(_cell_is, want, row))


@register("response_csv")
def response_csv(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer is CSV: the first row is the ``header``; ``row_count`` rows follow it;
    every row of ``rows`` is among them (cells trimmed; numbers compared by value)."""
    header, row_count, want_rows = p.get("header"), p.get("row_count"), p.get("rows") or []
    if header is not None and not isinstance(header, list):
        raise TypeError(f"header must be a list, got {header!r}")
    if trace.response is None:
        return _no_response("response_csv")
    payload = unwrap_payload(trace.response)
    try:
        rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(payload))]
    except csv.Error as exc:
        return _res("response_csv", False, f"invalid CSV: {exc}")
    rows = [r for r in rows if any(r)]
    if not rows:
        return _res("response_csv", False, "empty CSV")
    if header is not None and not _row_is(header, rows[0]):
        return _res("response_csv", False, f"header was {rows[0]}, wanted {[_lit(h) for h in header]}")
    if row_count is not None and len(rows) - 1 != _count(p, "row_count"):
        return _res("response_csv", False, f"{len(rows) - 1} data rows, wanted {row_count}")
    data = rows[1:] if header is not None else rows
    for want in want_rows:
        if not any(_row_is(want, r) for r in data):
            return _res("response_csv", False, f"no row {want}; rows: {_cut(str(data), 100)}")
    return _res("response_csv", True, f"CSV with {len(rows) - 1} data rows matched; header {rows[0]}")


class _YamlLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints: SafeLoader is Any
    """SafeLoader that leaves dates and times as strings, as JSON has them."""


_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@register("response_yaml")
def response_yaml(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer parses as YAML (and, given ``schema``, the JSON Schema accepts it)."""
    schema = p.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise TypeError(f"schema must be a mapping, got {schema!r}")
    if trace.response is None:
        return _no_response("response_yaml")
    payload = unwrap_payload(trace.response)
    try:
        data = yaml.load(payload, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        return _res("response_yaml", False, f"invalid YAML: {_one_line(str(exc))}")
    if schema is not None:
        why = _schema_error(data, schema)
        if why is not None:
            return _res("response_yaml", False, f"schema violation {why}")
    matched = " matches the schema" if schema else ""
    return _res("response_yaml", True, f"YAML {json_type(data)}{matched}")


def _md_cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return [c.strip() for c in body.split("|")]


def _md_separator(line: str) -> bool:
    return line.startswith("|") and all(re.fullmatch(r":?-+:?", c.replace(" ", "")) for c in _md_cells(line))


def _md_table(text: str) -> tuple[list[str], list[list[str]]] | None:
    """The first table: a ``|`` header line, a ``|---|`` separator, then ``|`` rows."""
    lines = [ln.strip() for ln in text.splitlines()]
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and _md_separator(lines[i + 1]):
            rows = []
            for ln in lines[i + 2 :]:
                if not ln.startswith("|"):
                    break
                rows.append(_md_cells(ln))
            return _md_cells(lines[i]), rows
    return None


@register("response_markdown_table")
def response_markdown_table(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer has a markdown table with ``header``, ``row_count`` rows, and for each of
    ``contains_rows`` a row whose cells contain the given cells in order."""
    header, row_count, like = p.get("header"), p.get("row_count"), p.get("contains_rows") or []
    if header is not None and not isinstance(header, list):
        raise TypeError(f"header must be a list, got {header!r}")
    if not isinstance(like, list) or not all(isinstance(r, list) for r in like):
        raise TypeError(f"contains_rows must be a list of rows, got {like!r}")
    if trace.response is None:
        return _no_response("response_markdown_table")
    table = _md_table(unwrap_payload(trace.response))
    if table is None:
        return _res(
            "response_markdown_table", False, f"no markdown table (| header |, |---| line) in: {_snip(trace.response)}"
        )
    got_header, rows = table
    if header is not None and got_header != [_lit(h) for h in header]:
        return _res("response_markdown_table", False, f"header was {got_header}, wanted {header}")
    if row_count is not None and len(rows) != _count(p, "row_count"):
        return _res("response_markdown_table", False, f"{len(rows)} rows, wanted {row_count}")
    for want in like:
        if not any(len(r) >= len(want) and all(find_literal(cell, w) for w, cell in zip(want, r)) for r in rows):
            return _res("response_markdown_table", False, f"no row like {want}; rows: {_cut(str(rows), 100)}")
    return _res("response_markdown_table", True, f"table {got_header} with {len(rows)} rows matched")


_STOPWORDS: dict[str, frozenset[str]] = {lang: frozenset(ws) for lang, ws in _WORDS["stopwords"].items()}
_DIACRITICS = {"pl": set("ąćęłńóśźż"), "en": set(), "de": set("äöüß")}


@register("response_language")
def response_language(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer is in ``language`` (pl, en or de): the language with the most stop words,
    its letters with diacritics breaking a tie (or deciding when no stop word is there)."""
    want = _name(p, "language").lower()
    if want not in _STOPWORDS:
        raise ValueError(f"unsupported language {want!r} (one of {', '.join(_STOPWORDS)})")
    if trace.response is None:
        return _no_response("response_language")
    text = trace.response.lower()
    words = re.findall(r"[^\W\d_]+", text)
    scores = {
        lang: (sum(w in stop for w in words), sum(ch in _DIACRITICS[lang] for ch in text))
        for lang, stop in _STOPWORDS.items()
    }
    best = max(scores.values())
    leaders = [lang for lang, s in scores.items() if s == best]
    detected = leaders[0] if len(leaders) == 1 and best != (0, 0) else None
    tally = ", ".join(f"{lang} {s[0]}" for lang, s in scores.items())
    why = f"stop words {tally}"
    if detected == want:
        return _res("response_language", True, f"detected {want} ({why})")
    found = detected or ("a tie" if best != (0, 0) else "no language")
    return _res("response_language", False, f"detected {found} ({why}), wanted {want}")


def _conditions(check: str, p: dict[str, Any], found: Callable[[str], re.Match[str] | None], text: str) -> CheckResult:
    """all_of / any_of / none_of over the answer, with ``found`` as the matcher."""
    all_of, any_of, none_of = _patterns(p, "all_of"), _groups(p, "any_of"), _patterns(p, "none_of")
    if not (all_of or any_of or none_of):
        raise ValueError("needs all_of, any_of or none_of")
    missing = [x for x in all_of if not found(x)]
    if missing:
        return _res(check, False, f"missing {_reprs(missing)} (all_of); response: {_snip(text)}")
    hits = []
    for group in any_of:
        hit = next((x for x in group if found(x)), None)
        if hit is None:
            return _res(check, False, f"none of {_reprs(group)} (any_of); response: {_snip(text)}")
        hits.append(hit)
    for x in none_of:
        m = found(x)
        if m:
            return _res(check, False, f"forbidden {x!r} (none_of) present: {_around(m.string, m)}")
    parts = []
    if all_of:
        parts.append(f"has {_reprs(all_of, 60)}")
    if hits:
        parts.append(f"matched {_reprs(hits, 60)}")
    if none_of:
        parts.append(f"none of {len(none_of)} forbidden")
    return _res(check, True, "; ".join(parts))


@register("response_satisfies")
def response_satisfies(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Literal conditions (matched as in response_contains): every ``all_of``, one of each
    ``any_of`` group, no ``none_of``."""
    if trace.response is None:
        return _no_response("response_satisfies")
    text = trace.response
    return _conditions("response_satisfies", p, lambda x: find_literal(text, x), text)


@register("response_matches_regex")
def response_matches_regex(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Regex conditions, all_of / any_of / none_of as in response_satisfies; MULTILINE,
    case-insensitive unless ``case_sensitive: true``."""
    flags = re.M if p.get("case_sensitive") is True else re.M | re.I
    if trace.response is None:
        return _no_response("response_matches_regex")
    text = trace.response
    return _conditions("response_matches_regex", p, lambda x: _compile(x, flags).search(text), text)


@register("clarification_asked")
def clarification_asked(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The answer contains one of ``phrases`` (case-insensitive substring)."""
    phrases = _patterns(p, "phrases")
    if not phrases:
        raise ValueError("missing parameter 'phrases'")
    if trace.response is None:
        return _no_response("clarification_asked")
    low = trace.response.lower()
    hit = next((x for x in phrases if x.lower() in low), None)
    if hit is None:
        return _res(
            "clarification_asked",
            False,
            f"no clarifying phrase ({_reprs(phrases, 80)}) in response: {_snip(trace.response)}",
        )
    return _res("clarification_asked", True, f"asked: {hit!r} in response")


_ERROR_WORDS = tuple(_WORDS["error_words"])


@register("error_surfaced")
def error_surfaced(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The tool returned an error and the answer tells the user about a failure."""
    tool = _name(p)
    calls = _of(trace, tool)
    failed = next((k for k, c in enumerate(calls) if c.result_kind == "error"), None)
    if failed is None:
        return _res(
            "error_surfaced", False, f"{tool} never returned an error ({len(calls)} call(s)); nothing to surface"
        )
    if trace.response is None:
        return _no_response("error_surfaced")
    low = trace.response.lower()
    word = next((w for w in _ERROR_WORDS if w in low), None)
    got = _show(calls[failed].result, 50)
    if word is None:
        return _res(
            "error_surfaced",
            False,
            f"{tool}[{failed}] returned error {got} but the response mentions no failure: {_snip(trace.response, 60)}",
        )
    return _res("error_surfaced", True, f"{tool}[{failed}] returned error {got}; response says {word!r}")


@register("final_state_equals")
def final_state_equals(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """Each ``{"<tool>_<arg>": value}`` of ``state`` (split at the last underscore) was set
    by some call: a call of <tool> whose <arg> equals value."""
    state = _mapping(p, "state")
    if not state:
        raise ValueError("state is empty")
    for key, want in state.items():
        if not isinstance(key, str) or "_" not in key.strip("_"):
            raise ValueError(f"state key {key!r} is not <tool>_<arg>")
        tool, arg = key.rsplit("_", 1)
        calls = _of(trace, tool)
        if not any(arg in c.args and _same(c.args[arg], want) for c in calls):
            if not calls:
                return _res("final_state_equals", False, f"{key}: {_never(tool, trace)}")
            got = ", ".join(_show(c.args[arg], 40) for c in calls if arg in c.args)
            return _res(
                "final_state_equals",
                False,
                f"no {tool} call set {arg}={_show(want)}; {tool}.{arg} values: {got or 'never passed'}",
            )
    shown = ", ".join(f"{k}={_show(v, 30)}" for k, v in state.items())
    return _res("final_state_equals", True, f"state matched: {_cut(shown, 100)}")
