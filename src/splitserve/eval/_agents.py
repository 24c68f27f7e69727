"""Scripted agents behind an OpenAI-compatible test endpoint: the fake of ``eval run``'s endpoint.

:func:`agent_app` serves ``/v1/chat/completions`` (and ``/v1/models``) for a suite: it finds
the scenario by the conversation's user prompt, counts the assistant turns so far, and
answers as its policy says:

- ``oracle``: the scenario's ideal play (its ``oracle`` turns);
- ``null``: does nothing (answers "I don't know." at once);
- ``loop``: repeats the ideal first call forever;
- ``no_edit``: the ideal play without any call that changes state (write, edit, commit…),
  then claims it is done;
- ``ignore_error``: the ideal play until a tool fails, then the final answer at once;
- ``memory``: the ideal final answer, without calling any tool;
- ``leak_reasoning``: the ideal play, with its reasoning written before the final answer;
- ``unknown_tool``: first calls a tool the scenario does not offer.

``flaws`` maps scenario ids to a policy, so one run can be the oracle everywhere except a
few scenarios (the compare test).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ._grade import is_mutating
from ._scenario import OracleCall, OracleTurn, Scenario

POLICIES = ("oracle", "null", "loop", "no_edit", "ignore_error", "memory", "leak_reasoning", "unknown_tool")
LEAK = "Let me think step by step about what the user asked and how to format it.\n"


def _final(scenario: Scenario) -> str:
    for turn in reversed(scenario.oracle):
        if turn.content is not None and not turn.tool_calls:
            return turn.content
    return "Done."


def _turn_for(policy: str, scenario: Scenario, messages: list[dict[str, Any]]) -> OracleTurn:
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    oracle = scenario.oracle or [OracleTurn(content="Done.")]
    if policy == "null":
        return OracleTurn(content="I don't know.")
    if policy == "memory":
        return OracleTurn(content=_final(scenario))
    if policy == "unknown_tool" and turn == 0:
        return OracleTurn(tool_calls=[OracleCall(name="search_everything", arguments={"query": scenario.prompt[:40]})])
    if policy == "unknown_tool":
        turn -= 1
    if policy == "loop":
        first = next((t for t in oracle if t.tool_calls), None)
        return OracleTurn(tool_calls=first.tool_calls[:1]) if first else OracleTurn(content=_final(scenario))
    if (
        policy == "ignore_error"
        and messages
        and messages[-1].get("role") == "tool"
        and "error" in str(messages[-1].get("content", ""))[:40].lower()
    ):
        return OracleTurn(content=_final(scenario))
    if policy == "no_edit":
        plan = [
            OracleTurn(tool_calls=[c for c in t.tool_calls if not is_mutating(c.name)]) if t.tool_calls else t
            for t in oracle
        ]
        plan = [t for t in plan if t.tool_calls or t.content is not None]
        return plan[turn] if turn < len(plan) else OracleTurn(content=_final(scenario))
    chosen = oracle[turn] if turn < len(oracle) else OracleTurn(content=_final(scenario))
    if policy == "leak_reasoning" and not chosen.tool_calls and chosen.content is not None:
        return OracleTurn(content=LEAK + chosen.content)
    return chosen


def _message(turn: OracleTurn) -> tuple[dict[str, Any], str]:
    if turn.tool_calls:
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in turn.tool_calls
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": turn.content or ""}, "stop"


def _text(content: Any) -> str | None:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _fits(scenario: Scenario, said: list[str | None], tools: list[str]) -> bool:
    """The request's user messages are the scenario's first ones, and its tools the scenario's."""
    from ._bfcl import bfcl_item

    item = bfcl_item(scenario)
    turns = [scenario.prompt]
    if item is not None:
        turns = [m["content"] for turn in item["entry"]["question"] for m in turn if m.get("role") == "user"]
    same_tools = not tools or sorted(tools) == sorted(scenario.tools)
    return same_tools and said == turns[: len(said)]


def agent_app(scenarios: list[Scenario], policy: str = "oracle", flaws: dict[str, str] | None = None) -> Any:
    """A Starlette app playing ``policy`` (``flaws[id]`` for the scenarios it names)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}")
    by_prompt: dict[str, list[Scenario]] = {}
    for s in scenarios:
        by_prompt.setdefault(s.prompt, []).append(s)
    flaws = flaws or {}

    def find(messages: list[dict[str, Any]], tools: list[str]) -> Scenario | None:
        said = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        text = said[0] if said else None
        if not isinstance(text, str):
            return None
        found = by_prompt.get(text) or next((c for p, c in by_prompt.items() if text.endswith(p)), None)
        if not found or len(found) == 1:
            return found[0] if found else None
        # one prompt, several scenarios (BFCL's variants of one conversation): the one whose
        # user turns so far and tools match the request
        return next((s for s in found if _fits(s, said, tools)), found[0])

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        messages = body.get("messages") or []
        tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
        scenario = find(messages, tools)
        if scenario is None:  # the decode-speed probe, or a prompt not in the suite
            turn, finish = {"role": "assistant", "content": " ".join(str(i) for i in range(1, 61))}, "stop"
        else:
            turn, finish = _message(_turn_for(flaws.get(scenario.id, policy), scenario, messages))
        text = turn.get("content") or json.dumps(turn.get("tool_calls"))
        tokens = max(1, len(text) // 4)
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": turn, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
            }
        )

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": f"scripted-{policy}", "object": "model"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models, methods=["GET"])]
    )
