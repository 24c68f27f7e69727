"""The SSE decoder and the stream timer: what each TTFT definition sees."""

from __future__ import annotations

from splitserve.bench._stream import DONE, SSEDecoder, StreamTimer, token_counts


def feed_all(lines: list[str]) -> list[object]:
    dec = SSEDecoder()
    out = []
    for line in lines:
        got = dec.feed_line(line)
        if got is not None:
            out.append(got)
    return out


def test_decoder_yields_payloads_and_done() -> None:
    got = feed_all(['data: {"a": 1}', "", ": keepalive", 'data: {"b": 2}', "", "data: [DONE]", ""])
    assert got == [{"a": 1}, {"b": 2}, DONE]


def test_decoder_joins_a_payload_split_over_data_lines() -> None:
    got = feed_all(['data: {"a":', "data: 1}", ""])
    assert got == [{"a": 1}]


def chunk(**delta: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_timer_separates_first_chunk_reasoning_content() -> None:
    t = StreamTimer()
    t.feed(chunk(role="assistant"), 0.10)  # role-only: a chunk, not a token
    t.feed(chunk(reasoning_content="hmm"), 0.20)
    t.feed(chunk(reasoning_content=" ok"), 0.25)
    t.feed(chunk(content="Hi"), 0.40)
    t.feed(chunk(content=" there"), 0.45)
    t.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, 0.46)
    t.feed(
        {
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 3}},
            "timings": {"prompt_n": 7, "cache_n": 3, "predicted_n": 4},
        },
        0.47,
    )
    tr = t.finish(0.5)
    assert (tr.first_chunk, tr.first_reasoning, tr.first_content, tr.first_token) == (0.10, 0.20, 0.40, 0.20)
    assert tr.token_times == [0.20, 0.25, 0.40, 0.45]
    assert tr.content == "Hi there" and tr.reasoning == "hmm ok"
    assert tr.finish_reason == "length" and tr.n_chunks == 7
    assert token_counts(tr) == (10, 4, 3, "usage")


def test_timer_reads_text_completions_and_tool_calls() -> None:
    t = StreamTimer()
    t.feed({"choices": [{"text": "abc", "index": 0, "finish_reason": None}]}, 0.3)
    t.feed(chunk(tool_calls=[{"index": 0, "function": {"name": "f"}}]), 0.4)
    tr = t.finish(0.5)
    assert tr.first_content == 0.3 and tr.tool_call_chunks == 1 and tr.token_times == [0.3, 0.4]


def test_error_payload_is_kept() -> None:
    t = StreamTimer()
    t.feed({"error": {"message": "context too long"}}, 0.1)
    assert t.finish(0.2).error == "context too long"


def test_token_counts_fall_back_to_timings_then_none() -> None:
    t = StreamTimer()
    t.feed({"choices": [], "timings": {"prompt_n": 5, "cache_n": 2, "predicted_n": 9}}, 0.1)
    assert token_counts(t.finish(0.2)) == (7, 9, 2, "timings")
    assert token_counts(StreamTimer().finish(0.1)) == (None, None, None, "none")
