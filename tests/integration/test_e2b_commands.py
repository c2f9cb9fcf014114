# SPDX-License-Identifier: LGPL-2.1-or-later
"""commands.run and envd's other process RPCs against the default install (docs/e2b.md
"Commands"): driven by the real SDK from npm (tools/install-e2b-sdk), unmodified, and by plain
Connect requests for what the SDK hides (statuses, envelopes, refusals). Exercised on the hybrid
cgroups of tools/sysbox on this VM."""
import base64
import http.client
import json
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from conftest import Response
from e2b_sdk import E2B_URL, ENVD_PORT, V1, e2b_request, sandboxes  # noqa: F401 (fixture)


def test_commands_as_the_sdk_documents_them(sandboxes):
    out = sandboxes.run("commands.mjs", {}, timeout=180)
    assert "fatal" not in out, out
    echo = out["echo"]["value"]
    # The E2B user's login: home and working directory /home/user (the workspace).
    assert echo == {"stdout": "hello\n/home/user\n/home/user user\n", "stderr": "oops\n", "exitCode": 0,
                    "error": None}, out
    assert "".join(c[1] for c in out["chunks"] if c[0] == "out") == echo["stdout"], out
    assert "".join(c[1] for c in out["chunks"] if c[0] == "err") == "oops\n", out
    # A non-zero exit: CommandExitError with its code, its output and envd's text.
    assert out["exit3Fields"] == {"name": "CommandExitError", "exitCode": 3, "stdout": "partial\n",
                                  "error": "exit status 3"}, out
    assert out["cwdEnvs"]["value"].startswith("/tmp\n1-two words\n"), out
    assert out["relative"]["value"] == "made\n/home/user/sub/dir\n", out
    assert out["sandboxEnvs"]["value"] == "sandbox command\n", out
    # The SDK's timeout: TimeoutError; the sandbox serves the next command.
    assert out["timeout"]["error"]["name"] == "TimeoutError", out
    assert out["afterTimeout"]["value"] == "alive\n", out
    # A background command is listed, outlives its client's disconnect, is followed again by
    # connect(pid) and ended by kill.
    assert out["list"] == [{"pid": out["bgPid"], "cmd": "/bin/bash", "cwd": "/home/user",
                            "args": ["-l", "-c", "for i in $(seq 1 600); do echo tick $i; sleep 0.1; done"]}], out
    assert out["listAfterDisconnect"] == [out["bgPid"]], out
    assert out["reconnectSaw"] is True and out["killed"] is True, out
    assert out["waitKilled"]["error"] == {"name": "CommandExitError", "message": "signal: killed"}, out
    assert out["listAfterKill"] == [] and out["killUnknown"] is False, out
    assert out["connectUnknown"]["error"]["name"] == "NotFoundError", out
    # Refused with the reason: root.
    assert "permission_denied" in out["root"]["error"]["message"], out
    # stdin, when the command asked for it; none otherwise (the SDK's default).
    assert out["stdin"]["value"] == "line 1\nünïcode\n[eof]\n", out
    assert "failed_precondition" in out["noStdin"]["error"]["message"], out
    assert out["notFound"]["error"]["name"] == "CommandExitError", out
    # Output is not cut at the sidecar's per-exec bound.
    assert out["big"]["value"] == 3000000, out
    # The sandbox's user, no new privileges, the seccomp filter (mode 2).
    ident = out["identity"]["value"].split("\n")
    assert ident[0] == "1000" and "NoNewPrivs:\t1" in ident and "Seccomp:\t2" in ident, out
    assert out["oom"]["error"]["name"] == "CommandExitError", out
    assert out["afterOom"]["value"] == "fine\n", out
    assert out["afterKill"]["error"]["name"] == "SandboxNotFoundError", out


def test_commands_with_the_older_sdk(sandboxes):
    out = sandboxes.run("commands.mjs", {}, version=V1, timeout=180)
    assert "fatal" not in out, out
    assert out["echo"]["value"]["stdout"] == "hello\n/home/user\n/home/user user\n", out
    assert out["exit3Fields"]["exitCode"] == 3 and out["reconnectSaw"] is True, out


def rpc(made, method, message, stream=True, headers=None, raw=None):
    """One Connect call to the sandbox 'made' (a raw create's answer); the decoded envelopes."""
    body = raw if raw is not None else json.dumps(message).encode()
    if stream and raw is None:
        body = struct.pack(">BI", 0, len(body)) + body
    h = {"E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": str(ENVD_PORT),
         "X-Access-Token": made["envdAccessToken"],
         "Content-Type": "application/connect+json" if stream else "application/json"}
    h.update(headers or {})
    h = {k: v for k, v in h.items() if v is not None}
    req = urllib.request.Request(E2B_URL + "/process.Process/" + method, data=body, method="POST", headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            resp = Response(r.status, r.read(), dict(r.headers))
    except urllib.error.HTTPError as e:
        resp = Response(e.code, e.read(), dict(e.headers))
    if not stream or resp.status != 200:
        return resp, None
    envelopes, data = [], resp.body
    while data:
        flags, n = struct.unpack(">BI", data[:5])
        envelopes.append((flags, json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return resp, envelopes


def start(cmd, **extra):
    return {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd], **extra}, "stdin": False}


def test_the_stream_is_envds(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    resp, env = rpc(made, "Start", start("printf 'a\\0b'; echo err >&2; exit 5"))
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/connect+json"), resp
    assert env[0] == (0, {"event": {"start": {"pid": env[0][1]["event"]["start"]["pid"]}}}), env
    out = b"".join(base64.b64decode(e["event"]["data"]["stdout"]) for f, e in env if "data" in e.get("event", {})
                   and "stdout" in e["event"]["data"])
    assert out == b"a\x00b", env
    assert env[-2] == (0, {"event": {"end": {"exitCode": 5, "exited": True, "status": "exit status 5",
                                             "error": "exit status 5"}}}), env
    assert env[-1] == (2, {}), env
    # Unary: List (nothing runs now), SendSignal of an unknown pid.
    resp, _ = rpc(made, "List", {}, stream=False)
    assert resp.status == 200 and resp.json == {"processes": []}, resp
    resp, _ = rpc(made, "SendSignal", {"process": {"pid": 424242}, "signal": "SIGNAL_SIGKILL"}, stream=False)
    assert resp.status == 404 and resp.json["code"] == "not_found", resp


def test_what_a_client_may_not_send(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})

    def refused(message=None, **kw):
        resp, env = rpc(made, "Start", message, **kw)
        assert resp.status == 200 and len(env) == 1 and env[0][0] == 2, (resp, env)
        return env[0][1]["error"]["code"]

    # A NUL anywhere in a string, an environment name with '=', no command: invalid_argument, never cut.
    assert refused(start("echo a\x00b")) == "invalid_argument"
    assert refused({"process": {"cmd": "/bin/ec\x00ho"}}) == "invalid_argument"
    assert refused(start("true", envs={"A=B": "1"})) == "invalid_argument"
    assert refused(start("true", envs={"A": 1})) == "invalid_argument"
    assert refused(start("true", cwd="/tm\x00p")) == "invalid_argument"
    assert refused({"process": {}}) == "invalid_argument"
    assert refused({"process": {"cmd": ""}}) == "invalid_argument"
    assert refused(start("true", args=["x"] * 5000)) == "invalid_argument"
    # Not one envelope; compressed; a PTY.
    assert refused(raw=b"\x00\x00\x00\x00\x09{}") == "invalid_argument"
    assert refused(raw=b"\x01\x00\x00\x00\x02{}") == "unimplemented"
    assert refused({**start("true"), "pty": {"size": {"cols": 80, "rows": 24}}}) == "unimplemented"
    # Another user than the sandbox's; a malformed Authorization.
    assert refused(start("id"), headers={"Authorization": "Basic " + base64.b64encode(b"root:").decode()}) \
        == "permission_denied"
    assert refused(start("id"), headers={"Authorization": "Basic " + base64.b64encode(b"alice:").decode()}) \
        == "unauthenticated"
    # A message over its bound (twice SANDBOX_MAX_CODE_BYTES, 1 MiB by default): 413 before it is read.
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(E2B_URL).netloc, timeout=30)
    conn.putrequest("POST", "/process.Process/Start")
    for k, v in {"E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": str(ENVD_PORT),
                 "X-Access-Token": made["envdAccessToken"], "Content-Type": "application/connect+json",
                 "Content-Length": str(3 << 20)}.items():
        conn.putheader(k, v)
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    # JSON where Connect's stream is expected: 415, in the API's error shape.
    resp, _ = rpc(made, "Start", start("true"), stream=False)
    assert resp.status == 415, resp
    # Without the sandbox's token, with another sandbox's, for a sandbox that is gone: nothing runs.
    other = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    resp, _ = rpc(made, "Start", start("touch /home/user/pwned"), headers={"X-Access-Token": None})
    assert resp.status == 401, resp
    resp, _ = rpc(made, "Start", start("touch /home/user/pwned"),
                  headers={"X-Access-Token": other["envdAccessToken"]})
    assert resp.status == 401, resp
    resp, env = rpc(made, "Start", start("ls /home/user/pwned"))
    assert env[-2][1]["event"]["end"]["exitCode"] == 2, env


def test_a_sandbox_that_ends_ends_its_commands(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    result = {}

    def follow():
        result["resp"], result["env"] = rpc(made, "Start", start("sleep 100"))

    t = threading.Thread(target=follow)
    t.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r, _ = rpc(made, "List", {}, stream=False)
        if r.status == 200 and r.json["processes"]:
            break
        time.sleep(0.1)
    assert e2b_request("DELETE", f"/sandboxes/{made['sandboxID']}").status == 204
    t.join(30)
    assert not t.is_alive()
    env = result["env"]
    # The start, then the end of the stream with the sandbox gone.
    assert env[0][1]["event"]["start"]["pid"] > 0, env
    assert env[-1][0] == 2 and env[-1][1] != {}, env
    r, _ = rpc(made, "List", {}, stream=False)
    assert r.status == 502, r


def test_stdin_is_bounded_and_checked(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    result = {}

    def follow():
        # stdin absent: a pipe, as envd gives older SDKs; the command never reads it.
        result["resp"], result["env"] = rpc(made, "Start", {"process": {"cmd": "sleep", "args": ["20"]}})

    t = threading.Thread(target=follow)
    t.start()
    pid = None
    deadline = time.monotonic() + 20
    while pid is None and time.monotonic() < deadline:
        r, _ = rpc(made, "List", {}, stream=False)
        if r.status == 200 and r.json["processes"]:
            pid = r.json["processes"][0]["pid"]
        time.sleep(0.1)
    assert pid, "the command was not listed"

    def send(data, **extra):
        r, _ = rpc(made, "SendInput", {"process": {"pid": pid}, "input": {"stdin": data, **extra}}, stream=False)
        return r

    assert send("not base64!").json["code"] == "invalid_argument"
    r, _ = rpc(made, "SendInput", {"process": {"pid": pid}, "input": {"pty": "eA=="}}, stream=False)
    assert r.status == 501 and r.json["code"] == "unimplemented", r
    # What the command does not read waits, up to 1 MiB beyond the pipe; then the client is told.
    chunk = base64.b64encode(b"x" * 65536).decode()
    statuses = [send(chunk).status for _ in range(24)]
    assert statuses[0] == 200 and statuses[-1] == 429, statuses
    assert send(chunk).json["code"] == "resource_exhausted"
    r, _ = rpc(made, "CloseStdin", {"process": {"pid": pid}}, stream=False)
    assert r.status == 200, r
    assert send("eA==").json["code"] == "failed_precondition"
    r, _ = rpc(made, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"}, stream=False)
    assert r.status == 200, r
    t.join(30)
    assert result["env"][-2][1]["event"]["end"]["status"] == "signal: killed", result["env"]
