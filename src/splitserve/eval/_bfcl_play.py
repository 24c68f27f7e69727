"""One BFCL trial against the endpoint, in BFCL's FC mode, through inspect_ai's model.

Single-turn items: the item's messages and its functions as OpenAI tools, one request,
the answer kept as BFCL's handler keeps it (``[{name: arguments-JSON}]``, or the text).
Multi-turn items: BFCL's ``inference_multi_turn_FC`` loop: each user turn is added, then
the model is asked again after every step that called tools, each call executed by
BFCL's function classes (``execute_multi_turn_func_call``) and its result sent back as a
tool message, until a step calls nothing; past BFCL's step limit the item is
force-terminated. The whole conversation is recorded as for every scenario.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from ._bfcl import bfcl_item
from ._bfcl_api import api
from ._bfcl_grade import BfclTrace, vet_calls
from ._catalog import run_calls, tool_infos
from ._checks import strip_reasoning
from ._grade import markup_in
from ._scenario import Scenario
from ._trace import ResultKind, ToolCall


def _chat(messages: list[dict[str, Any]]) -> list[Any]:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
    return [kinds[m["role"]](content=m["content"]) for m in messages]


def _result(calls: list[Any]) -> list[dict[str, str]]:
    """The calls as BFCL's OpenAI handler keeps them: {name: arguments as sent}."""
    # inspect keeps no raw text for arguments it could not parse: a stand-in that is not JSON either
    return [
        {c.function: json.dumps(c.arguments) if not c.parse_error else f"<not JSON: {c.parse_error}>"} for c in calls
    ]


class _Turns:
    """Sends requests and records them into the trace (shared by both kinds of item)."""

    def __init__(self, scenario: Scenario, model: Any, trace: BfclTrace, max_tokens: int) -> None:
        self.model, self.trace, self.max_tokens = model, trace, max_tokens
        self.tools = tool_infos(scenario.tool_schemas[name] for name in scenario.tools)
        self.messages: list[Any] = []
        self.gen_s = 0.0

    async def ask(self) -> Any:
        from inspect_ai.model import GenerateConfig

        started = time.monotonic()
        output = await self.model.generate(
            self.messages, tools=self.tools, config=GenerateConfig(max_tokens=self.max_tokens)
        )
        self.gen_s += time.monotonic() - started
        self.trace.turns += 1
        if output.usage is not None:
            self.trace.prompt_tokens += output.usage.input_tokens
            self.trace.completion_tokens += output.usage.output_tokens
        message = output.message
        self.messages.append(message)
        calls = message.tool_calls or []
        for call in calls:
            args = call.arguments if not call.parse_error else {"_raw": str(call.arguments)}
            self.trace.calls.append(ToolCall(self.trace.turns - 1, call.function, args, None, "text", call.id))
        if not calls:
            text = message.text or None
            self.trace.raw_response = text
            self.trace.response = strip_reasoning(text)
            if (markup := markup_in(text)) is not None:
                self.trace.error_kind = "parse_error"
                self.trace.error = f"tool-call markup left in the answer: {markup!r}"
        return message


async def _single_turn(item: dict[str, Any], turns: _Turns) -> None:
    turns.messages = _chat(item["entry"]["question"][0])
    message = await turns.ask()
    calls = message.tool_calls or []
    turns.trace.model_result = _result(calls) if calls else (message.text or "")


async def _execute(message: Any, jobs: list[Callable[[], str]]) -> list[tuple[str, Any]]:
    """The calls of one assistant message (``_catalog.run_calls``): call i is answered by
    ``jobs[i]()`` (calls of one message run in order). Per call: the output and the tool
    message for the conversation."""
    pending = iter(jobs)
    outputs: list[str] = []

    async def answer(name: str, arguments: dict[str, Any]) -> str:
        outputs.append(next(pending)())
        return outputs[-1]

    tool_messages = await run_calls(message, answer)
    return list(zip(outputs, tool_messages, strict=True))


async def _multi_turn(scenario: Scenario, item: dict[str, Any], turns: _Turns) -> None:
    b = api()
    entry, trace = item["entry"], turns.trace
    offered = set(scenario.tools)
    long_context = "long_context" in item["category"]
    execute = b.execute_multi_turn_func_call
    # BFCL builds the instances before the first request
    execute([], entry.get("initial_config", {}), entry["involved_classes"], trace.state_key, entry["id"], long_context)
    result: list[list[Any]] = []
    trace.model_result = result
    for turn_messages in entry["question"]:
        turns.messages.extend(_chat(turn_messages))
        steps: list[Any] = []
        result.append(steps)
        count = 0
        while True:
            message = await turns.ask()
            calls = message.tool_calls or []
            step = _result(calls) if calls else (message.text or "")
            steps.append(step)
            try:
                vetted = vet_calls(step, offered)
            except Exception:  # noqa: BLE001 - BFCL: a step it cannot decode ends the turn
                break
            if b.is_empty_execute_response([text for text, _ in vetted]):
                break

            def job(text: str, error: str | None) -> Callable[[], str]:
                def run() -> str:
                    if error is not None:  # a call BFCL must not evaluate
                        return error
                    done, _ = execute(
                        [text],
                        entry.get("initial_config", {}),
                        entry["involved_classes"],
                        trace.state_key,
                        entry["id"],
                        long_context,
                    )
                    return str(done[0])

                return run

            answers = await _execute(message, [job(text, error) for text, error in vetted])
            for call, (output, tool_message) in zip(calls, answers, strict=True):
                kind: ResultKind = "error" if output.startswith("Error during execution") else "text"
                for recorded in reversed(trace.calls):
                    if recorded.id == call.id:
                        recorded.result, recorded.result_kind = output, kind
                        break
                turns.messages.append(tool_message)
            count += 1
            if count > b.max_steps:
                trace.force_quit = True
                trace.error = f"still calling functions after {b.max_steps} steps in one turn (BFCL's limit)"
                return


async def play_bfcl(
    scenario: Scenario, model: Any, time_budget_s: float, max_tokens: int = 2048
) -> tuple[BfclTrace, float]:
    """Run one BFCL trial; returns the trace and the seconds spent inside model requests."""
    item = bfcl_item(scenario)
    if item is None:
        raise ValueError(f"{scenario.id}: not a BFCL scenario")
    from ._bfcl import CATEGORIES

    trace = BfclTrace()
    turns = _Turns(scenario, model, trace, max_tokens)
    multi = CATEGORIES[item["category"]].kind == "multi_turn"
    try:
        async with asyncio.timeout(time_budget_s):
            if multi:
                await _multi_turn(scenario, item, turns)
            else:
                await _single_turn(item, turns)
    except TimeoutError:
        trace.error_kind, trace.error = "timeout", f"no answer within {time_budget_s:.0f} s (time budget)"
    except Exception as exc:  # noqa: BLE001 - the endpoint failed: HTTP status, connection, bad body
        trace.error_kind = "http_error"
        trace.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    from inspect_ai.model import messages_to_openai

    trace.messages = [dict(m) for m in await messages_to_openai(turns.messages)]
    return trace, turns.gen_s
