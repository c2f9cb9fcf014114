# SPDX-License-Identifier: LGPL-2.1-or-later
"""Host routing and signed file URLs (docs/e2b.md "Host routing"): with SANDBOX_E2B_DOMAIN set,
traffic to <port>-<id>.<domain> goes to that sandbox, as the SDKs address a sandbox without
E2B_SANDBOX_URL, and the SDK's downloadUrl/uploadUrl work without any header, as a browser behind
the deployment's TLS terminator uses them. Off by default (tested too). The URLs are made by the
real SDK from npm, unmodified; they are then fetched over plain HTTP with their Host."""
import http.client
import json
import urllib.parse
import uuid

from conftest import unit_environment
from e2b_sdk import E2B_URL, ENVD_PORT, sandbox_request, sandboxes  # noqa: F401 (fixture)

GATEWAY = "scopebox-gateway.service"
DOMAIN = "sbx.example.test"


def by_host(url, method="GET", body=None, headers=None):
    """A request to url (its Host kept) sent to the E2B listener, as a TLS terminator forwards it."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(E2B_URL).netloc, timeout=30)
    target = u.path + ("?" + u.query if u.query else "")
    conn.request(method, target, body=body, headers={"Host": u.netloc, **(headers or {})})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def multipart(name, data):
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def test_host_routing_is_off_by_default(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    status, _ = by_host(f"http://{ENVD_PORT}-{made['sandboxID']}.{DOMAIN}/health",
                        headers={"X-Access-Token": made["envdAccessToken"]})
    # Not a sandbox's traffic but the control plane's, which wants the API key.
    assert status == 401, status


def test_signed_urls_and_host_routing(sandboxes):
    with unit_environment(GATEWAY, "test-e2b-domain", [f"SANDBOX_E2B_DOMAIN={DOMAIN}"]):
        out = sandboxes.run("urls.mjs", {"path": "notes/signed.txt"}, domain=DOMAIN)
        sid, token = out["sandboxId"], out["envdAccessToken"]
        host = f"{ENVD_PORT}-{sid}.{DOMAIN}"
        assert urllib.parse.urlsplit(out["upload"]).netloc == host, out
        # Creates say where their sandboxes are.
        assert sandboxes.create_raw({"templateID": "base", "timeout": 60})["domain"] == DOMAIN
        r = sandbox_request(sid, "GET", "/health", token=token)
        assert r.status == 204, r
        # Traffic by host, with the token, as the SDK's own calls go.
        assert by_host(f"https://{host}/health", headers={"X-Access-Token": token})[0] == 204
        assert by_host(f"https://{host}/health")[0] == 401
        # The upload URL alone writes, the download URL alone reads: no header, no key.
        body, headers = multipart("signed.txt", b"signed \x00 bytes")
        status, data = by_host(out["upload"], "POST", body, headers)
        assert status == 200, (status, data)
        status, data = by_host(out["download"])
        assert status == 200 and data == b"signed \x00 bytes", (status, data)
        status, data = by_host(out["expiring"])
        assert status == 200 and data == b"signed \x00 bytes", (status, data)
        # What the signature does not cover is refused: another path, the other operation, a changed
        # or expired signature, another sandbox, another user.
        u = urllib.parse.urlsplit(out["download"])
        q = dict(urllib.parse.parse_qsl(u.query))
        sig = q["signature"]
        # One character of the digest changed (never to itself: a test that could pass unchanged).
        forged = sig[:10] + ("B" if sig[10] == "A" else "A") + sig[11:]
        for changed in [{"path": "other.txt"}, {"signature": forged}, {"username": "user"}]:
            target = u._replace(query=urllib.parse.urlencode({**q, **changed})).geturl()
            assert by_host(target)[0] == 401, changed
        assert by_host(out["expired"])[0] == 401
        assert by_host(out["download"], "POST", *multipart("x", b"x"))[0] == 401
        other = sandboxes.create_raw({"templateID": "base", "timeout": 60})
        assert by_host(out["download"].replace(sid, other["sandboxID"]))[0] == 401
        # A signature opens /files only, and a token sent must be right.
        assert by_host(out["download"].replace("/files?", "/health?"))[0] == 401
        assert by_host(out["download"], headers={"X-Access-Token": "0" * 64})[0] == 401
        # Another port of the sandbox, a name that is not an id: not the sandbox's file server.
        assert by_host(out["download"].replace(f"{ENVD_PORT}-", "8080-"))[0] == 502
        assert by_host(f"https://{ENVD_PORT}-nothex.{DOMAIN}/health", headers={"X-Access-Token": token})[0] == 401
        # The headers still win over the host.
        r = sandbox_request(sid, "GET", "/files?path=notes/signed.txt", token=token)
        assert r.status == 200 and r.body == b"signed \x00 bytes", r
        assert json.loads(json.dumps(out))  # the script's answer was JSON throughout
