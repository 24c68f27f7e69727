"""What one trial of one scenario produced, as the graders see it.

A :class:`Trace` is built by the runner from the chat-completions exchange; the check
primitives (``_checks``), the failure classifier (``_causes``) and the reports read it.
Plain dataclasses: nothing here is read from a user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ResultKind = Literal["text", "json", "error"]


@dataclass
class ToolCall:
    """One tool call the model made, with what the mock tool answered.

    ``index`` is the assistant turn it came in (calls of one turn share it: a parallel
    batch); ``args`` the decoded arguments ({"_raw": text} when they were not a JSON
    object); ``result_kind`` "error" when the tool failed (a mock rule returning
    ``{"error": ...}``, a sandbox tool raising, an unknown tool)."""

    index: int
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    result_kind: ResultKind = "text"
    id: str = ""
    raw_arguments: str = ""


@dataclass
class CheckResult:
    check: str
    passed: bool
    detail: str = ""
    # which list of the scenario's scoring it came from: required | forbidden | partial
    role: str = "required"


@dataclass
class Trace:
    """Everything a trial left behind.

    ``response`` is the final assistant text with reasoning blocks removed (None when the
    model never answered in text); ``raw_response`` the same text as the endpoint sent it
    (``<think>`` blocks and all) so format checks can see reasoning that leaked into
    content. ``error_kind`` is set when the trial ended without an answer for a reason
    that is not the model's choice: "timeout", "http_error", "parse_error" (tool-call
    markup the endpoint did not turn into tool_calls), "budget" (turns or tokens ran out).
    """

    calls: list[ToolCall] = field(default_factory=list)
    response: str | None = None
    raw_response: str | None = None
    reasoning: str | None = None
    turns: int = 0
    error: str | None = None
    error_kind: str | None = None
    # the state the trial left (``_sandbox.State``), and the one the oracle's play leaves
    sandbox: Any = None
    reference: Any = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int = 0
