"""Parser throughput per tool-call format: batch, streamed in tokens and one character at a time.

For every registered format (``list_formats()``) a typical output is built (reasoning first
where the format has it; content; tool calls with a short and a long string argument and an
integer) of about 1k, 10k and 100k tokens (4 characters per token), from the first source
that gives one whose calls all parse back:

- ``branch``: hand-written call text for the formats this file knows (content and a call,
  repeated);
- ``template:NAME``: the pinned llama.cpp template that detects the format, rendering one
  assistant turn with content and all the calls (``assistant_turn``, as ``template check``
  does), so any format with a pinned template is covered without code here;
- ``example``: the format's own ``example`` call with a long location, repeated.

Each output is parsed three ways, on one core, CPU time, best of ``--repeat`` runs:
``batch`` (the whole output in one call, ``parse_complete``, as ``splitserve parse`` does),
``stream`` (pieces of 1 to 8 characters, 4 on average, like tokens) and ``char`` (one
character at a time, the worst case of a streaming gateway). Reported: MB/s of model output
for each, tokens/s and microseconds per token streamed (flat from 1k to 100k: the cost is
linear in the output length). A Markdown table goes to stdout, every number to ``--out``.

    .venv/bin/python benchmarks/bench_parsers.py --out benchmarks/results/parsers.json
    .venv/bin/python benchmarks/bench_parsers.py --sizes 1000 --repeat 1 --out /tmp/p.json
    .venv/bin/python benchmarks/bench_parsers.py --formats hermes,glm-4.5 --via template
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from splitserve.chat import (
    TemplateError,
    ToolCallEnd,
    assistant_turn,
    detect_format,
    get_format,
    list_formats,
    parse_complete,
)

NS = "]<]minimax[>["
CHARS_PER_TOKEN = 4
SIZES = (1_000, 10_000, 100_000)
VIAS = ("auto", "branch", "template", "example")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                                     "note": {"type": "string"}}}}}]
NOTE = ("Check the forecast for the whole weekend, including wind & rain; "
        "compare with <last year> and report \"feels like\" temperatures. ") * 2
# for the example path, spliced into a call text of unknown escaping: no quote, < or &
PLAIN_NOTE = ("check the forecast for the whole weekend, including wind and rain, and "
              "compare with last year. ") * 2
REASONING = ("The user wants the weather. I should call get_weather for each city, "
             "then summarise. ") * 3
SENTENCE = "Let me look that up for you, one city at a time, as asked. "
# the thinking switches templates read (as the template check sets them)
THINKING_ON = {"enable_thinking": True, "thinking": True, "thinking_mode": "enabled"}


def _call(fmt: str, i: int) -> str:
    """The hand-written call text of the formats this file knows; ValueError for the others."""
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


def _reasoning_prefix(fmt: str) -> list[str]:
    spec = get_format(fmt).reasoning
    return [f"{spec.open}{REASONING}{spec.close}\n\n"] if spec else []


def _repeated(fmt: str, tokens: int, call: Any) -> tuple[str, int]:
    """Reasoning, then content and a call repeated to about ``tokens`` tokens."""
    parts = _reasoning_prefix(fmt)
    size, calls = sum(map(len, parts)), 0
    target = tokens * CHARS_PER_TOKEN
    while size < target:
        piece = ("; " if calls else "") + call(calls) if fmt == "llama3-json" else \
            SENTENCE + call(calls) + "\n"
        parts.append(piece)
        size += len(piece)
        calls += 1
    return "".join(parts), calls


def _by_branch(fmt: str, tokens: int) -> tuple[str, int, bool]:
    text, calls = _repeated(fmt, tokens, lambda i: _call(fmt, i))
    return text, calls, False


def _by_example(fmt: str, tokens: int) -> tuple[str, int, bool]:
    example = get_format(fmt).example
    if not example:
        raise ValueError(f"{fmt} has no example")
    text, calls = _repeated(fmt, tokens, lambda i: example.replace(
        "Paris", f"City number {i}, {PLAIN_NOTE}", 1))
    return text, calls, False


@lru_cache(maxsize=1)
def _pinned_templates() -> dict[str, list[tuple[str, str]]]:
    """{format: [(template name, source)]} over the pinned llama.cpp templates."""
    from splitserve.engine import resolve_source

    out: dict[str, list[tuple[str, str]]] = {}
    folder = Path(resolve_source(None).path) / "models" / "templates"
    for path in sorted(folder.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        name = detect_format(source)
        if name is not None:
            out.setdefault(name, []).append((path.stem, source))
    return out


def _turn(fmt: str, source: str, calls: int) -> tuple[str, bool]:
    f = get_format(fmt)
    message = {"role": "assistant", "content": SENTENCE, "reasoning_content": REASONING,
               "tool_calls": [{"id": f"call{i:05d}", "type": "function", "function": {
                   "name": "get_weather", "arguments": json.dumps(
                       {"location": f"City number {i}", "days": 1 + i % 7, "note": NOTE})}}
                   for i in range(calls)]}
    history = [{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "The weather in every city, please."}]
    return assistant_turn(source, history, message, f.end_markers,
                          f.reasoning.open if f.reasoning else None, TOOLS, **THINKING_ON)


def _template_for(fmt: str) -> tuple[str, str]:
    """The first pinned template of ``fmt`` whose two-call turn parses back to two calls."""
    for name, source in _pinned_templates().get(fmt, []):
        try:
            text, prefilled = _turn(fmt, source, 2)
        except TemplateError:
            continue
        if len(parse_complete(fmt, text, TOOLS, prefilled=prefilled).tool_calls) == 2:
            return name, source
    raise ValueError(f"no pinned template renders {fmt} calls that parse back")


def _by_template(fmt: str, tokens: int) -> tuple[str, int, bool, str]:
    name, source = _template_for(fmt)
    one, _ = _turn(fmt, source, 1)
    two, _ = _turn(fmt, source, 2)
    per_call = max(1, len(two) - len(one))
    calls = max(1, -(-(tokens * CHARS_PER_TOKEN - len(one)) // per_call) + 1)
    text, prefilled = _turn(fmt, source, calls)
    return text, calls, prefilled, name


def typical_output(fmt: str, tokens: int, via: str = "auto") -> dict[str, Any]:
    """An output of about ``tokens`` tokens: text, calls, prefilled and the source used."""
    order = {"auto": ("branch", "template", "example")}.get(via, (via,))
    errors = []
    for source in order:
        try:
            if source == "template":
                text, calls, prefilled, name = _by_template(fmt, tokens)
                source = f"template:{name}"
            else:
                text, calls, prefilled = (_by_branch if source == "branch" else _by_example)(
                    fmt, tokens)
        except ValueError as exc:
            errors.append(f"{source}: {exc}")
            continue
        got = len(parse_complete(fmt, text, TOOLS, prefilled=prefilled).tool_calls)
        if got == calls:
            return {"text": text, "calls": calls, "prefilled": prefilled, "source": source}
        errors.append(f"{source}: parsed {got} of {calls} calls")
    raise ValueError(f"{fmt}: no typical output ({'; '.join(errors)})")


def pieces_of(text: str, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 2 * CHARS_PER_TOKEN - 1) if rng.random() < 0.9 else 2 * CHARS_PER_TOKEN
        out.append(text[i:i + n])
        i += n
    return out


def _streamed(fmt: str, pieces: list[str] | str, prefilled: bool, calls: int,
              repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        parser = get_format(fmt).parser(TOOLS, prefilled=prefilled)
        ended = 0
        start = time.process_time()  # CPU time of this one process: robust on a shared host
        for piece in pieces:  # events are consumed, not kept, as a streaming gateway does
            for event in parser.feed(piece):
                ended += isinstance(event, ToolCallEnd)
        for event in parser.finish():
            ended += isinstance(event, ToolCallEnd)
        best = min(best, time.process_time() - start)
        assert ended == calls, f"{fmt}: parsed {ended} of {calls} calls"
    return best


def measure(fmt: str, tokens: int, repeat: int, char_repeat: int,
            via: str = "auto") -> dict[str, Any]:
    out = typical_output(fmt, tokens, via)
    text, calls, prefilled = out["text"], out["calls"], out["prefilled"]
    pieces = pieces_of(text)
    n_bytes, n_tokens = len(text.encode()), len(text) / CHARS_PER_TOKEN
    best = _streamed(fmt, pieces, prefilled, calls, repeat)
    char = _streamed(fmt, text, prefilled, calls, char_repeat) if char_repeat else None
    batch = float("inf")
    for _ in range(repeat):  # the whole output at once (parse_complete, `splitserve parse`)
        start = time.process_time()
        whole = parse_complete(fmt, text, TOOLS, prefilled=prefilled)
        batch = min(batch, time.process_time() - start)
        assert len(whole.tool_calls) == calls
    result = {"source": out["source"], "prefilled": prefilled,
              "tokens": round(n_tokens), "chars": len(text), "bytes": n_bytes,
              "pieces": len(pieces), "calls": calls, "seconds": best,
              "mb_per_s": n_bytes / best / 1e6, "tokens_per_s": n_tokens / best,
              "us_per_token": best / n_tokens * 1e6, "one_piece_seconds": batch,
              "one_piece_us_per_token": batch / n_tokens * 1e6,
              "batch_mb_per_s": n_bytes / batch / 1e6}
    if char is not None:
        result.update({"char_seconds": char, "char_mb_per_s": n_bytes / char / 1e6,
                       "char_us_per_token": char / n_tokens * 1e6})
    return result


def _mbps(r: dict[str, Any], key: str) -> str:
    return f"{r[key]:.2f}" if key in r else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/parsers.json")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the batch and token-streamed parses; the best counts")
    ap.add_argument("--char-repeat", type=int, default=1,
                    help="runs of the one-character-at-a-time parse (0: skip it); the "
                         "slowest mode, one run of 100k tokens takes seconds")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="tokens, comma-separated")
    ap.add_argument("--formats", default=",".join(f.name for f in list_formats()),
                    help="comma-separated; default: every registered format")
    ap.add_argument("--via", choices=VIAS, default="auto",
                    help="how typical outputs are built: auto tries branch, template, example")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    rows = [("| format | source | tokens | calls | batch MB/s | stream MB/s | char MB/s "
             "| stream tokens/s | stream µs/token | char µs/token |"),
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for fmt in args.formats.split(","):
        try:
            results[fmt] = [measure(fmt, size, args.repeat, args.char_repeat, args.via)
                            for size in sizes]
        except (ValueError, AssertionError) as exc:
            failed[fmt] = str(exc)
            results.pop(fmt, None)
            rows.append(f"| `{fmt}` | failed: {exc} | | | | | | | | |")
            continue
        for r in results[fmt]:
            char_us = f"{r['char_us_per_token']:.2f}" if "char_us_per_token" in r else "-"
            rows.append(f"| `{fmt}` | {r['source']} | {r['tokens']} | {r['calls']} "
                        f"| {_mbps(r, 'batch_mb_per_s')} | {_mbps(r, 'mb_per_s')} "
                        f"| {_mbps(r, 'char_mb_per_s')} | {r['tokens_per_s']:,.0f} "
                        f"| {r['us_per_token']:.2f} | {char_us} |")
    print("\n".join(rows))
    linear = [f"`{fmt}` {rs[-1]['us_per_token'] / rs[0]['us_per_token']:.2f}"
              for fmt, rs in results.items() if len(rs) > 1]
    if linear:  # flat (about 1) when the cost is linear in the output length
        print("\nlinearity, stream µs/token at the largest size / at the smallest: "
              + ", ".join(linear))
    doc = {"benchmark": "bench_parsers", "chars_per_token": CHARS_PER_TOKEN,
           "python": platform.python_version(), "machine": platform.machine(),
           "processor": platform.processor(), "cores_used": 1, "via": args.via,
           "repeat": args.repeat, "char_repeat": args.char_repeat, "results": results,
           "failed": failed}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {args.out}")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
