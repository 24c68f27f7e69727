"""The delay proxy used by benchmarks/bench_link_delay.py: bytes pass intact and in order,
never earlier than the delay (a lower bound, so no flaky timing)."""

from __future__ import annotations

import socket
import threading
import time

from delay_proxy import DelayProxy


def echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return srv, int(srv.getsockname()[1])


def test_round_trip_is_intact_and_delayed_both_ways() -> None:
    srv, port = echo_server()
    payload = bytes(range(256)) * 4096  # 1 MiB, several chunks
    try:
        with DelayProxy(("127.0.0.1", port), delay=0.02) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port)) as c:
                t0 = time.perf_counter()
                c.sendall(b"x")
                assert c.recv(1) == b"x"
                assert time.perf_counter() - t0 >= 0.04  # 20 ms there, 20 ms back
                got = bytearray()
                sender = threading.Thread(target=c.sendall, args=(payload,))
                sender.start()
                while len(got) < len(payload):
                    got += c.recv(65536)
                sender.join()
                assert bytes(got) == payload
            assert proxy.chunks["to_target"] >= 2 and proxy.chunks["from_target"] >= 2
    finally:
        srv.close()
