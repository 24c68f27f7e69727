"""Figures of the dashboard (issue 19) on a running cluster started by `splitserve up`:

- page weight: bytes of /ui, its two static files and one /ui/state (the gateway sends them
  uncompressed, so this is what goes over the wire, headers aside);
- time to first render: navigation to the page filled from /ui/state, in headless Chromium
  (Debian's, via Playwright), median of --renders runs with the key already in the tab;
- the gateway's extra CPU per second with one page open (its /proc utime+stime over --seconds,
  without and with the page);
- decode tokens/s through the gateway over direct to llama-server, with the page open.

Usage: python benchmarks/bench_ui.py -c cluster.toml [--key KEY] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import httpx

from splitserve.cluster import cluster_state_dir, load_spec, read_state

CHROMIUM = "/usr/bin/chromium"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_second(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def page_weight(base: str, headers: dict[str, str]) -> dict[str, int]:
    with httpx.Client(timeout=10) as c:
        return {path: len(c.get(base + path, headers=headers).content)
                for path in ("/ui", "/ui/static/app.js", "/ui/static/app.css", "/ui/state")}


def decode_tps(url: str, path: str, body: dict, headers: dict[str, str], n: int) -> float:
    """Mean decode t/s of ``n`` streamed requests (the engine's own timings in the last event)."""
    import json

    rates = []
    for _ in range(n):
        t_first = t_last = None
        count = 0
        with httpx.stream("POST", url + path, json=body, headers=headers, timeout=300) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data: {"):
                    continue
                data = json.loads(line[6:])
                piece = data.get("content") if "content" in data else \
                    ((data.get("choices") or [{}])[0].get("delta") or {}).get("content")
                if piece:
                    now = time.perf_counter()
                    t_first = t_first or now
                    t_last = now
                    count += 1
        if t_first and t_last and count > 1:
            rates.append((count - 1) / (t_last - t_first))
    return statistics.mean(rates) if rates else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--config", type=Path, required=True)
    ap.add_argument("--key", default=os.environ.get("SPLITSERVE_API_KEY"))
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--renders", type=int, default=5)
    ap.add_argument("--requests", type=int, default=3)
    args = ap.parse_args()
    state = read_state(cluster_state_dir(load_spec(args.config)))
    assert state is not None and state.gateway is not None, "no running cluster with a gateway"
    base, gw_pid = state.endpoint.rstrip("/"), state.gateway.pid
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    weights = page_weight(base, headers)
    print(f"page weight: {sum(weights.values()) / 1024:.1f} KB "
          f"({', '.join(f'{p} {b / 1024:.1f} KB' for p, b in weights.items())}); each poll after: "
          f"{weights['/ui/state'] / 1024:.1f} KB/s")

    idle = cpu_per_second(gw_pid, args.seconds)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        ctx = browser.new_context()
        if args.key:
            ctx.add_init_script(f"sessionStorage.setItem('splitserve-key', {args.key!r})")
        renders = []
        for _ in range(args.renders):
            page = ctx.new_page()
            t0 = time.perf_counter()
            page.goto(base + "/ui")
            page.wait_for_selector("body[data-rendered='1']", timeout=30_000)
            renders.append(time.perf_counter() - t0)
            page.close()
        page = ctx.new_page()
        page.goto(base + "/ui")
        page.wait_for_selector("body[data-rendered='1']")
        time.sleep(2)
        open_ = cpu_per_second(gw_pid, args.seconds)
        print(f"time to first render: median {statistics.median(renders) * 1000:.0f} ms "
              f"(min {min(renders) * 1000:.0f}, max {max(renders) * 1000:.0f}, {len(renders)} loads)")
        print(f"gateway CPU: {idle * 100:.2f} % of a core idle, {open_ * 100:.2f} % with one page open: "
              f"+{(open_ - idle) * 1000:.1f} ms CPU per second")
        prompt = "Write a long story about a lighthouse keeper."
        native = {"prompt": prompt, "n_predict": 128, "stream": True, "temperature": 0, "ignore_eos": True,
                  "cache_prompt": False}
        chat = {"model": "x", "messages": [{"role": "user", "content": prompt}], "max_tokens": 128,
                "stream": True, "temperature": 0, "ignore_eos": True}
        direct = decode_tps(state.engine_url.rstrip("/"), "/completion", native, {}, args.requests)
        via = decode_tps(base, "/v1/chat/completions", chat, headers, args.requests)
        print(f"decode t/s with the page open: direct {direct:.1f}, gateway {via:.1f}, "
              f"gateway/direct {via / direct:.3f}")
        browser.close()


if __name__ == "__main__":
    main()
