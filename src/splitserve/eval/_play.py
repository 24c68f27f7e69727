"""One trial: the scenario's conversation with the endpoint, turn by turn, through inspect_ai.

The model is an inspect_ai :class:`~inspect_ai.model.Model` (its OpenAI-compatible
provider, pointed at any base URL). Each turn sends the whole conversation with the
scenario's tools; each tool call is answered by the scenario's sandbox when it handles the
tool, else by its ``tool_responses`` rules (``_mock``); the trial ends when the model
answers without calling a tool, or a budget runs out (turns, tokens, seconds).
"""

from __future__ import annotations

import asyncio
import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from ._catalog import run_calls, tool_infos
from ._checks import strip_reasoning
from ._grade import markup_in
from ._mock import MockTools
from ._scenario import Scenario
from ._trace import ResultKind, ToolCall, Trace

if TYPE_CHECKING:
    from ._sandbox import Workspace

# the prefill's words, repeated in their order (data/words.json)
_WORDS: dict[str, Any] = json.loads(resources.files(__package__).joinpath("data/words.json").read_text("utf-8"))
FILLER_WORDS: list[str] = _WORDS["filler"]


def prefill(tokens: int) -> str:
    """About ``tokens`` tokens of neutral filler (Toolery's ``context_prefill_tokens``)."""
    words = [FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(int(tokens * 0.75))]
    return "Background notes (not needed for the task):\n" + " ".join(words) + "\n\n"


class Responder:
    """Answers every tool call of one trial: the sandbox's workspace first, then the scripted rules."""

    def __init__(self, scenario: Scenario, workspace: Workspace | None = None) -> None:
        self.offered = set(scenario.tools)
        self.rules = MockTools(scenario)
        self.workspace = workspace

    async def respond(self, name: str, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        if name not in self.offered:
            self.rules.note_call(name)
            return {"error": f"unknown tool {name!r}; available: {', '.join(sorted(self.offered))}"}, "error"
        if self.workspace is not None and self.workspace.handles(name) and not self.rules.handles(name):
            self.rules.note_call(name)
            return await self.workspace.call(name, args)
        return self.rules.respond(name, args)


def tool_schemas(scenario: Scenario) -> list[dict[str, Any]]:
    from ._tools import schema_for

    out = []
    for name in scenario.tools:
        schema = scenario.tool_schemas.get(name) or schema_for(name)
        if schema is None and scenario.sandbox is not None:
            from ._sandbox import SANDBOX

            schema = SANDBOX.schema(name) if name in SANDBOX else None
        if schema is not None:
            out.append(schema)
    return out


def _tool_infos(scenario: Scenario) -> list[Any]:
    return tool_infos(tool_schemas(scenario))


def _content(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


async def _execute(responder: Responder, message: Any) -> list[tuple[Any, ResultKind, Any]]:
    """Run the tool calls of one assistant message (``_catalog.run_calls``), each answered by
    ``responder``: per call, the result, its kind and the tool message for the conversation."""
    answers: list[tuple[str, Any, ResultKind]] = []

    async def answer(name: str, arguments: dict[str, Any]) -> str:
        result, kind = await responder.respond(name, arguments)
        answers.append((name, result, kind))
        return _content(result)

    tool_messages = await run_calls(message, answer)
    out = []
    for call, (name, result, kind), tool_message in zip(message.tool_calls, answers, tool_messages, strict=True):
        assert call.function == name  # calls of one message run in order (no tool is parallel)
        out.append((result, kind, tool_message))
    return out


async def play(
    scenario: Scenario, model: Any, time_budget_s: float, max_tokens: int = 2048, env: Any = None
) -> tuple[Trace, float]:
    """Run one trial; returns the trace and the seconds spent inside model requests. A scenario
    with a ``sandbox`` gets a fresh workspace in ``env`` (default: the sample's inspect_ai
    sandbox, ``sandbox()``); the trace holds the state it ended in."""
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig

    workspace = None
    if scenario.sandbox is not None:
        from inspect_ai.util import sandbox

        from ._sandbox import Workspace

        workspace = await Workspace.create(env if env is not None else sandbox(), scenario.sandbox)
    responder = Responder(scenario, workspace)
    trace = Trace()
    messages: list[Any] = []
    if scenario.system_prompt:
        messages.append(ChatMessageSystem(content=scenario.system_prompt))
    prompt = scenario.prompt
    if scenario.context_prefill_tokens:
        prompt = prefill(scenario.context_prefill_tokens) + prompt
    messages.append(ChatMessageUser(content=prompt))
    tools = _tool_infos(scenario)
    budget = scenario.budget
    gen_s = 0.0

    async def turns() -> None:
        nonlocal gen_s
        for turn in range(budget.max_turns + 1):
            left = max_tokens
            if budget.max_tokens is not None:
                left = min(left, budget.max_tokens - trace.completion_tokens)
                if left <= 0:
                    trace.error_kind, trace.error = "budget", f"token budget {budget.max_tokens} spent"
                    return
            started = time.monotonic()
            output = await model.generate(messages, tools=tools, config=GenerateConfig(max_tokens=left))
            gen_s += time.monotonic() - started
            trace.turns = turn + 1
            if output.usage is not None:
                trace.prompt_tokens += output.usage.input_tokens
                trace.completion_tokens += output.usage.output_tokens
            message = output.message
            messages.append(message)
            text = message.text or None
            calls = message.tool_calls or []
            if not calls:
                trace.raw_response = text
                trace.response = strip_reasoning(text)
                reasoning = (
                    [c.reasoning for c in message.content if getattr(c, "type", "") == "reasoning"]
                    if isinstance(message.content, list)
                    else []
                )
                trace.reasoning = "\n".join(r for r in reasoning if r) or None
                if (markup := markup_in(text)) is not None:
                    trace.error_kind = "parse_error"
                    trace.error = f"tool-call markup left in the answer: {markup!r}"
                return
            for call in calls:
                if call.parse_error:
                    raw = str(getattr(call, "arguments", ""))
                    trace.calls.append(ToolCall(turn, call.function, {"_raw": raw}, call.parse_error, "error", call.id))
                    trace.error_kind = "parse_error"
                    trace.error = f"{call.function}: arguments are not JSON: {call.parse_error.splitlines()[0][:120]}"
                    return
            for call, (result, kind, tool_message) in zip(calls, await _execute(responder, message), strict=True):
                args = call.arguments if isinstance(call.arguments, dict) else {"_raw": call.arguments}
                trace.calls.append(ToolCall(turn, call.function, args, result, kind, call.id))
                messages.append(tool_message)
            if len(trace.calls) > budget.max_tool_calls:
                trace.error_kind, trace.error = (
                    "budget",
                    f"{len(trace.calls)} calls > max_tool_calls {budget.max_tool_calls}",
                )
                return
        trace.error_kind, trace.error = "budget", f"still calling tools after {budget.max_turns + 1} turns"

    try:
        async with asyncio.timeout(time_budget_s):
            await turns()
    except TimeoutError:
        trace.error_kind, trace.error = "timeout", f"no answer within {time_budget_s:.0f} s (time budget)"
    except Exception as exc:  # noqa: BLE001 - the endpoint failed: HTTP status, connection, bad body
        trace.error_kind = "http_error"
        trace.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if workspace is not None:
        from inspect_ai.log import transcript
        from pydantic import JsonValue

        trace.sandbox = await workspace.snapshot()
        # inspect's log shows what the trial changed in the workspace and how the hidden tests went
        end: dict[str, JsonValue] = {
            "workspace_diff": trace.sandbox.diff or "(no change)",
            "commits": [[sha, subject] for sha, subject in trace.sandbox.commits],
        }
        if trace.sandbox.tests_passed is not None:
            end["hidden_tests"] = trace.sandbox.tests_report
        transcript().info(end, source="splitserve: workspace at the end")
    trace.messages = await _openai_messages(messages)
    return trace, gen_s


async def _openai_messages(messages: list[Any]) -> list[dict[str, Any]]:
    from inspect_ai.model import messages_to_openai

    return [dict(m) for m in await messages_to_openai(messages)]
