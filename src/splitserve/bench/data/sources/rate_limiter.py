"""A token-bucket rate limiter shared by the request handlers."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    capacity: float
    refill_per_s: float
    tokens: float = 0.0
    updated: float = field(default_factory=time.monotonic)

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.refill_per_s)
        self.updated = now


class RateLimiter:
    """Allows ``rate`` requests per second per key, with bursts up to ``burst``."""

    def __init__(self, rate: float, burst: int = 10, max_keys: int = 10_000) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: dict[str, Bucket] = {}
        self._lock = threading.Lock()

    def allow(self, key: str, cost: float = 1.0) -> bool:
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= self.max_keys:
                    self._evict_oldest()
                bucket = Bucket(self.burst, self.rate, tokens=float(self.burst), updated=now)
                self._buckets[key] = bucket
            bucket.refill(now)
            if bucket.tokens >= cost:
                bucket.tokens -= cost
                return True
            return False

    def retry_after(self, key: str, cost: float = 1.0) -> float:
        """Seconds until ``allow(key, cost)`` would succeed."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                return 0.0
            bucket.refill(time.monotonic())
            missing = cost - bucket.tokens
            return max(0.0, missing / self.rate)

    def _evict_oldest(self) -> None:
        oldest = min(self._buckets, key=lambda k: self._buckets[k].updated)
        del self._buckets[oldest]
