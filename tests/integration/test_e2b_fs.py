# SPDX-License-Identifier: LGPL-2.1-or-later
"""The SDK's files.list/exists/getInfo/makeDir/rename/remove (envd's filesystem RPCs, Connect in
JSON) against the default install (docs/e2b.md "Files"): the workspace, which the sandbox sees as
/home/user and /workspace, and nothing else, whatever links a process of the sandbox makes; and
the wire for what the SDK hides (statuses, codes, envelopes, tokens). Driven by the real SDK from
npm (tools/install-e2b-sdk), unmodified."""
import datetime
import json
import os
import struct
from e2b_sdk import ENVD_PORT, JUPYTER_PORT, V1, sandboxes  # noqa: F401 (fixture)
from test_e2b_files import raw_request

FS = "/filesystem.Filesystem/"


def rpc(sandbox_id, method, body, token=None, content_type="application/json", headers=None, port=ENVD_PORT):
    """One Connect call as the SDK makes it: POST, E2b-Sandbox-Id/Port, the body as given (bytes)
    or JSON-encoded."""
    h = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port), "Connect-Protocol-Version": "1"}
    if content_type:
        h["Content-Type"] = content_type
    if token is not None:
        h["X-Access-Token"] = token
    h.update(headers or {})
    return raw_request("POST", FS + method, body if isinstance(body, bytes) else json.dumps(body).encode(), h)


def envelope(message):
    """A Connect stream's request: one envelope, flags 0."""
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


def envelopes(body):
    """The (flags, message) of each envelope of a stream's body; the body must be whole envelopes."""
    out = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        assert len(body) >= 5 + size, body
        out.append((flags, json.loads(body[5:5 + size])))
        body = body[5 + size:]
    return out


def connect_error(r, status, code):
    """A unary call's Connect error: the status of its code, {"code": code, "message": text}."""
    assert r.status == status, r
    assert r.json["code"] == code and isinstance(r.json["message"], str) and r.json["message"], r


def test_files_list_stat_mkdir_rename_remove(sandboxes):
    out = sandboxes.run("fs.mjs", {"package": "@e2b/code-interpreter"}, timeout=180)
    assert "fatal" not in out, out
    check_basic_calls(out)

    # getInfo: every field the SDK maps, as envd fills them.
    info = out["info"]["value"]
    assert {k: info[k] for k in ("name", "type", "path", "size", "mode", "permissions", "owner", "group")} == {
        "name": "a.txt", "type": "file", "path": "/home/user/t/a.txt", "size": 5, "mode": 0o644,
        "permissions": "-rw-r--r--", "owner": "user", "group": "user"}, out
    datetime.datetime.fromisoformat(info["modifiedTime"].replace("Z", "+00:00"))
    assert "symlinkTarget" not in info and "metadata" not in info, out
    # A path under /workspace is answered under /workspace; the home itself is a directory.
    assert out["infoDir"]["value"]["path"] == "/workspace/t/sub" and out["infoDir"]["value"]["type"] == "dir", out
    assert out["infoDir"]["value"]["permissions"] == "drwxr-xr-x", out
    assert out["infoHome"]["value"]["path"] == "/home/user" and out["infoHome"]["value"]["type"] == "dir", out
    # list: one level by default, sorted by name (above); the types and sizes of the entries.
    assert [e["type"] for e in out["listEntries"]["value"]] == ["file", "dir"], out
    assert out["listEntries"]["value"][0]["size"] == 5, out
    assert out["listDepth0"]["error"]["name"] == "InvalidArgumentError", out
    assert out["listMissing"]["error"]["name"] == "FileNotFoundError", out
    # rename: the destination's entry; its parents made.
    assert out["rename"]["value"]["size"] == 5, out
    assert out["renameAcross"]["value"]["path"] == "/home/user/moved/c.txt", out
    # The code of the sandbox sees what the API did.
    assert out["seen"]["value"] == ["hello", ["deep"], True], out

    # Links a process of the sandbox made: reported as links, with their text, never followed out.
    assert out["setup"]["value"] == "4000", out
    link = out["statLink"]["value"]
    assert (link["type"], link["symlinkTarget"], link["permissions"]) == ("symlink", "/etc", "Lrwxrwxrwx"), out
    assert out["statDangling"]["value"]["symlinkTarget"] == "/nowhere", out
    for k in ("listLinkEtc", "listLinkRoot", "listLinkUp", "statThrough", "existsThrough", "makeDirThrough",
              "makeDirThroughRoot", "renameOut", "renameIn", "renameRootIn", "removeThrough"):
        assert out[k]["error"]["name"] == "SandboxError" and "permission_denied" in out[k]["error"]["message"], (
            k, out[k])
    # Links that stay inside are followed, absolute (/workspace/...) or relative.
    assert out["listLinkInside"]["value"] == ["in.txt"] and out["listLinkRel"]["value"] == ["in.txt"], out
    assert out["listTop"]["value"] == ["big", "dangling", "etc", "inside", "moved", "outputs", "rel", "root",
                                       "skills", "t", "up", "uploads"], out
    # Removing or renaming a link acts on the link: /etc stays, and so does what was refused.
    assert "error" not in out["removeLink"], out
    moved = out["renameLink"]["value"]
    assert moved["type"] == "symlink" and moved["symlinkTarget"] == "/", out
    assert out["after"]["value"] == [False, True, True, "/", True, False], out
    assert not os.path.exists("/etc/scopebox-x") and not os.path.exists("/tmp/scopebox-x"), out
    # Absolute paths outside, "..": refused before anything is asked of the session.
    for k in ("outside", "outsideStat", "dotdot", "dotdotHome", "removeOutside"):
        assert out[k]["error"]["name"] == "SandboxError" and "permission_denied" in out[k]["error"]["message"], (
            k, out[k])
    # A NUL byte, a lone surrogate (JSON that is no UTF-8): invalid_argument.
    assert out["nul"]["error"]["name"] == "InvalidArgumentError", out
    assert out["loneSurrogate"]["error"]["name"] == "InvalidArgumentError", out
    # A huge directory: a bounded answer, the first names in order.
    assert out["big"]["value"] == {"n": 3000, "first": "f00000", "last": "f02999"}, out
    assert out["listTopDeep"]["value"] == {"n": 3000, "first": "/home/user/big",
                                           "last": "/home/user/big/f02998"}, out
    # Another user; a killed sandbox.
    assert out["root"]["error"]["name"] == "AuthenticationError", out
    assert out["afterKill"]["error"]["name"] == "TimeoutError", out


def check_basic_calls(out):
    """What files.list/exists/getInfo/makeDir/rename/remove answer, with any SDK version."""
    assert out["makeDir"]["value"] is True and out["makeDirAgain"]["value"] is False, out
    assert out["makeDirOnFile"]["error"]["name"] == "InvalidArgumentError", out
    assert [out[k]["value"] for k in ("exists", "existsDir", "existsNot", "existsUnderFile")] == [
        True, True, False, False], out
    assert out["info"]["value"]["path"] == "/home/user/t/a.txt" and out["info"]["value"]["size"] == 5, out
    assert out["infoMissing"]["error"]["name"] == "FileNotFoundError", out
    assert out["list"]["value"] == ["a.txt", "sub"], out
    assert out["listDeep"]["value"] == ["/home/user/t/a.txt", "/home/user/t/sub", "/home/user/t/sub/deep"], out
    assert out["listFile"]["error"]["name"] == "InvalidArgumentError", out
    assert out["rename"]["value"]["path"] == "/home/user/t/sub/b.txt", out
    assert out["renameMissing"]["error"]["name"] == "FileNotFoundError", out
    assert "error" not in out["remove"] and "error" not in out["removeMissing"], out
    assert out["afterRemove"]["value"] is False, out
    assert out["removeRoot"]["error"]["name"] == "InvalidArgumentError", out


def test_files_calls_of_the_v1_sdk(sandboxes):
    """e2b@2.50.0 (POST /sandboxes) speaks the same RPCs."""
    out = sandboxes.run("fs.mjs", {"basic": True}, version=V1, timeout=120)
    assert "fatal" not in out, out
    check_basic_calls(out)


def test_the_wire(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    sid, token = made["sandboxID"], made["envdAccessToken"]
    other = sandboxes.create_raw({"templateID": "base", "timeout": 60})

    r = rpc(sid, "MakeDir", {"path": "w/x"}, token)
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json"), r
    e = r.json["entry"]
    assert (e["name"], e["type"], e["path"], e["mode"], e["owner"]) == (
        "x", "FILE_TYPE_DIRECTORY", "/home/user/w/x", 0o755, "user"), r
    # int64 as a string, as protobuf's JSON writes it.
    assert isinstance(e["size"], str) and e["size"].isdigit(), r
    connect_error(rpc(sid, "MakeDir", {"path": "w/x"}, token), 409, "already_exists")
    # Both spellings of a depth, unknown members ignored, an empty body is the home.
    r = rpc(sid, "ListDir", {"path": "w", "depth": "2", "unknown": [1]}, token)
    assert r.status == 200 and [x["path"] for x in r.json["entries"]] == ["/home/user/w/x"], r
    r = rpc(sid, "ListDir", b"", token)
    assert r.status == 200 and "/home/user/w" in [x["path"] for x in r.json["entries"]], r
    r = rpc(sid, "Move", {"source": "w/x", "destination": "/workspace/w/y"}, token)
    assert r.status == 200 and r.json["entry"]["path"] == "/workspace/w/y", r
    r = rpc(sid, "Remove", {"path": "w"}, token)
    assert r.status == 200 and r.json == {}, r
    connect_error(rpc(sid, "Stat", {"path": "w"}, token), 404, "not_found")

    # Refusals: each a Connect code with its status, decided before the session is asked.
    connect_error(rpc(sid, "Stat", {"path": "/etc/passwd"}, token), 403, "permission_denied")
    connect_error(rpc(sid, "Stat", {"path": "a\u0000b"}, token), 400, "invalid_argument")
    connect_error(rpc(sid, "Stat", b'{"path": "a\xff"}', token), 400, "invalid_argument")
    connect_error(rpc(sid, "Stat", b'{"path": ', token), 400, "invalid_argument")
    connect_error(rpc(sid, "Stat", {"path": 7}, token), 400, "invalid_argument")
    connect_error(rpc(sid, "Stat", [], token), 400, "invalid_argument")
    connect_error(rpc(sid, "Stat", {"path": "a" * 5000}, token), 400, "invalid_argument")
    connect_error(rpc(sid, "ListDir", {"path": "", "depth": -1}, token), 400, "invalid_argument")
    # A body far beyond two paths is not read (64 KiB).
    assert rpc(sid, "Stat", {"path": "a/" * 40000}, token).status == 413
    connect_error(rpc(sid, "Stat", {"path": "x"}, token, content_type="application/proto"), 415,
                  "invalid_argument")
    connect_error(rpc(sid, "Stat", {"path": "x"}, token, headers={"Authorization": "Basic cm9vdDo="}), 401,
                  "unauthenticated")
    r = rpc(sid, "Stat", {"path": "x"}, token, headers={"Authorization": "Basic dXNlcjo="})
    connect_error(r, 404, "not_found")
    # The Python SDK's polling watchers: unimplemented. WatchDir: a stream, {"start":{}} first, which
    # ends at the client's Connect-Timeout-Ms with deadline_exceeded.
    connect_error(rpc(sid, "CreateWatcher", {"path": ""}, token), 501, "unimplemented")
    r = rpc(sid, "WatchDir", envelope({"path": "", "recursive": False}), token,
            content_type="application/connect+json", headers={"Connect-Timeout-Ms": "1200"})
    assert r.status == 200 and r.headers["Content-Type"] == "application/connect+json", r
    messages = envelopes(r.body)
    assert messages[0] == (0, {"start": {}}) and messages[-1][0] == 2, messages
    assert messages[-1][1]["error"]["code"] == "deadline_exceeded", messages
    # A stream's refusals end it at once, the code in its end (a status would lose it).
    for body, code in [(b"\x01\x00\x00\x00\x02{}", "invalid_argument"),
                       (b"\x00\x00\x00\x00\x09{}", "invalid_argument"),
                       (envelope({"path": "/etc"}), "permission_denied"),
                       (envelope({"path": "nope"}), "not_found")]:
        r = rpc(sid, "WatchDir", body, token, content_type="application/connect+json")
        assert r.status == 200 and envelopes(r.body) == [(2, {"error": {"code": code, "message": envelopes(
            r.body)[0][1]["error"]["message"]}})], (body, r)

    # No token, a wrong one, the other sandbox's: 401, nothing done.
    for bad in (None, "0" * 64, other["envdAccessToken"]):
        r = rpc(sid, "MakeDir", {"path": "stolen"}, bad)
        assert r.status == 401, (bad, r)
    connect_error(rpc(sid, "Stat", {"path": "stolen"}, token), 404, "not_found")
    # Another port of the sandbox, an unknown sandbox, a killed one: E2B's proxy answer, 502.
    assert rpc(sid, "Stat", {"path": ""}, token, port=JUPYTER_PORT).status == 502
    assert rpc(other["sandboxID"], "Stat", {"path": ""}, other["envdAccessToken"]).status == 200
    sandboxes.kill_all()
    assert rpc(sid, "Stat", {"path": ""}, token).status == 502


def test_watch_dir(sandboxes):
    out = sandboxes.run("watch.mjs", {"package": "@e2b/code-interpreter"}, timeout=180)
    assert "fatal" not in out, out
    # What the SDK and the sandbox's code changed, seen within the wait (the server looks twice a
    # second); a subdirectory's change only by a recursive watch; a rename as removal and creation.
    assert out["sawCreated"] and out["written"] and out["removed"] and out["recursive"], out
    events = out["events"]
    assert "create sub/deep.txt" not in events and not any("deep.txt" in e for e in events), out
    assert events.index("create a.txt") < events.index("write a.txt") < events.index("remove a.txt"), out
    # stop() ends it (the SDK reports its own abort); so do the directory's removal (not_found), the
    # watch's timeout and the sandbox's end.
    assert out["stopped"] and out["goneEnded"] and out["timeoutEnded"] and out["killEnded"], out
    assert out["goneExit"]["name"] == "NotFoundError", out
    timeout = out["timeoutExit"]
    assert timeout["name"] == "TimeoutError" and "deadline_exceeded" in timeout["message"], out
    assert out["killExit"]["name"] == "TimeoutError", out
    # Refusals, as for the other calls.
    assert out["missing"]["error"]["name"] == "FileNotFoundError", out
    assert out["file"]["error"]["name"] == "InvalidArgumentError", out
    for k in ("outside", "link"):
        assert out[k]["error"]["name"] == "SandboxError" and "permission_denied" in out[k]["error"]["message"], out
    assert out["root"]["error"]["name"] == "AuthenticationError", out
