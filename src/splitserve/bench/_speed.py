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
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from .._errors import EngineError
from ._client import BenchClient
from ._prompts import PromptMaker, TokenFit
from ._records import RequestRecord

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

    def total_requests(self) -> int:
        return len(self.prompt_tokens) * self.repeat * sum(self.concurrency)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Calibration:
    fit: TokenFit
    cache_allowance: int | None
    """Most cached tokens a unique prompt may show; ``None`` when the server reports none."""
    probes: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"overhead_tokens": round(self.fit.overhead, 2), "tokens_per_word": round(self.fit.per_word, 4),
                "cache_allowance": self.cache_allowance, "probes": self.probes}


class Session:
    """A client plus what every bench needs: unique prompts, calibration, cache flags."""

    def __init__(self, client: BenchClient, emit: Emit, seed: int = 0) -> None:
        self.client = client
        self.emit = emit
        self.nonce = secrets.token_hex(3)
        self.maker = PromptMaker(self.nonce, seed)
        self.calibration = Calibration(TokenFit(), None, [])
        self.saw_cache_counts = False
        self._n = 0
        self._batch = 0

    def tag(self) -> str:
        """A request-unique tag that goes first in the prompt (random, so tags share no prefix)."""
        self._n += 1
        return f"{secrets.token_hex(4)}-{self._n}"

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
            rec = await self.client.request(f"cal-{tag}", "calibration", {"words": words}, text, 1,
                                            batch=self.next_batch(), ignore_eos=True)
            self.emit(rec)
            seen.append((words, rec.prompt_tokens, rec.cached_tokens))
            probes.append({"words": words, "prompt_tokens": rec.prompt_tokens,
                           "cached_tokens": rec.cached_tokens, "error": rec.error})
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

    async def batch(self, make: Callable[[int], tuple[str, dict[str, Any], str]], count: int,
                    max_tokens: int, ignore_eos: bool | None = None,
                    keep_text: int | None = 400) -> list[RequestRecord]:
        """``count`` requests sent together; ``make(i)`` gives (tag, cell, text) for each."""
        batch = self.next_batch()
        specs = [make(i) for i in range(count)]
        t0 = time.perf_counter()
        tasks = [asyncio.ensure_future(self.client.request(
            tag, str(cell.get("kind", "speed")), cell, text, max_tokens, batch=batch, batch_t0=t0,
            ignore_eos=ignore_eos, keep_text=keep_text)) for tag, cell, text in specs]
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
                def make(i: int, conc: int = conc, rep: int = rep, target_tokens: int = target_tokens,
                         words: int = words) -> tuple[str, dict[str, Any], str]:
                    tag = session.tag()
                    cell = {"kind": "speed", "prompt_tokens": target_tokens, "concurrency": conc,
                            "repeat": rep, **(extra_cell or {})}
                    if opts.reuse_prompt:
                        text = reused.setdefault(
                            target_tokens, session.maker.speed_prompt(f"fixed/{session.nonce}", words))
                    else:
                        text = session.maker.speed_prompt(f"{tag}/{session.nonce}", words)
                    return tag, cell, text
                await session.batch(make, conc, opts.gen_tokens)


def speed_notes(session: Session, records: list[RequestRecord], server: dict[str, Any],
                opts: SpeedOptions) -> list[str]:
    """Warnings a reader of the run should see."""
    notes = []
    if not session.saw_cache_counts:
        notes.append("the server reported no cached-token counts: prompt-cache hits cannot be detected")
    hits = [r.id for r in records if r.cache_hit]
    if hits:
        notes.append(f"{len(hits)} request(s) hit the prompt cache; their prefill figures are not real: "
                     + ", ".join(hits[:5]) + (" ..." if len(hits) > 5 else ""))
    slots = server.get("total_slots")
    if isinstance(slots, int) and opts.concurrency and max(opts.concurrency) > slots:
        notes.append(f"concurrency up to {max(opts.concurrency)} but the server has {slots} slot(s) "
                     "(--parallel); the extra requests queued")
    short = [r.id for r in records if r.kind == "speed" and r.ok and r.completion_tokens is not None
             and r.completion_tokens < opts.gen_tokens]
    if short:
        notes.append(f"{len(short)} request(s) stopped before --gen-tokens (the server ignored ignore_eos?)")
    errors = [r for r in records if not r.ok]
    if errors:
        notes.append(f"{len(errors)} request(s) failed; first: {errors[0].error}")
    return notes
