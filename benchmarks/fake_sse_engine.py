"""A stand-in for llama-server that streams tokens at a fixed rate, for measuring the gateway.

It answers what the gateway and ``bench_gateway.py`` ask (``/health``, ``/props``,
``/v1/models``, ``/tokenize``, streamed ``/completion`` and ``/v1/chat/completions``) over
HTTP/1.1 with keep-alive and chunked bodies, and writes one event per token at ``--rate``
tokens/s per request, on a schedule (token i at start + i/rate), so both sides of a
comparison get exactly the same engine. It is a raw asyncio server, not starlette, so that
its own cost is small and the same for both sides.

    python benchmarks/fake_sse_engine.py --port 8090 --rate 600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROPS = {"chat_template": TEMPLATE, "model_path": "/models/fake.gguf", "total_slots": 8,
         "bos_token": "", "eos_token": "<|im_end|>",
         "default_generation_settings": {"n_ctx": 16384}}


def _head(status: int, ctype: str, chunked: bool, length: int = 0) -> bytes:
    lines = [f"HTTP/1.1 {status} OK", f"Content-Type: {ctype}", "Keep-Alive: timeout=5"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class Engine:
    def __init__(self, rate: float) -> None:
        self.rate = rate

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *headers = head.decode("latin-1").split("\r\n")
                method, path, _ = line.split(" ", 2)
                length = 0
                for h in headers:
                    if h.lower().startswith("content-length:"):
                        length = int(h.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                await self.answer(method, path.split("?")[0], body, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, path: str, body: dict, writer: asyncio.StreamWriter) -> None:
        if path in ("/completion", "/v1/chat/completions") and method == "POST":
            await self.stream(path, body, writer)
            return
        if path == "/health":
            data: object = {"status": "ok"}
        elif path == "/props":
            data = PROPS
        elif path == "/v1/models":
            data = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
        elif path == "/tokenize":
            data = {"tokens": [1] if body.get("add_special") else []}
        else:
            raw = b'{"error":"not found"}'
            writer.write(_head(404, "application/json", False, len(raw)) + raw)
            await writer.drain()
            return
        raw = json.dumps(data).encode()
        writer.write(_head(200, "application/json", False, len(raw)) + raw)
        await writer.drain()

    async def stream(self, path: str, body: dict, writer: asyncio.StreamWriter) -> None:
        n = int(body.get("n_predict") or body.get("max_tokens") or 16)
        n = 16 if n < 0 else n
        chat = path == "/v1/chat/completions"
        writer.write(_head(200, "text/event-stream", True))
        start = time.perf_counter()
        for i in range(n):
            delay = start + (i + 1) / self.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if chat:
                ev = {"choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}],
                      "created": 0, "id": "chatcmpl-x", "model": "fake", "object": "chat.completion.chunk"}
            else:
                ev = {"index": 0, "content": " tok", "tokens": [], "stop": False, "id_slot": 0,
                      "tokens_predicted": i + 1, "tokens_evaluated": 20}
            writer.write(_chunk(b"data: " + json.dumps(ev).encode() + b"\n\n"))
            await writer.drain()
        took = time.perf_counter() - start
        timings = {"cache_n": 19, "prompt_n": 1, "prompt_ms": 0.1, "predicted_n": n,
                   "predicted_ms": took * 1000, "predicted_per_second": n / took if took else 0.0}
        if chat:
            finals = [{"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                       "object": "chat.completion.chunk", "model": "fake"},
                      {"choices": [], "object": "chat.completion.chunk", "model": "fake",
                       "usage": {"completion_tokens": n, "prompt_tokens": 20, "total_tokens": n + 20},
                       "timings": timings}]
            out = b"".join(_chunk(b"data: " + json.dumps(f).encode() + b"\n\n") for f in finals)
            out += _chunk(b"data: [DONE]\n\n")
        else:
            final = {"index": 0, "content": "", "stop": True, "stop_type": "limit", "tokens": [],
                     "tokens_predicted": n, "tokens_evaluated": 20, "timings": timings}
            out = _chunk(b"data: " + json.dumps(final).encode() + b"\n\n")
        writer.write(out + b"0\r\n\r\n")
        await writer.drain()


async def main(port: int, rate: float) -> None:
    server = await asyncio.start_server(Engine(rate).handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, default=600.0, help="tokens per second per request")
    args = ap.parse_args()
    asyncio.run(main(args.port, args.rate))
