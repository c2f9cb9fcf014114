# SPDX-License-Identifier: LGPL-2.1-or-later
"""Clients that hang up (issue #14, item 5). A sidecar exec or a dify run whose HTTP client went
away is cancelled: dropped from its queue, or killed the way its timeout kills it, so that nothing
of it is left and nothing it would still have done happens; the session stays usable. A dify run
keeps counting against MAX_REQUESTS until the session manager has ended it."""
import json
import secrets
import socket
import time

import rawhttp
from conftest import api_key, in_system, request, run, session, unit_environment  # noqa: F401 (fixture)
from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from test_boundary import scope_processes

DIFY_PORT = 8194
MANAGER = "scopebox-session-manager.service"
GATEWAY = "scopebox-gateway.service"


def metrics():
    """The /metrics samples as {'name{labels}': value}."""
    r = request("GET", "/metrics")
    assert r.status == 200, r
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def cancelled():
    return metrics().get('scopebox_execs_total{outcome="cancelled"}', 0)


def post(port, path, body, headers):
    """Sends a request on a connection of its own and returns the socket, answer unread."""
    data = json.dumps(body).encode()
    sock = socket.create_connection((rawhttp.HOST, port), timeout=30)
    sock.sendall(rawhttp.head("POST", path, [*headers, ("Content-Type", "application/json"),
                                             ("Content-Length", str(len(data)))]) + data)
    return sock


def start_exec(sid, code, timeout_ms=30000):
    return post(rawhttp.PORT, "/exec", {"session_id": sid, "code": code, "timeout_ms": timeout_ms},
                [rawhttp.auth()])


def start_dify_run(code):
    return post(DIFY_PORT, "/v1/sandbox/run", {"language": "python3", "code": code}, [("X-Api-Key", api_key())])


def dify_status(code):
    """(HTTP status, body) of a dify run that waits for its answer."""
    sock = start_dify_run(code)
    try:
        status, _, body = rawhttp.Reader(sock).final()
        return status, json.loads(body or b"null")
    finally:
        sock.close()


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


def token_processes(sid, token):
    """Processes of the session's scope that the exec started: its `sleep`, or anything carrying
    the token in its command line."""
    return [p for p in scope_processes(sid) if p["comm"] == "sleep" or any(token in c for c in p["cmdline"])]


def workspace_files(sid):
    r = request("POST", "/files/list", {"session_id": sid})
    assert r.status == 200, r
    return {f["path"] for f in r.json["files"]}


# What a cancelled exec must not get to: a child process that would live on, and a file written
# after the client is gone.
LATE_WRITER = '''
import subprocess, time
subprocess.Popen(["/bin/sh", "-c", "sleep 60; : %s"])
time.sleep(4)
open("/workspace/%s", "w").write("x")
print("finished")
'''


def test_running_exec_of_a_client_that_hangs_up_is_killed(session):
    """The running phase: the exec (and the child it started) is gone right after the hang-up,
    its late write never happens, and the session's next exec is answered at once."""
    token = "hangup-" + secrets.token_hex(6)
    before = cancelled()
    start = time.monotonic()
    sock = start_exec(session, LATE_WRITER % (token, token))
    wait_for(lambda: token_processes(session, token), 5, "the exec runs")
    time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))
    sock.close()

    # Killed as at a timeout: nothing of it is left in the scope, soon (not after its 4 s).
    wait_for(lambda: not token_processes(session, token), 2.5, "the exec's processes are gone")
    wait_for(lambda: cancelled() >= before + 1, 5, "the manager counts the exec cancelled")
    assert metrics()["scopebox_execs_running"] == 0

    time.sleep(max(0.0, 6.0 - (time.monotonic() - start)))
    assert token not in workspace_files(session)
    t = time.monotonic()
    res = run(session, "print(6 * 7)")
    assert res["exit_code"] == 0 and res["stdout"] == "42\n", res
    assert time.monotonic() - t < 10, "the session's next exec was not answered promptly"
    assert token not in workspace_files(session)


def test_queued_exec_of_a_client_that_hangs_up_never_runs(session):
    """The queued phase: an exec waiting behind another one of its session is dropped when its
    client goes; the one ahead of it is not disturbed."""
    token = "hangup-" + secrets.token_hex(6)
    before = cancelled()
    first = start_exec(session, "import time\ntime.sleep(3)\nprint('first')\n")
    time.sleep(0.5)
    queued = start_exec(session, f"open('/workspace/{token}', 'w').write('x')\n")
    time.sleep(0.5)
    queued.close()
    wait_for(lambda: cancelled() >= before + 1, 5, "the queued exec is cancelled")

    status, _, body = rawhttp.Reader(first).final()
    first.close()
    assert status == 200 and json.loads(body)["stdout"] == "first\n", (status, body)
    assert token not in workspace_files(session)
    assert run(session, "print(1)")["stdout"] == "1\n"
    assert token not in workspace_files(session)


def test_client_that_is_gone_before_the_call(session):
    """A client that closes right after sending: nothing of its exec runs, or it is cancelled
    at once; never a late side effect."""
    token = "hangup-" + secrets.token_hex(6)
    sock = start_exec(session, f"import time\ntime.sleep(2)\nopen('/workspace/{token}', 'w').write('x')\n")
    sock.close()
    time.sleep(4)
    assert token not in workspace_files(session)
    assert not token_processes(session, token)
    assert run(session, "print(1)")["stdout"] == "1\n"


def run_units():
    out = in_system("systemctl", "list-units", "--no-legend", "--plain", "scopebox-runner-*").stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_dify_runs_of_clients_that_hang_up_end_and_count_until_then():
    """MAX_REQUESTS=2: two long runs fill it; another client gets 503 while they run. Their
    clients hang up: the runs end (their scopes go) long before their 20 s, and another client's
    run is taken once they have; nothing of them is left and nothing stays counted."""
    long_run = "import time\ntime.sleep(20)\nprint('late')\n"
    with unit_environment(MANAGER, "test-hangup", ["MAX_WORKERS=2"]), \
            unit_environment(GATEWAY, "test-hangup", ["MAX_REQUESTS=2"]):
        units_before = run_units()
        before = cancelled()
        clients = [start_dify_run(long_run) for _ in range(2)]
        # Executing, not just starting: their execs hold exec slots (no other exec runs now).
        wait_for(lambda: metrics().get("scopebox_execs_running") == 2, 15, "both runs execute")
        time.sleep(1)

        # They count: a third client is refused while they run.
        status, body = dify_status("print(1)")
        assert status == 503 and body == {"code": -503, "message": "Too many requests", "data": None}, body

        hung_up = time.monotonic()
        for c in clients:
            c.close()

        # Taken again once the manager has ended them: well before their own 20 s.
        while True:
            status, body = dify_status("print(1)")
            if status == 200:
                break
            assert status == 503, (status, body)
            assert time.monotonic() - hung_up < 10, "the runs of clients that hung up still count"
            time.sleep(0.05)
        assert body["code"] == 0 and body["data"]["stdout"] == "1\n", body
        assert cancelled() >= before + 2

        # Nothing of them is left: their sessions' scopes are gone, no run executes.
        wait_for(lambda: not (run_units() - units_before), 10, "the runs' scopes are gone")
        m = metrics()
        assert m["scopebox_dify_runs_running"] == 0 and m["scopebox_dify_runs_waiting"] == 0, m
        # And nothing stays counted: MAX_REQUESTS runs go through again.
        for _ in range(2):
            status, body = dify_status("print(2)")
            assert status == 200 and body["data"]["stdout"] == "2\n", body


def test_dify_run_waiting_for_a_worker_is_dropped():
    """MAX_WORKERS=1: a run waiting behind another one leaves the queue when its client hangs up;
    the one executing is not disturbed."""
    with unit_environment(MANAGER, "test-hangup", ["MAX_WORKERS=1"]), \
            unit_environment(GATEWAY, "test-hangup", ["MAX_REQUESTS=4"]):
        before = cancelled()
        first = start_dify_run("import time\ntime.sleep(3)\nprint('first')\n")
        wait_for(lambda: metrics().get("scopebox_dify_runs_running") == 1, 15, "the first run executes")
        waiting = start_dify_run("print('never')\n")
        wait_for(lambda: metrics().get("scopebox_dify_runs_waiting") == 1, 5, "the second run waits")
        waiting.close()
        wait_for(lambda: metrics().get("scopebox_dify_runs_waiting") == 0, 5, "the waiting run is dropped")
        assert cancelled() >= before + 1
        assert metrics()["scopebox_dify_runs_running"] == 1
        # One that goes the moment it has asked (the gateway may not even have called): nothing of
        # it waits or runs a moment later.
        gone = start_dify_run("print('never')\n")
        gone.close()
        time.sleep(0.5)
        m = metrics()
        assert m["scopebox_dify_runs_running"] == 1 and m["scopebox_dify_runs_waiting"] == 0, m

        status, _, body = rawhttp.Reader(first).final()
        first.close()
        assert status == 200 and json.loads(body)["data"]["stdout"] == "first\n", (status, body)
