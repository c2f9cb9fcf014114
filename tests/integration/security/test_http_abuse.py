# SPDX-License-Identifier: LGPL-2.1-or-later
"""Abuse of the HTTP front end: slow senders (header and body deadlines), oversized and
ambiguous requests (caps, request smuggling), hostile JSON, and the per-peer connection limits.
Each case shows the limit holds and that the service goes on answering others."""
import base64
import json
import os
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import request, run, session  # noqa: F401 (fixture)
from rawhttp import Reader, auth, connect, dribble, exchange, head, served_again
from test_front_door_caps import EVICT_GRACE, closed_to_make_room

MAX_BODY = 56 * 1024 * 1024
MAX_STORAGE_BODY = 300 * 1024 * 1024
HEADERS_MAX = 64
CONNECTIONS_PER_PEER = 64
UNAUTHENTICATED_PER_PEER = 48  # of them, without a request that carried the key
# What a cut-off connection may take: the deadline is ~10 s; MHD's idle timeout (30 s) must not be
# what ends it.
CUT_MIN, CUT_MAX = 8, 30

TOO_LARGE = f'{{"error":"request body exceeds {MAX_BODY} bytes"}}'.encode()
HEADERS_TOO_LARGE = b'{"error":"request header fields too large"}'
INVALID_TE = b'{"error":"invalid transfer-encoding"}'
INVALID_CL = b'{"error":"invalid content-length"}'
JSON_INVALID = {"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}]}


def healthz_answers():
    r = request("GET", "/healthz", key=None, timeout=5)
    assert r.status == 200, r


def exec_raw(body, key=...):
    return request("POST", "/exec", raw=body, key=key, headers={"Content-Type": "application/json"})


# Deadlines


def test_slowloris_header_is_cut_off_while_others_are_served():
    served = []

    def meanwhile(elapsed):
        # A few complete requests from another client while the slow one hangs on.
        if len(served) < 4 and elapsed > 2 * (len(served) + 1):
            healthz_answers()
            served.append(elapsed)

    with connect() as s:
        s.sendall(b"POST /exec HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        elapsed = dribble(s, meanwhile=meanwhile)
        rd = Reader(s)
        assert elapsed is not None, "a header trickling in one byte per second was never cut off"
        assert CUT_MIN <= elapsed <= CUT_MAX, elapsed
        # Closed without an answer: no request was ever complete.
        assert rd.closed()
    assert len(served) == 4


def test_kept_alive_connection_gets_a_new_header_deadline():
    with connect() as s:
        rd = Reader(s)
        # The first request is answered and the connection kept open...
        s.sendall(head("GET", "/healthz"))
        status, headers, _ = rd.response()
        assert status == 200 and headers.get("connection", "").lower() != "close"
        # ...and the next header has the same deadline, counted from the end of the first request.
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        elapsed = dribble(s)
        assert elapsed is not None and CUT_MIN <= elapsed <= CUT_MAX, elapsed
        assert rd.closed()


def test_slow_body_is_answered_408_and_closed():
    with connect() as s:
        rd = Reader(s)
        s.sendall(head("POST", "/exec", [auth(), ("Content-Type", "application/json"),
                                         ("Content-Length", "100000")]) + b'{"code":"')
        elapsed = dribble(s)
        assert elapsed is not None and CUT_MIN <= elapsed <= CUT_MAX, elapsed
        status, headers, body = rd.final()
        assert (status, body) == (408, b'{"error":"request body too slow"}')
        assert headers["connection"].lower() == "close"
        assert rd.closed()


def test_body_stalled_after_100_continue_is_answered_408():
    with connect() as s:
        rd = Reader(s)
        s.sendall(head("POST", "/exec", [auth(), ("Content-Length", "1000"), ("Expect", "100-continue")]))
        start = time.monotonic()
        assert rd.response()[0] == 100
        status, _, body = rd.final()
        elapsed = time.monotonic() - start
        assert (status, body) == (408, b'{"error":"request body too slow"}')
        assert CUT_MIN <= elapsed <= CUT_MAX, elapsed
        assert rd.closed()


def test_large_storage_put_at_local_speed_is_not_cut_off():
    # Just under the 300 MiB limit of /storage/put, sent at whatever speed loopback gives: the body
    # deadline grows with what arrives, so all of it reaches the storage agent (whose local
    # provider then refuses to presign).
    data = os.urandom((MAX_STORAGE_BODY - 256) // 4 * 3)
    body = json.dumps({"key": "mineru/http-abuse-big.bin", "data_base64": base64.b64encode(data).decode(),
                       "storage": {"provider": "local", "prefix": "aivory/"}}).encode()
    del data
    assert MAX_STORAGE_BODY - 1024 * 1024 < len(body) <= MAX_STORAGE_BODY
    r = request("POST", "/storage/put", raw=body, headers={"Content-Type": "application/json"}, timeout=600)
    assert (r.status, r.json) == (400, {"detail": "presigned URLs are unsupported for local storage"})


# Body caps


def test_chunked_body_over_the_limit_gets_413_while_streaming():
    chunk = b"x" * (1 << 20)
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    sent = 0
    with connect() as s:
        rd = Reader(s)
        s.sendall(head("POST", "/exec", [auth(), ("Transfer-Encoding", "chunked")]))
        try:
            for _ in range(80):
                s.sendall(frame)
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, headers, body = rd.final()
        assert (status, body) == (413, TOO_LARGE)
        assert headers["connection"].lower() == "close"
        assert rd.closed()
    # Refused at the limit, not after the whole body.
    assert sent < 80


def test_announced_body_over_the_limit_gets_413_before_it_is_sent():
    with connect() as s:
        rd = Reader(s)
        s.sendall(head("POST", "/files", [auth(), ("Content-Length", str(MAX_BODY + 1)),
                                          ("Expect", "100-continue")]))
        status, _, body = rd.response()  # no "100 Continue" first
        assert (status, body) == (413, TOO_LARGE)
        assert rd.closed()


# Header caps


def test_header_field_count_is_capped_at_64():
    # Host, Authorization and Connection are three of them.
    fields = [auth(), ("Connection", "close")] + [(f"X-Pad-{i}", "v") for i in range(HEADERS_MAX - 3)]
    responses, closed = exchange(head("POST", "/exec", fields))
    # 64 are accepted: the missing body is the resource's business.
    assert [r[0] for r in responses] == [422] and closed
    responses, closed = exchange(head("POST", "/exec", fields + [("X-One-More", "v")]))
    assert [(r[0], r[2]) for r in responses] == [(431, HEADERS_TOO_LARGE)] and closed


def test_header_bytes_are_capped_at_16k():
    responses, closed = exchange(head("GET", "/healthz", [("X-Big", "b" * (12 * 1024)), ("Connection", "close")]))
    assert [r[0] for r in responses] == [200] and closed
    responses, closed = exchange(head("GET", "/healthz", [("X-Big", "b" * (17 * 1024))]))
    assert [(r[0], r[2]) for r in responses] == [(431, HEADERS_TOO_LARGE)] and closed


def test_header_larger_than_the_connection_memory_is_refused():
    # Beyond what libmicrohttpd keeps per connection it refuses by itself (its own small body).
    responses, closed = exchange(head("GET", "/healthz", [("X-Huge", "h" * (200 * 1024))]))
    assert [r[0] for r in responses] == [431] and closed


def test_long_request_target_is_414():
    for target in ("/" + "p" * 9000, "/healthz?q=" + "v" * 9000):
        responses, closed = exchange(head("GET", target))
        assert [(r[0], r[2]) for r in responses] == [(414, b'{"error":"request target too long"}')], target
        assert closed
    # A request line beyond the connection's memory: libmicrohttpd's own 414 or 431.
    responses, closed = exchange(head("GET", "/" + "p" * (200 * 1024)))
    assert [r[0] for r in responses] in ([414], [431]) and closed


# Request smuggling: a request whose end is ambiguous is refused and the connection closed, so
# that nothing after it is ever read as a request of its own.

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def test_content_length_with_transfer_encoding_is_400():
    body = b"0\r\n\r\n" + SMUGGLED
    req = head("POST", "/exec", [auth(), ("Content-Length", str(len(body))), ("Transfer-Encoding", "chunked")])
    responses, closed = exchange(req + body)
    assert [(r[0], r[2]) for r in responses] == [(400, INVALID_TE)] and closed


def test_transfer_encoding_other_than_chunked():
    # Repeated, or a coding we don't implement.
    responses, closed = exchange(head("POST", "/exec", [auth(), ("Transfer-Encoding", "chunked"),
                                                        ("Transfer-Encoding", "identity")]) + b"0\r\n\r\n" + SMUGGLED)
    assert [(r[0], r[2]) for r in responses] == [(400, INVALID_TE)] and closed
    for te in ("gzip, chunked", "identity", "xchunked"):
        responses, closed = exchange(head("POST", "/exec", [auth(), ("Transfer-Encoding", te)]) + SMUGGLED)
        assert [(r[0], r[2]) for r in responses] == [(501, b'{"error":"unsupported transfer-encoding"}')], te
        assert closed


@pytest.mark.parametrize("field", [
    b"Transfer-Encoding : chunked",
    b"Content-Length\t: 5",
    b"X-Note: a\rTransfer-Encoding: chunked",
    b"X Note: b",
], ids=["space-before-colon", "tab-before-colon", "bare-cr", "space-in-name"])
def test_malformed_header_fields_are_400(field):
    # What one parser ignores and another obeys: refused before anything is read as a body.
    req = head("POST", "/exec", [auth()])[:-2] + field + b"\r\n\r\n"
    responses, closed = exchange(req + b"0\r\n\r\n" + SMUGGLED)
    assert [(r[0], r[2]) for r in responses] == [(400, b'{"error":"invalid header field"}')] and closed


@pytest.mark.parametrize("second", ["0", "5", "6"])
def test_repeated_content_length_is_400(second):
    body = b"{}\r\n\r\n"
    req = head("POST", "/sessions", [auth(), ("Content-Length", "6"), ("Content-Length", second)])
    responses, closed = exchange(req + body + SMUGGLED)
    assert [(r[0], r[2]) for r in responses] == [(400, INVALID_CL)] and closed


@pytest.mark.parametrize("size,status", [
    (b"zz", 400), (b"-1", 400), (b"0x5", 400), (b" 5", 400), (b"", 400), (b"1" * 20, 413),
], ids=["zz", "negative", "0x", "space", "empty", "over-64-bits"])
def test_invalid_chunk_size_is_refused_and_ends_the_connection(size, status):
    # libmicrohttpd finds these in the middle of the body and answers itself (with its own small
    # HTML body): the status and the closed connection are what matter.
    req = head("POST", "/exec", [auth(), ("Transfer-Encoding", "chunked")])
    responses, closed = exchange(req + size + b"\r\nhello\r\n0\r\n\r\n" + SMUGGLED)
    assert [r[0] for r in responses] == [status] and closed


@pytest.mark.parametrize("value,status", [
    ("12x", 400), ("-1", 400), ("+5", 400), ("5 5", 400), ("0x10", 400), ("1" * 30, 413),
], ids=["suffix", "negative", "plus", "two-numbers", "hex", "over-64-bits"])
def test_malformed_content_length_is_refused(value, status):
    # Refused by libmicrohttpd before the gateway sees the request (its own small HTML body, the
    # one known difference from the upstream sidecar's JSON).
    responses, closed = exchange(head("POST", "/exec", [auth(), ("Content-Length", value)]) + b"{}" + SMUGGLED)
    assert [r[0] for r in responses] == [status] and closed


def test_well_framed_requests_keep_the_connection_in_step():
    # Pipelined: a chunked body, then a Content-Length body, then a GET, all on one connection,
    # each answered in order.
    chunked = b'{"session_id":"nope",' + b'"code":"1"}'
    req = head("POST", "/exec", [auth(), ("Transfer-Encoding", "chunked")]) + \
        b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunked), chunked)
    body = b'{"session_id":"nope","code":"2"}'
    req += head("POST", "/exec", [auth(), ("Content-Length", str(len(body)))]) + body
    req += head("GET", "/healthz", [("Connection", "close")])
    responses, closed = exchange(req)
    assert [r[0] for r in responses] == [400, 400, 200] and closed
    assert responses[0][2] == responses[1][2] == b'{"detail":"invalid session_id"}'


# Strict JSON


def nested(depth):
    return b"[" * depth + b"]" * depth


def test_json_depth_is_capped_at_32():
    r = exec_raw(nested(32))
    assert r.status == 422 and r.json["detail"][0]["type"] == "model_attributes_type", r
    r = exec_raw(nested(33))
    assert (r.status, r.json) == (422, JSON_INVALID)
    r = exec_raw(b'{"session_id":"nope","code":"1","x":' + nested(100000) + b"}")
    assert (r.status, r.json) == (422, JSON_INVALID)


@pytest.mark.parametrize("body", [
    b'{"session_id":"nope","code":"1","code":"2"}',     # duplicate key
    b'{"session_id":"nope","code":"\xc3\x28"}',           # invalid UTF-8
    b'{"session_id":"nope","code":"\\ud800"}',            # lone surrogate
    b'{"session_id":"nope","code":"1"} {}',               # trailing data
    b"{'session_id':'nope','code':'1'}",                  # not JSON quotes
], ids=["duplicate-key", "invalid-utf8", "lone-surrogate", "trailing-data", "single-quotes"])
def test_non_strict_json_is_422(body):
    r = exec_raw(body)
    assert (r.status, r.json) == (422, JSON_INVALID)


@pytest.mark.parametrize("number,expected", [
    (b"NaN", JSON_INVALID),
    (b"Infinity", JSON_INVALID),
    (b"1e400", "int_from_float"),
    (b"18446744073709551616", "int_parsing_size"),
    (b"1" * 80, JSON_INVALID),
    (b"2.5", "int_from_float"),
], ids=["nan", "infinity", "1e400", "2**64", "80-digits", "fraction"])
def test_out_of_range_numbers_are_422(number, expected):
    r = exec_raw(b'{"session_id":"0123456789abcdef0123456789abcdef","code":"1","timeout_ms":' + number + b"}")
    assert r.status == 422, r
    if isinstance(expected, str):
        assert r.json["detail"][0]["type"] == expected and r.json["detail"][0]["loc"] == ["body", "timeout_ms"], r
    else:
        assert r.json == expected


def test_negative_timeout_is_clamped_not_refused(session):
    # COMPAT.md: timeout_ms is clamped to [1000, cap]; -1 runs with the minimum.
    res = run(session, "import time; time.sleep(5)", timeout_ms=-1)
    assert res["exit_code"] == 124
    assert res["stderr"].endswith("[sandbox] execution exceeded 1.000s and was killed")


# Connections


def test_connections_per_peer_are_capped():
    """Connections that never authenticated hold at most 48 of a peer's 64; each one past that
    closes the oldest of them (one that waited for its request for a second at least), which is
    answered 503 with Retry-After first."""
    held = []
    try:
        for _ in range(UNAUTHENTICATED_PER_PEER):
            held.append(connect(timeout=10))
        time.sleep(EVICT_GRACE + 0.2)
        for _ in range(CONNECTIONS_PER_PEER + 1 - UNAUTHENTICATED_PER_PEER):
            held.append(connect(timeout=10))
        time.sleep(0.5)
        closed = [closed_to_make_room(s, timeout=0.05) for s in held]
        n_closed = CONNECTIONS_PER_PEER + 1 - UNAUTHENTICATED_PER_PEER
        assert closed == [True] * n_closed + [False] * UNAUTHENTICATED_PER_PEER, closed
        # The newest ones work.
        held[-1].sendall(head("GET", "/healthz", [("Connection", "close")]))
        assert Reader(held[-1]).response()[0] == 200
    finally:
        for s in held:
            s.close()
    served_again()


def test_authenticated_connections_fill_a_peer_and_stay():
    """64 connections that each authenticated are kept; a 65th from the same peer, for which none
    of them is closed to make room, is served all the same: never accepted and closed unanswered
    (libmicrohttpd's own limit bounds them all; past it a client waits in the listen backlog)."""
    held = []
    try:
        for _ in range(CONNECTIONS_PER_PEER):
            s = connect(timeout=10)
            held.append(s)
            s.sendall(head("GET", "/healthz", [auth()]))
            assert Reader(s).response()[0] == 200
        extra = connect(timeout=10)
        held.append(extra)
        assert not closed_to_make_room(extra, timeout=0.5)
        extra.sendall(head("GET", "/healthz", [auth(), ("Connection", "close")]))
        assert Reader(extra).response()[0] == 200
        # The held ones still work (kept alive, well within the next header's deadline).
        held[0].sendall(head("GET", "/healthz", [auth(), ("Connection", "close")]))
        assert Reader(held[0]).response()[0] == 200
    finally:
        for s in held:
            s.close()
    served_again()
