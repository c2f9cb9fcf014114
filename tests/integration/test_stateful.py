# SPDX-License-Identifier: LGPL-2.1-or-later
"""Stateful sessions (docs/api.md "Stateful sessions"): one interpreter (the kernel) keeps the
session's python state across cells, is stopped between them, is reset on request, and ends with
a cell that times out, crashes or runs out of memory; processes a cell starts still end with it."""
import time

import pytest

from conftest import create_session, delete_session, in_system, request, run, scope_processes

NOTE = "the kernel ended"


@pytest.fixture
def kernel():
    sid = create_session(stateful=True)
    yield sid
    delete_session(sid)


def test_variables_and_imports_persist(kernel):
    first = run(kernel, "import json\nx = 41\ndef f(v):\n    return v + 1")
    assert first["exit_code"] == 0 and first["kernel"] == "new", first
    res = run(kernel, "print(f(x), json.dumps([x]))")
    assert res["stdout"] == "42 [41]\n" and res["kernel"] == "running", res


def test_create_says_stateful():
    r = request("POST", "/sessions", {"stateful": True})
    try:
        assert r.status == 200 and r.json == {"session_id": r.json["session_id"], "stateful": True}, r
    finally:
        delete_session(r.json["session_id"])
    for body in ({"stateful": False}, {"stateful": None}, {}):
        r = request("POST", "/sessions", body)
        try:
            assert r.status == 200 and list(r.json) == ["session_id"], r
        finally:
            delete_session(r.json["session_id"])
    r = request("POST", "/sessions", {"stateful": "yes"})
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["body", "stateful"], r


def test_stateless_session_does_not_persist(session):
    run(session, "x = 1")
    res = run(session, "print(x)")
    assert res["exit_code"] == 1 and "NameError" in res["stderr"]
    assert "kernel" not in res
    r = request("POST", "/exec", {"session_id": session, "code": "print(1)"})
    assert r.body == b'{"stdout":"1\\n","stderr":"","exit_code":0,"files":[]}'


def test_exceptions_and_exit_codes_keep_the_kernel(kernel):
    run(kernel, "y = 5")
    res = run(kernel, "1/0")
    assert res["exit_code"] == 1 and "ZeroDivisionError" in res["stderr"] and res["kernel"] == "running", res
    assert "kernel.py" not in res["stderr"]
    res = run(kernel, "raise SystemExit(7)")
    assert res["exit_code"] == 7 and res["kernel"] == "running", res
    assert run(kernel, "print(y)")["stdout"] == "5\n"


def test_reset_clears_variables(kernel):
    run(kernel, "z = 3")
    r = request("POST", f"/sessions/{kernel}/reset")
    assert r.status == 200 and r.json == {"ok": True}, r
    res = run(kernel, "print(z)")
    assert "NameError" in res["stderr"] and res["kernel"] == "new", res


def test_reset_of_unknown_session():
    r = request("POST", "/sessions/" + "0" * 32 + "/reset")
    assert r.status == 404, r


def test_reset_refusals(kernel):
    run(kernel, "q = 1")
    assert request("POST", f"/sessions/{kernel}/reset", key=None).status == 401
    assert request("POST", f"/sessions/{kernel}/reset", key="wrong").status == 401
    for bad in ("XYZ", "0" * 31, "0" * 33, kernel.upper()):
        r = request("POST", f"/sessions/{bad}/reset")
        assert r.status == 400 and r.json == {"detail": "invalid session_id"}, (bad, r)
    r = request("POST", f"/sessions/{kernel[:-1]}%00/reset")
    assert r.status == 400 and r.json == {"detail": "path contains a NUL byte"}, r
    assert request("GET", f"/sessions/{kernel}/reset").status == 405
    assert request("POST", f"/sessions/{kernel}/reset", raw=b"{").status == 422
    # None of that touched the kernel; a stateless session's reset is a no-op.
    assert run(kernel, "print(q)")["kernel"] == "running"
    sid = create_session()
    try:
        run(sid, "open('/workspace/f', 'w').write('x')")
        assert request("POST", f"/sessions/{sid}/reset").json == {"ok": True}
        res = run(sid, "print(open('/workspace/f').read())")
        assert res["stdout"] == "x\n" and "kernel" not in res, res
    finally:
        delete_session(sid)


@pytest.mark.parametrize("crash", ["import os\nos._exit(3)", "import os, signal\nos.kill(os.getpid(), 9)"])
def test_crash_is_reported_once_and_next_cell_is_fresh(kernel, crash):
    run(kernel, "w = 1")
    res = run(kernel, crash)
    assert res["kernel"] == "ended" and NOTE in res["stderr"], res
    assert res["exit_code"] in (3, 137), res
    res = run(kernel, "print('w' in globals())")
    assert res["stdout"] == "False\n" and res["kernel"] == "new" and NOTE not in res["stderr"], res
    assert run(kernel, "print(1)")["kernel"] == "running"


def test_timeout_ends_the_kernel(kernel):
    run(kernel, "v = 1")
    res = run(kernel, "while True: pass", timeout_ms=1000)
    assert res["exit_code"] == 124 and res["kernel"] == "ended" and "(timeout)" in res["stderr"], res
    assert run(kernel, "print('v' in globals())")["stdout"] == "False\n"


def test_memory_blowup_ends_the_kernel(kernel):
    run(kernel, "u = 1")
    res = run(kernel, "b = []\nwhile True: b.append(bytearray(64 << 20))", report=True)
    # MemoryError keeps the kernel only if Python survives it; the OOM killer ends it.
    if res["kernel"] == "ended":
        assert res["exit_reason"] == "memory" and "(memory)" in res["stderr"], res
        assert run(kernel, "print('u' in globals())")["stdout"] == "False\n"
    else:
        assert "MemoryError" in res["stderr"], res


def test_background_processes_end_with_the_cell(kernel):
    res = run(kernel, "import subprocess, os\np = subprocess.Popen(['sleep', '100'])\n"
                      "pid = os.fork()\nif pid == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                      "        import time\n        time.sleep(100)\n    os._exit(0)\n"
                      "os.waitpid(pid, 0)\nprint(p.pid)")
    assert res["exit_code"] == 0, res
    res = run(kernel, "import os\nprint(sorted(int(d) for d in os.listdir('/proc') if d.isdigit()), os.getpid())\n"
                      "try:\n    os.kill(p.pid, 0)\n    print('alive')\nexcept ProcessLookupError:\n    print('gone')")
    listed, me = res["stdout"].splitlines()[0].rsplit(" ", 1)
    # PID 1 is root's, hidden by hidepid: the kernel sees only itself.
    assert listed == f"[{me}]", res
    assert res["stdout"].splitlines()[1] == "gone", res


def test_kernel_is_stopped_between_cells(kernel):
    # A thread stamps the time every 10 ms; while the kernel is stopped it can't, so the file
    # shows a gap at least as long as the pause between the cells.
    run(kernel, "import threading, time\ndef stamp():\n    while True:\n"
                "        with open('/tmp/stamps', 'a') as f: f.write('%f\\n' % time.monotonic())\n"
                "        time.sleep(0.01)\nthreading.Thread(target=stamp, daemon=True).start()\ntime.sleep(0.2)")
    time.sleep(0.5)
    res = run(kernel, "import time\ntime.sleep(0.2)\n"
                      "s = [float(l) for l in open('/tmp/stamps')]\n"
                      "print(max(b - a for a, b in zip(s, s[1:])), len(s))")
    gap, n = res["stdout"].split()
    assert float(gap) >= 0.45, res
    assert int(n) > 20, res  # it ran during both cells


def test_outputs_are_artifacts_of_their_cell(kernel):
    res = run(kernel, "open('/workspace/outputs/a.txt', 'w').write('one')")
    assert [f["name"] for f in res["files"]] == ["a.txt"], res
    res = run(kernel, "open('/workspace/outputs/b.txt', 'w').write('two')")
    assert [f["name"] for f in res["files"]] == ["b.txt"], res


def test_report_works_for_cells(kernel):
    res = run(kernel, "print('x' * 1000)", report=True)
    assert res["exit_reason"] == "exited" and res["resources"]["written_bytes"] >= 1000, res
    res = run(kernel, "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass",
              report=True)
    assert res["resources"]["cpu_ms"] >= 250, res


@pytest.mark.parametrize("how", ["reset", "release"])
def test_detached_processes_do_not_survive_reset_or_release(how):
    sid = create_session(stateful=True)
    try:
        run(sid, "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                 "        import time\n        while True:\n"
                 "            open('/workspace/marker', 'a').write('x'); time.sleep(0.05)\n"
                 "    os._exit(0)\nimport time\ntime.sleep(0.3)")
        if how == "reset":
            assert request("POST", f"/sessions/{sid}/reset").status == 200
            size = run(sid, "import os\nprint(os.path.getsize('/workspace/marker'))")["stdout"]
            time.sleep(0.3)
            again = run(sid, "import os\nprint(os.path.getsize('/workspace/marker'),"
                             " sorted(int(d) for d in os.listdir('/proc') if d.isdigit()))")["stdout"]
            assert again.split()[0] == size.strip(), (size, again)
        else:
            assert kernel_pids(sid), scope_processes(sid)
            assert delete_session(sid).status == 200
            r = request("POST", "/exec", {"session_id": sid, "code": "print(1)"})
            assert r.status == 404
            assert scope_processes(sid) == []
    finally:
        delete_session(sid)


def test_example_client_with_a_kernel():
    import importlib.util
    from conftest import BASE_URL, REPO, api_key
    spec = importlib.util.spec_from_file_location("scopebox_client", REPO / "docs/examples/client.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.Client(BASE_URL, api_key())
    sid = c.create_session(stateful=True)
    try:
        c.exec(sid, "x = 41")
        assert c.exec(sid, "print(x + 1)")["stdout"] == "42\n"
        events = list(c.exec_stream(sid, "import sys\nprint(x, flush=True)\nprint('e', file=sys.stderr)"))
        text = {name: "".join(d["text"] for e, d in events if e == name) for name in ("stdout", "stderr")}
        assert text == {"stdout": "41\n", "stderr": "e\n"}, events
        assert events[-1][0] == "result" and events[-1][1]["kernel"] == "running", events
        assert c.reset(sid) == {"ok": True}
        assert "NameError" in c.exec(sid, "print(x)")["stderr"]
    finally:
        c.delete_session(sid)


def test_cancel_ends_the_kernel(kernel):
    import concurrent.futures
    run(kernel, "t = 1")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(run, kernel, "import time\nprint('in', flush=True)\ntime.sleep(60)")
        deadline = time.monotonic() + 30
        while request("POST", "/exec/cancel", {"session_id": kernel}).status != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        res = fut.result(timeout=30)
    assert res["exit_reason"] == "cancelled" and res["kernel"] == "ended" and "(cancelled)" in res["stderr"], res
    assert run(kernel, "print('t' in globals())")["stdout"] == "False\n"


def test_peak_memory_is_the_cells_own(kernel):
    res = run(kernel, "b = bytearray(200 << 20)\nb[::4096] = b'x' * len(b[::4096])\ndel b", report=True)
    assert res["resources"]["max_rss_bytes"] >= 200 << 20, res
    res = run(kernel, "print(1)", report=True)
    assert res["resources"]["max_rss_bytes"] < 100 << 20, res
    # Its name is the first line of /proc/<pid>/status: a forged figure there is not read.
    res = run(kernel, "import ctypes\nctypes.CDLL(None).prctl(15, b'VmHWM: 99999999', 0, 0, 0)\n"
                      "print(open('/proc/self/comm').read())", report=True)
    assert res["stdout"] == "VmHWM: 99999999\n\n" and res["resources"]["max_rss_bytes"] < 100 << 20, res
    # A child of this cell counts; a later cell does not inherit its peak.
    res = run(kernel, "import subprocess\nsubprocess.run(['python3', '-c', "
                      "'b = bytearray(150 << 20); b[::4096] = bytes(len(b[::4096]))'], check=True)", report=True)
    assert res["exit_code"] == 0 and res["resources"]["processes"] >= 1, res
    res = run(kernel, "import os\nif os.fork() == 0: os._exit(0)\nos.wait()", report=True)
    assert res["resources"]["max_rss_bytes"] < 100 << 20, res


def kernel_pids(sid):
    return [p["pid"] for p in scope_processes(sid) if any(c.endswith("kernel.py") for c in p["cmdline"])]


@pytest.mark.parametrize("wait", [True, False, False, False])
def test_kernel_killed_between_cells_is_replaced(kernel, wait):
    run(kernel, "s = 1")
    pids = kernel_pids(kernel)
    assert len(pids) == 1, pids
    assert in_system("kill", "-KILL", str(pids[0])).returncode == 0
    if wait:
        deadline = time.monotonic() + 10
        while kernel_pids(kernel):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # The next cell runs, in a fresh interpreter, and says so; nothing is reported as a crash.
    res = run(kernel, "print('s' in globals())")
    assert res["stdout"] == "False\n" and res["exit_code"] == 0 and res["kernel"] == "new", res
    assert NOTE not in res["stderr"], res
    assert run(kernel, "print(2)")["kernel"] == "running"


def test_a_cell_that_answers_for_itself_does_not_shift_the_next(kernel):
    # The cell's code can reach the kernel's socket: a forged answer ends the cell early (its own
    # choice), and its late real answer must not be taken for the next cell's.
    res = run(kernel, "import socket, struct, time\ns = socket.socket(fileno=4)\n"
                      "s.send(struct.pack('=Ii', 1, 5)); s.send(struct.pack('=Ii', 99, 6)); s.detach()\n"
                      "time.sleep(0.5)\nprint('late')")
    assert res["exit_code"] == 5 and res["kernel"] == "new", res
    for i in range(3):
        res = run(kernel, f"print({i})")
        assert res["stdout"] == f"{i}\n" and res["exit_code"] == 0 and res["kernel"] == "running", res
    res = run(kernel, "import socket\nsocket.socket(fileno=4).send(b'garbage')\nimport time\ntime.sleep(1)")
    assert res["kernel"] == "ended", res
    assert run(kernel, "print(1)")["kernel"] == "new"


def test_a_restarted_manager_keeps_the_session_stateful(kernel):
    run(kernel, "r = 7")
    assert in_system("systemctl", "kill", "-s", "KILL", "scopebox-session-manager.service").returncode == 0
    deadline = time.monotonic() + 30
    while True:
        r = request("POST", "/exec", {"session_id": kernel, "code": "print(r)", "timeout_ms": 10000})
        if r.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    # The runner, and with it the stopped kernel, outlived the manager; the recorded session is
    # still stateful.
    assert r.status == 200 and r.json["stdout"] == "7\n" and r.json["kernel"] == "running", r
