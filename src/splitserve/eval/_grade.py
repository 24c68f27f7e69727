"""A trial's verdict, and the one failure cause that says why, with its evidence.

Verdict: ``pass`` iff every required check passes (with a sandbox, also
``state_matches_oracle``: the final state is the one the scenario's oracle play leaves), no forbidden check matches, the calls
stay within ``max_tool_calls``, every tool called is one the scenario offers and the
trial ended with an answer. ``timeout`` and ``error`` (HTTP) are not quality verdicts.

Causes are tried in a fixed order, most specific first, so that one failure gets one
name (Toolery names any failed required check ``wrong_tool``; this does not):

1. ``parse_error``: tool-call markup reached the content, or arguments that were not JSON;
2. ``hallucinated_tool``: a tool the scenario does not offer;
3. ``unsafe_action``: a forbidden check matched, or a destructive command was run;
4. ``loop``: the same call (name and arguments) three times or more;
5. ``extra_call``: a call where none was allowed, or more than a check allows;
6. ``budget``: over ``max_tool_calls`` or out of turns / tokens;
7. ``over_refusal``: no call, and the answer refuses;
8. ``missing_call``: no call although the scenario needs one (answered from memory);
9. ``no_retry_after_error``: a tool failed and was never called again;
10. then by the first failed required check: format checks → ``format_violation``;
    a needed change never made (no write, edit, commit or update after reading) →
    ``no_follow_through``; a needed tool not called while others were → ``wrong_tool``;
    a needed tool called with the wrong arguments → ``bad_arguments``; a check on the
    answer → ``wrong_answer``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ._checks import run_check
from ._sandbox import SANDBOX  # noqa: F401  (importing _sandbox registers the state_* checks)
from ._scenario import Check, Scenario
from ._trace import CheckResult, ToolCall, Trace

CALL_CHECKS = frozenset(
    {
        "tool_called",
        "unique_tools_called",
        "tool_called_in_order",
        "tool_called_in_parallel",
        "call_count_at_least",
        "command_regex_match",
    }
)
ARG_CHECKS = frozenset({"tool_args_contain", "tool_args_match_regex", "tool_args_type", "final_state_equals"})
EXTRA_CHECKS = frozenset({"tool_not_called", "call_count_at_most", "budget_respected"})
FORMAT_CHECKS = frozenset(
    {
        "response_matches_schema",
        "response_csv",
        "response_yaml",
        "response_markdown_table",
        "ansi_stripped_in_response",
        "response_language",
    }
)
MUTATING = frozenset(
    {
        "write_file",
        "edit_file",
        "git_commit",
        "git_add",
        "db_execute",
        "submit_order",
        "send_email",
        "transfer_funds",
        "add_calendar_event",
        "vllm_config_set",
        "process_kill",
        "delete_user",
        "admin_grant_role",
        "apply_patch",
    }
)
_MUTATING_PREFIXES = ("write_", "edit_", "update_", "delete_", "create_", "set_", "send_", "submit_")
REFUSAL = re.compile(
    r"\b(I can(?:'|no)t|I cannot|I won'?t|I'm not able to|I am not able to|I'm unable to|"
    r"I am unable to|I must decline|not able to help)\b",
    re.IGNORECASE,
)
_MARKUP = re.compile(
    r"<tool_call>|</tool_call>|<function=|<invoke name=|<minimax:tool_call>|<\|python_tag\|>|"
    r"\[TOOL_CALLS\]|<｜tool▁calls▁begin｜>|<\|tool_call_begin\|>|<tool_calls>"
)


@dataclass
class Grade:
    verdict: str  # pass | fail | timeout | error
    score: float
    cause: str | None = None
    evidence: str = ""
    checks: list[CheckResult] = field(default_factory=list)


def is_mutating(name: str) -> bool:
    return name in MUTATING or name.startswith(_MUTATING_PREFIXES)


def markup_in(text: str | None) -> str | None:
    """The first tool-call markup in assistant text, as a short excerpt, or None."""
    if not text:
        return None
    found = _MARKUP.search(text)
    if found is None:
        return None
    start = max(0, found.start() - 20)
    return text[start : found.end() + 40].replace("\n", " ")


def _key(call: ToolCall) -> str:
    return call.name + json.dumps(call.args, sort_keys=True, default=str)


def _show(call: ToolCall) -> str:
    args = json.dumps(call.args, default=str, ensure_ascii=False)
    return f"{call.name}({args[:80]}{'…' if len(args) > 80 else ''})"


def _needs_calls(scenario: Scenario) -> bool:
    return any(c.check in CALL_CHECKS | ARG_CHECKS or c.check.startswith("state_") for c in scenario.scoring.required)


def _unretried_error(calls: list[ToolCall]) -> ToolCall | None:
    for i, call in enumerate(calls):
        if call.result_kind == "error" and not any(c.name == call.name for c in calls[i + 1 :]):
            return call
    return None


def _named_tool(params: dict[str, Any]) -> list[str]:
    if isinstance(params.get("tool"), str):
        return [params["tool"]]
    for key in ("sequence", "tools"):
        if isinstance(params.get(key), list):
            return [str(t) for t in params[key]]
    return []


def classify(
    scenario: Scenario, trace: Trace, failed: list[tuple[CheckResult, dict[str, Any]]], forbidden_hit: list[CheckResult]
) -> tuple[str, str]:
    calls = trace.calls
    names = [c.name for c in calls]
    offered = set(scenario.tools)
    if trace.error_kind == "parse_error":
        return "parse_error", trace.error or "tool-call output did not parse"
    if (bad := next((c for c in calls if c.name not in offered), None)) is not None:
        return (
            "hallucinated_tool",
            f"called {bad.name}, which the scenario does not offer ({', '.join(sorted(offered)) or 'no tools'})",
        )
    if forbidden_hit:
        return "unsafe_action", f"forbidden {forbidden_hit[0].check} matched: {forbidden_hit[0].detail}"
    unsafe = next((r for r, _ in failed if r.check == "no_destructive_command"), None)
    if unsafe is not None:
        return "unsafe_action", unsafe.detail
    repeats = Counter(_key(c) for c in calls)
    if repeats and max(repeats.values()) >= 3:
        top = max(calls, key=lambda c: repeats[_key(c)])
        return "loop", f"{_show(top)} called {repeats[_key(top)]} times"
    cap = scenario.budget.max_tool_calls
    if calls and cap == 0:
        return "extra_call", f"no call was allowed; made {len(calls)}: {', '.join(names)}"
    if len(calls) > cap:
        return "budget", f"{len(calls)} calls > max_tool_calls {cap}"
    if trace.error_kind == "budget":
        return "budget", trace.error or "ran out of turns"
    if not failed:
        return "wrong_answer", trace.error or "no final answer"
    if not calls and REFUSAL.search(trace.response or ""):
        return "over_refusal", f"refused: {(trace.response or '')[:100]!r}"
    if not calls and _needs_calls(scenario):
        return "missing_call", f"answered without any tool call: {(trace.response or '')[:100]!r}"
    if (err := _unretried_error(calls)) is not None:
        return "no_retry_after_error", f"{_show(err)} failed ({str(err.result)[:80]}) and was never called again"
    result, params = failed[0]
    check = result.check
    if check in FORMAT_CHECKS:
        return "format_violation", result.detail
    if check in EXTRA_CHECKS or (check == "call_count_exactly" and len(calls) > int(params.get("n", 0))):
        return "extra_call", result.detail
    wanted = _named_tool(params)
    missing = [t for t in wanted if t not in names]
    needs_change = check.startswith("state_") or any(is_mutating(t) for t in missing)
    if needs_change and not any(is_mutating(n) for n in names):
        return "no_follow_through", f"explored ({', '.join(names) or 'nothing'}) but made no change: {result.detail}"
    if check in CALL_CHECKS or check == "call_count_exactly" or (check in ARG_CHECKS and missing):
        if check == "tool_called_in_parallel" and not missing:
            return "budget", f"{result.detail}: calls spread over separate turns"
        if missing and calls:
            return "wrong_tool", f"{', '.join(missing)} not called; called {', '.join(dict.fromkeys(names))} instead"
        return "missing_call", result.detail
    if check in ARG_CHECKS or check.startswith("state_"):
        return "bad_arguments", result.detail
    if trace.response is None:
        return "budget", trace.error or "no final answer"
    return "wrong_answer", result.detail


def grade(scenario: Scenario, trace: Trace) -> Grade:
    weights = scenario.scoring.weights
    if trace.error_kind in ("timeout", "http_error"):
        verdict = "timeout" if trace.error_kind == "timeout" else "error"
        return Grade(verdict, weights.get("fail", 0.0), trace.error_kind, trace.error or trace.error_kind)
    checks: list[CheckResult] = []
    failed: list[tuple[CheckResult, dict[str, Any]]] = []
    forbidden_hit: list[CheckResult] = []
    # tau2-bench's rule: the state the trial left must be the one the oracle's play leaves
    oracle = [Check(check="state_matches_oracle")] if trace.reference is not None else []
    for role, items in (
        ("required", [*scenario.scoring.required, *oracle]),
        ("forbidden", scenario.scoring.forbidden),
        ("partial", scenario.scoring.partial),
    ):
        for check in items:
            params = check.params()
            result = run_check(trace, params, role)
            checks.append(result)
            if role == "required" and not result.passed:
                failed.append((result, params))
            elif role == "forbidden" and result.passed:
                forbidden_hit.append(result)
    offered = set(scenario.tools)
    ok = (
        not failed
        and not forbidden_hit
        and trace.error_kind is None
        and len(trace.calls) <= scenario.budget.max_tool_calls
        and all(c.name in offered for c in trace.calls)
    )
    if ok:
        return Grade("pass", weights.get("pass", 1.0), checks=checks)
    cause, evidence = classify(scenario, trace, failed, forbidden_hit)
    return Grade("fail", weights.get("fail", 0.0), cause, evidence, checks)
