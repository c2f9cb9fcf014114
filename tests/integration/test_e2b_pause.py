# SPDX-License-Identifier: LGPL-2.1-or-later
"""pause and resume of E2B sandboxes (docs/e2b.md "Pause and resume"): a paused sandbox keeps its
memory and files, nothing of it runs, and it goes on where it was after connect, driven by the
real SDKs (tests/e2b/pause.mjs); then, with plain HTTP, the statuses the SDKs read, the traffic
a paused sandbox refuses (502) under a hammer, the sidecar's calls on it (409), callers without
the key, a kill and a deadline that end a paused sandbox without leaving a process, a restarted
manager that keeps it paused, and the cgroup itself: the sandbox's processes frozen in the
scope's "payload" cgroup, the runner not. On this VM the private systemd (tools/sysbox) runs a
hybrid hierarchy, so these tests exercise the unified hierarchy at /sys/fs/cgroup/unified; the
guest stage (tools/guest, cgroup v2 only) exercises /sys/fs/cgroup."""
import concurrent.futures
import json
import secrets
import time

import pytest

from conftest import in_system, request, scope_processes, session_info, system_python, wait_until
from e2b_sdk import (CURRENT, ENVD_PORT, JUPYTER_PORT, V1, e2b_request, sandbox_request,  # noqa: F401
                     sandboxes)

INTERPRETER = "@e2b/code-interpreter"
MANAGER = "scopebox-session-manager.service"
# Bounds for what the system does on its own (a scope stopped, a deadline reached, a manager
# back after a restart), not speed claims.
GONE_BOUND_SEC = 30


def error_name(result):
    return (result.get("error") or {}).get("name")


def assert_error(r, status):
    assert r.status == status, r
    assert r.json["code"] == status and isinstance(r.json["message"], str) and r.json["message"], r


def state(sid):
    r = e2b_request("GET", f"/sandboxes/{sid}")
    return r.json["state"] if r.status == 200 else r.status


def interpreter(sandboxes, timeout=120):
    made = sandboxes.create_raw({"templateID": "code-interpreter-v1", "timeout": timeout})
    return made["sandboxID"], made["envdAccessToken"]


def execute(sid, token, code):
    """POST /execute with plain HTTP: (status, the result's text or the error's name)."""
    r = sandbox_request(sid, "POST", "/execute", port=JUPYTER_PORT, token=token, body={"code": code})
    if r.status != 200:
        return r.status, None
    lines = [json.loads(line) for line in r.body.decode().splitlines() if line.strip()]
    for line in lines:
        if line.get("type") == "error":
            return r.status, line.get("name")
    return r.status, next((line.get("text") for line in lines if line.get("type") == "result"), None)


# The cgroup a paused session's sandboxes are frozen in, seen from the system that runs scopebox:
# the runner's pid, the pids in the scope and in its payload cgroup, and the payload's "frozen".
CGROUP_STATE = r"""
import json, os, sys
sid = sys.argv[1]
name = 'scopebox-runner-%s.scope' % sid
for root in ('/sys/fs/cgroup/unified', '/sys/fs/cgroup'):
    if os.path.exists(os.path.join(root, 'cgroup.controllers')):
        break
found = None
for dp, dn, fn in os.walk(root):
    if os.path.basename(dp) == name:
        found = dp
        break
if not found:
    print(json.dumps(None))
    sys.exit(0)
def pids(d):
    try:
        return sorted(int(x) for x in open(os.path.join(d, 'cgroup.procs')).read().split())
    except OSError:
        return None
payload = os.path.join(found, 'payload')
events = {}
if os.path.isdir(payload):
    events = dict(l.split() for l in open(os.path.join(payload, 'cgroup.events')))
comms = {}
for p in (pids(found) or []) + (pids(payload) or []):
    try:
        comms[p] = open('/proc/%d/comm' % p).read().strip()
    except OSError:
        pass
print(json.dumps({'hierarchy': root, 'scope': pids(found), 'payload': pids(payload),
                  'frozen': events.get('frozen'), 'comms': comms}))
"""


def cgroup_state(sid):
    return json.loads(system_python(CGROUP_STATE, sid))


# ---- through the SDKs


def test_a_paused_sandbox_keeps_its_kernel_and_goes_on_after_connect(sandboxes):
    tag = {"scopebox-test": secrets.token_hex(8)}
    out = sandboxes.run("pause.mjs", {"mode": "kernel", "package": INTERPRETER, "metadata": tag}, timeout=120)
    sid = out["sandboxId"]
    assert out["set"] == "41", out
    # pause() is true once, then false: the SDK's reading of 409.
    assert out["pause"] == {"value": True} and out["pauseAgain"] == {"value": False}, out
    paused = out["paused"]
    assert paused["state"] == {"value": "paused"}, out
    assert paused["listedPaused"] == [sid] and paused["listedRunning"] == [] and paused["listedAll"] == [sid], out
    # Its traffic is what E2B's proxy answers for a paused sandbox: 502, which the SDK reads as
    # "not running" and as a TimeoutError.
    assert paused["running"] == {"value": False}, out
    assert error_name(paused["runCode"]) == "TimeoutError", out
    assert error_name(paused["read"]) == "TimeoutError", out
    assert out["connected"] == {"value": True}, out
    # The interpreter was kept, not restarted: the variable, and the next execution count.
    assert out["after"] == {"text": "42", "error": None, "count": 2}, out
    assert out["stateAfter"] == {"value": "running"} and out["runningAfter"] == {"value": True}, out


@pytest.mark.parametrize("version", [CURRENT, V1])
def test_a_paused_sandbox_keeps_its_files(sandboxes, version):
    # e2b 2.50 resumes with POST /sandboxes/{id}/connect, 2.51 with /v2.
    out = sandboxes.run("pause.mjs", {"mode": "files"}, version=version, timeout=120)
    assert out["pause"] == {"value": True} and out["pauseAgain"] == {"value": False}, out
    assert out["paused"]["state"] == {"value": "paused"} and out["paused"]["running"] == {"value": False}, out
    assert error_name(out["paused"]["read"]) == "TimeoutError", out
    assert out["connected"] is True and out["read"] == {"value": "still here"}, out
    assert out["stateAfter"] == {"value": "running"}, out


def test_a_busy_cell_stops_while_paused_and_finishes_after(sandboxes):
    paused_ms, cpu = 3000, 2.0
    out = sandboxes.run("pause.mjs", {"mode": "busy", "package": INTERPRETER, "pausedMs": paused_ms,
                                      "cpuSeconds": cpu}, timeout=120)
    assert out["pause"] == {"value": True} and out["state"] == {"value": "paused"}, out
    assert out["connected"] is True, out
    # The cell was neither lost nor restarted: it burnt its CPU to the end, and the kernel went on.
    assert out["result"] == {"error": None} and out["after"] == {"value": "yes"}, out
    samples = [tuple(float(v) for v in line.split()) for _, line in out["lines"]]
    # (A line every quarter CPU second: the last one a quarter before the end.)
    assert samples[-1][1] >= cpu - 0.25 - 0.05, out
    # Inside the sandbox: one step of a quarter CPU second took the whole pause in wall time, so
    # no CPU was used while paused (it burns CPU whenever it runs).
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(samples, samples[1:])]
    paused_s = (out["resumeStart"] - out["pauseEnd"]) / 1000
    assert any(wall >= paused_s - 0.5 and spent <= 0.5 for wall, spent in steps), (paused_s, steps)
    # And the client got nothing while the sandbox was paused (what was under way when the pause
    # came in may arrive a little after it).
    during = [t for t, _ in out["lines"] if out["pauseEnd"] + 500 < t < out["resumeStart"]]
    assert during == [], out


def test_a_background_command_stops_while_paused_and_goes_on_after(sandboxes):
    out = sandboxes.run("pause.mjs", {"mode": "command", "pausedMs": 2000}, timeout=120)
    assert out["pause"] == {"value": True} and out["connected"] is True, out
    assert error_name(out["listPaused"]) == "TimeoutError", out
    assert out["listAfter"] == {"value": [out["pid"]]} and out["killed"] == {"value": True}, out
    stamps = [float(t) for _, chunk in out["lines"] for t in chunk.split()]
    paused_s = (out["resumeStart"] - out["pauseEnd"]) / 1000
    # Its clock, read every 0.1 s, skipped the pause: it did not run; and it went on after.
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert any(gap >= paused_s - 0.5 for gap in gaps), (paused_s, gaps)
    assert stamps[-1] * 1000 > out["resumeStart"] - 1000, out
    during = [t for t, _ in out["lines"] if out["pauseEnd"] + 500 < t < out["resumeStart"]]
    assert during == [], out


def test_a_sandbox_can_neither_thaw_nor_leave_its_cgroup(sandboxes):
    out = sandboxes.run("pause.mjs", {"mode": "thaw", "package": INTERPRETER}, timeout=120)
    assert out["pause"] == {"value": True} and out["connected"] is True, out
    for tried in (out["before"], out["after"]):
        assert "error" not in tried, out
        assert "written" not in tried.values() and "mounted" not in tried.values(), out


def test_metrics_come_from_the_sandboxs_cgroup(sandboxes):
    out = sandboxes.run("pause.mjs", {"mode": "metrics", "package": INTERPRETER}, timeout=120)
    assert out["cell"] is None, out
    info, [now] = out["info"], out["now"]["value"]
    assert now["cpuCount"] == info["cpuCount"] and now["memTotal"] == info["memoryMB"] * 2**20, out
    detail = e2b_request("GET", f"/sandboxes/{out['sandboxId']}").json
    assert now["diskTotal"] == detail["diskSizeMB"] * 2**20, (detail, out)
    # The cell's bytearray, its file and the CPU second it burnt since the start.
    assert now["memUsed"] >= 64 * 2**20 and now["diskUsed"] >= 8 * 2**20, out
    assert now["memCache"] >= 8 * 2**20, out
    assert now["cpuUsedPct"] > 0, out
    assert out["past"] == {"value": []}, out
    # Paused: nothing of the sandbox ran between two samples, its memory is kept.
    [paused] = out["pausedAgain"]["value"]
    assert paused["cpuUsedPct"] < 5 and paused["memUsed"] >= 64 * 2**20, out
    assert error_name(out["unknown"]) == "SandboxNotFoundError", out


# ---- plain HTTP


def test_pause_and_resume_statuses(sandboxes):
    unknown = secrets.token_hex(16)
    assert_error(e2b_request("POST", f"/sandboxes/{unknown}/pause", {}), 404)
    assert_error(e2b_request("POST", f"/sandboxes/{unknown}/resume", {}), 404)
    sid, _ = interpreter(sandboxes)
    # A pause that would lose the memory is refused, not turned into another one.
    assert_error(e2b_request("POST", f"/sandboxes/{sid}/pause", {"memory": False}), 400)
    assert_error(e2b_request("POST", f"/v2/sandboxes/{sid}/connect", {"memory": False}), 400)
    assert state(sid) == "running"
    # The legacy resume of a running sandbox is E2B's 409.
    assert_error(e2b_request("POST", f"/sandboxes/{sid}/resume", {}), 409)

    r = e2b_request("POST", f"/sandboxes/{sid}/pause", {"memory": True})
    assert r.status == 204 and r.body == b"", r
    assert_error(e2b_request("POST", f"/sandboxes/{sid}/pause", {}), 409)
    assert state(sid) == "paused"
    r = e2b_request("POST", f"/sandboxes/{sid}/resume", {})
    assert r.status == 201 and r.json["sandboxID"] == sid, r
    assert state(sid) == "running"

    for path in (f"/v2/sandboxes/{sid}/connect", f"/sandboxes/{sid}/connect"):
        assert e2b_request("POST", f"/sandboxes/{sid}/pause", None).status == 204
        first = e2b_request("POST", path, {"timeout": 60})
        again = e2b_request("POST", path, {"timeout": 60})
        # 201: it was resumed; 200: it ran.
        assert (first.status, again.status) == (201, 200), (path, first, again)
        assert first.json["sandboxID"] == sid and first.json["envdAccessToken"], first


def test_callers_without_the_key_neither_pause_nor_resume(sandboxes):
    sid, _ = interpreter(sandboxes)
    for key in (None, "e2b_" + secrets.token_hex(20)):
        assert_error(e2b_request("POST", f"/sandboxes/{sid}/pause", {}, key=key), 401)
    assert state(sid) == "running"
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    for key in (None, "e2b_" + secrets.token_hex(20)):
        for path in (f"/v2/sandboxes/{sid}/connect", f"/sandboxes/{sid}/connect", f"/sandboxes/{sid}/resume"):
            assert_error(e2b_request("POST", path, {"timeout": 60}, key=key), 401)
    assert state(sid) == "paused"


def test_a_paused_sandbox_under_a_hammer_stays_paused_and_answers_502(sandboxes):
    sid, token = interpreter(sandboxes)
    assert execute(sid, token, "x = 'kept'\nx") == (200, "kept")
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    calls = [(JUPYTER_PORT, "POST", "/execute", {"code": "x = 'lost'"}),
             (JUPYTER_PORT, "GET", "/contexts", None),
             (ENVD_PORT, "GET", "/health", None),
             (ENVD_PORT, "GET", "/files?path=a.txt", None),
             (ENVD_PORT, "POST", "/filesystem.Filesystem/Stat", {"path": "a.txt"})]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(sandbox_request, sid, method, path, port=port, token=token, body=body)
                   for _ in range(12) for port, method, path, body in calls]
        statuses = [f.result().status for f in futures]
    assert statuses == [502] * len(statuses), statuses
    assert state(sid) == "paused"
    assert e2b_request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 60}).status == 201
    # None of the refused cells ran: the variable is the one set before the pause.
    assert execute(sid, token, "x") == (200, "kept")


def test_the_sidecar_api_says_paused_and_does_not_resume(sandboxes):
    sid, token = interpreter(sandboxes)
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    for path, body in [("/exec", {"session_id": sid, "code": "print(1)"}),
                       ("/files/list", {"session_id": sid}),
                       ("/exec/cancel", {"session_id": sid})]:
        r = request("POST", path, body)
        assert r.status == 409 and r.json == {"detail": "session is paused"}, (path, r)
    assert state(sid) == "paused"
    assert execute(sid, token, "1")[0] == 502


def manager_call(method, sid):
    """PauseSession or ResumeSession as the gateway calls them (here as root)."""
    return in_system("busctl", "--json=short", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                     "io.scopebox.SessionManager1", method, "s", sid)


def test_a_call_queued_at_the_pause_is_refused_and_the_running_one_waits():
    r = request("POST", "/sessions", {"stateful": True})
    assert r.status == 200, r
    sid = r.json["session_id"]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            burn = "import time\nc0 = time.process_time()\nwhile time.process_time() - c0 < 1.5: pass\nprint('done')"
            running = pool.submit(request, "POST", "/exec", {"session_id": sid, "timeout_ms": 60000, "code": burn})
            wait_until(lambda: session_info(sid).get("exec_running"), 10, "the first exec to run")
            queued = pool.submit(request, "POST", "/exec", {"session_id": sid, "code": "print('second')"})
            wait_until(lambda: session_info(sid).get("queued") == 1, 10, "the second exec to wait")
            assert manager_call("PauseSession", sid).returncode == 0
            r = queued.result(timeout=30)
            assert r.status == 409 and r.json == {"detail": "session is paused"}, r
            # Frozen, the first one neither ended (its 1.5 s of CPU would be over) nor was lost.
            time.sleep(2)
            assert not running.done() and session_info(sid).get("exec_running"), session_info(sid)
            assert json.loads(manager_call("ResumeSession", sid).stdout)["data"] == [True]
            r = running.result(timeout=60)
            assert r.status == 200 and r.json["stdout"] == "done\n", r
    finally:
        request("DELETE", f"/sessions/{sid}", {})


def test_the_sandbox_is_frozen_and_its_runner_is_not(sandboxes):
    sid, token = interpreter(sandboxes)
    assert execute(sid, token, "1") == (200, "1")
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    frozen = wait_until(lambda: (lambda s: s if s and s["frozen"] == "1" else None)(cgroup_state(sid)), 10,
                        "the payload cgroup to be frozen")
    # The runner stays in the scope; everything else (the kernel's PID 1 and interpreter) is in
    # the frozen cgroup.
    assert [frozen["comms"].get(str(p)) for p in frozen["scope"]] == ["scopebox-runner"], frozen
    assert frozen["payload"], frozen
    assert e2b_request("POST", f"/v2/sandboxes/{sid}/connect", {}).status == 201
    thawed = cgroup_state(sid)
    assert thawed["frozen"] == "0" and thawed["payload"] == frozen["payload"], (frozen, thawed)


def assert_nothing_left(sid):
    wait_until(lambda: cgroup_state(sid) is None and not scope_processes(sid), GONE_BOUND_SEC,
               "the scope and every process of the sandbox to be gone")


def test_killing_a_paused_sandbox_leaves_nothing(sandboxes):
    sid, token = interpreter(sandboxes)
    assert execute(sid, token, "import threading\nx = 1") == (200, None)
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    r = e2b_request("DELETE", f"/sandboxes/{sid}")
    assert r.status == 204, r
    assert_error(e2b_request("GET", f"/sandboxes/{sid}"), 404)
    assert_nothing_left(sid)


def test_a_paused_sandbox_ends_at_its_deadline(sandboxes):
    made = sandboxes.create_raw({"templateID": "code-interpreter-v1", "timeout": 3})
    sid = made["sandboxID"]
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    # The deadline runs on while paused (docs/e2b.md).
    wait_until(lambda: state(sid) == 404, GONE_BOUND_SEC, "the paused sandbox's deadline")
    assert_nothing_left(sid)


def test_a_restarted_manager_keeps_the_sandbox_paused(sandboxes):
    sid, token = interpreter(sandboxes)
    assert execute(sid, token, "y = 6 * 7") == (200, None)
    assert e2b_request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    in_system("systemctl", "restart", MANAGER, check=True)
    # The restarted manager knows it is paused, and the cgroup stayed frozen.
    assert wait_until(lambda: state(sid) == "paused", GONE_BOUND_SEC, "the manager back with the sandbox")
    assert cgroup_state(sid)["frozen"] == "1"
    assert execute(sid, token, "y")[0] == 502
    assert e2b_request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 60}).status == 201
    assert execute(sid, token, "y") == (200, "42")

