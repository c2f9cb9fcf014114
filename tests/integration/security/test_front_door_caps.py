# SPDX-License-Identifier: LGPL-2.1-or-later
"""Issue 31, finding 7: the front door under one client that sends everything. Request bodies
waiting in any queue (a session's, a slow sender's) count against the gateway's body budget: past it
one more upload is answered 503 with Retry-After while small calls go on, and the gateway's memory
stays within what the budget counts. Many more parallel requests than the connection caps from one
peer (all of the loopback range is one) each get an HTTP answer, none a connection closed without
one: over the caps a connection waits (in libmicrohttpd's table or the listen backlog); a connection
closed to make room is answered 503 with Retry-After first; keyless clients get 401.

The numbers are the shipped defaults (docs/configuration.md, "The gateway's memory budget" and
"Fixed in the gateway"); nothing is configured around them."""
import base64
import concurrent.futures
import json
import socket
import threading
import time

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import api_key, create_session, delete_session, in_system, request, run
from rawhttp import Reader, auth, connect, head, served_again

MIB = 1 << 20
BUDGET = 1 << 30               # HTTP_BODY_BUDGET_MIN: the default body limits do not raise it
LARGE_LIMIT = BUDGET - 64 * MIB  # bodies over 1 MiB leave the budget's last 64 MiB to small ones
HARD_MAX = 256 + 64            # HTTP_CONNECTIONS_MAX + HTTP_CONNECTIONS_CLOSING_MAX, per socket
UPLOAD_RAW = 37 * MIB          # under SANDBOX_MAX_UPLOAD_BYTES (40M) once decoded
GATEWAY = "scopebox-gateway.service"


EVICT_GRACE = 1.0             # HTTP_EVICT_GRACE_USEC: a connection's time to send its request
MADE_ROOM = {"error": "too many connections, retry later"}


def closed_to_make_room(sock, timeout=0.5):
    """Whether the gateway answered the connection 503 with Retry-After (to make room for a newer
    one) and closed it, within 'timeout' seconds; False if it is still open and silent. A
    connection closed without an answer fails the test."""
    rd = Reader(sock)
    sock.settimeout(timeout)
    try:
        r = rd.final()
    except socket.timeout:
        return False
    finally:
        sock.settimeout(30)
    assert r is not None, "a connection was closed without an answer"
    status, headers, body = r
    assert status == 503 and headers.get("retry-after") == "1" and json.loads(body) == MADE_ROOM, r
    assert headers.get("connection", "").lower() == "close", headers
    assert rd.closed(timeout=5)
    return True


def gateway_memory():
    """The gateway's memory as its cgroup counts it (anonymous memory, the memory files it wrote
    the uploads into, socket buffers): whichever cgroup layout the host has."""
    out = in_system("systemctl", "show", "-p", "MemoryCurrent", "--value", GATEWAY).stdout.strip()
    assert out.isdigit(), out
    return int(out)


def buffered_bodies():
    """What the gateway's budget counts for request bodies now (GET /metrics)."""
    r = request("GET", "/metrics", timeout=30)
    assert r.status == 200, r
    for line in r.body.decode().splitlines():
        if line.startswith('scopebox_http_buffered_bytes{kind="bodies"} '):
            return int(line.split()[-1])
    raise AssertionError("no scopebox_http_buffered_bytes in /metrics")


def upload_body(sid, i):
    data = base64.b64encode(bytes([i]) * UPLOAD_RAW).decode()
    return json.dumps({"session_id": sid, "path": f"uploads/queued-{i}.bin", "data_base64": data}).encode()


def send_head(path, length, extra=()):
    s = connect(timeout=60)
    s.sendall(head("POST", path, [auth(), ("Content-Type", "application/json"),
                                  ("Content-Length", str(length)), *extra]))
    return s


def answered_at_once(s, timeout=0.5):
    """The final answer if one comes within 'timeout' s (None if none comes)."""
    s.settimeout(timeout)
    try:
        return Reader(s).final()
    except socket.timeout:
        return None
    finally:
        s.settimeout(60)


def test_bodies_waiting_in_queues_count_against_the_budget():
    busy_sid = create_session()
    other = create_session()
    held = []
    try:
        # The session runs a long exec: uploads into it wait behind it, decoded and held.
        busy = connect(timeout=60)
        held.append(busy)
        code = json.dumps({"session_id": busy_sid, "code": "import time; time.sleep(100)",
                           "timeout_ms": 120000}).encode()
        busy.sendall(head("POST", "/exec", [auth(), ("Content-Type", "application/json"),
                                            ("Content-Length", str(len(code)))]) + code)
        time.sleep(1)
        queued_bytes = 0
        for i in range(8):
            body = upload_body(busy_sid, i)
            s = send_head("/files", len(body))
            s.sendall(body)
            held.append(s)
            queued_bytes += len(body)
        # Every one of them waits (for the session), none answered.
        assert all(answered_at_once(s) is None for s in held[1:]), "an upload did not wait"

        # Slow senders: large bodies that stop short of their end, until one more finds no room.
        trickled_bytes, refused = 0, None
        for i in range(40):
            length = 55 * MIB
            s = send_head("/files", length)
            answer = answered_at_once(s, timeout=0.3)
            if answer is not None:
                refused = answer
                held.append(s)
                break
            s.sendall(b'{"session_id":"' + busy_sid.encode() + b'","path":"x","data_base64":"' +
                      b"A" * (50 * MIB))
            held.append(s)
            trickled_bytes += 50 * MIB
            time.sleep(0.2)  # read by the gateway before the next head arrives
        held_bytes = queued_bytes + trickled_bytes
        memory = gateway_memory()
        counted = buffered_bodies()
        print(f"\n{queued_bytes / MIB:.0f} MiB of uploads waiting for their session, {trickled_bytes / MIB:.0f} "
              f"MiB of uploads arriving slowly; the next one answered {refused and refused[0]}; the "
              f"gateway's cgroup holds {memory / MIB:.0f} MiB ({memory / held_bytes:.2f} of the bodies held), "
              f"its budget counts {counted / MIB:.0f} MiB")

        # The next large upload is refused at its head, with a status that says when to retry.
        assert refused is not None, "uploads past the budget were still taken"
        status, headers, raw = refused
        assert status == 503 and json.loads(raw) == {"error": "server busy, retry later"}, refused
        assert headers.get("retry-after") == "1", headers
        # It took what the budget allows for large bodies, counted with the ones waiting (each
        # reserved by the MiB as it arrives, so a little more than its bytes).
        assert LARGE_LIMIT * 0.85 < held_bytes <= LARGE_LIMIT, held_bytes
        assert held_bytes <= counted <= LARGE_LIMIT, (counted, held_bytes)

        # Small calls are served meanwhile: they have the budget's last 64 MiB.
        assert request("GET", "/healthz", timeout=30).status == 200
        assert run(other, "print(6 * 7)", timeout_ms=10000)["stdout"] == "42\n"
        r = request("POST", "/files", {"session_id": other, "path": "small.txt", "data_base64": "eA=="})
        assert r.status == 200, r

        # What is held is what the budget counts: the bodies, once each (an upload waiting for its
        # session in its memory file, not in its parsed body as well), and little besides.
        assert memory <= held_bytes * 1.05 + 96 * MIB, (memory, held_bytes)
    finally:
        for s in held:
            s.close()
        delete_session(busy_sid)
        delete_session(other)
    served_again()


def parallel_clients(n, path, body_of, key_header, keep_alive, per_client=1):
    """n clients from the loopback, each on its own connection, all started at once: every
    request's (status, retry-after) or the way its connection failed."""
    results = []
    start = threading.Barrier(n)

    def client(i):
        out = []
        try:
            start.wait(timeout=60)
            with connect(timeout=240) as s:
                rd = Reader(s)
                for k in range(per_client):
                    body = body_of(i, k)
                    last = k == per_client - 1
                    hdrs = [key_header, ("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
                    if not keep_alive or last:
                        hdrs.append(("Connection", "close"))
                    s.sendall(head("POST", path, hdrs) + body)
                    r = rd.final()
                    if r is None:
                        out.append(("closed without an answer", None, b""))
                        break
                    out.append((r[0], r[1].get("retry-after"), r[2][:100]))
                    if r[1].get("connection", "").lower() == "close":
                        break
        except (OSError, threading.BrokenBarrierError) as e:
            out.append((f"failed: {e!r}", None, b""))
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        for out in pool.map(client, range(n)):
            results += out
    return results


def check_every_one_answered(results, what):
    tally = {}
    for status, retry_after, body in results:
        key = status if isinstance(status, int) else str(status).split("(")[0]
        tally[key] = tally.get(key, 0) + 1
    print(f"\n{what}: {tally}")
    bad = [(s, ra, body) for s, ra, body in results if not (s == 200 or (s in (429, 503) and ra))]
    assert not bad, f"{len(bad)} of {len(results)} without an answer or a Retry-After: {bad[:5]}"
    assert tally.get(200, 0) > 0, tally


def test_many_parallel_execs_from_one_client_are_all_answered():
    """400 execs at once from one peer, each on a new connection: more than the peer's 64, than
    all 256, and than libmicrohttpd's 320 (the rest wait in the listen backlog); spread over 12
    sessions, more of them wait for the session manager (12 x 17) than dbus-daemon lets one
    connection have calls waiting for replies (128). Then 96 clients that keep their connections
    alive for three execs each."""
    sids = [create_session() for _ in range(12)]
    try:
        def body_of(i, k):
            return json.dumps({"session_id": sids[i % len(sids)], "code": "import time; time.sleep(0.2)",
                               "timeout_ms": 60000}).encode()

        results = parallel_clients(400, "/exec", body_of, auth(), keep_alive=False)
        check_every_one_answered(results, "400 parallel execs, one connection each")
        results = parallel_clients(96, "/exec", body_of, auth(), keep_alive=True, per_client=3)
        assert len(results) >= 96
        check_every_one_answered(results, "96 kept-alive clients, three execs each")
    finally:
        for sid in sids:
            delete_session(sid)
    served_again()


def test_many_parallel_dify_runs_from_one_client_are_all_answered():
    """Dify's API server is one peer: 300 runs at once, on new connections, past MAX_REQUESTS
    (50: 503 in dify-sandbox's envelope, with Retry-After) and past every connection cap."""
    def body_of(i, k):
        return json.dumps({"language": "python3", "code": "print(1)", "preload": ""}).encode()

    results = parallel_clients(300, "/v1/sandbox/run", body_of, ("X-Api-Key", api_key()), keep_alive=False)
    check_every_one_answered(results, "300 parallel dify runs")
    served_again()


def test_keyless_clients_over_the_caps_get_401_never_a_close():
    """300 clients without the key at once, on both APIs: each gets its 401 (or waits for it in the
    backlog), none a connection closed without an answer. The only other answer is the 503 with
    Retry-After of a connection closed to make room while no byte of its request had arrived yet
    (connected, but its request not sent: a keyless client holding a connection is what the
    per-peer bound is against). A key holder at the same time is served."""
    n = 300
    start = threading.Barrier(n + 1)

    def keyless(i):
        path, hdrs = (("/exec", [("Authorization", "Bearer wrong")]) if i % 2
                      else ("/v1/sandbox/run", [("X-Api-Key", "wrong")]))
        body = b'{"code":"print(1)"}'
        try:
            start.wait(timeout=60)
            with connect(timeout=120) as s:
                s.sendall(head("POST", path, hdrs + [("Content-Type", "application/json"),
                                                     ("Content-Length", str(len(body)))]) + body)
                r = Reader(s).final()
                return (r[0], r[1].get("retry-after")) if r else ("closed without an answer", None)
        except (OSError, threading.BrokenBarrierError) as e:
            return (f"failed: {e!r}", None)

    with concurrent.futures.ThreadPoolExecutor(max_workers=n + 1) as pool:
        futures = [pool.submit(keyless, i) for i in range(n)]
        start.wait(timeout=60)
        holder = request("GET", "/healthz", timeout=120)
        statuses = [f.result() for f in futures]
    tally = {s: statuses.count(s) for s in set(statuses)}
    print(f"\n{n} keyless clients at once: {tally}; a key holder meanwhile: {holder.status}")
    assert all(s == (401, None) or s == (503, "1") for s in statuses), tally
    assert tally.get((401, None), 0) > n // 2, tally
    assert holder.status == 200
    served_again()
