"""A loopback TCP proxy that can cut a "host" off the database the way a network partition does.

A real partition drops packets: nothing is delivered, no side sees the connection close, and
what was sent arrives late if the network comes back before TCP gives up.  ``cut()`` does
the same to every connection through the proxy: bytes stop moving in both directions (they
wait in the proxy and the kernel's buffers), sockets stay open, new connections are accepted
but reach the server only after ``heal()``.  Clients block, as they would on a dead network.
"""

from __future__ import annotations

import socket
import threading


class PartitionProxy:
    def __init__(self, upstream: tuple[str, int], port: int = 0) -> None:
        """``port``: where to listen (0: any free port, read back as ``self.port``)."""
        self.upstream = upstream
        self.accepted = 0
        """Connections accepted so far (which node a client reached, when the proxy stands for one)."""
        self.flowing = threading.Event()
        self.flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def cut(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed.set()
        self.flowing.set()  # release pumps waiting for the network to come back
        try:
            # Stops listening now: a bare close() leaves the socket to the thread blocked in accept(),
            # and the kernel would go on completing new connections that nobody serves.
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.close()
                except OSError:
                    pass

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._track(client)
            self.accepted += 1
            threading.Thread(target=self._connect, args=(client,), name="proxy-conn", daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self.flowing.wait()  # a connection opened during the cut reaches the server only after it
        if self._closed.is_set():
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        self._track(server)
        for src, dst in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            self.flowing.wait()
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            self.flowing.wait()  # bytes read just before a cut are held, not lost, until it heals
            if not data or self._closed.is_set():
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return
