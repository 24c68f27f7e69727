"""Per-key concurrency limits with a bounded queue.

Each key (or ``anonymous`` without auth) may run ``max_concurrent`` requests at once;
up to ``max_queue`` more wait in arrival order; beyond that a request is refused at once
with 429 and ``Retry-After``. Waiting requests whose client leaves are removed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ._errors import APIError


class _Lane:
    __slots__ = ("running", "waiters")

    def __init__(self) -> None:
        self.running = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


class KeyLimiter:
    """``async with limiter.slot(key):`` around each engine request."""

    def __init__(
        self, max_concurrent: int, max_queue: int, on_change: Callable[[int, int], None] | None = None
    ) -> None:
        if max_concurrent < 1 or max_queue < 0:
            raise ValueError("max_concurrent must be >= 1 and max_queue >= 0")
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self._lanes: dict[str, _Lane] = {}
        self._on_change = on_change

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.running, self.queued)

    @property
    def queued(self) -> int:
        return sum(len(lane.waiters) for lane in self._lanes.values())

    @property
    def running(self) -> int:
        return sum(lane.running for lane in self._lanes.values())

    @asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        lane = self._lanes.setdefault(key, _Lane())
        if lane.running >= self.max_concurrent:
            if len(lane.waiters) >= self.max_queue:
                raise APIError(
                    429,
                    f"too many concurrent requests for key {key!r}: "
                    f"{self.max_concurrent} running, {len(lane.waiters)} queued; "
                    "retry later",
                    type_="rate_limit_error",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": "1"},
                )
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lane.waiters.append(fut)
            self._changed()
            try:
                await fut
            except BaseException:
                if fut in lane.waiters:
                    lane.waiters.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._release(lane)  # handed the slot, then cancelled: pass it on
                self._changed()
                raise
        else:
            lane.running += 1
        self._changed()
        try:
            yield
        finally:
            self._release(lane)
            self._changed()

    def _release(self, lane: _Lane) -> None:
        while lane.waiters:
            fut = lane.waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes on; running stays the same
                return
        lane.running -= 1


__all__ = ["KeyLimiter"]
