# SPDX-License-Identifier: LGPL-2.1-or-later
"""Authentication of the sidecar API (COMPAT.md A): only "Authorization: Bearer <key>", compared as
a whole, opens the authenticated routes; everything else is 401 {"error":"unauthorized"} before the
body is read, and tells nothing about paths or limits."""
import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import api_key, delete_session, request
from rawhttp import Reader, connect, exchange, head

UNAUTHORIZED = {"error": "unauthorized"}
SID = "0123456789abcdef0123456789abcdef"

# Every authenticated route, with a body it would accept the shape of.
ROUTES = [
    ("POST", "/sessions", {}),
    ("DELETE", f"/sessions/{SID}", {}),
    ("POST", "/exec", {"session_id": SID, "code": "print(1)"}),
    ("POST", "/files", {"session_id": SID, "path": "a.txt", "data_base64": ""}),
    ("POST", "/files/get", {"session_id": SID, "path": "a.txt"}),
    ("POST", "/files/list", {"session_id": SID}),
    ("POST", "/files/reset-inputs", {"session_id": SID}),
    ("POST", "/storage/put", {"key": "mineru/a.pdf", "data_base64": ""}),
    ("POST", "/storage/delete", {"key": "mineru/a.pdf"}),
    ("POST", "/storage/gc", {"max_age_seconds": 1}),
    ("GET", "/metrics", None),
]


def refused(r):
    return r.status == 401 and r.json == UNAUTHORIZED


def wrong_keys():
    key = api_key()
    flipped = key[:-1] + ("A" if key[-1] != "A" else "B")
    return {
        "missing": None,
        "empty": "",
        "same-length": flipped,
        "prefix": key[:-1],
        "longer": key + "x",
        "doubled": key + key,
    }


@pytest.mark.parametrize("method,path,body", ROUTES, ids=[f"{m} {p.split('/')[1]}{p.count('/')}" for m, p, _ in ROUTES])
def test_every_authenticated_route_refuses_a_wrong_key(method, path, body):
    for name, key in wrong_keys().items():
        r = request(method, path, body, key=key)
        assert refused(r), (name, r)
    # And opens with the right one (whatever the resource then says about the made-up ids).
    r = request(method, path, body)
    assert r.status != 401, r
    if path == "/sessions" and method == "POST" and r.status == 200:
        delete_session(r.json["session_id"])


@pytest.mark.parametrize("value", [
    "Basic {key}", "bearer {key}", "BEARER {key}", "Token {key}", "{key}", "Bearer", "Bearer ",
    "Bearer  {key}", "Bearer\t{key}", "Bearer {key},Bearer {key}",
], ids=["basic", "lowercase", "uppercase", "token", "bare-key", "no-key", "empty-key", "two-spaces", "tab",
        "list"])
def test_wrong_scheme_or_format_is_401(value):
    r = request("POST", "/sessions", {}, key=None, headers={"Authorization": value.format(key=api_key())})
    assert refused(r), r


def test_key_in_the_query_string_or_other_headers_is_not_a_key():
    key = api_key()
    for query in (f"?api_key={key}", f"?key={key}", f"?token={key}", f"?access_token={key}"):
        assert refused(request("POST", "/sessions" + query, {}, key=None)), query
    # X-Api-Key belongs to the dify-sandbox API (COMPAT.md B), not to this one.
    for header in ("X-Api-Key", "X-API-Key", "Api-Key", "Proxy-Authorization"):
        assert refused(request("POST", "/sessions", {}, key=None, headers={header: key})), header
        assert refused(request("POST", "/sessions", {}, key=None, headers={header: f"Bearer {key}"})), header


def test_authorization_wins_over_a_wrong_x_api_key():
    r = request("GET", "/nope", key=..., headers={"X-Api-Key": "wrong"})
    assert (r.status, r.json) == (404, {"detail": "Not Found"})


def test_repeated_authorization_header_is_401():
    # Even with the right key twice: a repeated header is no key (docs/api.md).
    fields = [("Authorization", f"Bearer {api_key()}")] * 2 + [("Connection", "close")]
    responses, closed = exchange(head("POST", "/sessions", fields))
    assert [(r[0], r[2]) for r in responses] == [(401, b'{"error":"unauthorized"}')] and closed


def test_without_the_key_paths_and_limits_stay_hidden():
    # An unknown path, a wrong method and an oversized body all look the same.
    assert refused(request("GET", "/nope", key=None))
    assert refused(request("GET", "/exec", key=None))
    assert refused(request("GET", "/v1/sandbox/run", key=None))
    responses, _ = exchange(head("POST", "/exec", [("Content-Length", str(57 * 1024 * 1024))]))
    assert [(r[0], r[2]) for r in responses] == [(401, b'{"error":"unauthorized"}')]
    # While the key shows them.
    assert request("GET", "/nope").status == 404
    assert request("GET", "/exec").status == 405


def test_healthz_is_open_and_tells_nothing_sensitive():
    r = request("GET", "/healthz", key=None)
    assert r.status == 200 and set(r.json) <= {"ok", "image_ready", "backend", "systemd", "runner", "node", "sessions", "capacity", "draining"}, r
    assert api_key().encode() not in r.body
    # A wrong key does not matter there.
    assert request("GET", "/healthz", key="wrong").status == 200


@pytest.mark.parametrize("key", ["missing", "wrong"])
def test_401_before_the_body_with_expect_100_continue(key):
    fields = [("Content-Type", "application/json"), ("Content-Length", "1000000"), ("Expect", "100-continue")]
    if key == "wrong":
        fields.append(("Authorization", "Bearer wrong"))
    with connect(timeout=10) as s:
        rd = Reader(s)
        s.sendall(head("POST", "/files", fields))
        # The answer comes without a byte of the body and without "100 Continue".
        status, _, body = rd.response()
        assert (status, body) == (401, b'{"error":"unauthorized"}')
        assert rd.closed()


def test_401_before_the_body_without_expect():
    # The client sends the header only and waits: the 401 must not wait for the announced body.
    with connect(timeout=10) as s:
        rd = Reader(s)
        s.sendall(head("POST", "/exec", [("Content-Length", str(50 * 1024 * 1024))]))
        status, _, body = rd.response()
        assert (status, body) == (401, b'{"error":"unauthorized"}')
        assert rd.closed()
