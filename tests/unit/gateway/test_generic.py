"""The Hermes-style fallback for templates without tool support: messages, plan, parsing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from splitserve.chat import get_format, parse_complete
from splitserve.gateway import PLAIN, APIError, ServedModel, Turn, plan_chat
from splitserve.gateway._generic import GENERIC, call_block, generic_messages, tools_text
from splitserve.gateway._schemas import ChatRequest, check_history, parse_body
from unit.chat.test_grammar import Grammar

# SmolLM2's own template (ChatML with a default system message): it knows no tools
SMOL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# a template that knows only user/assistant turns, strictly alternating (as Mistral's and
# Gemma 2's do), and refuses a system role
STRICT = (
    "{% for m in messages %}"
    "{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('role ' + m.role) }}"
    "{% endif %}"
    "{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
    "[{{ m.role }}]{{ m.content }}[/{{ m.role }}]{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now.",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string", "enum": ["Paris", "Oslo"]}, "days": {"type": "integer"}},
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
ASK: dict[str, Any] = {"role": "user", "content": "Weather in Paris?"}
CALLS: dict[str, Any] = {
    "role": "assistant",
    "content": "Checking.",
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
        {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": '{"city": "Oslo"}'}},
    ],
}
RESULTS: list[dict[str, Any]] = [
    {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
    {"role": "tool", "tool_call_id": "c2", "content": "14:00"},
]
HISTORY = [ASK, CALLS, *RESULTS]


def req(**kw: Any) -> ChatRequest:
    body = {"model": "m", "messages": [ASK], **kw}
    r: ChatRequest = parse_body(ChatRequest, json.dumps(body).encode())
    check_history(r)
    return r


def model(template: str = SMOL, fmt: str = "plain") -> ServedModel:
    return ServedModel(id="m", template=template, format=PLAIN if fmt == "plain" else get_format(fmt))


# -- the message conversion -----------------------------------------------------------------


def test_tools_go_into_a_new_system_message_in_hermes_style() -> None:
    out = generic_messages([ASK], TOOLS)
    assert [m["role"] for m in out] == ["system", "user"]
    system = out[0]["content"]
    assert system == tools_text(TOOLS)
    listed = system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == TOOLS
    assert '<tool_call>{"name": <function-name>, "arguments": ' in system
    assert out[1] == ASK


def test_an_existing_system_message_keeps_its_text_first() -> None:
    out = generic_messages([{"role": "system", "content": "Be terse."}, ASK], TOOLS)
    assert [m["role"] for m in out] == ["system", "user"]
    assert out[0]["content"] == "Be terse.\n\n" + tools_text(TOOLS)


def test_history_becomes_system_user_assistant_only_and_input_is_untouched() -> None:
    before = copy.deepcopy(HISTORY)
    out = generic_messages(HISTORY, TOOLS)
    assert before == HISTORY
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert all("tool_calls" not in m and "tool_call_id" not in m for m in out)
    assistant = out[2]["content"]
    assert assistant == (
        'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"location": "Paris"}}\n</tool_call><tool_call>\n{"name": '
        '"get_time", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    assert out[3]["content"] == (
        '<tool_response>\n{"sky": "sunny"}\n</tool_response>\n<tool_response>\n14:00\n</tool_response>'
    )


def test_a_call_without_text_and_a_user_turn_after_results() -> None:
    bare = {**CALLS, "content": None, "tool_calls": CALLS["tool_calls"][:1]}
    out = generic_messages([ASK, bare, RESULTS[0], {"role": "user", "content": "And now?"}], TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[2]["content"].startswith("<tool_call>\n")
    assert out[3]["content"] == ('<tool_response>\n{"sky": "sunny"}\n</tool_response>\n\nAnd now?')


def test_without_a_system_role_the_tools_open_the_first_user_message() -> None:
    out = generic_messages([{"role": "system", "content": "Be terse."}, *HISTORY], TOOLS, system=False)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[0]["content"] == f"Be terse.\n\n{tools_text(TOOLS)}\n\nWeather in Paris?"


def test_history_calls_are_what_the_model_writes_and_parse_back() -> None:
    """The rewritten assistant turn is a sentence of the forced-call grammar and the hermes
    parser reads it back: the model sees its own syntax (and the prompt cache its tokens)."""
    block = call_block(CALLS["tool_calls"][0])
    grammar = Grammar(
        plan_chat(req(tools=TOOLS, tool_choice="required", parallel_tool_calls=False), model()).body["grammar"]
    )
    assert grammar.accepts(block)
    both = "".join(call_block(c) for c in CALLS["tool_calls"])
    assert Grammar(plan_chat(req(tools=TOOLS, tool_choice="required"), model()).body["grammar"]).accepts(both)
    msg = parse_complete(GENERIC, generic_messages(HISTORY, TOOLS)[2]["content"], TOOLS)
    assert msg.content == "Checking.\n" and not msg.warnings
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.tool_calls] == [
        ("get_weather", {"location": "Paris"}),
        ("get_time", {"city": "Oslo"}),
    ]


# -- plan_chat chooses the fallback ---------------------------------------------------------


@pytest.mark.parametrize("choice", ["auto", "required", None])
def test_plain_model_with_tools_is_planned_as_hermes(choice: str | None) -> None:
    kw: dict[str, Any] = {"tools": TOOLS}
    if choice is not None:
        kw["tool_choice"] = choice
    plan = plan_chat(req(**kw), model())
    assert plan.format is GENERIC and plan.format.name == "hermes"
    assert plan.prompt.startswith("<|im_start|>system\nYou can call functions.")
    assert "SmolLM" not in plan.prompt  # the template's default system message gave way
    assert ("grammar" in plan.body) == (choice == "required")
    assert plan.body["stop"] == []  # the model's own EOS ends the turn, as for plain


def test_named_choice_forces_that_function_only() -> None:
    plan = plan_chat(req(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}), model())
    grammar = Grammar(plan.body["grammar"])
    assert plan.named_tool == "get_time"
    assert grammar.accepts(call_block({"function": {"name": "get_time", "arguments": '{"city": "Lima"}'}}))
    assert not grammar.accepts(call_block(CALLS["tool_calls"][0]))


def test_none_and_no_tools_keep_the_plain_behaviour() -> None:
    bare = plan_chat(req(), model())
    none = plan_chat(req(tools=TOOLS, tool_choice="none"), model())
    for plan in (bare, none):
        assert plan.format is PLAIN and "grammar" not in plan.body
        assert plan.prompt == bare.prompt and "<tools>" not in plan.prompt


def test_a_model_with_a_tool_format_is_not_rewritten() -> None:
    plan = plan_chat(req(tools=TOOLS, tool_choice="required"), model(fmt="hermes"))
    assert plan.format is get_format("hermes")
    assert "You can call functions" not in plan.prompt
    assert plan.body["grammar"].startswith("root ::= reasoning? ")  # real hermes: <think>


def test_multi_turn_renders_on_a_template_that_knows_no_tool_roles() -> None:
    follow = {"role": "user", "content": "Thanks. And Oslo?"}
    with pytest.raises(APIError):  # the template refuses the raw history: today's 400
        plan_chat(req(messages=[*HISTORY, follow], tools=TOOLS, tool_choice="none"), model(STRICT))
    plan = plan_chat(
        req(messages=[{"role": "system", "content": "Be terse."}, *HISTORY, follow], tools=TOOLS), model(STRICT)
    )
    p = plan.prompt
    assert p.startswith("[user]Be terse.\n\nYou can call functions.")
    assert '[assistant]Checking.\n<tool_call>\n{"name": "get_weather"' in p
    assert (
        '[user]<tool_response>\n{"sky": "sunny"}\n</tool_response>\n<tool_response>\n'
        "14:00\n</tool_response>\n\nThanks. And Oslo?[/user][assistant]"
    ) in p
    assert p.endswith("[assistant]")


def test_smollm2_multi_turn_prompt() -> None:
    plan = plan_chat(req(messages=HISTORY, tools=TOOLS), model())
    assert "<|im_start|>tool" not in plan.prompt
    assert plan.prompt.endswith(
        '<|im_start|>user\n<tool_response>\n{"sky": "sunny"}\n'
        "</tool_response>\n<tool_response>\n14:00\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )


# -- the output, read as hermes ---------------------------------------------------------------


def run(plan_kw: dict[str, Any], text: str) -> Turn:
    plan = plan_chat(req(tools=TOOLS, **plan_kw), model())
    turn = Turn(plan, plan.parser())
    for i in range(0, len(text), 5):
        turn.feed(text[i : i + 5])
    turn.finish()
    return turn


def test_the_fallback_output_gives_structured_calls() -> None:
    turn = run({}, "Sure. " + call_block({"function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}}))
    (call,) = turn.tool_calls()
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris"}
    assert turn.finish_reason("eos") == "tool_calls" and turn.message()["content"] == "Sure. "


def test_no_reasoning_split_and_plain_text_stays_content() -> None:
    turn = run({}, "<think>hm</think>It is sunny.")
    assert turn.message() == {"role": "assistant", "content": "<think>hm</think>It is sunny."}
    assert turn.finish_reason("eos") == "stop"


def test_undeclared_tool_and_bad_arguments_warn_as_hermes_does() -> None:
    turn = run({}, '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')
    assert any("no tool named 'nope'" in w for w in turn.warnings)
    broken = run({}, "<tool_call>\nnot json\n</tool_call>")
    assert broken.tool_calls() == [] and "not json" in broken.message()["content"]
    assert any("held no valid call" in w for w in broken.warnings)
