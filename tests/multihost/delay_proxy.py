"""A TCP proxy that delays every chunk by a fixed one-way time (the kernel here has no netem).

Each direction of each connection is a delay line: a reader thread stamps every chunk it
receives with ``arrival + delay`` and a writer thread sends it at that time, in order, so
the delay adds latency without limiting throughput. ``delay`` can be changed while
connections are open (the benchmark sweeps it over one loaded model). ``time.sleep``
(``clock_nanosleep``) keeps sub-millisecond delays honest, unlike an event loop's
millisecond timer.

    with DelayProxy(("127.0.0.1", 50052)) as proxy:      # listens on 127.0.0.1:proxy.port
        proxy.delay = 0.002                              # 2 ms each way
"""

from __future__ import annotations

import collections
import socket
import threading
import time
from types import TracebackType


class _Line:
    """One direction: src -> dst, each chunk delayed."""

    def __init__(self, proxy: DelayProxy, src: socket.socket, dst: socket.socket, counter: str) -> None:
        self.proxy, self.src, self.dst, self.counter = proxy, src, dst, counter
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.src.recv(1 << 16)
                if not data:
                    break
                with self.cond:
                    self.queue.append((time.perf_counter() + self.proxy.delay, data))
                    self.cond.notify()
        except OSError:
            pass
        with self.cond:
            self.closed = True
            self.cond.notify()

    def _write(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.queue and not self.closed:
                        self.cond.wait()
                    if not self.queue:
                        break
                    due, data = self.queue.popleft()
                wait = due - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                self.dst.sendall(data)
                self.proxy.count(self.counter)
        except OSError:
            pass
        for s in (self.dst, self.src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class DelayProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``target`` with ``delay`` seconds each way."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0, listen: str = "127.0.0.1") -> None:
        self.target = target
        self.delay = delay
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((listen, 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.chunks = {"to_target": 0, "from_target": 0}
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, which: str) -> None:
        with self._lock:
            self.chunks[which] += 1

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns += [client, upstream]
            _Line(self, client, upstream, "to_target")
            _Line(self, upstream, client, "from_target")

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for s in self._conns:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
