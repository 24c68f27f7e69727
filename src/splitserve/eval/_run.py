"""``eval run``: every (scenario, trial) of a suite against an endpoint, as an inspect_ai eval.

inspect_ai schedules the samples (one per scenario × trial, ``max_samples`` = the
concurrency), drives the model through its OpenAI-compatible provider and writes its own
log (``RUN/inspect/``, readable with ``inspect view``). On top of it: the time budget
scaled by the endpoint's decode speed, our graders and failure causes, and the
append-only ``RUN/run.jsonl`` (``_records``) that makes the run resumable trial by trial.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from .._errors import AuthError, SplitserveError, UsageError
from ._bfcl import bfcl_item
from ._grade import grade
from ._play import play
from ._records import RUN_FILE, read_records
from ._scenario import Scenario
from ._wire import eval_model

REFERENCE_TPS = 50.0  # the decode speed at which a scenario's timeout_seconds apply unscaled
PROBE_PROMPT = "Count from 1 to 60, separated by spaces. Output only the numbers."


class EvalError(SplitserveError):
    """An eval that cannot start: endpoint unreachable, bad run folder."""


@dataclass
class RunOptions:
    suite: str
    url: str
    out: Path
    model: str | None = None
    api_key: str | None = None
    trials: int = 1
    concurrency: int = 1
    tier: str | None = None
    category: str | None = None
    limit: int | None = None
    time_scale: float | None = None  # None: from the measured decode speed
    max_tokens: int = 2048  # per model turn
    label: str = ""
    filters: dict[str, Any] = field(default_factory=dict)
    api: str = "chat"  # the wire API the agent loop speaks: chat | messages | responses (see _wire)
    sandbox: str = "local"  # inspect_ai sandbox provider for scenarios with a workspace: local | docker


def base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def resolve_model(client: httpx.AsyncClient, url: str) -> str:
    try:
        resp = await client.get(f"{base_url(url)}/models")
        if resp.status_code == 401:
            raise AuthError(f"{base_url(url)}/models")
        resp.raise_for_status()
        return str(resp.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise EvalError(f"--url {url}: cannot list models ({type(exc).__name__}: {exc}); give --model") from None


async def measure_decode(client: httpx.AsyncClient, url: str, model: str) -> float:
    """Decode tokens per second of one short greedy completion (llama.cpp's own timing
    when the endpoint reports it, else completion tokens over the request's wall time)."""
    body = {"model": model, "messages": [{"role": "user", "content": PROBE_PROMPT}], "max_tokens": 64, "temperature": 0}
    started = time.monotonic()
    try:
        resp = await client.post(f"{base_url(url)}/chat/completions", json=body)
        if resp.status_code == 401:
            raise AuthError(f"{base_url(url)}/chat/completions")
        resp.raise_for_status()
        data = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise EvalError(
            f"--url {url}: the endpoint did not answer a chat completion ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    elapsed = time.monotonic() - started
    timings = data.get("timings") or {}
    if timings.get("predicted_per_second"):
        return float(timings["predicted_per_second"])
    tokens = (data.get("usage") or {}).get("completion_tokens") or 0
    return tokens / elapsed if tokens and elapsed > 0 else 0.0


def time_scale_for(tps: float) -> float:
    """Factor on every ``timeout_seconds``: 1 at or above REFERENCE_TPS, slower servers more."""
    return 1.0 if tps <= 0 or tps >= REFERENCE_TPS else REFERENCE_TPS / tps


class RunFile:
    """The append-only run file; one whole line per write, flushed."""

    def __init__(self, run: Path) -> None:
        run.mkdir(parents=True, exist_ok=True)
        self.path = run / RUN_FILE
        self.done: set[tuple[str, int]] = set()
        self.header: dict[str, Any] | None = None
        self.passes = 0
        self.scored = 0
        if self.path.exists():
            for rec in read_records(self.path):
                if rec.get("type") == "trial":
                    self.done.add((rec["scenario"], int(rec["trial"])))
                    if rec.get("verdict") in ("pass", "fail"):
                        self.scored += 1
                        self.passes += rec["verdict"] == "pass"
                elif rec.get("type") == "run" and self.header is None:
                    self.header = rec
        self._fh = self.path.open("a", encoding="utf-8")
        if _last_byte(self.path) not in (b"", b"\n"):
            self._fh.write("\n")  # a line cut by a kill stays alone (and is skipped on read)

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return b""
        fh.seek(-1, 2)
        return fh.read(1)


def trial_record(
    scenario: Scenario,
    trial: int,
    trace: Any,
    graded: Any,
    started: str,
    duration: float,
    gen_s: float,
    budget_s: float,
) -> dict[str, Any]:
    return {
        "type": "trial",
        "scenario": scenario.id,
        "trial": trial,
        "tier": scenario.tier,
        "category": scenario.category,
        "verdict": graded.verdict,
        "score": graded.score,
        "cause": graded.cause,
        "evidence": graded.evidence,
        "checks": [{"check": c.check, "role": c.role, "passed": c.passed, "detail": c.detail} for c in graded.checks],
        "duration_s": round(duration, 4),
        "gen_s": round(gen_s, 4),
        "time_budget_s": round(budget_s, 2),
        "turns": trace.turns,
        "tool_calls": len(trace.calls),
        "prompt_tokens": trace.prompt_tokens,
        "completion_tokens": trace.completion_tokens,
        "messages": trace.messages,
        "calls": [
            {"index": c.index, "name": c.name, "args": c.args, "result": c.result, "result_kind": c.result_kind}
            for c in trace.calls
        ],
        "response": trace.response,
        "error": trace.error,
        "started_at": started,
    }


Progress = Callable[[int, int, int, int], None]  # (done, total, passes, scored)


async def run_eval(opts: RunOptions, scenarios: list[Scenario], progress: Progress | None = None) -> Path:
    """Run (or continue) the eval into ``opts.out``; returns the run file."""
    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import Sample
    from inspect_ai.model import GenerateConfig, get_model
    from inspect_ai.scorer import Score, accuracy, scorer, stderr
    from inspect_ai.solver import solver
    from inspect_ai.util._display import init_display_type

    init_display_type("none")  # our own progress bar; inspect's would fight it for the terminal
    if not scenarios:
        raise UsageError("eval run: no scenario matches the filters")
    from ._sandbox import docker_problem, oracle_state, sandbox_spec

    sandboxed = any(s.sandbox is not None for s in scenarios)
    task_sandbox = sandbox_spec(opts.sandbox) if sandboxed else None  # ValueError: an unknown provider
    if sandboxed and opts.sandbox == "docker" and (problem := docker_problem()) is not None:
        raise EvalError(problem)
    references: dict[str, asyncio.Task[Any]] = {}  # scenario id -> the oracle's end state, once per run
    record_file = RunFile(opts.out)
    previous = record_file.header
    if previous is not None and previous.get("suite") != opts.suite:
        record_file.close()
        raise EvalError(
            f"-o {opts.out}: this run folder holds a run of suite {previous.get('suite')!r}, "
            f"not {opts.suite!r}; give another -o"
        )
    try:
        headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
        async with httpx.AsyncClient(timeout=120, headers=headers) as client:
            model_name = opts.model or await resolve_model(client, opts.url)
            tps = await measure_decode(client, opts.url, model_name)
        scale = opts.time_scale if opts.time_scale is not None else time_scale_for(tps)
        by_id = {s.id: s for s in scenarios}
        todo = [(s.id, k) for s in scenarios for k in range(opts.trials) if (s.id, k) not in record_file.done]
        total = len(scenarios) * opts.trials
        record_file.write(
            {
                "type": "run",
                "resumed": record_file.header is not None,
                "suite": opts.suite,
                "url": opts.url,
                "model": model_name,
                "trials": opts.trials,
                "concurrency": opts.concurrency,
                "filters": {"tier": opts.tier, "category": opts.category, "limit": opts.limit},
                "scenarios": list(by_id),
                "decode_tps": round(tps, 2),
                "time_scale": round(scale, 3),
                "reference_tps": REFERENCE_TPS,
                "started_at": now(),
                "splitserve": _version(),
                "label": opts.label,
                "remaining": len(todo),
                "max_tokens_per_turn": opts.max_tokens,
                "api": opts.api,
                "sandbox": opts.sandbox if sandboxed else None,
            }
        )
        done = total - len(todo)
        counts = {"done": done, "passes": record_file.passes, "scored": record_file.scored}
        if progress is not None:
            progress(done, total, counts["passes"], counts["scored"])

        @solver
        def agent() -> Any:
            async def solve(state: Any, generate: Any) -> Any:
                scenario = by_id[state.metadata["scenario"]]
                trial = int(state.metadata["trial"])
                budget_s = scenario.budget.timeout_seconds * scale
                started_at, started = now(), time.monotonic()
                if bfcl_item(scenario) is not None:  # BFCL items: its FC-mode loop, its checkers
                    from ._bfcl_grade import grade_bfcl
                    from ._bfcl_play import play_bfcl

                    bfcl_trace, gen_s = await play_bfcl(scenario, get_model(), budget_s, opts.max_tokens)
                    graded = grade_bfcl(scenario, bfcl_trace)
                    trace: Any = bfcl_trace
                else:
                    trace, gen_s = await play(scenario, get_model(), budget_s, opts.max_tokens)
                    if scenario.sandbox is not None and scenario.oracle:  # the oracle's end state, once per run
                        if scenario.id not in references:
                            references[scenario.id] = asyncio.ensure_future(oracle_state(scenario, opts.sandbox))
                        trace.reference = await references[scenario.id]
                    graded = grade(scenario, trace)
                record_file.write(
                    trial_record(
                        scenario, trial, trace, graded, started_at, time.monotonic() - started, gen_s, budget_s
                    )
                )
                counts["done"] += 1
                if graded.verdict in ("pass", "fail"):
                    counts["scored"] += 1
                    counts["passes"] += graded.verdict == "pass"
                if progress is not None:
                    progress(counts["done"], total, counts["passes"], counts["scored"])
                state.metadata["verdict"] = graded.verdict
                state.metadata["cause"] = graded.cause
                state.metadata["evidence"] = graded.evidence
                state.output.completion = trace.response or ""
                return state

            return solve

        @scorer(metrics=[accuracy(), stderr()])
        def verdict() -> Any:
            async def score(state: Any, target: Any) -> Any:
                value = {"pass": "C", "fail": "I"}.get(state.metadata.get("verdict"), "N")
                explanation = state.metadata.get("cause") or "pass"
                if state.metadata.get("evidence"):
                    explanation += f": {state.metadata['evidence']}"
                return Score(value=value, explanation=explanation)

            return score

        if todo:
            samples = [
                Sample(input=by_id[sid].prompt[:200], id=f"{sid}#{k}", metadata={"scenario": sid, "trial": k})
                for sid, k in todo
            ]
            model = eval_model(
                opts.api,
                model_name,
                base_url(opts.url),
                opts.api_key,
                GenerateConfig(temperature=0.0, max_retries=2, max_connections=opts.concurrency),
            )
            await eval_async(
                Task(dataset=samples, solver=agent(), scorer=verdict(), name="splitserve-eval", sandbox=task_sandbox),
                model=model,
                log_dir=str(opts.out / "inspect"),
                max_samples=opts.concurrency,
                fail_on_error=False,
                log_level="error",
                log_model_api=False,
                score_display=False,
            )
        if counts["done"] >= total:
            record_file.write({"type": "end", "finished_at": now(), "done": counts["done"]})
    finally:
        record_file.close()
    return opts.out / RUN_FILE


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("splitserve")
    except PackageNotFoundError:
        return "unknown"


def run(opts: RunOptions, scenarios: list[Scenario], progress: Progress | None = None) -> Path:
    return asyncio.run(run_eval(opts, scenarios, progress))
