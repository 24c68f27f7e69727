"""``bench speed``: prefill and decode speed, latency and throughput per concurrency level.

For every prompt size and concurrency level the bench sends ``concurrency``
requests at once, ``repeat`` times, each with a prompt no other request
shares.  Before the cells, two probe requests calibrate prompt sizes in the
server's tokens and measure the chat template's shared prefix, which is the
most the server may legitimately find in its prompt cache; any request whose
reported cached-token count exceeds that is flagged ``cache_hit``.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .._errors import EngineError
from ._client import BenchClient
from ._prompts import PromptMaker, TokenFit
from ._records import RequestRecord
from ._workloads import DEFAULT_MAX_TOKENS, Item, WorkloadPlan, fidelity, job_tag, tagged

Emit = Callable[[RequestRecord], None]

CACHE_MARGIN = 8
"""Tokens of cached prefix tolerated beyond the calibrated template prefix."""

PROBE_WORDS = (20, 20, 140)


@dataclass
class SpeedOptions:
    """What ``bench speed`` measures."""

    prompt_tokens: list[int] = field(default_factory=lambda: [512])
    gen_tokens: int = 128
    concurrency: list[int] = field(default_factory=lambda: [1])
    repeat: int = 3
    reuse_prompt: bool = False
    """Send one prompt again and again (only to see the cache-hit detector work)."""
    workloads: list[str] = field(default_factory=lambda: ["chat"])
    """``chat`` (random words, the cells above), ``copy``, ``edit``, ``json``, ``agent``."""
    workload_files: list[str] = field(default_factory=list)
    """Source files for ``copy``/``edit`` (default: the three that ship with splitserve)."""
    recording: str | None = None
    """The agent recording to replay (default: the shipped one)."""
    drop_reasoning: bool = False
    """Agent replay: send earlier assistant turns without ``reasoning_content`` (as the OpenAI SDK does)."""
    max_tokens: int | None = None
    """Output cap of a workload request (default per workload: copy/edit 1024, json 512, agent 256)."""
    workload_ignore_eos: bool = False
    """Send ``ignore_eos`` with workload requests too (off: they end where the model ends them)."""
    reference: str | None = None
    """A run file whose outputs are the reference for agreement (``bench speed --reference``)."""

    def total_requests(self, plan: WorkloadPlan | None = None) -> int:
        total = 0
        for w in self.workloads:
            if w == "chat":
                total += len(self.prompt_tokens) * self.repeat * sum(self.concurrency)
            else:
                total += self.repeat * sum(self.concurrency) * (plan.turns_per_item(w) if plan else 1)
        return total

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Calibration:
    fit: TokenFit
    cache_allowance: int | None
    """Most cached tokens a unique prompt may show; ``None`` when the server reports none."""
    probes: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "overhead_tokens": round(self.fit.overhead, 2),
            "tokens_per_word": round(self.fit.per_word, 4),
            "cache_allowance": self.cache_allowance,
            "probes": self.probes,
        }


class Session:
    """A client plus what every bench needs: unique prompts, calibration, cache flags."""

    def __init__(self, client: BenchClient, emit: Emit, seed: int = 0, nonce: str | None = None) -> None:
        """``nonce`` given: every prompt and tag follows from it (a sweep sends the same prompts at
        each point, so their outputs can be compared); else a random one."""
        self.client = client
        self.emit = emit
        self.nonce = nonce or secrets.token_hex(3)
        self._tags = random.Random(f"tags:{nonce}") if nonce else None
        self.maker = PromptMaker(self.nonce, seed)
        self.calibration = Calibration(TokenFit(), None, [])
        self.saw_cache_counts = False
        self._n = 0
        self._batch = 0

    def tag(self) -> str:
        """A request-unique tag that goes first in the prompt (random, so tags share no prefix)."""
        self._n += 1
        head = f"{self._tags.getrandbits(32):08x}" if self._tags is not None else secrets.token_hex(4)
        return f"{head}-{self._n}"

    def next_batch(self) -> int:
        self._batch += 1
        return self._batch

    def flag(self, rec: RequestRecord) -> RequestRecord:
        if rec.cached_tokens is not None:
            self.saw_cache_counts = True
            allowance = self.calibration.cache_allowance
            limit = (allowance if allowance is not None else 0) + CACHE_MARGIN
            rec.cache_hit = rec.cached_tokens > limit
        return rec

    async def calibrate(self) -> Calibration:
        """Three probes: two short ones, then a long one.

        The short pair gives the shared template prefix: the second lands in the
        slot of the first (llama.cpp picks the most similar slot) and its cached
        count is that prefix.  The short and long probes give tokens per word and
        the template overhead.  If no probe shows a cached count (a fresh slot
        every time), the overhead estimate stands in for the prefix.
        """
        probes: list[dict[str, Any]] = []
        seen: list[tuple[int, int | None, int | None]] = []
        for words in PROBE_WORDS:
            tag = self.tag()
            text = self.maker.speed_prompt(f"{tag}/{self.nonce}", words)
            rec = await self.client.request(
                f"cal-{tag}", "calibration", {"words": words}, text, 1, batch=self.next_batch(), ignore_eos=True
            )
            self.emit(rec)
            seen.append((words, rec.prompt_tokens, rec.cached_tokens))
            probes.append(
                {
                    "words": words,
                    "prompt_tokens": rec.prompt_tokens,
                    "cached_tokens": rec.cached_tokens,
                    "error": rec.error,
                }
            )
        errors = [p["error"] for p in probes if p["error"]]
        if len(errors) == len(probes):
            hint = "; pass --no-ignore-eos" if "ignore_eos" in errors[0] else ""
            raise EngineError(f"{self.client.target.v1}: every probe request failed: {errors[0]}{hint}")
        (w1, p1, _), (w2, p2, _) = seen[0], seen[-1]
        fit = TokenFit.from_probes(w1, p1, w2, p2) if p1 and p2 else TokenFit()
        cached = [c for _, _, c in seen if c is not None]
        allowance: int | None
        if not cached:
            allowance = None
        elif max(cached) > 0:
            allowance = max(cached)
        else:
            allowance = round(fit.overhead)
        self.calibration = Calibration(fit, allowance, probes)
        return self.calibration

    async def batch(
        self,
        make: Callable[[int], tuple[str, dict[str, Any], str]],
        count: int,
        max_tokens: int,
        ignore_eos: bool | None = None,
        keep_text: int | None = None,
    ) -> list[RequestRecord]:
        """``count`` requests sent together; ``make(i)`` gives (tag, cell, text) for each."""
        batch = self.next_batch()
        specs = [make(i) for i in range(count)]
        t0 = time.perf_counter()
        tasks = [
            asyncio.ensure_future(
                self.client.request(
                    tag,
                    str(cell.get("kind", "speed")),
                    cell,
                    text,
                    max_tokens,
                    batch=batch,
                    batch_t0=t0,
                    ignore_eos=ignore_eos,
                    keep_text=keep_text,
                )
            )
            for tag, cell, text in specs
        ]
        done: list[RequestRecord] = []
        try:
            for fut in asyncio.as_completed(tasks):
                rec = self.flag(await fut)
                done.append(rec)
                self.emit(rec)
        finally:
            for t in tasks:
                t.cancel()
        return done


async def speed_cells(session: Session, opts: SpeedOptions, extra_cell: dict[str, Any] | None = None) -> None:
    """Run every (prompt size, concurrency, repeat) cell; records go to ``session.emit``."""
    fit = session.calibration.fit
    reused: dict[int, str] = {}
    for target_tokens in opts.prompt_tokens:
        words = fit.words_for(target_tokens)
        for conc in opts.concurrency:
            for rep in range(opts.repeat):

                def make(
                    i: int, conc: int = conc, rep: int = rep, target_tokens: int = target_tokens, words: int = words
                ) -> tuple[str, dict[str, Any], str]:
                    tag = session.tag()
                    cell = {
                        "kind": "speed",
                        "prompt_tokens": target_tokens,
                        "concurrency": conc,
                        "repeat": rep,
                        **(extra_cell or {}),
                    }
                    if opts.reuse_prompt:
                        text = reused.setdefault(
                            target_tokens, session.maker.speed_prompt(f"fixed/{session.nonce}", words)
                        )
                    else:
                        text = session.maker.speed_prompt(f"{tag}/{session.nonce}", words)
                    return tag, cell, text

                await session.batch(make, conc, opts.gen_tokens)


async def workload_cells(
    session: Session, opts: SpeedOptions, plan: WorkloadPlan, extra_cell: dict[str, Any] | None = None
) -> None:
    """Every workload of ``opts`` (``chat`` through :func:`speed_cells`), each at every
    concurrency level ``repeat`` times; records go to ``session.emit``."""
    for workload in opts.workloads:
        if workload == "chat":
            await speed_cells(session, opts, extra_cell)
            continue
        items = plan.items.get(workload) or []
        if not items:
            continue
        max_tokens = opts.max_tokens or DEFAULT_MAX_TOKENS[workload]
        for conc in opts.concurrency:
            for rep in range(opts.repeat):
                picks = [(i, items[(rep * conc + i) % len(items)]) for i in range(conc)]
                batch = session.next_batch()
                t0 = time.perf_counter()
                await asyncio.gather(
                    *(
                        _conversation(
                            session,
                            opts,
                            plan,
                            item,
                            job_tag(workload, conc, rep, i),
                            max_tokens,
                            batch,
                            t0,
                            {
                                "kind": workload,
                                "workload": workload,
                                "item": item.name,
                                "concurrency": conc,
                                "repeat": rep,
                                **(extra_cell or {}),
                            },
                        )
                        for i, item in picks
                    )
                )


async def _conversation(
    session: Session,
    opts: SpeedOptions,
    plan: WorkloadPlan,
    item: Item,
    tag: str,
    max_tokens: int,
    batch: int,
    t0: float,
    cell: dict[str, Any],
) -> None:
    """One item: one request, or for ``agent`` one request per recorded turn, in order."""
    turns = item.turns(plan.drop_reasoning)
    headers = {"X-Session-Id": tag} if item.workload == "agent" else None
    for n, history in enumerate(turns, start=1):
        turn_cell = dict(cell) | ({"turn": n, "turns": len(turns)} if item.workload == "agent" else {})
        rec_id = f"{tag}-t{n}" if item.workload == "agent" else tag
        rec = await session.client.request(
            rec_id,
            item.workload,
            turn_cell,
            "",
            max_tokens,
            batch=batch,
            batch_t0=t0,
            keep_text=None,
            ignore_eos=opts.workload_ignore_eos,
            messages=tagged(history, tag),
            tools=item.tools,
            headers=headers,
            # a fresh prefill every time: a prompt served from the cache is computed in other batches, and
            # on a small model that alone can change the greedy output a reference is compared with
            body_extra=None if item.workload == "agent" else {"cache_prompt": False},
        )
        if n == 1:
            session.flag(rec)  # later turns are meant to be served from the prompt cache
        elif rec.cached_tokens is not None:
            session.saw_cache_counts = True
        fid = fidelity(rec, item.expected)
        if fid is not None:
            rec.extra["fidelity"] = fid
        session.emit(rec)


def speed_notes(
    session: Session, records: list[RequestRecord], server: dict[str, Any], opts: SpeedOptions
) -> list[str]:
    """Warnings a reader of the run should see."""
    notes = []
    if not session.saw_cache_counts:
        notes.append("the server reported no cached-token counts: prompt-cache hits cannot be detected")
    hits = [r.id for r in records if r.cache_hit]
    if hits:
        notes.append(
            f"{len(hits)} request(s) hit the prompt cache; their prefill figures are not real: "
            + ", ".join(hits[:5])
            + (" ..." if len(hits) > 5 else "")
        )
    slots = server.get("total_slots")
    if isinstance(slots, int) and opts.concurrency and max(opts.concurrency) > slots:
        notes.append(
            f"concurrency up to {max(opts.concurrency)} but the server has {slots} slot(s) "
            "(--parallel); the extra requests queued"
        )
    short = [
        r.id
        for r in records
        if r.kind == "speed" and r.ok and r.completion_tokens is not None and r.completion_tokens < opts.gen_tokens
    ]
    capped = [
        r.id
        for r in records
        if r.kind in ("copy", "edit", "json") and r.finish_reason == "length" and not opts.workload_ignore_eos
    ]
    if capped:
        notes.append(
            f"{len(capped)} workload request(s) reached the output cap before the model ended them "
            "(raise --gen-tokens to compare whole answers): " + ", ".join(capped[:5])
        )
    if short:
        notes.append(f"{len(short)} request(s) stopped before --gen-tokens (the server ignored ignore_eos?)")
    errors = [r for r in records if not r.ok]
    if errors:
        notes.append(f"{len(errors)} request(s) failed; first: {errors[0].error}")
    return notes
