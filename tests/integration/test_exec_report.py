# SPDX-License-Identifier: LGPL-2.1-or-later
"""Opt-in exit reasons and resource use ("report": true), and POST /exec/cancel (docs/api.md
"Exit reason and resources", "POST /exec/cancel"). Without the member every byte stays the
sidecar's."""
import concurrent.futures
import time

import pytest

from conftest import create_session, delete_session, request, run

RESOURCE_KEYS = ["cpu_ms", "wall_ms", "max_rss_bytes", "written_bytes", "processes"]
MiB = 1024 * 1024


def reported(sid, code, timeout_ms=30000):
    res = run(sid, code, timeout_ms=timeout_ms, report=True)
    assert list(res)[-2:] == ["exit_reason", "resources"], res
    assert list(res["resources"]) == RESOURCE_KEYS, res
    return res


def test_default_result_has_no_extension_members(session):
    r = request("POST", "/exec", {"session_id": session, "code": "print(1)"})
    assert r.status == 200
    assert r.body == b'{"stdout":"1\\n","stderr":"","exit_code":0,"files":[]}'
    # "report": false and null are the default too.
    for v in (False, None):
        r = request("POST", "/exec", {"session_id": session, "code": "print(1)", "report": v})
        assert r.body == b'{"stdout":"1\\n","stderr":"","exit_code":0,"files":[]}'


@pytest.mark.parametrize("value", ["yes", 1, [], {}])
def test_report_must_be_a_boolean(session, value):
    r = request("POST", "/exec", {"session_id": session, "code": "print(1)", "report": value})
    assert r.status == 422, r
    assert r.json["detail"][0]["loc"] == ["body", "report"]


def test_exited_with_plausible_figures(session):
    res = reported(session, "print('x' * 1000)")
    assert res["exit_code"] == 0 and res["exit_reason"] == "exited"
    u = res["resources"]
    assert all(isinstance(u[k], int) and u[k] >= 0 for k in RESOURCE_KEYS), u
    # At least the 1001 bytes printed went through write(2); an interpreter is several MiB.
    assert u["written_bytes"] >= 1001, u
    assert 4 * MiB < u["max_rss_bytes"] < 1024 * MiB, u
    assert u["processes"] >= 1
    assert u["cpu_ms"] <= u["wall_ms"] * 2 + 50  # 2 cores at most


def test_figures_follow_what_the_cell_did(session):
    # 200 MiB touched: the peak resident set is at least that.
    res = reported(session, "b = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1")
    assert res["exit_reason"] == "exited"
    assert res["resources"]["max_rss_bytes"] >= 200 * MiB, res
    # Half a second of CPU.
    res = reported(session, "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass")
    assert res["resources"]["cpu_ms"] >= 450, res
    # 5 MiB written to a file.
    res = reported(session, "open('/tmp/f', 'wb').write(b'x' * 5 * 1024 * 1024)")
    assert res["resources"]["written_bytes"] >= 5 * MiB, res
    # Processes it started count, with what they used, also those it never waited for.
    res = reported(session, "import subprocess\nfor _ in range(5): subprocess.run(['true'])\n"
                            "subprocess.Popen(['python3', '-c', 'import time; t = time.process_time()\\n"
                            "while time.process_time() - t < 0.3: pass'])\n"
                            "import time; time.sleep(1)")
    assert res["resources"]["processes"] >= 7, res
    assert res["resources"]["cpu_ms"] >= 250, res
    # Sleeping costs no CPU.
    res = reported(session, "import time; time.sleep(1)")
    assert res["resources"]["wall_ms"] >= 1000 and res["resources"]["cpu_ms"] < 500, res


def test_exit_reasons(session):
    assert reported(session, "raise SystemExit(3)")["exit_reason"] == "exited"
    res = reported(session, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert (res["exit_code"], res["exit_reason"]) == (128 + 15, "signal"), res
    res = reported(session, "import time; time.sleep(10)", timeout_ms=1000)
    assert (res["exit_code"], res["exit_reason"]) == (124, "timeout"), res
    assert res["stderr"].endswith("[sandbox] execution exceeded 1.000s and was killed")
    res = reported(session, "import os\nos.setuid(0)")
    assert res["exit_reason"] == "blocked_syscall" and res["blocked_syscalls"], res
    res = reported(session, "import ctypes\nctypes.CDLL(None).syscall(169, 0, 0, 0, 0)")  # reboot: SIGSYS
    assert (res["exit_code"], res["exit_reason"]) == (128 + 31, "blocked_syscall"), res


def test_timeout_still_measures_what_ran(session):
    # The payload burns CPU until the timeout: its usage is in the result (PID 1 reaps it first).
    res = reported(session, "while True: pass", timeout_ms=1500)
    assert res["exit_reason"] == "timeout"
    assert res["resources"]["cpu_ms"] >= 1000, res


def test_memory_limit_is_the_reason(session):
    res = reported(session, "b = []\nwhile True: b.append(bytearray(64 * 1024 * 1024))", timeout_ms=60000)
    assert res["exit_reason"] == "memory", res
    assert res["exit_code"] == 128 + 9


def test_tasks_limit_is_the_reason(session):
    code = ("import threading, time\nev = threading.Event()\nts = []\n"
            "while True:\n    t = threading.Thread(target=ev.wait, daemon=True); t.start(); ts.append(t)")
    res = reported(session, code, timeout_ms=60000)
    assert res["exit_reason"] == "tasks", res


def test_dify_report():
    from test_dify import call
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(6 * 7)"})
    assert list(r.json["data"]) == ["stdout", "stderr", "error", "exit_code"], r.json
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(6 * 7)", "report": True})
    data = r.json["data"]
    assert data["stdout"] == "42\n" and data["exit_reason"] == "exited", r.json
    assert list(data["resources"]) == RESOURCE_KEYS and data["resources"]["max_rss_bytes"] > 0
    r = call("POST", "/v1/sandbox/run", {"language": "nodejs", "code": "console.log(1)", "report": True})
    assert r.json["data"]["exit_reason"] == "exited" and r.json["data"]["resources"]["processes"] >= 1, r.json
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)", "report": "yes"})
    assert r.json["code"] != 0


# ---- POST /exec/cancel ----

def cancel(sid, **kw):
    return request("POST", "/exec/cancel", {"session_id": sid}, **kw)


def start_exec(sid, code, **extra):
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(request, "POST", "/exec", {"session_id": sid, "code": code, "timeout_ms": 60000, **extra},
                      timeout=120)
    pool.shutdown(wait=False)
    return fut


def test_cancel_ends_the_running_exec_and_only_it():
    sid = create_session()
    try:
        fut = start_exec(sid, "import time, subprocess\nsubprocess.Popen(['sleep', '1000'])\nprint('started', flush=True)\n"
                              "time.sleep(60)\nopen('/workspace/late', 'w').write('x')")
        time.sleep(2)
        t = time.monotonic()
        r = cancel(sid)
        assert r.status == 200 and r.body == b'{"ok":true}', r
        # Idempotent while it ends.
        r2 = cancel(sid)
        assert r2.status in (200, 409), r2
        res = fut.result(timeout=30)
        assert time.monotonic() - t < 10
        assert res.status == 200
        body = res.json
        assert body["exit_reason"] == "cancelled" and body["exit_code"] == 137, body
        assert body["stdout"] == "started\n"
        assert body["stderr"].endswith("[sandbox] execution was cancelled"), body
        assert "resources" not in body  # only with "report"
        # Nothing runs any more, nothing of it happened later; the session goes on.
        assert cancel(sid).status == 409
        assert cancel(sid).json == {"detail": "no exec is running"}
        res = run(sid, "import os, subprocess\nprint(os.path.exists('/workspace/late'))\n"
                       "print(subprocess.run(['ps', '-e', '-o', 'comm='], capture_output=True, text=True).stdout)")
        assert res["stdout"].startswith("False\n") and "sleep" not in res["stdout"], res
    finally:
        delete_session(sid)


def test_cancel_with_report_measures_the_cancelled_exec(session):
    fut = start_exec(session, "t = __import__('time').time()\nwhile True: pass", report=True)
    time.sleep(2.5)
    assert cancel(session).status == 200
    body = fut.result(timeout=30).json
    assert body["exit_reason"] == "cancelled" and body["resources"]["cpu_ms"] >= 1000, body


def test_cancel_leaves_queued_execs_alone(session):
    first = start_exec(session, "import time; time.sleep(60)")
    time.sleep(1.5)
    second = start_exec(session, "print('second')")
    time.sleep(0.5)
    assert cancel(session).status == 200
    assert first.result(timeout=30).json["exit_reason"] == "cancelled"
    r = second.result(timeout=30)
    assert r.status == 200 and r.json == {"stdout": "second\n", "stderr": "", "exit_code": 0, "files": []}, r


def test_cancel_errors(session):
    assert cancel(session).status == 409
    unknown = "0" * 32
    r = cancel(unknown)
    assert r.status == 404 and r.json == {"detail": "session not found or not running"}, r
    r = request("POST", "/exec/cancel", {"session_id": "../x"})
    assert r.status == 400 and r.json == {"detail": "invalid session_id"}
    r = request("POST", "/exec/cancel", {"session_id": session[:31] + "\u0000"})
    assert r.status == 400
    r = request("POST", "/exec/cancel", {})
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["body", "session_id"]
    r = request("POST", "/exec/cancel", {"session_id": 5})
    assert r.status == 422
    r = request("POST", "/exec/cancel", raw=b"{", headers={"Content-Type": "application/json"})
    assert r.status == 422
    assert cancel(session, key="wrong").status == 401
    assert cancel(session, key=None).status == 401
    assert request("GET", "/exec/cancel").status == 405


def test_cancel_is_per_session():
    a, b = create_session(), create_session()
    try:
        fa = start_exec(a, "import time; time.sleep(5); print('a done')")
        fb = start_exec(b, "import time; time.sleep(60)")
        time.sleep(1.5)
        assert cancel(b).status == 200
        assert fb.result(timeout=30).json["exit_reason"] == "cancelled"
        ra = fa.result(timeout=30).json
        assert ra == {"stdout": "a done\n", "stderr": "", "exit_code": 0, "files": []}, ra
    finally:
        delete_session(a)
        delete_session(b)


def test_cancel_under_load():
    """Several sessions busy with CPU-bound cells, each cancelled: every one ends promptly with
    exit_reason cancelled, and every session runs its next cell."""
    sids = [create_session() for _ in range(4)]
    try:
        futs = [start_exec(s, "while True: pass", report=True) for s in sids]
        time.sleep(2)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda s: cancel(s).status, sids))
        assert codes == [200] * 4
        for f in futs:
            body = f.result(timeout=60).json
            assert body["exit_reason"] == "cancelled", body
        for s in sids:
            assert run(s, "print(1)")["stdout"] == "1\n"
    finally:
        for s in sids:
            delete_session(s)
