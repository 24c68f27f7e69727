"""plan_chat enforces tool_choice required / named with the format's call grammar."""

from __future__ import annotations

import json

import pytest

from splitserve.chat import get_format
from splitserve.gateway import PLAIN, APIError, ServedModel, plan_chat
from splitserve.gateway._schemas import ChatRequest, check_history, parse_body

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    },
]
NAMED = {"type": "function", "function": {"name": "get_time"}}


def req(**kw: object) -> ChatRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    r: ChatRequest = parse_body(ChatRequest, json.dumps(body).encode())
    check_history(r)
    return r


def model(fmt: str = "hermes", template: str = CHATML) -> ServedModel:
    return ServedModel(id="m", template=template, format=PLAIN if fmt == "plain" else get_format(fmt))


@pytest.mark.parametrize(
    "fmt", ["minimax-m3", "minimax-m3-hybrid", "minimax-m2", "hermes", "qwen3-coder", "llama3-json", "deepseek-v3"]
)
def test_required_sets_the_format_grammar(fmt: str) -> None:
    plan = plan_chat(req(tools=TOOLS, tool_choice="required"), model(fmt))
    grammar = plan.body["grammar"]
    assert grammar.startswith("root ::= ")
    assert "get_weather" in grammar and "get_time" in grammar
    assert plan.tool_choice == "required"


def test_named_choice_grammar_names_only_that_function() -> None:
    plan = plan_chat(req(tools=TOOLS, tool_choice=NAMED), model("minimax-m3"))
    assert plan.named_tool == "get_time"
    assert 'name=\\"get_time\\"' in plan.body["grammar"]
    assert "get_weather" not in plan.body["grammar"]


def test_parallel_false_allows_one_call() -> None:
    many = plan_chat(req(tools=TOOLS, tool_choice="required"), model()).body["grammar"]
    one = plan_chat(req(tools=TOOLS, tool_choice="required", parallel_tool_calls=False), model()).body["grammar"]
    assert "tool-calls ::= tool-call (tool-call)*" in many
    assert "tool-calls ::= (get-weather-call | get-time-call)" in one and ")*" not in one


@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_auto_and_none_add_no_grammar(choice: str | None) -> None:
    kw: dict[str, object] = {"tools": TOOLS}
    if choice is not None:
        kw["tool_choice"] = choice
    assert "grammar" not in plan_chat(req(**kw), model()).body


def test_plain_format_is_enforced_through_the_hermes_fallback() -> None:
    """A template without tool support: the call is forced in hermes' syntax (test_generic.py)."""
    plan = plan_chat(req(tools=TOOLS, tool_choice="required"), model("plain"))
    assert plan.tool_choice == "required" and plan.format.name == "hermes"
    assert plan.body["grammar"].startswith("root ::= tool-calls")  # no reasoning offered
    assert '<tool_call>\\n{\\"name\\": \\"get_weather\\"' in plan.body["grammar"]


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"grammar": 'root ::= "x"'}, "grammar"),
        ({"json_schema": {"type": "object"}}, "json_schema"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"grammar_lazy": True}, "grammar_lazy"),
    ],
)
def test_client_constraints_conflict_with_a_forced_call(extra: dict[str, object], param: str) -> None:
    for choice in ("required", NAMED):
        with pytest.raises(APIError) as err:
            plan_chat(req(tools=TOOLS, tool_choice=choice, **extra), model())
        assert err.value.status == 400 and err.value.param == param
        assert param in err.value.message and "tool_choice" in err.value.message
    assert plan_chat(req(tools=TOOLS, tool_choice="auto", **extra), model())  # fine with auto


def test_force_output_hook_wins_over_the_call_grammar() -> None:
    plan = plan_chat(req(tools=TOOLS, tool_choice="required", force_output="hello"), model(), test_hooks=True)
    assert plan.body["grammar"] == 'root ::= "hello"\n'


def test_prefilled_and_closed_reasoning_shape_the_grammar() -> None:
    think = CHATML.replace("assistant\n{% endif %}", "assistant\n<think>\n{% endif %}")
    closed = CHATML.replace("assistant\n{% endif %}", "assistant\n<think>\n\n</think>\n\n{% endif %}")
    open_ = plan_chat(req(tools=TOOLS, tool_choice="required"), model()).body["grammar"]
    pre = plan_chat(req(tools=TOOLS, tool_choice="required"), model(template=think))
    off = plan_chat(req(tools=TOOLS, tool_choice="required"), model(template=closed))
    assert pre.prefilled
    assert open_.startswith("root ::= reasoning? ")
    assert pre.body["grammar"].startswith("root ::= Until")  # closer first
    assert off.body["grammar"].startswith("root ::= tool-calls")  # no reasoning offered
