"""The embedded default: SmolLM2-135M split over two local RPC workers, one
streamed chat request, speeds and per-worker memory, then everything stopped."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._assets import smollm2_path
from ._errors import EngineError
from .cluster import ClusterState, Event, cluster_state_dir, cluster_status, down, parse_spec, up
from .engine import Engine

DEFAULT_PROMPT = "In two sentences: why split a large language model across several machines?"


@dataclass
class DemoResult:
    endpoint: str
    reply: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_per_second: float | None = None
    predicted_per_second: float | None = None
    load_seconds: float | None = None
    up_seconds: float | None = None
    wall_seconds: float = 0.0
    memory: list[dict[str, Any]] = field(default_factory=list)
    kept: bool = False


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback TCP ports."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def demo_spec(port: int | None = None, ctx_size: int = 2048) -> Any:
    w1, w2, head, gw = free_ports(4)
    return parse_spec(
        {
            "name": "demo",
            "model": str(smollm2_path()),
            "workers": [{"name": "w1", "port": w1}, {"name": "w2", "port": w2}],
            "server": {"port": head, "ctx_size": ctx_size, "tensor_split": [1, 1]},
            "gateway": {"port": port or gw},
        }
    )


def stream_chat(
    endpoint: str, prompt: str, on_text: Callable[[str], None], max_tokens: int = 96, seed: int = 42
) -> dict[str, Any]:
    """One streamed chat completion; returns the usage and llama.cpp timings of the last chunk."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": seed,
        "stream_options": {"include_usage": True},
    }
    last: dict[str, Any] = {}
    text: list[str] = []
    with httpx.stream("POST", f"{endpoint}/v1/chat/completions", json=body, timeout=120.0) as resp:
        if resp.status_code != 200:
            raise EngineError(f"chat request failed: HTTP {resp.status_code}: {resp.read()[:200]!r}")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    text.append(piece)
                    on_text(piece)
            if chunk.get("timings"):
                last["timings"] = chunk["timings"]
            if chunk.get("usage"):
                last["usage"] = chunk["usage"]
    last["text"] = "".join(text)
    return last


def run_demo(
    engine: Engine,
    *,
    prompt: str = DEFAULT_PROMPT,
    keep: bool = False,
    port: int | None = None,
    on_event: Callable[[Event], None] = lambda _e: None,
    on_text: Callable[[str], None] = lambda _t: None,
) -> DemoResult:
    """Bring the demo cluster up, chat once, report, and (unless ``keep``) bring it down."""
    t0 = time.monotonic()
    spec = demo_spec(port)
    state: ClusterState | None = None
    try:
        state = up(spec, engine=engine, on_event=on_event)
        reply = stream_chat(state.endpoint, prompt, on_text)
        status = cluster_status(cluster_state_dir(spec), with_slots=False)
    except BaseException:
        down(spec)
        raise
    if not keep:
        down(spec)
    timings = reply.get("timings", {})
    usage = reply.get("usage", {})
    return DemoResult(
        endpoint=state.endpoint,
        reply=reply["text"],
        prompt_tokens=usage.get("prompt_tokens", timings.get("prompt_n")),
        completion_tokens=usage.get("completion_tokens", timings.get("predicted_n")),
        prompt_per_second=timings.get("prompt_per_second"),
        predicted_per_second=timings.get("predicted_per_second"),
        load_seconds=state.load_seconds,
        up_seconds=state.up_seconds,
        wall_seconds=round(time.monotonic() - t0, 2),
        memory=status["memory"],
        kept=keep,
    )
