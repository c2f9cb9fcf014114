# SPDX-License-Identifier: LGPL-2.1-or-later
"""Stateful sessions (docs/api.md "Stateful sessions"): one interpreter (the kernel) keeps the
session's python state across cells, is stopped between them, is reset on request, and ends with
a cell that times out, crashes or runs out of memory; processes a cell starts still end with it."""
import time

import pytest

from conftest import create_session, delete_session, request, run

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
    assert [f["path"] for f in res["files"]] == ["a.txt"], res
    res = run(kernel, "open('/workspace/outputs/b.txt', 'w').write('two')")
    assert [f["path"] for f in res["files"]] == ["b.txt"], res


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
            assert delete_session(sid).status == 200
            r = request("POST", "/exec", {"session_id": sid, "code": "print(1)"})
            assert r.status == 404
    finally:
        delete_session(sid)
