"""Scripted tool answers: a scenario's ``tool_responses`` rules, as Toolery means them.

For each call of tool T the rules of T are tried in order; the first that applies answers.
A rule applies when

- its ``match`` is ``"any"``, or every key of its ``match`` mapping holds: ``k: v`` means
  ``args[k] == v``; ``<param>_regex: pattern`` means ``re.search(pattern, str(args[param]))``;
- its ``call_index`` (if any) equals the 0-based count of earlier calls of T (``">=N"``:
  at least N);
- its ``match_index`` (if any) does the same with the count of earlier calls of T whose
  arguments matched this rule's ``match``;
- its ``if_tool_called`` / ``if_tool_not_called`` (if any) names a tool that was / was not
  called earlier in the trial (for T itself: strictly before this call).

``returns`` is the answer ("error" kind when it is a mapping with an ``error`` key);
``returns_with_injection`` is text returned as is. No rule: an error naming the call, which
the model sees like any failing tool.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from ._scenario import Scenario, ToolResponseRule
from ._trace import ResultKind


def _rule_key(rule: ToolResponseRule) -> str:
    return json.dumps(rule.match, sort_keys=True, default=str)


def _index_ok(spec: int | str, seen: int) -> bool:
    if isinstance(spec, int):
        return spec == seen
    text = str(spec).strip()
    if text.startswith(">="):
        return seen >= int(text[2:])
    return text.isdigit() and int(text) == seen


def args_match(match: Any, args: dict[str, Any]) -> bool:
    if match == "any" or match is None:
        return True
    if not isinstance(match, dict):
        return False
    for key, want in match.items():
        if key.endswith("_regex") and key not in args:
            if re.search(str(want), str(args.get(key[: -len("_regex")], ""))) is None:
                return False
        elif args.get(key) != want:
            return False
    return True


class MockTools:
    """Answers the tool calls of one trial from a scenario's rules (state: call counts)."""

    def __init__(self, scenario: Scenario) -> None:
        self.rules = scenario.tool_responses
        self.calls: Counter[str] = Counter()  # per tool, calls answered so far
        self.matched: Counter[tuple[str, str]] = Counter()  # per (tool, rule key)

    def handles(self, name: str) -> bool:
        return name in self.rules

    def respond(self, name: str, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        rules = self.rules.get(name, [])
        seen = self.calls[name]
        matching = [r for r in rules if args_match(r.match, args)]
        match_seen = {_rule_key(r): self.matched[(name, _rule_key(r))] for r in matching}
        for key in match_seen:
            self.matched[(name, key)] += 1
        answer: tuple[Any, ResultKind] | None = None
        for rule in matching:
            if rule.call_index is not None and not _index_ok(rule.call_index, seen):
                continue
            if rule.match_index is not None and not _index_ok(rule.match_index, match_seen[_rule_key(rule)]):
                continue
            if rule.if_tool_called is not None and self.calls[rule.if_tool_called] == 0:
                continue
            if rule.if_tool_not_called is not None and self.calls[rule.if_tool_not_called] > 0:
                continue
            answer = _render(rule)
            break
        self.calls[name] += 1
        if answer is None:
            return {"error": f"no matching rule for {name}({json.dumps(args, default=str)})"}, "error"
        return answer

    def note_call(self, name: str) -> None:
        """Count a call answered elsewhere (a sandbox tool), for the ``if_tool_called`` gates."""
        self.calls[name] += 1


def _render(rule: ToolResponseRule) -> tuple[Any, ResultKind]:
    if rule.returns is not None:
        if isinstance(rule.returns, dict) and "error" in rule.returns:
            return rule.returns, "error"
        return rule.returns, "json" if isinstance(rule.returns, (dict, list)) else "text"
    if rule.returns_with_injection is not None:
        return rule.returns_with_injection, "text"
    return {}, "json"
