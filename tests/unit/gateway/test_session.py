"""The gateway's session helpers: reasoning put back by tool-call id, one slot per session."""

from __future__ import annotations

from typing import Any

from splitserve.gateway._session import ReasoningMemory, SlotAffinity, session_key


def turn(reasoning: str | None, *ids: str) -> dict[str, Any]:
    m: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids],
    }
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def test_reasoning_comes_back_for_the_calls_it_preceded() -> None:
    mem = ReasoningMemory()
    mem.remember("k", turn("I should look", "call_a", "call_b"))
    mem.remember("k", {"role": "assistant", "content": "no calls", "reasoning_content": "x"})
    mem.remember("k", turn(None, "call_c"))  # nothing to keep
    assert len(mem) == 2
    history = [
        {"role": "user", "content": "hi"},
        turn(None, "call_b"),
        {"role": "tool", "tool_call_id": "call_b", "content": "1"},
        turn(None, "call_zz"),
        turn("the client kept it", "call_a"),
    ]
    assert mem.restore("k", history) == 1
    assert history[1]["reasoning_content"] == "I should look"
    assert "reasoning_content" not in history[3]  # an id the gateway never issued
    assert history[4]["reasoning_content"] == "the client kept it"  # never overwritten


def test_memory_is_per_key_and_bounded() -> None:
    mem = ReasoningMemory(max_entries=2)
    mem.remember("alice", turn("secret plan", "call_1"))
    other = [turn(None, "call_1")]
    assert mem.restore("bob", other) == 0 and "reasoning_content" not in other[0]
    mem.remember("alice", turn("r2", "call_2"))
    mem.remember("alice", turn("r3", "call_3"))  # call_1 is the least recently used: gone
    assert len(mem) == 2
    assert mem.restore("alice", [turn(None, "call_1")]) == 0
    by_size = ReasoningMemory(max_chars=10)
    by_size.remember("k", turn("x" * 8, "a"))
    by_size.remember("k", turn("y" * 8, "b"))
    assert len(by_size) == 1 and by_size.restore("k", [turn(None, "b")]) == 1


def test_a_session_keeps_its_slot_and_new_ones_take_the_least_recently_used() -> None:
    aff = SlotAffinity(3)
    a, b, c = aff.slot_for("a"), aff.slot_for("b"), aff.slot_for("c")
    assert sorted([a, b, c]) == [0, 1, 2]
    assert aff.slot_for("a") == a and aff.slot_for("b") == b
    assert aff.slot_for("d") == c  # c's slot is the one used longest ago
    assert SlotAffinity(0).slot_for("x") == 0


def test_session_key_from_header_then_user() -> None:
    assert session_key({"x-session-id": "s1"}, {"user": "u"}) == "s1"
    assert session_key({}, {"user": "u"}) == "u"
    assert session_key({}, {"user": 5}) is None and session_key({}, {}) is None
    assert len(session_key({"x-session-id": "z" * 1000}, {}) or "") == 256


def test_the_restored_history_renders_what_the_model_generated() -> None:
    from splitserve.chat import get_format
    from splitserve.engine import resolve_source
    from splitserve.gateway._schemas import ChatRequest
    from splitserve.gateway._translate import ServedModel, plan_chat

    ns = "]<]minimax[>["
    template = (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()
    model = ServedModel(id="m", template=template, format=get_format("minimax-m3"))
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
            },
        }
    ]
    ask: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = plan_chat(ChatRequest(messages=ask, tools=tools), model).prompt
    generated = (
        f"<mm:think>I should look it up.</mm:think>{ns}<tool_call>\n"
        f'{ns}<invoke name="get_weather">{ns}<location>Paris{ns}</location>'
        f"{ns}</invoke>\n{ns}</tool_call>"
    )
    call: dict[str, Any] = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
    }
    mem = ReasoningMemory()
    mem.remember("k", {"role": "assistant", "reasoning_content": "I should look it up.", "tool_calls": [call]})
    sent_back = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    req = ChatRequest(messages=sent_back, tools=tools)
    restored = plan_chat(req, model, restore=lambda m: mem.restore("k", m)).prompt
    assert restored.startswith(first + generated)  # byte-stable: the engine's cache holds it
    assert not plan_chat(req, model).prompt.startswith(first + generated)
