"""A tiny TCP server that speaks just enough RESP to play a hostile Redis server.

It reads each command a client sends (RESP arrays of bulk strings, as redis-py writes them) and
answers with whatever bytes `reply(args)` returns for it: a well-formed reply, garbage, a reply
of the wrong type, an oversize bulk string, or nothing (b"": the connection is closed). Tests
point `--autotune_remote_cache` at it to check that no reply a server can send gives a traceback,
a hang or unbounded memory.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

Reply = Callable[[list[bytes]], bytes]


def bulk(data: bytes | None) -> bytes:
    """RESP's bulk string (or nil for None)."""
    return b"$-1\r\n" if data is None else b"$%d\r\n%s\r\n" % (len(data), data)


def array(items: list[bytes]) -> bytes:
    """A RESP array of bulk strings."""
    return b"*%d\r\n" % len(items) + b"".join(bulk(i) for i in items)


def polite(args: list[bytes]) -> bytes:
    """What a real server answers to the handshake commands redis-py may send."""
    command = args[0].upper() if args else b""
    if command in (b"HELLO", b"CLIENT", b"AUTH", b"SELECT", b"PING"):
        return b"+OK\r\n" if command != b"PING" else b"+PONG\r\n"
    return b""


def _read_command(rfile) -> list[bytes] | None:  # noqa: ANN001 - a socket file
    line = rfile.readline(1 << 16)
    if not line:
        return None
    if not line.startswith(b"*"):  # an inline command
        return line.split()
    args = []
    for _ in range(int(line[1:].strip() or 0)):
        size = int(rfile.readline(1 << 16)[1:].strip() or 0)
        args.append(rfile.read(size + 2)[:-2])
    return args


@contextlib.contextmanager
def fake_server(reply: Reply) -> Iterator[str]:
    """Serve `reply` on a free local port for the duration; yields a redis:// URL to it (with a
    password, so tests can check that it is never printed). Every socket has a timeout and the
    server stops by itself at exit, whatever its clients still hold open."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        conn.settimeout(2.0)
        with conn, conn.makefile("rb") as rfile:
            while not stop.is_set():
                try:
                    args = _read_command(rfile)
                    if args is None:
                        return
                    answer = polite(args) or reply(args)
                    if not answer:
                        return
                    conn.sendall(answer)
                except (OSError, ValueError):
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"redis://:hunter2@127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        acceptor.join(timeout=5)
        listener.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
