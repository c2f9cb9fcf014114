# SPDX-License-Identifier: LGPL-2.1-or-later
"""Prepared sandboxes (docs/security.md "Prepared sandboxes", issue 34): a sidecar session's next
exec runs in a sandbox made before it came. The sandbox waits pristine — nothing of the session
ran in it, nothing the session wrote was read —, serves one exec, and is thrown away when what it
captured changed or it died waiting. Runs against the default configuration, on whichever cgroup
layout the service runs on (tools/sysbox: hybrid, v1 controllers and the unified hierarchy)."""
import json
import time

from conftest import (create_session, delete_session, exec_start, in_system, manager_run_sandboxes, request,
                      run, scope_processes, system_python, wait_until)
from test_dify_runs import dify_run

# The processes of a waiting prepared sandbox, seen as root: PID 1, the template's child, and the
# payload, with what the payload's root holds at /exec and where it waits.
PREPARED = r"""
import json, os, sys
out = []
for p in json.loads(sys.argv[1]):
    pid = p['pid']
    try:
        entry = dict(p)
        entry['exec'] = sorted(os.listdir('/proc/%d/root/exec' % pid)) if p['comm'] == 'python3' else None
        entry['fds'] = sorted(int(f) for f in os.listdir('/proc/%d/fd' % pid)) if p['comm'] == 'python3' else None
        entry['state'] = [l.split()[1] for l in open('/proc/%d/status' % pid) if l.startswith('State:')][0]
        entry['seccomp'] = [l.split()[1] for l in open('/proc/%d/status' % pid) if l.startswith('Seccomp:')][0]
        entry['nnp'] = [l.split()[1] for l in open('/proc/%d/status' % pid) if l.startswith('NoNewPrivs:')][0]
        out.append(entry)
    except OSError:
        pass
print(json.dumps(out))
"""


def prepared(sid):
    """The processes of the session's scope but its runner, with the payload's view of /exec."""
    procs = [p for p in scope_processes(sid) if p["comm"] != "scopebox-runner"]
    return json.loads(system_python(PREPARED, json.dumps(procs)))


def waiting(sid):
    procs = prepared(sid)
    comms = sorted(p["comm"] for p in procs)
    return procs if comms == ["python3", "sandbox-init", "template-child"] else None


def test_a_prepared_sandbox_waits_pristine():
    sid = create_session()
    try:
        # Made once the session is ready, before any exec.
        procs = wait_until(lambda: waiting(sid), 10, "the first prepared sandbox")
        payload = next(p for p in procs if p["comm"] == "python3")
        # The payload is already the sandbox: filtered, no_new_privs, the session's user, and
        # holds nothing but stdio and its socket to PID 1; the code's place is empty.
        assert payload["seccomp"] == "2" and payload["nnp"] == "1", payload
        assert payload["uid"].split()[0] != "0", payload
        assert payload["exec"] == [] and payload["fds"] == [0, 1, 2, 3], payload
        assert payload["cmdline"] == ["python3", "/exec/cell.py"], payload
        res = run(sid, "import os, sys\nprint(sorted(os.listdir('/exec')), sys.argv, os.getppid())")
        assert res["exit_code"] == 0 and res["stdout"] == "['cell.py'] ['/exec/cell.py'] 0\n", res
        assert exec_start(sid) == "template"
        # It served that exec only: the next one waits in a new sandbox.
        again = wait_until(lambda: waiting(sid), 10, "the next prepared sandbox")
        assert {p["pid"] for p in again}.isdisjoint(p["pid"] for p in procs), (procs, again)
    finally:
        delete_session(sid)


def test_nothing_of_the_session_runs_before_its_exec():
    """The user site's .pth files run at each exec, in it, never while the sandbox waits."""
    sid = create_session()
    try:
        res = run(sid, "import os, site\nd = site.getusersitepackages()\nos.makedirs(d, exist_ok=True)\n"
                       "open(os.path.join(d, 'mark.pth'), 'w').write(\"import os; open('/workspace/pth-runs', 'a')"
                       ".write('%d\\\\n' % os.getpid())\\n\")\n"
                       "print(os.path.exists('/workspace/pth-runs'))")
        assert res["exit_code"] == 0 and res["stdout"] == "False\n", res
        wait_until(lambda: waiting(sid), 10, "a prepared sandbox, with the .pth in place")
        time.sleep(0.5)
        first = run(sid, "import os\nprint(open('/workspace/pth-runs').read().split(), os.getpid())")
        runs, pid = first["stdout"].rsplit("]", 1)
        assert json.loads(runs.replace("'", '"') + "]") == [pid.strip()], first
        wait_until(lambda: waiting(sid), 10, "the next prepared sandbox")
        time.sleep(0.5)
        second = run(sid, "print(len(open('/workspace/pth-runs').read().split()))")
        assert second["stdout"] == "2\n", second
    finally:
        delete_session(sid)


def test_the_exec_gets_its_own_timeout():
    """The sandbox was made before the exec's timeout was known: its CPU backstop is the exec's."""
    sid = create_session()
    try:
        code = "import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))"
        # (seconds + 5) × the session's CPUs (the default: one) + 5, as for a sandbox made for it.
        for timeout_ms, limit in ((2000, 12), (30000, 40), (1000, 11)):
            wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
            res = run(sid, code, timeout_ms=timeout_ms)
            assert res["stdout"] == f"({limit}, {limit})\n", (timeout_ms, res)
    finally:
        delete_session(sid)


def test_the_sandbox_cannot_touch_its_code():
    sid = create_session()
    try:
        wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
        res = run(sid, "import errno, os\nfor p in ('/exec/cell.py', '/exec/other.py'):\n"
                       "    try:\n        open(p, 'w')\n        print('wrote', p)\n"
                       "    except OSError as e:\n        print(errno.errorcode[e.errno])\n"
                       "print(os.stat('/exec').st_uid, oct(os.stat('/exec').st_mode))")
        # Read-only as a sandbox's /exec made with its code, and root's.
        assert res["stdout"] == "EROFS\nEROFS\n65534 0o40755\n", res
    finally:
        delete_session(sid)


def test_a_sandbox_that_died_waiting_is_replaced():
    """Its payload killed while it waited (as the OOM killer would): the exec runs all the same, in
    a sandbox of its own, and the journal says so."""
    sid = create_session()
    try:
        procs = wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
        payload = next(p for p in procs if p["comm"] == "python3")
        in_system("kill", "-KILL", str(payload["pid"]), check=True)
        res = run(sid, "print('ran')")
        assert res["exit_code"] == 0 and res["stdout"] == "ran\n", res
        # The same with the exec sent while PID 1 is still taking the loss in (the exec meets
        # the sandbox before or after its end), and with a timeout that still holds after it.
        for _ in range(5):
            procs = wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
            payload = next(p for p in procs if p["comm"] == "python3")
            killer = in_system("kill", "-KILL", str(payload["pid"]), check=True)
            assert killer.returncode == 0
            res = run(sid, "print('ran')")
            assert res["exit_code"] == 0 and res["stdout"] == "ran\n", res
        procs = wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
        in_system("kill", "-KILL", next(str(p["pid"]) for p in procs if p["comm"] == "python3"), check=True)
        res = run(sid, "import time\ntime.sleep(30)", timeout_ms=1500)
        assert res["exit_code"] == 124 and "exceeded 1.500s" in res["stderr"], res
    finally:
        delete_session(sid)


def test_stateful_sessions_prepare_none():
    sid = create_session(stateful=True)
    try:
        assert run(sid, "x = 1")["exit_code"] == 0
        time.sleep(1)
        assert not [p for p in prepared(sid) if p["comm"] == "template-child"], prepared(sid)
    finally:
        delete_session(sid)


def test_the_session_ends_with_its_prepared_sandbox():
    sid = create_session()
    wait_until(lambda: waiting(sid), 10, "a prepared sandbox")
    assert delete_session(sid).status == 200
    assert request("POST", "/exec", {"session_id": sid, "code": "print(1)"}).status == 404
    wait_until(lambda: scope_processes(sid) == [], 10, "the scope to be empty")


# A pooled dify run's sandbox (SANDBOX_DIFY_POOL_SIZE): prepared in the profile Dify sends by
# default (the dify profile with a network, its slirp4netns up), taken by such a run only.

STARTTIME = "print(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])"


def pooled_prepared(network=True):
    """The start times (clock ticks since boot, as /proc/<pid>/stat says inside and out) of the
    payloads waiting in pooled run sessions, with their slirp4netns up (or without a network)."""
    want = sorted(["python3", "sandbox-init", "template-child"] + (["slirp4netns"] if network else []))
    found = {}
    for sid in manager_run_sandboxes():
        procs = prepared(sid)
        comms = sorted(p["comm"] for p in procs)
        if comms == want:
            payload = next(p for p in procs if p["comm"] == "python3")
            assert payload["cmdline"] == ["python3", "/usr/share/scopebox/dify-run.py"], payload
            assert payload["exec"] == [] and payload["fds"] == [0, 1, 2, 3], payload
            stat = in_system("cat", f"/proc/{payload['pid']}/stat", check=True).stdout
            found[sid] = stat.rsplit(")", 1)[1].split()[19]
    return found


def test_a_run_with_a_network_takes_a_pooled_prepared_sandbox():
    # Runs fill the pool; once it is full, each pooled session waits with its sandbox made.
    assert dify_run("print(0)", enable_network=True)[0] == 200
    waiting_pool = wait_until(pooled_prepared, 15, "a pooled run session's prepared sandbox")
    status, body = dify_run(STARTTIME, enable_network=True)
    assert status == 200 and body["code"] == 0, body
    assert body["data"]["stdout"].strip() in waiting_pool.values(), (body, waiting_pool)


def test_a_run_without_a_network_never_gets_the_prepared_one():
    assert dify_run("print(0)", enable_network=True)[0] == 200
    waiting_pool = wait_until(pooled_prepared, 15, "a pooled run session's prepared sandbox")
    code = STARTTIME + "\nimport socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n" \
                       "    print('inet')\nexcept OSError as e:\n    print('refused')"
    status, body = dify_run(code, enable_network=False)
    assert status == 200 and body["code"] == 0, body
    start, inet = body["data"]["stdout"].split()
    assert start not in waiting_pool.values() and inet == "refused", (body, waiting_pool)
    # The pool follows the runs: its next sandboxes are made without a network, and such a run
    # takes one.
    waiting_pool = wait_until(lambda: pooled_prepared(network=False), 15, "a prepared sandbox without network")
    status, body = dify_run(code, enable_network=False)
    start, inet = body["data"]["stdout"].split()
    assert start in waiting_pool.values() and inet == "refused", (body, waiting_pool)
    # And back: the next run with a network again.
    assert dify_run("print(0)", enable_network=True)[0] == 200
