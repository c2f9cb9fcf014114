# SPDX-License-Identifier: LGPL-2.1-or-later
"""The front door serves everyone while one client abuses it (issue 14): a JSON body with a million
members is refused without stopping the event loop, a NUL in a JSON string is refused rather than
cutting the string short, connections from the whole loopback range count as one peer, a keyless
flood of connections leaves room for key holders, and creates waiting for a storage endpoint that
does not answer hold no create slot."""
import json
import secrets
import socket
import threading
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import LOOPBACK_STORAGE, create_session, delete_session, in_system, request, run
from conftest import session, storage_agent_setting  # noqa: F401 (fixture)
from rawhttp import HOST, PORT, Reader, auth, connect, head, served_again
from test_storage_keys import Listener
from test_storage_ssrf import s3_block
from test_front_door_caps import EVICT_GRACE, closed_to_make_room

UNAUTHENTICATED_PER_PEER = 48  # HTTP_CONNECTIONS_PER_IP_MAX less HTTP_CONNECTIONS_PER_IP_RESERVED
CONNECTIONS_PER_PEER = 64      # HTTP_CONNECTIONS_PER_IP_MAX
JSON_INVALID = {"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}]}


def other_client_round():
    """Another client's /healthz (without the key), create, exec and delete, each on a new
    connection, answered normally; returns the seconds the round took."""
    t = time.monotonic()
    assert request("GET", "/healthz", key=None, timeout=30).status == 200
    sid = create_session()
    try:
        assert run(sid, "print(6 * 7)", timeout_ms=10000)["stdout"] == "42\n"
    finally:
        delete_session(sid)
    return time.monotonic() - t


def many_keys_body(session_id, n):
    members = b",".join(b'"k%07d":0' % i for i in range(n))
    return b'{"session_id":"' + session_id.encode() + b'","code":"print(1)",' + members + b"}"


def test_million_key_body_is_refused_while_others_are_served(sibling):
    body = many_keys_body(sibling, 1_000_000)
    answer = {}

    def abuse():
        with connect(timeout=120) as s:
            s.sendall(head("POST", "/exec", [auth(), ("Content-Type", "application/json"),
                                             ("Content-Length", str(len(body))), ("Connection", "close")]))
            start = time.monotonic()
            s.sendall(body)
            sent = time.monotonic()
            answer["response"] = Reader(s).final()
            answer["after_send"] = time.monotonic() - sent
            answer["total"] = time.monotonic() - start

    abuser = threading.Thread(target=abuse)
    abuser.start()
    served = []
    try:
        # Another client's requests, answered normally while the body arrives and is refused.
        while abuser.is_alive() or not served:
            served.append(other_client_round())
    finally:
        abuser.join(timeout=120)
    status, _, raw = answer["response"]
    print(f"\n{len(body)} bytes, 1,000,000 keys: refused {answer['after_send'] * 1000:.1f} ms after the "
          f"last byte was sent ({answer['total'] * 1000:.1f} ms with the upload); meanwhile "
          f"{len(served)} rounds of healthz/create/exec/delete, the slowest {max(served) * 1000:.0f} ms")
    assert status == 422, raw
    assert json.loads(raw) == JSON_INVALID


def test_nul_in_a_json_string_is_refused(sibling):
    # It used to run as print(1): the string was cut at the NUL.
    r = request("POST", "/exec", raw=b'{"session_id":"' + sibling.encode() + b'","code":"print(1)\\u0000junk"}',
                headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json == {"detail": "code contains a NUL byte"}, r
    # In a key it would alias another member ("code\u0000x" is "code" as a C string).
    r = request("POST", "/exec", raw=b'{"session_id":"' + sibling.encode() + b'","code":"print(1)","x\\u0000":1}',
                headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json == {"detail": "the JSON body contains a NUL (\\u0000) in a member name"}, r
    # Still a plain exec without it.
    assert run(sibling, "print(1)")["stdout"] == "1\n"


def connect_from(source):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect((HOST, PORT))
    return s


def test_loopback_range_counts_as_one_peer():
    # Any local process may bind any 127.x address: 48 idle connections from 48 of them, then 48
    # more from 48 others. The newer ones close the older ones, as connections of one peer, each
    # with a 503 that says when to retry.
    first, second = [], []
    try:
        for i in range(UNAUTHENTICATED_PER_PEER):
            first.append(connect_from(f"127.0.0.{2 + i}"))
        time.sleep(EVICT_GRACE + 0.2)
        for i in range(UNAUTHENTICATED_PER_PEER):
            second.append(connect_from(f"127.0.{1 + i % 3}.{100 + i}"))
        time.sleep(0.5)
        made_room = sum(closed_to_make_room(s, timeout=0.05) for s in first + second)
        still_open = [s for s in second if not Reader(s).closed(timeout=0.05)]
        print(f"\n96 connections from 96 loopback addresses: {made_room} closed to make room, "
              f"{len(still_open)} of the newer ones open")
        assert made_room == UNAUTHENTICATED_PER_PEER and len(still_open) == UNAUTHENTICATED_PER_PEER
        # The ones left open work.
        still_open[0].sendall(head("GET", "/healthz", [("Connection", "close")]))
        assert Reader(still_open[0]).response()[0] == 200
    finally:
        for s in first + second:
            s.close()
    # Room again once they are gone.
    served_again()


class StalledStorage(Listener):
    """A storage endpoint that accepts and then stalls: says nothing ("silent") or sends a response
    head announcing 1 MiB and then one body byte a second ("trickle"). Once released it closes
    what it holds and every later connection at once."""

    def __init__(self, mode):
        self.mode = mode
        self.lock = threading.Lock()
        self.held = []
        self.released = False
        super().__init__()

    def handle(self, conn):
        with self.lock:
            self.count += 1
            if self.released:
                conn.close()
                return
            self.held.append(conn)
        if self.mode == "trickle":
            threading.Thread(target=self.trickle, args=(conn,), daemon=True).start()

    def trickle(self, conn):
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
            while not self.released:
                conn.sendall(b"\0")
                time.sleep(1)
        except OSError:
            pass

    def release(self):
        with self.lock:
            self.released = True
            held, self.held = self.held, []
        for conn in held:
            conn.close()


SLOW_CREATES = 3  # more than the create slots (SANDBOX_MAX_CONCURRENT_CREATES=2)


@pytest.fixture(scope="module")
def loopback_storage():
    with storage_agent_setting("front-door-loopback", LOOPBACK_STORAGE):
        yield


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_stalled_storage_endpoint_holds_no_create_slot(loopback_storage, mode):
    stalled = StalledStorage(mode)
    block = s3_block(f"http://127.0.0.1:{stalled.port}")
    slow = [{} for _ in range(SLOW_CREATES)]

    def slow_create(i):
        r = request("POST", "/sessions", {"archive_key": f"stalled_{mode}_{i}", "storage": block}, timeout=120)
        slow[i].update(response=r, done=time.monotonic())

    threads = [threading.Thread(target=slow_create, args=(i,)) for i in range(SLOW_CREATES)]
    try:
        for t in threads:
            t.start()
        # Every slow create has reached the storage agent's fetch.
        deadline = time.monotonic() + 30
        while stalled.count < SLOW_CREATES and time.monotonic() < deadline:
            time.sleep(0.1)
        # (A create slot held over a fetch keeps the third create from ever getting this far.)
        assert stalled.count >= SLOW_CREATES, f"only {stalled.count} fetches reached the endpoint"

        # Another client's plain create and exec, answered while the fetches stall.
        start = time.monotonic()
        sid = create_session()
        try:
            created = time.monotonic() - start
            assert run(sid, "print(6 * 7)", timeout_ms=10000)["stdout"] == "42\n"
            served = time.monotonic() - start
        finally:
            delete_session(sid)
        waiting = sum(1 for t in threads if t.is_alive())
        print(f"\n{SLOW_CREATES} creates stalled on a {mode} storage endpoint; meanwhile another create "
              f"took {created * 1000:.0f} ms, create and exec {served * 1000:.0f} ms; "
              f"{waiting} of the stalled creates still waiting")
        assert waiting == SLOW_CREATES, "a stalled create ended before the other client was served"
    finally:
        stalled.release()
        for t in threads:
            t.join(timeout=120)
        stalled.close()
    # Released, the stalled creates fail, clearly: whether an archive exists could not be learnt,
    # and a workspace is never handed out as less than it was (the client may retry).
    for i, s in enumerate(slow):
        r = s["response"]
        assert r.status == 503 and r.json["detail"].startswith("failed to restore the workspace from its archive: "), r
        assert r.headers.get("Retry-After") == "5", r.headers
        assert s["done"] > start + served


# ---- connection slots kept for key holders ----


class KeylessFlood:
    """A local process without the key: threads that open connections from 127.0.<t>.2-251 as fast
    as they can, each holding up to 'hold' of them with a request header that never ends, a
    header line trickled onto one of them after every new one."""

    def __init__(self, threads=4, hold=150):
        self.hold = hold
        self.stop = False
        self.opened = 0
        self.failed = 0
        self.held = [[] for _ in range(threads)]
        self.threads = [threading.Thread(target=self.flood, args=(t,), daemon=True) for t in range(threads)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.halt()
        for held in self.held:
            for s in held:
                s.close()

    def halt(self):
        self.stop = True
        for t in self.threads:
            t.join(timeout=30)

    def flood(self, t):
        held = self.held[t]
        i = 0
        while not self.stop:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.settimeout(2)
                s.bind((f"127.0.{t + 1}.{2 + i % 250}", 0))
                s.connect((HOST, PORT))
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: flood\r\n")
                held.append(s)
                self.opened += 1
            except OSError:
                s.close()
                self.failed += 1
            i += 1
            if len(held) > self.hold:
                held.pop(0).close()
            if held:
                try:
                    held[i % len(held)].sendall(b"X-Trickle: 1\r\n")
                except OSError:
                    pass

    def open_at_the_gateway(self):
        """How many of the connections held (once halted) the gateway left open; the others it
        closed to make room, each with its 503 (or, at their header deadline, without)."""
        return sum(1 for held in self.held for s in held if not self.closed(s))

    @staticmethod
    def closed(s):
        rd = Reader(s)
        s.settimeout(0.01)
        try:
            r = rd.final()
        except socket.timeout:
            return False
        assert r is None or (r[0] == 503 and r[1].get("retry-after") == "1"), r
        return True


def keep_alive_client():
    """A key holder on one kept-alive connection: /healthz (with its key, as clients send it on
    every request), then create, exec and delete. Returns the milliseconds each took."""
    took = []
    with connect(timeout=60) as s:
        rd = Reader(s)

        def call(method, path, body=None):
            t = time.monotonic()
            data = json.dumps(body).encode() if body is not None else b""
            hdrs = [auth(), ("Content-Length", str(len(data)))]
            if body is not None:
                hdrs.append(("Content-Type", "application/json"))
            s.sendall(head(method, path, hdrs) + data)
            r = rd.final()
            assert r is not None, f"{method} {path}: connection closed"
            took.append((time.monotonic() - t) * 1000)
            return r[0], json.loads(r[2]) if r[2] else None

        assert call("GET", "/healthz")[0] == 200
        status, created = call("POST", "/sessions", {})
        assert status == 200, created
        sid = created["session_id"]
        status, res = call("POST", "/exec", {"session_id": sid, "code": "print(6 * 7)", "timeout_ms": 10000})
        assert status == 200 and res["stdout"] == "42\n", res
        assert call("DELETE", f"/sessions/{sid}", {})[0] == 200
    return took


def test_a_keyless_flood_leaves_room_for_key_holders():
    """All of the loopback range is one peer: the key holder and the keyless process share its 64
    connections. Connections that never authenticated may hold 48 of them (64 while the newest
    are within their second to send a request); past that, a new one closes the oldest of them,
    so the flood churns through its own connections and the key holder's requests get through."""
    rounds = []
    with KeylessFlood() as flood:
        deadline = time.monotonic() + 10
        while flood.opened < 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(3):
            # One kept-alive connection that authenticates with its first request...
            rounds.append(keep_alive_client())
            # ... and a client with a new connection for every request, /healthz without the key.
            rounds.append([other_client_round() * 1000])
        flood.halt()
        still_open = flood.open_at_the_gateway()
        opened, failed = flood.opened, flood.failed
    slowest = max(max(r) for r in rounds)
    print(f"\nkeyless flood: {opened} connections opened ({failed} connects failed), {still_open} of those "
          f"held at the end still open; meanwhile {len(rounds)} key-holder rounds, the slowest "
          f"request or round {slowest:.0f} ms")
    assert opened > 500, "the flood did not get going"
    # Those in their grace (a second to send a request) may take the peer's reserve, no more.
    assert still_open <= CONNECTIONS_PER_PEER, still_open
    served_again()


def gateway_signal(name):
    in_system("systemctl", "kill", "--kill-whom=main", f"--signal={name}", "scopebox-gateway.service", check=True)


def test_a_request_that_arrived_is_never_dropped_to_make_room(session):
    """A connection whose request has arrived but that libmicrohttpd has not read yet (the gateway
    is stopped meanwhile) may carry the key: it is not the one closed to make room for a newer
    connection. Its request runs and is answered; the oldest idle connection is closed instead,
    with a 503 that says when to retry, never without an answer."""
    marker = f"/workspace/made-room-{secrets.token_hex(4)}"
    body = json.dumps({"session_id": session, "code": f"open({marker!r}, 'w').write('ran')"}).encode()
    held = []
    try:
        # The key holder's connection first: the oldest of 48 that have not authenticated.
        holder = connect(timeout=10)
        held.append(holder)
        for _ in range(UNAUTHENTICATED_PER_PEER - 1):
            held.append(connect(timeout=10))
        time.sleep(EVICT_GRACE + 0.2)
        assert not Reader(holder).closed(timeout=0.05)
        gateway_signal("SIGSTOP")
        try:
            holder.sendall(head("POST", "/exec", [auth(), ("Content-Type", "application/json"),
                                                  ("Content-Length", str(len(body)))]) + body)
            held.append(connect(timeout=10))  # the kernel completes it meanwhile
        finally:
            gateway_signal("SIGCONT")
        answer = Reader(holder).final()
        time.sleep(0.5)
        made_room = [closed_to_make_room(s, timeout=0.05) for s in held[1:]]
    finally:
        for s in held:
            s.close()
    ran = run(session, f"import os\nprint(os.path.exists({marker!r}))")["stdout"]
    assert answer is not None and answer[0] == 200, answer
    assert ran == "True\n"
    # The next oldest made room, answered; the newest stays.
    assert made_room == [True] + [False] * (UNAUTHENTICATED_PER_PEER - 1), made_room
    served_again()
