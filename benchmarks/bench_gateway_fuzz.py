"""Fuzz the gateway with hostile requests: no 5xx, OpenAI's error shape, healthy after.

Generates requests with hypothesis (bodies with random nesting, numbers including NaN /
Infinity / 1e999 / huge integers, strings with lone surrogates and control characters,
wrong types per field, colliding ``chat_template_kwargs``, odd tool schemas, small but
long arrays; odd headers) for ``/v1/chat/completions``, ``/v1/completions``,
``/v1/models`` and the Anthropic Messages API (``/v1/messages``, ``/v1/messages/count_tokens``:
every block type, Anthropic's own headers) and the OpenAI Responses API (``/v1/responses``:
every input item and tool type, a stream must end with a terminal event), sends them and counts statuses. In-process by default: the gateway's ASGI
app with a fake engine (``hermes`` format; the engine's output is a mix of content, calls
to the request's tools and calls cut off, so the parser and the schema coercion run on
what the fuzzed tools declare). With ``--url`` a real gateway is fuzzed instead.

A 5xx, an error body not in the endpoint's shape (OpenAI's; Anthropic's on ``/v1/messages``),
a Messages stream that does not end with ``message_stop`` or an ``error`` event, or an
exception out of the app is a failure. With ``--url``, a case the HTTP client refuses to
send (an illegal header value) reaches no gateway: it is counted apart, not as a 5xx;
the gateway must answer a normal request after the run. Prints tried / status counts / 5xx
seen and writes a JSON result::

    .venv/bin/python benchmarks/bench_gateway_fuzz.py --requests 10000 --out /tmp/fuzz.json
    .venv/bin/python benchmarks/bench_gateway_fuzz.py --url http://127.0.0.1:8000 --requests 10000

``tests/unit/gateway/test_hostile.py`` uses the same strategies (imported from this file).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hyp_seed
from hypothesis import strategies as st

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# -- values ------------------------------------------------------------------------------

_ODD_CHARS = ["\ud800", "\udfff", "\ud83d", "\x00", "\x1b", "\n", "\r", "\t", "\u2028", "\ufeff",
              "é", "世", "😀", "<", ">", "{", "}", '"', "\\", "]<]minimax[>[", "<tool_call>",
              "</tool_call>", "<think>", "{{", "{%", "%}", "}}", "<|im_end|>"]
texts = st.lists(st.one_of(st.sampled_from(_ODD_CHARS), st.text(max_size=8)),
                 max_size=6).map("".join)
numbers = st.one_of(
    st.integers(min_value=-5, max_value=300),
    st.sampled_from([0, -1, 2 ** 31, 2 ** 63, 2 ** 64, -(2 ** 64), 10 ** 30, 10 ** 400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0, 5e-324]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
anyjson = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)), max_leaves=12)


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


# A placeholder a value is replaced with in the serialised body: deep nesting (raw text,
# beyond what json.dumps would write without recursing itself).
DEEP = "__deep__"
deep = st.sampled_from([DEEP + str(d) for d in (2, 63, 64, 65, 200, 990, 5000, 100_000)])
any_value = st.one_of(anyjson, deep, st.lists(st.integers(0, 9), min_size=100, max_size=2000))


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value of the right shape, mostly; any value (the wrong type) sometimes."""
    return st.one_of(strategy, strategy, strategy, any_value)


# -- chat bodies -------------------------------------------------------------------------

TOOL_NAMES = ["f", "get_weather", ""]
schema_leaf = st.fixed_dictionaries({}, optional={
    "type": maybe(st.sampled_from(["string", "integer", "number", "boolean", "object", "array",
                                   "null"])),
    "enum": maybe(st.lists(scalars, max_size=3)),
    "items": maybe(st.just({"type": "string"})),
})
schemas = st.fixed_dictionaries({}, optional={
    "type": maybe(st.just("object")),
    "properties": maybe(st.dictionaries(st.sampled_from(["a", "b", "location", ""]), schema_leaf,
                                        max_size=3)),
    "required": maybe(st.lists(st.one_of(st.sampled_from(["a", "b", "location"]),
                                         st.lists(st.just("a"), max_size=1), anyjson),
                               max_size=3)),
    "additionalProperties": maybe(st.booleans()),
    "$ref": st.just("#/x"),
    "anyOf": st.lists(schema_leaf, max_size=2),
})
tools = st.lists(st.fixed_dictionaries(
    {"type": maybe(st.just("function")),
     "function": maybe(st.fixed_dictionaries({"name": maybe(st.sampled_from(TOOL_NAMES))},
                                             optional={"parameters": maybe(schemas),
                                                       "description": maybe(texts)}))}),
    max_size=3)
tool_calls = st.lists(st.fixed_dictionaries(
    {"id": maybe(st.sampled_from(["c1", "c2"])), "type": maybe(st.just("function")),
     "function": maybe(st.fixed_dictionaries({
         "name": maybe(st.sampled_from(TOOL_NAMES)),
         "arguments": maybe(st.one_of(st.just('{"a": 1}'), st.just("{oops"), texts,
                                      st.dictionaries(texts, scalars, max_size=2)))}))}),
    max_size=2)
content = st.one_of(texts, st.none(), st.lists(st.fixed_dictionaries(
    {"type": maybe(st.sampled_from(["text", "image_url", "input_text"]))},
    optional={"text": maybe(texts)}), max_size=3))
message = st.fixed_dictionaries(
    {"role": maybe(st.sampled_from(["system", "developer", "user", "assistant", "tool", "bot"])),
     "content": maybe(content)},
    optional={"tool_calls": maybe(tool_calls), "tool_call_id": maybe(st.sampled_from(["c1", "zz"])),
              "name": maybe(texts), "reasoning_content": maybe(texts)})
messages = st.lists(message, min_size=0, max_size=4)
RESERVED = ["add_generation_prompt", "messages", "tools", "template", "self", "bos_token",
            "enable_thinking", "raise_exception", "range", "loop", "namespace"]
chat_optional = {
    "model": maybe(st.sampled_from(["m", "smol", "gpt-4o", ""])),
    "tools": maybe(tools),
    "tool_choice": maybe(st.one_of(
        st.sampled_from(["none", "auto", "required", "bogus"]),
        st.fixed_dictionaries({"type": maybe(st.just("function")),
                               "function": maybe(st.fixed_dictionaries(
                                   {"name": maybe(st.sampled_from(TOOL_NAMES))}))}))),
    "parallel_tool_calls": maybe(st.booleans()),
    "response_format": maybe(st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "json_object", "json_schema", "xml"]))},
        optional={"json_schema": maybe(st.fixed_dictionaries({}, optional={
            "schema": maybe(schemas), "name": texts}))})),
    "stream": maybe(st.booleans()),
    "stream_options": maybe(st.fixed_dictionaries({}, optional={"include_usage": maybe(st.booleans())})),
    "max_tokens": maybe(numbers),
    "max_completion_tokens": maybe(numbers),
    "stop": maybe(st.one_of(texts, st.lists(texts, max_size=20))),
    "temperature": maybe(numbers),
    "top_p": maybe(numbers),
    "seed": maybe(numbers),
    "n": maybe(numbers),
    "chat_template_kwargs": maybe(st.dictionaries(st.one_of(st.sampled_from(RESERVED), texts),
                                                  anyjson, max_size=3)),
    "reasoning_effort": maybe(texts),
    "top_k": maybe(numbers), "min_p": maybe(numbers), "repeat_penalty": maybe(numbers),
    "logit_bias": maybe(st.one_of(st.dictionaries(st.sampled_from(["1", "2", "x"]), numbers,
                                                  max_size=3),
                                  st.lists(st.lists(numbers, max_size=2), max_size=3))),
    "grammar": maybe(st.sampled_from(['root ::= "x"', "root ::= ", ""])),
    "json_schema": maybe(schemas),
    "n_probs": maybe(numbers), "id_slot": maybe(numbers), "cache_prompt": maybe(st.booleans()),
    "samplers": maybe(st.lists(texts, max_size=3)),
    "force_output": maybe(texts),
    "user": maybe(texts),
    "unknown_field": any_value,
}
chat_bodies = st.fixed_dictionaries({"messages": maybe(messages)}, optional=chat_optional)
completion_bodies = st.fixed_dictionaries({}, optional={
    "model": maybe(st.sampled_from(["m", "smol", "gpt-4o"])),
    "prompt": maybe(st.one_of(texts, st.lists(texts, max_size=3),
                              st.lists(st.integers(-1, 70000), max_size=5))),
    "stream": maybe(st.booleans()),
    "max_tokens": maybe(numbers), "temperature": maybe(numbers), "logit_bias": maybe(anyjson),
    "stop": maybe(st.one_of(texts, st.lists(texts, max_size=3))), "n_probs": maybe(numbers),
    "unknown_field": any_value,
})
garbage = st.one_of(st.binary(max_size=64), st.sampled_from([
    b"", b"null", b"[]", b"1", b'"x"', b"{", b'{"messages": [}', b"\xff\xfe{}", b'{"a":1}{',
    b'{"messages": NaN}', b"\xed\xa0\x80", b'{"\\ud800": 1}', b"{" * 100_000]))


_DEEP_RE = re.compile('"' + DEEP + r'(\d+)"')


def serialise(value: Any) -> bytes:
    """JSON text that may hold NaN/Infinity, lone surrogates (as escapes) and deep nesting."""
    text = json.dumps(value, allow_nan=True, ensure_ascii=True)
    return _DEEP_RE.sub(lambda m: _nest(int(m.group(1))), text).encode()


header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=40)
headers = st.dictionaries(
    st.sampled_from(["authorization", "content-type", "x-session-id", "accept", "user-agent",
                     "x-request-id", "accept-encoding", "expect", "transfer-encoding-x"]),
    st.one_of(header_values, st.sampled_from(["Bearer ", "Bearer x" * 20, "application/x",
                                              "text/event-stream", "gzip", "100-continue"])),
    max_size=4)


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]


cases = st.one_of(
    st.builds(lambda b, h: Case("POST", "/v1/chat/completions", serialise(b), h), chat_bodies, headers),
    st.builds(lambda b, h: Case("POST", "/v1/chat/completions", serialise(b), h), chat_bodies, headers),
    st.builds(lambda b, h: Case("POST", "/v1/chat/completions", b, h), garbage, headers),
    st.builds(lambda b, h: Case("POST", "/v1/completions", serialise(b), h), completion_bodies, headers),
    st.builds(lambda b, h: Case("POST", "/v1/completions", b, h), garbage, headers),
    st.builds(lambda q, h: Case("GET", "/v1/models" + q, None, h),
              st.sampled_from(["", "?x=1", "?%ff", "?a=" + "b" * 500]), headers),
)

# -- Anthropic Messages bodies (/v1/messages, /v1/messages/count_tokens) ------------------

MESSAGES_PATHS = ["/v1/messages", "/v1/messages?beta=true", "/v1/messages/count_tokens"]


def messages_bodies() -> st.SearchStrategy[Any]:
    """Hostile Messages request bodies: every block type, wrong types per field."""
    ids = st.sampled_from(["toolu_1", "c1", "", "call_x"])
    inner = st.lists(st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "image", "document", "x"]))},
        optional={"text": maybe(texts), "source": maybe(anyjson)}), max_size=3)
    block = st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "image", "tool_use", "tool_result", "thinking",
                                        "redacted_thinking", "document", "server_tool_use", "bogus"]))},
        optional={"text": maybe(texts), "id": maybe(ids), "name": maybe(st.sampled_from(TOOL_NAMES)),
                  "input": maybe(anyjson), "tool_use_id": maybe(ids),
                  "content": maybe(st.one_of(texts, st.none(), inner)), "is_error": maybe(st.booleans()),
                  "thinking": maybe(texts), "signature": maybe(texts), "data": maybe(texts),
                  "source": maybe(anyjson), "cache_control": maybe(anyjson)})
    message = st.fixed_dictionaries(
        {"role": maybe(st.sampled_from(["user", "assistant", "system", "tool", "developer"])),
         "content": maybe(st.one_of(texts, st.lists(block, max_size=4)))})
    tool = st.fixed_dictionaries(
        {"name": maybe(st.sampled_from(TOOL_NAMES))},
        optional={"input_schema": maybe(schemas), "description": maybe(texts),
                  "type": maybe(st.sampled_from(["custom", "web_search_20250305", "bash_20250124"])),
                  "defer_loading": maybe(st.booleans()), "cache_control": maybe(anyjson),
                  "strict": maybe(st.booleans())})
    system = st.one_of(texts, st.lists(st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["text", "image"]))},
        optional={"text": maybe(st.one_of(texts, st.just("x-anthropic-billing-header: cch=1;"))),
                  "cache_control": maybe(anyjson)}), max_size=3))
    optional = {
        "model": maybe(st.sampled_from(["m", "smol", "claude-opus-5-5", ""])),
        "max_tokens": maybe(numbers),
        "system": maybe(system),
        "tools": maybe(st.lists(tool, max_size=3)),
        "tool_choice": maybe(st.fixed_dictionaries(
            {"type": maybe(st.sampled_from(["auto", "any", "tool", "none", "bogus"]))},
            optional={"name": maybe(st.sampled_from(TOOL_NAMES)),
                      "disable_parallel_tool_use": maybe(st.booleans())})),
        "stop_sequences": maybe(st.one_of(texts, st.lists(texts, max_size=20))),
        "temperature": maybe(numbers), "top_p": maybe(numbers), "top_k": maybe(numbers),
        "stream": maybe(st.booleans()),
        "metadata": maybe(st.fixed_dictionaries({}, optional={"user_id": maybe(texts)})),
        "thinking": maybe(st.fixed_dictionaries(
            {"type": maybe(st.sampled_from(["enabled", "disabled", "adaptive", "x"]))},
            optional={"budget_tokens": maybe(numbers), "display": maybe(texts)})),
        "output_config": maybe(st.fixed_dictionaries({}, optional={
            "effort": maybe(st.sampled_from(["low", "medium", "high", "xhigh", "max", "x"])),
            "format": maybe(st.fixed_dictionaries({"type": maybe(st.just("json_schema"))},
                                                  optional={"schema": maybe(schemas)}))})),
        "context_management": maybe(anyjson),
        "unknown_field": any_value,
    }
    return st.fixed_dictionaries({"messages": maybe(st.lists(message, max_size=4))}, optional=optional)


def messages_valid_bodies() -> st.SearchStrategy[Any]:
    """Well-formed Messages requests with hostile text in them (these reach the engine, so the
    answer path runs: blocks, streams, tool calls out of the fake engine's output)."""
    text_block = st.fixed_dictionaries({"type": st.just("text"), "text": texts},
                                       optional={"cache_control": st.just({"type": "ephemeral"})})
    use = st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.just("toolu_1"),
                                 "name": st.sampled_from(["f", "get_weather"]),
                                 "input": st.dictionaries(texts, scalars, max_size=2)})
    result = st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": st.just("toolu_1"),
                                    "content": st.one_of(texts, st.lists(text_block, max_size=2))},
                                   optional={"is_error": st.booleans()})
    thinking = st.fixed_dictionaries({"type": st.just("thinking"), "thinking": texts, "signature": texts})
    user = st.fixed_dictionaries({"role": st.just("user"),
                                  "content": st.one_of(texts, st.lists(st.one_of(text_block, result), max_size=3))})
    assistant = st.fixed_dictionaries({"role": st.just("assistant"), "content": st.one_of(
        texts, st.lists(st.one_of(thinking, text_block, use), min_size=1, max_size=3))})
    system_msg = st.fixed_dictionaries({"role": st.just("system"), "content": texts})
    tool = st.fixed_dictionaries({"name": st.sampled_from(["f", "get_weather"]),
                                  "input_schema": st.just({"type": "object", "properties": {
                                      "a": {"type": "integer"}, "location": {"type": "string"}}})})
    return st.fixed_dictionaries(
        {"model": st.just("m"), "max_tokens": st.integers(1, 40),
         "messages": st.lists(st.one_of(user, assistant, system_msg), min_size=1, max_size=4)},
        optional={"system": texts, "stream": st.booleans(), "tools": st.lists(tool, max_size=2, unique_by=lambda t: t["name"]),
                  "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "none"}, {"type": "any"},
                                                  {"type": "tool", "name": "f"}]),
                  "stop_sequences": st.lists(texts, max_size=3),
                  "thinking": st.sampled_from([{"type": "adaptive"}, {"type": "disabled"},
                                               {"type": "enabled", "budget_tokens": 1024}]),
                  "metadata": st.fixed_dictionaries({"user_id": texts})})


messages_headers = st.one_of(headers, st.dictionaries(
    st.sampled_from(["x-api-key", "anthropic-version", "anthropic-beta", "x-claude-code-session-id"]),
    st.one_of(header_values, st.sampled_from(["", " ", "2023-06-01", "sk-x"])), max_size=3))


def messages_cases() -> st.SearchStrategy[Case]:
    """Cases for the Messages API: fuzzed bodies and garbage, on its three paths."""
    paths = st.sampled_from(MESSAGES_PATHS)
    return st.one_of(
        st.builds(lambda p, b, h: Case("POST", p, serialise(b), h), paths, messages_bodies(), messages_headers),
        st.builds(lambda p, b, h: Case("POST", p, b, h), paths, garbage, messages_headers),
        st.builds(lambda p, b: Case("POST", p, serialise(b), {"content-type": "application/json"}),
                  paths, messages_valid_bodies()),
        st.builds(lambda p, b: Case("POST", p, serialise(b), {"content-type": "application/json"}),
                  paths, messages_valid_bodies()),
    )


cases = st.one_of(cases, messages_cases())

# -- OpenAI Responses bodies (/v1/responses) -------------------------------------------------


def responses_bodies() -> st.SearchStrategy[Any]:
    """Hostile Responses request bodies: every input item and tool type, wrong types per field."""
    ids = st.sampled_from(["call_1", "c1", "", "fc_x"])
    part = st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["input_text", "output_text", "refusal", "input_image",
                                        "input_file", "reasoning_text", "summary_text", "x"]))},
        optional={"text": maybe(texts), "refusal": maybe(texts), "image_url": maybe(texts)})
    item = st.fixed_dictionaries({}, optional={
        "type": maybe(st.sampled_from(["message", "function_call", "function_call_output", "reasoning",
                                       "custom_tool_call", "custom_tool_call_output", "additional_tools",
                                       "item_reference", "web_search_call", "bogus"])),
        "role": maybe(st.sampled_from(["user", "assistant", "system", "developer", "tool"])),
        "content": maybe(st.one_of(texts, st.none(), st.lists(part, max_size=3))),
        "summary": maybe(st.lists(part, max_size=2)),
        "call_id": maybe(ids), "id": maybe(ids), "name": maybe(st.sampled_from(TOOL_NAMES)),
        "namespace": maybe(st.sampled_from(["ns", ""])),
        "arguments": maybe(st.one_of(st.just('{"a": 1}'), st.just("{oops"), st.just("[1]"), texts,
                                     st.dictionaries(texts, scalars, max_size=2))),
        "input": maybe(texts), "output": maybe(st.one_of(texts, st.lists(part, max_size=2), anyjson)),
        "tools": maybe(st.lists(anyjson, max_size=2)),
    })
    fmt = st.fixed_dictionaries({"type": maybe(st.sampled_from(["text", "grammar", "x"]))},
                                optional={"syntax": maybe(st.sampled_from(["lark", "regex"])),
                                          "definition": maybe(texts)})
    tool = st.fixed_dictionaries(
        {"type": maybe(st.sampled_from(["function", "custom", "namespace", "web_search", "mcp", "x"]))},
        optional={"name": maybe(st.sampled_from(TOOL_NAMES + ["apply_patch", "ns"])),
                  "parameters": maybe(schemas), "description": maybe(texts), "strict": maybe(st.booleans()),
                  "format": maybe(fmt),
                  "tools": maybe(st.lists(st.fixed_dictionaries(
                      {"type": maybe(st.sampled_from(["function", "custom", "namespace"])),
                       "name": maybe(st.sampled_from(TOOL_NAMES))},
                      optional={"parameters": maybe(schemas)}), max_size=2))})
    choice = st.one_of(
        st.sampled_from(["none", "auto", "required", "bogus"]),
        st.fixed_dictionaries({"type": maybe(st.sampled_from(["function", "custom", "allowed_tools",
                                                              "web_search", "x"]))},
                              optional={"name": maybe(st.sampled_from(TOOL_NAMES + ["apply_patch"])),
                                        "namespace": maybe(texts),
                                        "mode": maybe(st.sampled_from(["auto", "required", "none"])),
                                        "tools": maybe(st.lists(anyjson, max_size=2))}))
    optional = {
        "model": maybe(st.sampled_from(["m", "smol", "gpt-5.5", ""])),
        "instructions": maybe(texts),
        "tools": maybe(st.lists(tool, max_size=3)),
        "tool_choice": maybe(choice),
        "parallel_tool_calls": maybe(st.booleans()),
        "max_output_tokens": maybe(numbers),
        "temperature": maybe(numbers), "top_p": maybe(numbers),
        "reasoning": maybe(st.fixed_dictionaries({}, optional={
            "effort": maybe(st.sampled_from(["none", "minimal", "low", "high", "xhigh", "x"])),
            "summary": maybe(texts)})),
        "text": maybe(st.fixed_dictionaries({}, optional={
            "format": maybe(st.fixed_dictionaries(
                {"type": maybe(st.sampled_from(["text", "json_object", "json_schema", "xml"]))},
                optional={"schema": maybe(schemas), "name": maybe(texts), "strict": maybe(st.booleans())})),
            "verbosity": maybe(texts)})),
        "stream": maybe(st.booleans()),
        "store": maybe(st.booleans()),
        "previous_response_id": maybe(st.sampled_from(["resp_x", "", "resp_" + "0" * 32])),
        "include": maybe(st.lists(texts, max_size=2)),
        "prompt_cache_key": maybe(texts), "user": maybe(texts), "metadata": maybe(anyjson),
        "chat_template_kwargs": maybe(st.dictionaries(st.one_of(st.sampled_from(RESERVED), texts),
                                                      anyjson, max_size=2)),
        "grammar": maybe(st.sampled_from(['root ::= "x"', "root ::= ", ""])),
        "force_output": maybe(texts),
        "unknown_field": any_value,
    }
    return st.fixed_dictionaries({"input": maybe(st.one_of(texts, st.lists(item, max_size=4)))},
                                 optional=optional)


def responses_valid_bodies() -> st.SearchStrategy[Any]:
    """Well-formed Responses requests with hostile text in them (these reach the engine: the
    answer path runs, items and events out of the fake engine's calls and cut-off calls)."""
    user = st.fixed_dictionaries({"role": st.just("user"), "content": texts})
    developer = st.fixed_dictionaries({"role": st.just("developer"), "content": texts})
    fc = st.fixed_dictionaries({"type": st.just("function_call"), "call_id": st.just("call_1"),
                                "name": st.sampled_from(["f", "get_weather"]), "arguments": st.just('{"a": 1}')})
    out = st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": st.just("call_1"),
                                 "output": texts})
    reasoning = st.fixed_dictionaries({"type": st.just("reasoning"), "id": st.just("rs_1"), "summary": st.just([]),
                                       "content": st.lists(st.fixed_dictionaries(
                                           {"type": st.just("reasoning_text"), "text": texts}), max_size=1)})
    ctc = st.fixed_dictionaries({"type": st.just("custom_tool_call"), "call_id": st.just("call_2"),
                                 "name": st.just("apply_patch"), "input": texts})
    ctco = st.fixed_dictionaries({"type": st.just("custom_tool_call_output"), "call_id": st.just("call_2"),
                                  "output": texts})
    tools = st.lists(st.sampled_from([
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}},
        {"type": "function", "name": "get_weather",
         "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                             "definition": 'start: "x"'}},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
        {"type": "web_search"}]), max_size=4, unique_by=lambda t: t.get("name", t["type"]))
    return st.fixed_dictionaries(
        {"model": st.just("m"), "input": st.one_of(texts, st.lists(
            st.one_of(user, developer, reasoning, fc, out, ctc, ctco), min_size=1, max_size=5))},
        optional={"instructions": texts, "stream": st.booleans(), "tools": tools, "store": st.booleans(),
                  "max_output_tokens": st.integers(1, 40), "parallel_tool_calls": st.booleans(),
                  "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "name": "f"},
                                                  {"type": "custom", "name": "apply_patch"}]),
                  "text": st.sampled_from([{"format": {"type": "json_object"}},
                                           {"format": {"type": "json_schema", "name": "x", "schema": {
                                               "type": "object", "properties": {"a": {"type": "integer"}}}}}]),
                  "reasoning": st.sampled_from([{"effort": "low"}, {"effort": "none"}, {"summary": "auto"}]),
                  "prompt_cache_key": texts})


def responses_cases() -> st.SearchStrategy[Case]:
    """Cases for the Responses API: fuzzed bodies, garbage and hostile well-formed requests."""
    json_ct = {"content-type": "application/json"}
    return st.one_of(
        st.builds(lambda b, h: Case("POST", "/v1/responses", serialise(b), h), responses_bodies(), headers),
        st.builds(lambda b, h: Case("POST", "/v1/responses", b, h), garbage, headers),
        st.builds(lambda b: Case("POST", "/v1/responses", serialise(b), json_ct), responses_valid_bodies()),
        st.builds(lambda b: Case("POST", "/v1/responses", serialise(b), json_ct), responses_valid_bodies()),
    )


cases = st.one_of(cases, responses_cases())

# -- the fake engine ---------------------------------------------------------------------


def _strict(raw: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(raw, parse_constant=refuse)


class FakeEngine:
    """llama-server's /props, /tokenize, /completion (streamed) and /v1/completions.

    It parses what it is sent strictly (no NaN, valid UTF-8), as llama-server does; a body it
    cannot read is its HTTP 500, so a gateway that forwards one shows up as a 5xx. Its chat
    output, picked by the prompt's length, mixes content with calls to ``f`` and
    ``get_weather`` (complete, with odd arguments, and cut off)."""

    OUTPUTS = (
        "Hello there.",
        '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": "x"}}\n</tool_call>',
        'I\'ll check.<tool_call>\n{"name": "get_weather", "arguments": {"location": [1, {"a": null}]}}'
        "\n</tool_call>",
        '<think>hmm</think><tool_call>\n{"name": "f", "arguments": {"a": "1e999", "location": "P"}}'
        "\n</tool_call><tool_call>\n{\"name\": \"zz\", \"arguments\": 3}\n</tool_call>",
        "Cut off <tool_call>\n{\"name\": \"f\", \"argum",
        "Cut off <tool_c",
        "",
    )

    def __init__(self) -> None:
        self.requests = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        path = request.url.path
        if path == "/props":
            return httpx.Response(200, json={"chat_template": CHATML, "model_path": "/m/smol.gguf",
                                             "default_generation_settings": {"n_ctx": 2048},
                                             "total_slots": 2})
        if path == "/health":
            return httpx.Response(200, json={"status": "ok"})
        try:
            body = _strict(request.content) if request.content else {}
        except ValueError as exc:
            return httpx.Response(500, json={"error": {"message": f"engine could not parse: {exc}"}})
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1] if body.get("add_special") else []})
        if path == "/completion":
            text = self.OUTPUTS[len(str(body.get("prompt", ""))) % len(self.OUTPUTS)]
            pieces = [text[i:i + 3] for i in range(0, len(text), 3)]
            limit = body.get("n_predict", -1)
            stop_type = "limit" if isinstance(limit, int) and 0 < limit < len(pieces) else "eos"
            if stop_type == "limit":
                pieces = pieces[:limit]
            events: list[dict[str, Any]] = [{"content": p, "stop": False} for p in pieces]
            events.append({"content": "", "stop": True, "stop_type": stop_type,
                           "tokens_predicted": len(pieces), "tokens_evaluated": 5,
                           "timings": {"cache_n": 0, "predicted_per_second": 10.0}})
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
            return httpx.Response(200, content=data.encode(),
                                  headers={"content-type": "text/event-stream"})
        if path == "/v1/completions":
            if body.get("stream"):
                data = ('data: {"choices":[{"text":"Hi","index":0}]}\n\n'
                        "data: [DONE]\n\n")
                return httpx.Response(200, content=data.encode(),
                                      headers={"content-type": "text/event-stream"})
            return httpx.Response(200, json={"choices": [{"text": "Hi", "index": 0}],
                                             "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        return httpx.Response(404, json={"error": {"message": "no such endpoint"}})


def in_process_app(test_hooks: bool = False) -> Any:
    """The gateway's ASGI app (hermes format) wired to a :class:`FakeEngine`."""
    from splitserve.engine import LlamaCppBackend
    from splitserve.gateway import GatewayConfig, create_app

    engine = FakeEngine()
    backend = LlamaCppBackend("http://engine", transport=httpx.MockTransport(engine.handler))
    app = create_app(GatewayConfig(engine_url="http://engine", model_format="hermes",
                                   model_name="smol", test_hooks=test_hooks,
                                   max_concurrent=64, max_queue=64), backend)
    app.state.engine = engine
    return app


# -- checking answers --------------------------------------------------------------------


def problems(status: int, body: bytes, streamed: bool) -> list[str]:
    """What is wrong with an answer: a 5xx, an error not in OpenAI's shape, a broken stream."""
    out = []
    if status >= 500:
        out.append(f"HTTP {status}: {body[:300]!r}")
    if status >= 400:
        try:
            err = json.loads(body)["error"]
            assert isinstance(err["message"], str) and isinstance(err["type"], str)
            assert "param" in err and "code" in err
        except (ValueError, KeyError, TypeError, AssertionError):
            out.append(f"HTTP {status} without OpenAI's error shape: {body[:300]!r}")
    elif streamed:
        text = body.decode("utf-8", "replace")
        if "internal error" in text or '"server_error"' in text:
            out.append(f"a stream with a server error: {text[-300:]!r}")
    elif status == 200 and b"internal error" in body:
        out.append(f"internal error in a 200: {body[:300]!r}")
    return out


def messages_problems(status: int, body: bytes, streamed: bool) -> list[str]:
    """:func:`problems` for the Messages API: its error shape, ``event: error`` in streams."""
    out = []
    if status >= 500:
        out.append(f"HTTP {status}: {body[:300]!r}")
    if status >= 400:
        try:
            doc = json.loads(body)
            assert doc["type"] == "error"
            assert isinstance(doc["error"]["message"], str) and isinstance(doc["error"]["type"], str)
        except (ValueError, KeyError, TypeError, AssertionError):
            out.append(f"HTTP {status} without Anthropic's error shape: {body[:300]!r}")
    elif streamed:
        text = body.decode("utf-8", "replace")
        if "internal error" in text or '"api_error"' in text:
            out.append(f"a stream with a server error: {text[-300:]!r}")
        elif not text.rstrip().endswith('{"type":"message_stop"}') and "event: error" not in text:
            out.append(f"a stream that does not end with message_stop: {text[-300:]!r}")
    elif status == 200 and b"internal error" in body:
        out.append(f"internal error in a 200: {body[:300]!r}")
    return out


RESPONSES_END = ("response.completed", "response.incomplete", "response.failed")


def responses_problems(status: int, body: bytes, streamed: bool) -> list[str]:
    """:func:`problems` for the Responses API: OpenAI's error shape; a stream whose last event
    is terminal (completed, incomplete, or failed for the prompt's length, never a server error)."""
    out = problems(status, body, False)
    if status == 200 and streamed:
        text = body.decode("utf-8", "replace")
        last = text.rstrip().rsplit("\n\n", 1)[-1]
        if not last.startswith("event: ") or last[7:].split("\n", 1)[0] not in RESPONSES_END:
            out.append(f"a Responses stream that does not end with a terminal event: {text[-300:]!r}")
        elif '"server_error"' in text or "internal error" in text:
            out.append(f"a Responses stream with a server error: {text[-300:]!r}")
    return out


def checker(case: Case) -> Any:
    """The answer check for this case's endpoint."""
    if case.path.startswith("/v1/responses"):
        return responses_problems
    return messages_problems if case.path.startswith("/v1/messages") else problems


NORMAL = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


@dataclass
class Tally:
    tried: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    five_xx: int = 0
    problems: int = 0
    failures: list[str] = field(default_factory=list)
    refused: int = 0
    by_path: Counter[str] = field(default_factory=Counter)
    """Cases the HTTP client refused to send (``--url`` only; see :data:`CLIENT_REFUSED`)."""

    def add(self, case: Case, status: int, found: list[str]) -> None:
        self.tried += 1
        self.by_path[case.path.split("?", 1)[0]] += 1
        self.statuses[str(status)] += 1
        if status >= 500:
            self.five_xx += 1
        self.problems += len(found)
        for f in found:
            if len(self.failures) < 50:
                self.failures.append(f"{case.method} {case.path} {case.body[:200]!r}: {f}"
                                     if case.body is not None else f"{case.method} {case.path}: {f}")


BATCH = 500


def _rss_mib() -> float:
    """This process's resident memory (MiB; in-process, the gateway's)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    import os

    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20, 1)


CLIENT_REFUSED = 0
"""The "status" of a case the HTTP client refused to send (an illegal header value such as
``Bearer `` with its trailing space): nothing reached the gateway, so it is counted apart."""


def send_sync(client: httpx.Client, case: Case) -> tuple[int, bytes, bool]:
    """One case through a real HTTP client (``--url``); a case the client refuses to send is
    :data:`CLIENT_REFUSED`; any other exception (the connection broke) counts as status 599."""
    try:
        r = client.request(case.method, case.path, content=case.body, headers=case.headers)
    except (httpx.LocalProtocolError, httpx.UnsupportedProtocol, UnicodeEncodeError) as exc:
        return CLIENT_REFUSED, f"{type(exc).__name__}: {exc}".encode(), False
    except httpx.HTTPError as exc:
        return 599, f"{type(exc).__name__}: {exc}".encode(), False
    return r.status_code, r.content, "text/event-stream" in r.headers.get("content-type", "")


def run(n: int, url: str | None, api_key: str | None, seed: int | None) -> dict[str, Any]:
    import anyio

    tally = Tally()
    started = time.perf_counter()
    if url:
        client = httpx.Client(base_url=url, timeout=60,
                              headers={"Authorization": f"Bearer {api_key}"} if api_key else {})

        def send(case: Case) -> tuple[int, bytes, bool]:
            if api_key:
                case = Case(case.method, case.path, case.body,
                            {k: v for k, v in case.headers.items() if k != "authorization"})
            return send_sync(client, case)
    else:
        app = in_process_app()
        portal_cm = anyio.from_thread.start_blocking_portal()
        portal = portal_cm.__enter__()
        aclient = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw",
                                    timeout=60)

        async def asend(case: Case) -> tuple[int, bytes, bool]:
            try:
                r = await aclient.request(case.method, case.path, content=case.body,
                                          headers=case.headers)
            except Exception as exc:  # noqa: BLE001 - an exception out of the app: a 5xx
                return 598, f"exception out of the app: {type(exc).__name__}: {exc}".encode(), False
            return r.status_code, r.content, "text/event-stream" in r.headers.get("content-type", "")

        def send(case: Case) -> tuple[int, bytes, bool]:
            return portal.call(asend, case)

    def one(case: Case) -> None:
        status, body, streamed = send(case)
        if status == CLIENT_REFUSED:
            tally.refused += 1
            return
        tally.add(case, status, checker(case)(status, body, streamed))

    # In batches: one hypothesis run keeps a record of every case it generated (its memory
    # grows with the run), a fresh run per batch does not.
    rss_start = _rss_mib()
    rss: list[float] = []
    batch = 0
    while tally.tried < n:
        size = min(BATCH, n - tally.tried)
        run_batch = settings(max_examples=size, deadline=None, database=None,
                             phases=[Phase.generate],
                             suppress_health_check=list(HealthCheck))(given(cases)(one))
        if seed is not None:
            run_batch = hyp_seed(seed * 100_003 + batch)(run_batch)
        before = tally.tried
        run_batch()
        if tally.tried == before:  # hypothesis generated nothing new: stop
            break
        batch += 1
        rss.append(_rss_mib())
    healthy = send(Case("POST", "/v1/chat/completions", json.dumps(NORMAL).encode(),
                        {"content-type": "application/json"}))
    elapsed = time.perf_counter() - started
    if not url:
        portal.call(aclient.aclose)
        portal_cm.__exit__(None, None, None)
    return {"target": url or "in-process (fake engine)", "tried": tally.tried,
            "statuses": dict(sorted(tally.statuses.items())), "five_xx": tally.five_xx,
            "problems": tally.problems, "failures": tally.failures, "healthy_after": healthy[0] == 200,
            "client_refused": tally.refused,
            "messages_tried": sum(v for k, v in tally.by_path.items() if k.startswith("/v1/messages")),
            "responses_tried": tally.by_path.get("/v1/responses", 0),
            "seconds": round(elapsed, 1),
            "rss_mib_start": rss_start, "rss_mib_end": _rss_mib(),
            "rss_mib_per_batch": rss,
            "requests_per_second": round(tally.tried / elapsed, 1) if elapsed else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--url", help="fuzz a running gateway instead of the in-process app")
    ap.add_argument("--api-key", help="the key of the gateway at --url")
    ap.add_argument("--seed", type=int, help="derandomize (a fixed sequence of cases)")
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # hypothesis' notes on the large cases it builds
    result = run(args.requests, args.url, args.api_key, args.seed)
    print(f"target: {result['target']}")
    print(f"tried: {result['tried']}  in {result['seconds']} s "
          f"({result['requests_per_second']} req/s)")
    print("status counts: " + ", ".join(f"{k}: {v}" for k, v in result["statuses"].items()))
    print(f"of which /v1/responses: {result['responses_tried']}")
    print(f"of which /v1/messages*: {result['messages_tried']}  "
          f"refused by the client before sending (not counted): {result['client_refused']}")
    if not args.url:
        print(f"process RSS: {result['rss_mib_start']} -> {result['rss_mib_end']} MiB")
    print(f"5xx seen: {result['five_xx']}  problems (5xx, error shape, broken streams): "
          f"{result['problems']}  healthy after: {result['healthy_after']}")
    for f in result["failures"][:10]:
        print("  " + f)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
    return 0 if result["five_xx"] == 0 and not result["problems"] and result["healthy_after"] else 1


if __name__ == "__main__":
    sys.exit(main())
