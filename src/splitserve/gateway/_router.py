"""Replicas behind one gateway: which engine serves a request.

    Router(names)                      # pure: replica states, in-flight counts, session affinity
    ReplicaBackend({name: backend})    # an EngineBackend over several: each request to one replica

A session (the ``X-Session-Id`` header, the request's ``user``, Anthropic's ``metadata.user``; the
prompt's first characters when none is given) sticks to the replica that served it first, so an
agent loop finds its prompt in that engine's cache. A new session goes to the least-loaded replica
that is up: load is the larger of the gateway's own requests in flight there and the engine's busy
slots (the two count the same requests), then the fewer sessions held, then the spec's order.
That is the ``affinity`` policy; ``round-robin`` and ``least-loaded`` (:data:`ROUTES`) ignore
sessions, for comparison (``serve --route``).

A replica that is down or loading gets no new request. A request that never reached its engine
(the connection was refused, or the engine answered 503 while loading) is sent once to another
replica; a stream that broke after it began is not retried (its client already has tokens): the
gateway ends it with an error event. Replicas marked down are probed again (``health()``) before a
request is refused for want of one, and every ``probe_interval`` seconds while one is down.

The gateway passes the session to :class:`ReplicaBackend` in the request's ``extra`` (or a
passed-on body) under :data:`SESSION_FIELD`, which is removed before it reaches an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .._errors import EngineError, UsageError
from ..engine import (
    CompletionRequest,
    CompletionStream,
    EngineBackend,
    EngineHealth,
    EngineHTTPError,
    EngineInfo,
    EngineReply,
    EngineUnavailable,
    backend_for,
)
from ._access import note_replica

T = TypeVar("T")

SESSION_FIELD = "splitserve_session"
"""The body key under which the gateway hands the session key to :class:`ReplicaBackend`."""
PREFIX_CHARS = 2048
"""Characters of the prompt that key a request without a session (system prompt and tools)."""


@dataclass
class ReplicaState:
    """What the router knows of one replica."""

    name: str
    status: str = "ok"  #: ``ok``, ``loading``, ``error`` or ``down`` (an :class:`EngineHealth` status)
    running: int = 0  #: this gateway's requests in flight there
    busy_slots: int = 0  #: the engine's own count of slots processing (from ``/slots``), when known
    sessions: int = 0  #: sessions whose affinity is this replica
    served: int = 0  #: requests sent there
    retried_away: int = 0  #: requests that met it down or loading and went elsewhere
    errors: int = 0  #: engine errors there (down, loading, or any other before an answer)
    down_since: float | None = None

    @property
    def load(self) -> int:
        return max(self.running, self.busy_slots)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "running": self.running,
            "busy_slots": self.busy_slots,
            "sessions": self.sessions,
            "served": self.served,
            "retried_away": self.retried_away,
            "errors": self.errors,
        }


class NoReplica(EngineError):
    """No replica can take a request now; ``loading`` when at least one is loading."""

    def __init__(self, message: str, loading: bool) -> None:
        super().__init__(message)
        self.loading = loading


ROUTES = ("affinity", "round-robin", "least-loaded")
"""The routing policies (``serve --route``): ``affinity`` (a session sticks to its replica, a new
one goes to the least loaded: the default), ``round-robin`` (each request to the next replica that
is up, sessions ignored) and ``least-loaded`` (each request to the least loaded, sessions ignored,
ties taken in turn); the last two are there to compare against."""


class Router:
    """Replica choice (see the module); pure and synchronous, the caller does the I/O."""

    def __init__(self, names: list[str], max_sessions: int = 4096, policy: str = "affinity") -> None:
        if not names:
            raise ValueError("Router: no replicas")
        if policy not in ROUTES:
            raise ValueError(f"Router: no routing policy {policy!r} (choose {', '.join(ROUTES)})")
        self.replicas = [ReplicaState(n) for n in names]
        self.max_sessions = max_sessions
        self.policy = policy
        self._affinity: OrderedDict[str, int] = OrderedDict()
        self._turn = 0  # the next replica in turn (round-robin, and least-loaded's ties)

    def index(self, name: str) -> int:
        return [r.name for r in self.replicas].index(name)

    def pick(self, key: str | None, exclude: tuple[int, ...] = ()) -> int:
        """The replica for a request of session ``key`` (None: no affinity), not one of ``exclude``.

        Raises :class:`NoReplica` when none is up."""
        up = [i for i, r in enumerate(self.replicas) if r.status == "ok" and i not in exclude]
        if not up:
            states = ", ".join(f"{r.name} {r.status}" for r in self.replicas)
            loading = any(r.status == "loading" for r in self.replicas)
            raise NoReplica(f"no replica can take the request ({states})", loading)
        if self.policy != "affinity":
            n = len(self.replicas)
            if self.policy == "round-robin":
                choice = min(up, key=lambda i: (i - self._turn) % n)
            else:
                choice = min(up, key=lambda i: (self.replicas[i].load, (i - self._turn) % n))
            self._turn = (choice + 1) % n
            return choice
        if key is not None:
            held = self._affinity.get(key)
            if held is not None and held in up:
                self._affinity.move_to_end(key)
                return held
        choice = min(up, key=lambda i: (self.replicas[i].load, self.replicas[i].sessions, i))
        if key is not None:
            self._bind(key, choice)
        return choice

    def _bind(self, key: str, i: int) -> None:
        old = self._affinity.pop(key, None)
        if old is not None:
            self.replicas[old].sessions -= 1
        self._affinity[key] = i
        self.replicas[i].sessions += 1
        while len(self._affinity) > self.max_sessions:
            _, dropped = self._affinity.popitem(last=False)
            self.replicas[dropped].sessions -= 1

    def holder(self, key: str) -> int | None:
        """The replica a session sticks to (None: none yet)."""
        return self._affinity.get(key)

    def started(self, i: int) -> None:
        self.replicas[i].running += 1
        self.replicas[i].served += 1

    def finished(self, i: int) -> None:
        self.replicas[i].running = max(0, self.replicas[i].running - 1)

    def set_status(self, i: int, status: str, now: float | None = None) -> None:
        r = self.replicas[i]
        if status != "ok" and r.status == "ok":
            r.down_since = time.monotonic() if now is None else now
        elif status == "ok":
            r.down_since = None
        r.status = status

    def set_busy(self, i: int, busy: int) -> None:
        self.replicas[i].busy_slots = max(0, busy)

    def any_not_ok(self) -> bool:
        return any(r.status != "ok" for r in self.replicas)


def session_of(body: dict[str, Any]) -> str | None:
    """The routing key of a request body (its session, else its prompt's prefix); removes
    :data:`SESSION_FIELD` from the body."""
    return _key(body.pop(SESSION_FIELD, None), body.get("prompt"))


def _key(session: Any, prompt: Any) -> str | None:
    if isinstance(session, str) and session:
        return "s:" + session
    if isinstance(prompt, str) and prompt:
        return "p:" + hashlib.sha1(prompt[:PREFIX_CHARS].encode("utf-8", "replace")).hexdigest()
    return None


def _failover(exc: Exception) -> str | None:
    """The replica status an error shows before any token was sent (None: not a reason to retry)."""
    if isinstance(exc, EngineUnavailable):
        return "down"
    if isinstance(exc, EngineHTTPError) and exc.status == 503:
        return "loading"
    return None


class _RoutedStream(CompletionStream):
    """One streamed completion on the replica the router picks, tried once more elsewhere when
    the first one turns out to be down or loading before it answered."""

    def __init__(self, owner: ReplicaBackend, request: CompletionRequest) -> None:
        self.owner = owner
        self.request = request
        self.key = _key(request.extra.pop(SESSION_FIELD, None), request.prompt)
        self.replica: int | None = None
        self.inner: CompletionStream | None = None

    async def open(self) -> None:
        tried: tuple[int, ...] = ()
        while True:
            i = await self.owner.choose(self.key, tried)
            inner = self.owner.backends[i].stream(self.request)
            self.owner.router.started(i)
            note_replica(self.owner.names[i])
            try:
                await inner.open()
            except Exception as exc:
                self.owner.router.finished(i)
                status = _failover(exc)
                self.owner.failed(i, status)
                if status is None or len(tried) >= 1:
                    if status is not None:
                        self.owner.mark(i, status)
                    raise
                self.owner.mark(i, status)
                self.owner.router.replicas[i].retried_away += 1
                with contextlib.suppress(Exception):
                    await inner.aclose()
                tried += (i,)
                continue
            self.replica, self.inner = i, inner
            return

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        assert self.inner is not None, "open() first"
        try:
            async for batch in self.inner.batches():
                yield batch
        except EngineError:
            if self.replica is not None:
                self.owner.failed(self.replica, None)  # a stream that broke after it began
            raise

    async def aclose(self) -> None:
        inner, self.inner = self.inner, None
        if inner is not None:
            try:
                await inner.aclose()
            finally:
                if self.replica is not None:
                    self.owner.router.finished(self.replica)


class ReplicaBackend(EngineBackend):
    """One :class:`EngineBackend` over several replicas of the same model (see the module)."""

    def __init__(
        self, backends: Mapping[str, EngineBackend], *, probe_interval: float = 1.0, route: str = "affinity"
    ) -> None:
        if not backends:
            raise ValueError("ReplicaBackend: no replicas")
        self.names = list(backends)
        self.backends = [backends[n] for n in self.names]
        self.router = Router(self.names, policy=route)
        self.url = ", ".join(f"{n}={b.url}" for n, b in zip(self.names, self.backends, strict=True))
        self.probe_interval = probe_interval
        self._probe: asyncio.Task[None] | None = None
        self.on_error: Callable[[str, str], None] | None = None
        """Called with a replica's name and the error's kind (``down``, ``loading``, ``error``)
        for each engine error there (the gateway counts them in ``splitserve_replica_errors``)."""

    # -- routing -----------------------------------------------------------------------------
    def failed(self, i: int, status: str | None) -> None:
        """Count an engine error of replica ``i`` (``status``: ``down`` or ``loading`` when it never
        reached the engine, None for any other) and tell :attr:`on_error`."""
        kind = status or "error"
        self.router.replicas[i].errors += 1
        if self.on_error is not None:
            self.on_error(self.names[i], kind)

    def mark(self, i: int, status: str) -> None:
        self.router.set_status(i, status)
        if status != "ok":
            self._start_probing()

    async def choose(self, key: str | None, exclude: tuple[int, ...] = ()) -> int:
        """:meth:`Router.pick`, after a fresh look at the replicas when none seems up."""
        try:
            return self.router.pick(key, exclude)
        except NoReplica:
            await self.health()
        try:
            return self.router.pick(key, exclude)
        except NoReplica as exc:
            if exc.loading:
                raise EngineHTTPError(503, f'{{"error": {{"code": 503, "message": "{exc}"}}}}') from None
            raise EngineUnavailable(str(exc), url=self.url, path="", reason="no replica up") from None

    def _start_probing(self) -> None:
        if self._probe is not None and not self._probe.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._probe = loop.create_task(self._probe_loop())

    async def _probe_loop(self) -> None:
        while self.router.any_not_ok():
            await asyncio.sleep(self.probe_interval)
            await self.health()

    def state(self) -> list[dict[str, Any]]:
        """Each replica's state and URL, for ``status`` and the live page."""
        return [r.as_dict() | {"url": b.url} for r, b in zip(self.router.replicas, self.backends, strict=True)]

    # -- the interface -----------------------------------------------------------------------
    async def health(self) -> EngineHealth:
        """Every replica's health (each one's status is updated); ok when one is."""
        answers = await asyncio.gather(*(b.health() for b in self.backends))
        for i, h in enumerate(answers):
            self.router.set_status(i, h.status)
        for h in answers:
            if h.ok:
                return h
        for h in answers:
            if h.status == "loading":
                return h
        detail = "; ".join(f"{n}: {h.message}" for n, h in zip(self.names, answers, strict=True))
        return EngineHealth(answers[0].status, answers[0].http_status, detail, answers[0].retry_after)

    async def _any(self, call: Callable[[EngineBackend], Awaitable[T]]) -> T:
        """``call`` on the least-loaded replica, once more on another when that one is down or
        loading."""
        tried: tuple[int, ...] = ()
        while True:
            i = await self.choose(None, tried)
            try:
                return await call(self.backends[i])
            except Exception as exc:
                status = _failover(exc)
                self.failed(i, status)
                if status is None:
                    raise
                self.mark(i, status)
                if tried:
                    raise
                tried += (i,)

    async def info(self, timeout: float | None = None) -> EngineInfo:
        """The settings and slots of one replica (each has the same ``--parallel``); :meth:`all_slots` for all."""
        return await self._any(lambda b: b.info(timeout))

    async def all_slots(self, timeout: float | None = None) -> dict[str, list[dict[str, Any]]]:
        """Every replica's slots (an empty list for one that does not answer); updates their load."""
        out: dict[str, list[dict[str, Any]]] = {}
        for i, (name, b) in enumerate(zip(self.names, self.backends, strict=True)):
            try:
                slots = (await b.info(timeout)).slots
            except EngineError:
                slots = []
            self.router.set_busy(i, sum(1 for s in slots if s.get("is_processing")))
            out[name] = slots
        return out

    def stream(self, request: CompletionRequest) -> CompletionStream:
        return _RoutedStream(self, request)

    async def tokenize(self, text: str, add_special: bool = False) -> list[int]:
        """The least-loaded replica's tokenizing, in its own engine's shape (each serves the same model)."""
        return await self._any(lambda b: b.tokenize(text, add_special))

    async def metrics(self) -> bytes | None:
        """Every replica's Prometheus text, each sample labelled ``replica="NAME"``."""
        seen: set[bytes] = set()
        out: list[bytes] = []
        for name, b in zip(self.names, self.backends, strict=True):
            text = await b.metrics()
            if not text:
                continue
            for line in text.splitlines():
                if line.startswith(b"#"):
                    if line not in seen:
                        seen.add(line)
                        out.append(line)
                elif line.strip():
                    out.append(label_sample(line, name))
        return b"\n".join(out) + b"\n" if out else None

    async def relay(
        self,
        method: str,
        path: str,
        *,
        query: str = "",
        content: bytes = b"",
        content_type: str | None = None,
        check: bool = False,
    ) -> EngineReply:
        key, content = _relay_key(path, content, content_type)
        i = await self.choose(key)
        self.router.started(i)
        note_replica(self.names[i])
        try:
            reply = await self.backends[i].relay(
                method, path, query=query, content=content, content_type=content_type, check=check
            )
        except Exception as exc:
            self.router.finished(i)
            self.failed(i, _failover(exc))
            raise
        closer = reply.closer
        if closer is None:
            self.router.finished(i)
            return reply

        async def close() -> None:
            try:
                await closer()
            finally:
                self.router.finished(i)

        reply.closer = close
        return reply

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._probe
        for b in self.backends:
            await b.aclose()


def _relay_key(path: str, content: bytes, content_type: str | None) -> tuple[str | None, bytes]:
    """The routing key of a passed-on generation (``/v1/completions``, ``/completion``: its
    session or its prompt's prefix, as :func:`session_of`) and its body without
    :data:`SESSION_FIELD`; (None, content) for anything else."""
    if not content or "json" not in (content_type or "") or "complet" not in path:
        return None, content
    try:
        body = json.loads(content)
    except ValueError:
        return None, content
    if not isinstance(body, dict):
        return None, content
    had = SESSION_FIELD in body
    key = session_of(body)
    if had:
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    return key, content


def label_sample(line: bytes, replica: str) -> bytes:
    """A Prometheus sample line with ``replica="NAME"`` added to its labels."""
    label = b'replica="' + replica.replace("\\", "\\\\").replace('"', '\\"').encode() + b'"'
    brace, space = line.find(b"{"), line.find(b" ")
    if brace != -1 and (space == -1 or brace < space):
        end = line.rfind(b"}")
        inside = line[brace + 1 : end]
        return line[: brace + 1] + inside + (b"," if inside.strip() else b"") + label + line[end:]
    name, sep, rest = line.partition(b" ")
    return name + b"{" + label + b"}" + sep + rest


def engines_backend(url: str, api_key: str | None = None, route: str = "affinity") -> EngineBackend:
    """The backend of the gateway's ``--engine-url``: one engine, or replicas given as a
    comma-separated list (``http://a:8080,http://b:8080``, or ``NAME=URL`` items to name them),
    routed by ``route`` (one of :data:`ROUTES`)."""
    items = [u.strip() for u in url.split(",") if u.strip()]
    if len(items) <= 1:
        return backend_for(url.strip(), api_key=api_key)
    named: dict[str, EngineBackend] = {}
    for i, item in enumerate(items, 1):
        name, sep, rest = item.partition("=")
        if sep and "://" not in name and name:
            named[name] = backend_for(rest, api_key=api_key)
        else:
            named[f"r{i}"] = backend_for(item, api_key=api_key)
    if len(named) != len(items):
        raise UsageError(f"--engine-url {url}: a replica name is given twice")
    return ReplicaBackend(named, route=route)
