# SPDX-License-Identifier: LGPL-2.1-or-later
"""The SDK's files.read/files.write (envd's GET and POST /files) against the default install
(docs/e2b.md "Files"): the workspace, which the sandbox also sees as /home/user; nothing outside
it. Driven by the real SDK from npm (tools/install-e2b-sdk), unmodified."""
import urllib.error
import urllib.request

from conftest import Response
from e2b_sdk import E2B_URL, ENVD_PORT, sandbox_request, sandboxes  # noqa: F401 (fixture)


def raw_request(method, path, body, headers):
    """A request with a body sent as is (not JSON)."""
    req = urllib.request.Request(E2B_URL + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return Response(r.status, r.read(), dict(r.headers))
    except urllib.error.HTTPError as e:
        return Response(e.code, e.read(), dict(e.headers))


def test_files_round_trip_and_meet_the_code(sandboxes):
    out = sandboxes.run("files.mjs", {"package": "@e2b/code-interpreter"}, timeout=120)
    assert "fatal" not in out, out
    w = out["write"]["value"]
    assert w["path"] == "/home/user/notes/a.txt" and w["name"] == "a.txt" and w["type"] == "file", out
    assert out["readText"]["value"] == "héllo\n" and out["readTilde"]["value"] == "héllo\n", out
    # Bytes stay bytes, CR and NUL included.
    assert out["readBytes"]["value"] == [0, 1, 2, 255, 10, 13], out
    assert [e["path"] for e in out["writeMany"]["value"]] == ["/home/user/m/1.txt", "/home/user/m/2.txt"], out
    assert out["missing"]["error"]["name"] in ("FileNotFoundError", "NotFoundError"), out
    # Nothing outside the workspace, whatever the path says.
    assert out["outside"]["error"]["name"] == "InvalidArgumentError", out
    assert out["escape"]["error"], out
    # What the SDK wrote, the code reads, under both names; what the code wrote, the SDK reads.
    assert out["code"]["value"] == ["héllo\n", "two", "/workspace"], out
    assert out["readMade"]["value"] == "from code", out
    assert out["afterKill"]["error"], out


def test_raw_uploads_and_their_refusals(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    sid, token = made["sandboxID"], made["envdAccessToken"]

    def files(method, query, body=None, headers=None):
        h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(ENVD_PORT), "X-Access-Token": token}
        h.update(headers or {})
        return raw_request(method, "/files" + query, body, h)

    r = files("POST", "?path=raw.bin", b"\x00abc", {"Content-Type": "application/octet-stream"})
    assert r.status == 200 and r.json == [{"path": "/home/user/raw.bin", "name": "raw.bin", "type": "file"}], r
    r = files("GET", "?path=/workspace/raw.bin")
    assert r.status == 200 and r.body == b"\x00abc", r
    assert files("POST", "?path=d/f", b"x", {"Content-Type": "application/octet-stream"}).status == 200
    # A directory is no file (404, as the sidecar's file API says; envd says 400), another user,
    # a compressed body, a path outside, a broken form: 4xx with a reason.
    for method, query, body, headers, status in [
        ("GET", "?path=/home/user", None, {}, 404),
        ("GET", "?path=d", None, {}, 404),
        ("GET", "?path=raw.bin&username=root", None, {}, 401),
        ("POST", "?path=z", b"x", {"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}, 400),
        ("POST", "?path=/tmp/z", b"x", {"Content-Type": "application/octet-stream"}, 400),
        ("POST", "", b"--B\r\nno", {"Content-Type": "multipart/form-data; boundary=B"}, 400),
    ]:
        r = files(method, query, body, headers)
        assert r.status == status and r.json["code"] == status and r.json["message"], (query, r)
    # Without the token: nothing.
    r = sandbox_request(sid, "GET", "/files?path=raw.bin")
    assert r.status == 401, r
