"""``bench engine``: llama-bench's in-process pp/tg figures, through the same RPC workers.

The command line is built as data (:func:`llama_bench_argv`), run with
``-o jsonl`` so each finished test arrives as one line, and the rows are kept
verbatim (``avg_ts``, ``stddev_ts``, ``samples_ts``, ``n_prompt``, ``n_gen``,
``n_depth``, ``n_ubatch`` ...).  No HTTP is involved: the ratio of the HTTP
bench's decode speed to these figures is the cost of the serving path.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import EngineError


@dataclass
class EngineBenchOptions:
    prompt_tokens: list[int] = field(default_factory=lambda: [512])
    gen_tokens: list[int] = field(default_factory=lambda: [128])
    depths: list[int] = field(default_factory=list)
    ubatch: list[int] = field(default_factory=list)
    batch: list[int] = field(default_factory=list)
    repetitions: int = 3
    n_gpu_layers: int = 999
    flash_attn: str | None = None
    threads: int | None = None
    extra_args: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _csv(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


def llama_bench_argv(bench: Path, model: Path, rpc: list[str], opts: EngineBenchOptions) -> list[str]:
    """llama-bench's command line (jsonl output on stdout)."""
    argv = [str(bench), "-m", str(model), "-o", "jsonl", "-r", str(opts.repetitions), "-ngl", str(opts.n_gpu_layers)]
    if rpc:
        argv += ["--rpc", ",".join(rpc)]
    if opts.prompt_tokens:
        argv += ["-p", _csv(opts.prompt_tokens)]
    if opts.gen_tokens:
        argv += ["-n", _csv(opts.gen_tokens)]
    if opts.depths:
        argv += ["-d", _csv(opts.depths)]
    if opts.ubatch:
        argv += ["-ub", _csv(opts.ubatch)]
    if opts.batch:
        argv += ["-b", _csv(opts.batch)]
    if opts.flash_attn:
        argv += ["-fa", {"on": "1", "off": "0"}.get(opts.flash_attn, opts.flash_attn)]
    if opts.threads:
        argv += ["-t", str(opts.threads)]
    return argv + list(opts.extra_args)


def count_tests(opts: EngineBenchOptions) -> int:
    """How many rows llama-bench will print (pp tests + tg tests, times the parameter grid)."""
    tests = len([p for p in opts.prompt_tokens if p > 0]) + len([n for n in opts.gen_tokens if n > 0])
    grid = max(1, len(opts.depths)) * max(1, len(opts.ubatch)) * max(1, len(opts.batch))
    return tests * grid


def bench_test_label(row: dict[str, Any]) -> str:
    """llama-bench's own label: ``pp512``, ``tg128``, ``pp512 @ d4096``."""
    n_p, n_g, d = int(row.get("n_prompt", 0)), int(row.get("n_gen", 0)), int(row.get("n_depth", 0))
    if n_p and n_g:
        name = f"pp{n_p}+tg{n_g}"
    elif n_p:
        name = f"pp{n_p}"
    else:
        name = f"tg{n_g}"
    return name + (f" @ d{d}" if d else "")


def run_llama_bench(
    argv: list[str],
    on_row: Callable[[dict[str, Any]], None],
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> int:
    """Run llama-bench, calling ``on_row`` for each result line; returns the rows seen."""
    full_env = dict(os.environ)
    lib = str(Path(argv[0]).parent)
    full_env["LD_LIBRARY_PATH"] = lib + (
        os.pathsep + full_env["LD_LIBRARY_PATH"] if full_env.get("LD_LIBRARY_PATH") else ""
    )
    full_env.update(env or {})
    errfile = open(log, "w") if log else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errfile, text=True, env=full_env)
    except OSError as exc:
        raise EngineError(f"cannot run {argv[0]}: {exc.strerror}") from None
    rows = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows += 1
            on_row(row)
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if not isinstance(errfile, int):  # the log file (DEVNULL is an int)
            errfile.close()
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log and log.exists() else []
        raise EngineError(
            f"llama-bench exited with code {code}: {tail[0] if tail else 'no output'}"
            + (f" (log: {log})" if log else "")
        )
    return rows
