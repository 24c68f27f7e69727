"""Time as an interface: :class:`SystemClock` for real runs, :class:`FakeClock` beside it for tests.

Code that waits (readiness polls, backoff, supervision) takes a :class:`Clock` instead of calling
:mod:`time` directly, so a test of a 60-second timeout runs in microseconds and needs no global
patching of ``time.monotonic``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """What waiting code needs of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and durations)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (for records people read)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``event`` is set, whichever comes first; whether it is set."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when slept on or advanced: ``sleep(5)`` returns at once, 5 s later.

    ``on_advance`` callbacks see the new monotonic time after every move, so fakes driven by time
    (a process that starts listening 2 s after it was spawned) progress as the code under test waits.
    """

    def __init__(self, start: float = 1000.0, wall: float = 1_800_000_000.0) -> None:
        self.now = start
        self._wall_offset = wall - start
        self.slept: list[float] = []
        self.on_advance: list[Callable[[float], None]] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now + self._wall_offset

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if not event.is_set():
            self.sleep(seconds)
        return event.is_set()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for callback in list(self.on_advance):
            callback(self.now)


__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock"]
