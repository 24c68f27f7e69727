"""Round trips through the models' own templates: render a call, parse it back, same arguments.

For random argument values that a random schema allows, the real template (from the pinned
llama.cpp source) renders an assistant turn with the call (M3 through its ``to_xml``
macro); the text it writes is parsed with the format's parser (streamed in random pieces)
and must give the same name and arguments.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitserve.chat import assistant_turn, get_format, load_recipe, transplant

from ._support import assemble, calls_of, run

KEY = st.text(string.ascii_lowercase + "_-.", min_size=1, max_size=8).filter(lambda k: k[0].isalpha() and k != "item")
# Text with the characters that break naive parsers; the formats' own markers cannot occur
# in a value (special tokens), so they are left out.
TEXT = st.text(
    st.sampled_from(list(string.ascii_letters + string.digits + " \n\t<>/&\"'\\{}[]=:,") + ["é", "日", "🚀"]),
    max_size=20,
).filter(lambda s: "</" not in s and "<tool_call>" not in s)

SCALAR_SCHEMAS: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer"},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "string", "enum": ["red", "green", "007"]},
    ]
)
SCHEMAS: st.SearchStrategy[dict[str, Any]] = st.recursive(
    SCALAR_SCHEMAS,
    lambda inner: st.one_of(
        inner.map(lambda s: {"type": "array", "items": s}),
        st.dictionaries(KEY, inner, min_size=1, max_size=3).map(lambda props: {"type": "object", "properties": props}),
    ),
    max_leaves=5,
)


def values_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the schema allows."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "string":
        return TEXT
    if kind == "integer":
        return st.integers(-(10**12), 10**12)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(values_for(schema["items"]), max_size=3)
    return st.fixed_dictionaries({k: values_for(v) for k, v in schema["properties"].items()})


def _with_values(props: dict[str, dict[str, Any]]) -> st.SearchStrategy[dict[str, tuple[dict[str, Any], Any]]]:
    """Each property's schema paired with a value drawn for it."""
    values = st.fixed_dictionaries({k: values_for(v) for k, v in props.items()})
    return values.map(lambda drawn: {k: (props[k], drawn[k]) for k in props})


ARGS = st.dictionaries(KEY, SCHEMAS, max_size=4).flatmap(_with_values)


def _source() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


@functools.cache
def templates() -> dict[str, str]:
    t = _source()
    out = {
        name: (t / f"{file}.jinja").read_text()
        for name, file in {
            "minimax-m3": "MiniMax-M3",
            "minimax-m2": "MiniMax-M2",
            "hermes": "Qwen-Qwen2.5-7B-Instruct",
            "hermes-3": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
            "qwen3-coder": "Qwen3-Coder",
            "qwen3.5": "Qwen3.5-4B",
            "llama3-json": "meta-llama-Llama-3.1-8B-Instruct",
            "deepseek-v3": "deepseek-ai-DeepSeek-V3.1",
            "deepseek-r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
            "glm-4.6": "GLM-4.6",
            "glm-4.7": "GLM-4.7-Flash",
            "seed-oss": "ByteDance-Seed-OSS",
            "step-3.5": "StepFun3.5-Flash",
            "mimo-vl": "MiMo-VL",
            "deepseek-v3.2": "deepseek-ai-DeepSeek-V3.2",
            "deepseek-v4": "deepseek-ai-DeepSeek-V4",
            "minimax-m1": "MiniMax-M1",
        }.items()
    }
    out["minimax-m3-hybrid"] = transplant(out["minimax-m3"], out["minimax-m2"], load_recipe("minimax-m3-hybrid"))
    return out


CASES = [
    ("minimax-m3", "minimax-m3"),
    ("minimax-m2", "minimax-m2"),
    ("minimax-m3-hybrid", "minimax-m3-hybrid"),
    ("hermes", "hermes"),
    ("hermes-3", "hermes"),
    ("qwen3-coder", "qwen3-coder"),
    ("qwen3.5", "qwen3-coder"),
    ("llama3-json", "llama3-json"),
    ("deepseek-v3", "deepseek-v3"),
    ("deepseek-r1", "deepseek-v3"),
    ("glm-4.6", "glm-4.5"),
    ("glm-4.7", "glm-4.7"),
    ("seed-oss", "seed-oss"),
    ("step-3.5", "qwen3-coder"),
    ("mimo-vl", "hermes"),
    ("deepseek-v3.2", "deepseek-v3.2"),
    ("deepseek-v4", "deepseek-v4"),
    ("minimax-m1", "minimax-m1"),
]


def _tools(args: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    props = {k: s for k, (s, _) in args.items()}
    values = {k: v for k, (_, v) in args.items()}
    return [
        {
            "type": "function",
            "function": {
                "name": "fn_x",
                "description": "a tool",
                "parameters": {"type": "object", "properties": props, "required": list(props)},
            },
        }
    ], values


@pytest.mark.parametrize(("template", "fmt"), CASES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=ARGS, seed=st.integers(0, 2**16))
def test_render_then_parse_round_trip(template: str, fmt: str, args: dict[str, Any], seed: int) -> None:
    tools, values = _tools(args)
    f = get_format(fmt)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "fn_x", "arguments": json.dumps(values)}}
        ],
    }
    text, prefilled = assistant_turn(
        templates()[template],
        [{"role": "user", "content": "go"}],
        message,
        f.end_markers,
        f.reasoning.open if f.reasoning else None,
        tools,
    )
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, max(2, len(text))), min(len(text) - 1, 6))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    msg = assemble(run(fmt, pieces, tools, prefilled))
    assert calls_of(msg) == [("fn_x", values)], text
    assert msg.warnings == []
