"""Fuzz: random and truncated output never raises, and chunking never changes the result."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splitserve.chat import coalesce, parse_complete

from ._support import FORMATS, MARKERS, SYNTAXES, check_shape, run, tool

TOOLS = [
    tool(
        "get_weather",
        {
            "location": {"type": "string"},
            "days": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    ),
    tool("noop", {}),
]

# Fragments of every format's markers, so random text often looks almost like a call.
FRAGMENTS = sorted(
    {piece for markers in MARKERS.values() for m in markers for piece in (m, m[: len(m) // 2], m[len(m) // 2 :])}
    | {
        "]<]minimax[>[",
        '<invoke name="get_weather">',
        "<location>",
        "</location>",
        '<parameter name="days">',
        "</parameter>",
        "<parameter=days>",
        "<function=noop>",
        "</function>",
        '{"name": "noop", "arguments": {}}',
        '{"name": "get_weather", "parameters": {"days": 3}}',
        "<item>",
        "</item>",
        "{",
        "}",
        '"',
        "\\",
        "\n",
        " ",
        "3",
        "true",
        "Paris",
        "</invoke>",
        "<|python_tag|>",
        ";",
        "```json\n",
        "```",
        "function",
    }
)
NOISE = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=30).map("".join)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=NOISE, seed=st.integers(0, 2**16), prefilled=st.booleans())
def test_random_output_never_raises_and_is_chunk_invariant(fmt: str, text: str, seed: int, prefilled: bool) -> None:
    reference = run(fmt, [text], TOOLS, prefilled)
    check_shape(reference)
    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(text):
        n = rng.randint(1, 5)
        pieces.append(text[i : i + n])
        i += n
    streamed = run(fmt, pieces, TOOLS, prefilled)
    check_shape(streamed)
    assert coalesce(streamed) == coalesce(reference)
    msg = parse_complete(fmt, text, TOOLS, prefilled=prefilled)
    assert msg.content is None or isinstance(msg.content, str)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_truncation_of_a_rich_output_never_raises(fmt: str) -> None:
    s = SYNTAXES[fmt]
    think = f"{s.think[0]}plan{s.think[1]}" if s.think else ""
    text = (
        think
        + ("" if fmt == "llama3-json" else "Checking.\n")
        + s.many([("get_weather", {"location": "Paris & <Rome>", "days": 3, "tags": ["a", "b"]}), ("noop", {})])
    )
    for cut in range(len(text) + 1):
        events = run(fmt, [text[:cut]], TOOLS, False)
        check_shape(events)
        for j in (1, 7):  # and streamed
            pieces = [text[:cut][k : k + j] for k in range(0, cut, j)]
            assert coalesce(run(fmt, pieces, TOOLS, False)) == coalesce(events)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_decoded_never_raise(fmt: str, data: bytes) -> None:
    parse_complete(fmt, data.decode("utf-8", "replace"), TOOLS)
    parse_complete(fmt, data.decode("latin-1"), None, prefilled=True)


def _mutate(text: str, rng: random.Random, n: int) -> str:
    for _ in range(n):
        if not text:
            break
        i = rng.randrange(len(text))
        j = min(len(text), i + rng.randint(1, 12))
        op = rng.randrange(4)
        if op == 0:
            text = text[:i] + text[j:]  # delete a span
        elif op == 1:
            text = text[:j] + text[i:j] + text[j:]  # duplicate a span
        elif op == 2:
            text = text[:i] + rng.choice(FRAGMENTS) + text[i:]  # insert a marker fragment
        else:
            k = rng.randrange(len(text))
            text = text[:i] + text[k : k + 8] + text[i:]  # copy text from elsewhere
    return text


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=int(os.environ.get("CHAT_FUZZ_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32), mutations=st.integers(1, 4), prefilled=st.booleans())
def test_mutated_calls_never_raise_and_are_chunk_invariant(
    fmt: str, seed: int, mutations: int, prefilled: bool
) -> None:
    s = SYNTAXES[fmt]
    think = f"{s.think[0]}plan{s.think[1]}" if s.think else ""
    valid = think + s.many(
        [
            ("get_weather", {"location": "Paris", "days": 3, "tags": ["x", "y"]}),
            ("noop", {}),
            ("get_weather", {"location": "Rome"}),
        ]
    )
    rng = random.Random(seed)
    text = _mutate(valid, rng, mutations)
    reference = run(fmt, [text], TOOLS, prefilled)
    check_shape(reference)
    pieces = [text[k : k + 3] for k in range(0, len(text), 3)]
    assert coalesce(run(fmt, pieces, TOOLS, prefilled)) == coalesce(reference)
    assert coalesce(run(fmt, list(text), TOOLS, prefilled)) == coalesce(reference)


@pytest.mark.parametrize("fmt", ["hermes", "llama3-json", "deepseek-v3"])
@settings(max_examples=80, deadline=None)
@given(body=st.text(st.sampled_from(list('\\"u0aF9\n\t\x01 x}{,:é')), max_size=24))
def test_streamed_json_strings_with_any_escapes_stay_valid_json(fmt: str, body: str) -> None:
    args = '{"location": "' + body + '", "days": 3}'
    text = {
        "hermes": f'<tool_call>{{"name": "get_weather", "arguments": {args}}}</tool_call>',
        "llama3-json": f'{{"name": "get_weather", "parameters": {args}}}',
        "deepseek-v3": (
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
            f"{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
        ),
    }[fmt]
    reference = run(fmt, [text], TOOLS, False)
    check_shape(reference)  # every ended call's fragments form valid JSON
    assert coalesce(run(fmt, list(text), TOOLS, False)) == coalesce(reference)
