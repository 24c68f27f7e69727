"""Parser throughput per tool-call format, streamed in token-sized pieces, on one core.

For each format a typical output is built (reasoning first where the format has it, then
repeated: a sentence of content and a tool call with a short and a long string argument
and an integer) of about 1k, 10k and 100k tokens (4 characters per token), and fed to the
format's parser in pieces of 1 to 8 characters (4 on average, like tokens). Reported:
MB/s and tokens/s from CPU time (best of ``--repeat`` runs, pinned to one core) and
microseconds per token, whose flatness
from 1k to 100k shows the cost is linear in the output length; also the cost of parsing the
whole output in one call (``parse_complete``, as ``splitserve parse`` does).

    .venv/bin/python benchmarks/bench_parsers.py --out benchmarks/results/parsers.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from typing import Any

from splitserve.chat import ToolCallEnd, get_format, list_formats, parse_complete

NS = "]<]minimax[>["
CHARS_PER_TOKEN = 4
SIZES = (1_000, 10_000, 100_000)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                                     "note": {"type": "string"}}}}}]
NOTE = ("Check the forecast for the whole weekend, including wind & rain; "
        "compare with <last year> and report \"feels like\" temperatures. ") * 2
REASONING = ("The user wants the weather. I should call get_weather for each city, "
             "then summarise. ") * 3
SENTENCE = "Let me look that up for you, one city at a time, as asked. "


def _call(fmt: str, i: int) -> str:
    loc, days = f"City number {i}", 1 + i % 7
    if fmt == "minimax-m3":
        return (f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<location>{loc}'
                f"{NS}</location>{NS}<days>{days}{NS}</days>{NS}<note>{NOTE}{NS}</note>"
                f"{NS}</invoke>\n{NS}</tool_call>")
    if fmt in ("minimax-m2", "minimax-m3-hybrid"):
        return (f'<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="location">'
                f'{loc}</parameter>\n<parameter name="days">{days}</parameter>\n'
                f'<parameter name="note">{NOTE}</parameter>\n</invoke>\n</minimax:tool_call>')
    if fmt == "qwen3-coder":
        return (f"<tool_call>\n<function=get_weather>\n<parameter=location>\n{loc}\n</parameter>\n"
                f"<parameter=days>\n{days}\n</parameter>\n<parameter=note>\n{NOTE}\n</parameter>\n"
                "</function>\n</tool_call>")
    args = {"location": loc, "days": days, "note": NOTE}
    if fmt == "hermes":
        return "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": args}) + \
            "\n</tool_call>"
    if fmt == "llama3-json":
        return json.dumps({"name": "get_weather", "parameters": args})
    if fmt == "deepseek-v3":
        return ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                + json.dumps(args) + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    raise ValueError(fmt)


def typical_output(fmt: str, tokens: int) -> tuple[str, int]:
    """An output of about ``tokens`` tokens, and the number of calls in it."""
    spec = get_format(fmt).reasoning
    parts = [f"{spec.open}{REASONING}{spec.close}\n\n"] if spec else []
    size, calls = sum(map(len, parts)), 0
    target = tokens * CHARS_PER_TOKEN
    while size < target:
        piece = ("; " if calls else "") + _call(fmt, calls) if fmt == "llama3-json" else \
            SENTENCE + _call(fmt, calls) + "\n"
        parts.append(piece)
        size += len(piece)
        calls += 1
    return "".join(parts), calls


def pieces_of(text: str, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 2 * CHARS_PER_TOKEN - 1) if rng.random() < 0.9 else 2 * CHARS_PER_TOKEN
        out.append(text[i:i + n])
        i += n
    return out


def measure(fmt: str, tokens: int, repeat: int) -> dict[str, Any]:
    text, calls = typical_output(fmt, tokens)
    pieces = pieces_of(text)
    best = float("inf")
    for _ in range(repeat):
        parser = get_format(fmt).parser(TOOLS, prefilled=False)
        ended = 0
        start = time.process_time()  # CPU time of this one process: robust on a shared host
        for piece in pieces:  # events are consumed, not kept, as a streaming gateway does
            for event in parser.feed(piece):
                ended += isinstance(event, ToolCallEnd)
        for event in parser.finish():
            ended += isinstance(event, ToolCallEnd)
        best = min(best, time.process_time() - start)
    assert ended == calls, f"{fmt}: parsed {ended} of {calls} calls"
    start = time.process_time()  # the whole output at once (parse_complete, `splitserve parse`)
    whole = parse_complete(fmt, text, TOOLS, prefilled=False)
    one_piece = time.process_time() - start
    assert len(whole.tool_calls) == calls
    n_tokens = len(text) / CHARS_PER_TOKEN
    return {"tokens": round(n_tokens), "chars": len(text), "bytes": len(text.encode()),
            "pieces": len(pieces), "calls": calls, "seconds": best,
            "mb_per_s": len(text.encode()) / best / 1e6, "tokens_per_s": n_tokens / best,
            "us_per_token": best / n_tokens * 1e6, "one_piece_seconds": one_piece,
            "one_piece_us_per_token": one_piece / n_tokens * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/parsers.json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--formats", default=",".join(f.name for f in list_formats()))
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {}
    print(f"{'format':<19}{'tokens':>8}{'MB/s':>8}{'tokens/s':>11}{'us/token':>10}{'calls':>7}"
          f"{'one-piece us/token':>20}")
    for fmt in args.formats.split(","):
        results[fmt] = []
        for size in sizes:
            r = measure(fmt, size, args.repeat)
            results[fmt].append(r)
            print(f"{fmt:<19}{r['tokens']:>8}{r['mb_per_s']:>8.2f}{r['tokens_per_s']:>11,.0f}"
                  f"{r['us_per_token']:>10.2f}{r['calls']:>7}{r['one_piece_us_per_token']:>20.2f}")
        first, last = results[fmt][0], results[fmt][-1]
        print(f"{'':<19}linearity: us/token at {last['tokens']} / at {first['tokens']} = "
              f"{last['us_per_token'] / first['us_per_token']:.2f}")
    doc = {"benchmark": "bench_parsers", "chars_per_token": CHARS_PER_TOKEN,
           "python": platform.python_version(), "machine": platform.machine(),
           "processor": platform.processor(), "cores_used": 1, "results": results}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
