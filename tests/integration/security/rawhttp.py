# SPDX-License-Identifier: LGPL-2.1-or-later
"""HTTP/1.1 over a socket of its own, for what an HTTP library would not send or would hide:
broken framing, slow senders, pipelining, Expect: 100-continue. Every response body read here is
recorded like the ones of conftest.request, so the suite's leak check sees them too."""
import select
import socket
import time
import urllib.parse

import conftest

URL = urllib.parse.urlsplit(conftest.BASE_URL)
HOST, PORT = URL.hostname, URL.port or 80


def connect(timeout=30):
    return socket.create_connection((HOST, PORT), timeout=timeout)


def auth():
    return ("Authorization", f"Bearer {conftest.api_key()}")


def head(method, path, headers=(), version="HTTP/1.1", host=True):
    """A request line and header fields, with Host first unless host=False."""
    lines = [f"{method} {path} {version}"]
    if host:
        lines.append(f"Host: {URL.netloc}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _record(body):
    if conftest.RECORDED is not None:
        conftest.RECORDED.append(body)


class Reader:
    """Reads the responses of one connection in order."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        try:
            chunk = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        self.buf += chunk
        return bool(chunk)

    def response(self):
        """(status, headers, body) of the next response (a 1xx one too), or None if the connection
        ends first. Header names are lower case."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                return None
        raw, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status < 200:
            return status, headers, b""
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length and self._fill():
            pass
        body, self.buf = self.buf[:length], self.buf[length:]
        _record(body)
        return status, headers, body

    def final(self):
        """The next response that is not 1xx."""
        while True:
            r = self.response()
            if r is None or r[0] >= 200:
                return r

    def closed(self, timeout=5):
        """Whether the server ends the connection (EOF or reset) within 'timeout' seconds without
        sending anything more."""
        if self.buf:
            return False
        self.sock.settimeout(timeout)
        try:
            return not self._fill()
        except socket.timeout:
            return False


def exchange(data, timeout=10):
    """Sends 'data' at once on a new connection and reads every response until the server closes
    the connection: (list of (status, headers, body), whether it was closed)."""
    with connect(timeout) as s:
        s.sendall(data)
        rd = Reader(s)
        responses = []
        try:
            while (r := rd.response()) is not None:
                responses.append(r)
            return responses, True
        except socket.timeout:
            return responses, False


def dribble(sock, byte=b"a", interval=1.0, limit=40, meanwhile=None):
    """Sends one byte every 'interval' seconds until the server answers or closes the connection,
    at most 'limit' seconds. Calls meanwhile(elapsed) after each byte. Returns the seconds until
    then (None if it never happened)."""
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < limit:
        try:
            sock.sendall(byte)
        except (BrokenPipeError, ConnectionResetError):
            return elapsed
        readable, _, _ = select.select([sock], [], [], interval)
        if readable:
            return time.monotonic() - start
        if meanwhile:
            meanwhile(time.monotonic() - start)
    return None


def served_again(timeout=10):
    """Waits until /healthz is answered again (after a test held connection slots), at most
    'timeout' seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            r = conftest.request("GET", "/healthz", key=None, timeout=5)
            assert r.status == 200, r
            return
        except (AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
