"""How many of splitserve's source files a request (and `up`) walks through, traced with
``sys.setprofile``: issue 31's "files and transitions crossed" figure.

Two paths, each on fakes (no process, no socket):

- ``chat``: a streamed chat completion with a tool, through the gateway's ASGI app
  (``create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), FakeEngine(...))``)
  driven by httpx's ASGITransport; the FakeEngine writes a hermes tool call in 12 tokens.
- ``up``: ``cluster.up`` of a two-worker local spec on a :class:`FakeNetwork` (tests/fake_cluster.py).

*files* are the distinct splitserve files whose code ran; a *cross-file call* is a call into a
splitserve file from code of another splitserve file (the nearest splitserve frame below it); a
*transition* is two consecutive profile events (Python calls and returns) in different splitserve
files, counting only events whose frame is in a splitserve file (a call there and back is two). Both are counted for the measured work only (the app and spec are
built before tracing starts). ``--src``/``--tests`` point at another checkout's trees, so the
same script measures an older revision::

    git worktree add /tmp/before 5d6d81f
    python benchmarks/trace_paths.py --src /tmp/before/src --tests /tmp/before/tests --json before.json
    python benchmarks/trace_paths.py --json after.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class Tracer:
    """Counts splitserve files and file-to-file transitions of the profile events it sees."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve()) + "/"
        self.files: Counter[str] = Counter()
        self.transitions = 0
        self.cross_calls = 0
        self.pairs: Counter[tuple[str, str]] = Counter()
        self._last: str | None = None
        self._known: dict[str, str | None] = {}

    def _rel(self, filename: str) -> str | None:
        rel = self._known.get(filename, "")
        if rel == "":
            rel = filename[len(self.root) :] if filename.startswith(self.root) else None
            self._known[filename] = rel
        return rel

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        rel = self._rel(frame.f_code.co_filename)
        if rel is None:
            return
        self.files[rel] += 1
        if event == "call":  # a call from another splitserve file into this one
            caller = frame.f_back
            while caller is not None and self._rel(caller.f_code.co_filename) is None:
                caller = caller.f_back
            if caller is not None and self._rel(caller.f_code.co_filename) != rel:
                self.cross_calls += 1
        if self._last is not None and rel != self._last:
            self.transitions += 1
            self.pairs[(self._last, rel)] += 1
        self._last = rel

    def run(self, work: Callable[[], Any]) -> Any:
        threading.setprofile(self)
        sys.setprofile(self)
        try:
            return work()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def result(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "transitions": self.transitions,
            "cross_file_calls": self.cross_calls,
            "by_file": dict(self.files.most_common()),
            "busiest_pairs": [f"{a} <-> {b}: {n}" for (a, b), n in self._undirected().most_common(8)],
        }

    def _undirected(self) -> Counter[tuple[str, str]]:
        out: Counter[tuple[str, str]] = Counter()
        for (a, b), n in self.pairs.items():
            a2, b2 = sorted((a, b))
            out[(a2, b2)] += n
        return out


TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'


def chat_work() -> Callable[[], Any]:
    import anyio
    import httpx

    from splitserve.engine import FakeEngine, resolve_source
    from splitserve.gateway import GatewayConfig, create_app

    template = (resolve_source(None).path / "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    pieces = [TOOL_CALL[i : i + 8] for i in range(0, len(TOOL_CALL), 8)]
    engine = FakeEngine(
        [pieces],
        props={
            "chat_template": template,
            "model_path": "/models/m.gguf",
            "default_generation_settings": {"n_ctx": 65536},
            "total_slots": 4,
        },
    )
    app = create_app(GatewayConfig(engine_url="fake://", model_format="hermes"), engine)
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": {
                        "type": "object",
                        "properties": {"location": {"type": "string"}},
                        "required": ["location"],
                    },
                },
            }
        ],
    }

    async def once() -> str:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            r = await c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            assert '"tool_calls"' in r.text and "get_weather" in r.text, r.text
            return r.text

    anyio.run(once)  # warm: templates compiled, props cached, as on a running gateway
    return lambda: anyio.run(once)


def up_work(tmp: Path) -> Callable[[], Any]:
    from fake_cluster import ENGINE, local_spec  # type: ignore[import-not-found]
    from splitserve.cluster import FakeNetwork, down, up
    from splitserve.engine import FakeEngine

    spec = local_spec(tmp)

    def once() -> Any:
        net = FakeNetwork()
        edges = net.edges(FakeEngine(loading=2))
        state = up(spec, engine=ENGINE, preflight=False, edges=edges)
        assert state.phase == "ready", state
        return state, net, edges

    _state, _net, edges = once()  # warm: imports done, as the measured run will find them
    down(spec, edges=edges)
    return once


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", type=Path, default=REPO / "src", help="the src/ tree to measure")
    p.add_argument("--tests", type=Path, default=REPO / "tests", help="its tests/ tree (fake_cluster.py)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    sys.path[:0] = [str(args.src), str(args.tests)]
    import splitserve

    root = Path(splitserve.__file__).parent.parent
    assert root.resolve() == args.src.resolve(), f"splitserve imported from {root}, not {args.src}"
    out: dict[str, Any] = {"src": str(args.src)}
    chat = chat_work()
    t = Tracer(root)
    t.run(chat)
    out["chat_stream_tool_call"] = t.result()
    with tempfile.TemporaryDirectory() as tmp:
        upw = up_work(Path(tmp))
        t = Tracer(root)
        t.run(upw)
        out["up_fakes"] = t.result()
    for name in ("chat_stream_tool_call", "up_fakes"):
        r = out[name]
        print(f"{name}: {r['files']} files, {r['transitions']} transitions, {r['cross_file_calls']} cross-file calls")
        for line in r["busiest_pairs"][:4]:
            print(f"  {line}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
