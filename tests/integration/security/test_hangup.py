# SPDX-License-Identifier: LGPL-2.1-or-later
"""Clients that hang up (issue #14, item 5). A sidecar exec or a dify run whose HTTP client went
away is cancelled: dropped from its queue, or killed the way its timeout kills it, so that nothing
of it is left and nothing it would still have done happens; the session stays usable. A dify run
keeps counting against MAX_REQUESTS until the session manager has ended it.

A session create whose client went away before the answer (issue #16, item 6) is undone: the
session is released unarchived, whatever phase its create was in, or by the manager when its
answer crossed the hang-up (the gateway never confirmed the delivery on the create's pipe), so
that it never counts against SANDBOX_MAX_SESSIONS for an idle TTL;
a dying gateway takes its creates in flight along. The hang-up only ever ends the caller's own
create."""
import json
import secrets
import socket
import time

import pytest

import rawhttp
from conftest import LOOPBACK_STORAGE, api_key, create_session, delete_session, in_system, pooled_units, request, run
from conftest import scope_processes, session, storage_agent_setting, unit_environment  # noqa: F401 (fixture)
from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from test_front_door import StalledStorage
from test_storage_ssrf import s3_block

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
        wait_for(lambda: not (run_units() - units_before - pooled_units()), 10, "the runs' scopes are gone")
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


# ---- session creates of clients that hang up (issue #16, item 6) ----

MANAGER_BUS = ("io.scopebox.SessionManager1", "/io/scopebox/SessionManager1", "io.scopebox.SessionManager1")
LOCAL_STORAGE = {"provider": "local", "prefix": "hangup/"}


def live_sessions():
    """Sidecar sessions the manager has (starting, running or being released), as it counts them
    against SANDBOX_MAX_SESSIONS; asked on the bus, so that it works while the gateway is away."""
    r = in_system("busctl", "--json=short", "get-property", *MANAGER_BUS, "Sessions")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["data"]


def max_sessions():
    r = in_system("scopeboxctl", "status", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["limits"]["max_sessions"]


def start_create(body, headers=None):
    return post(rawhttp.PORT, "/sessions", body, [rawhttp.auth()] if headers is None else headers)


def create_phases():
    m = metrics()
    return int(m["scopebox_session_creates_waiting"]), int(m["scopebox_session_creates_running"])


def released(baseline, units_before, timeout=20):
    """Seconds until the manager is back to 'baseline' sessions, and until their scopes are gone."""
    start = time.monotonic()
    wait_for(lambda: live_sessions() <= baseline, timeout, "the abandoned sessions are released")
    counted = time.monotonic() - start
    wait_for(lambda: not (run_units() - units_before), timeout, "their scopes are gone")
    return counted, time.monotonic() - start


def journal_count(since, match):
    out = in_system("journalctl", "-o", "cat", "--no-pager", f"--since=@{int(since)}", match).stdout
    return len([line for line in out.splitlines() if line.strip()])


@pytest.fixture(scope="module")
def loopback_storage():
    with storage_agent_setting("test-hangup-loopback", LOOPBACK_STORAGE):
        yield


@pytest.fixture
def stalled(loopback_storage):
    """A storage endpoint that never answers: a create restoring from it can never complete."""
    endpoint = StalledStorage("silent")
    try:
        yield endpoint
    finally:
        endpoint.release()
        endpoint.close()


def fill_with_stalled_creates(stalled, tag):
    """As many creates as SANDBOX_MAX_SESSIONS leaves room for, each to restore from the stalled
    endpoint, so that none of them can be answered. Returns their sockets and the baseline once
    all of them count (most still wait for a create slot then, SANDBOX_MAX_CONCURRENT_CREATES=2)."""
    cap, baseline = max_sessions(), live_sessions()
    assert baseline < cap, (baseline, cap)
    block = s3_block(f"http://127.0.0.1:{stalled.port}")
    socks = [start_create({"archive_key": f"{tag}_{i}", "storage": block}) for i in range(cap - baseline)]
    wait_for(lambda: live_sessions() >= cap, 15, "every create counts")
    return socks, baseline


def test_creates_of_clients_that_hang_up_are_released(stalled):
    """SANDBOX_MAX_SESSIONS worth of creates, caught in every phase (waiting for a create slot,
    starting their scope, fetching their archive), fill the cap: another client gets 429. Their
    clients hang up: the sessions are released, unarchived, within moments, and a new client's
    create succeeds."""
    units_before = run_units()
    socks, baseline = fill_with_stalled_creates(stalled, "abandoned")
    try:
        r = request("POST", "/sessions", {})
        assert r.status == 429 and r.json == {"detail": "too many active sessions"}, r
        waiting, starting = create_phases()
        fetching = stalled.count
    finally:
        for s in socks:
            s.close()
    counted, scopes = released(baseline, units_before)
    # Not archived: nothing more reached the storage endpoint (an upload would have).
    assert stalled.count <= len(socks)
    print(f"\n{len(socks)} creates abandoned ({waiting} waiting for a create slot, {starting} starting, "
          f"{fetching} fetching their archive): no longer counted {counted * 1000:.0f} ms after the hang-up, "
          f"scopes gone after {scopes * 1000:.0f} ms")
    delete_session(create_session())


def test_creates_in_flight_when_the_gateway_dies_are_released(stalled):
    """The gateway SIGKILLed while SANDBOX_MAX_SESSIONS worth of creates are in flight: its death
    closes every hang-up pipe, the manager releases the sessions, and the gateway, socket-activated,
    serves the next client, whose create succeeds."""
    units_before = run_units()
    socks, baseline = fill_with_stalled_creates(stalled, "gateway_killed")
    try:
        waiting, starting = create_phases()
        in_system("systemctl", "kill", "-s", "KILL", GATEWAY, check=True)
        counted, scopes = released(baseline, units_before)
        # The clients lost their connections, unanswered.
        assert all(rawhttp.Reader(s).closed(timeout=5) for s in socks)
    finally:
        for s in socks:
            s.close()
    print(f"\n{len(socks)} creates in flight ({waiting} waiting for a create slot, {starting} starting) when "
          f"the gateway was killed: no longer counted {counted * 1000:.0f} ms later, scopes gone after "
          f"{scopes * 1000:.0f} ms")
    delete_session(create_session())


def test_creates_abandoned_at_any_moment_are_released():
    """Creates whose clients hang up (shut their sending side) at moments spread over a create's
    whole course: before the call, waiting, starting, or just as the answer comes. A client that got
    its answer owns its session (and releases it); every other session is released by the manager,
    or by the gateway when its answer crossed the hang-up."""
    units_before = run_units()
    cap, baseline = max_sessions(), live_sessions()
    n = cap - baseline

    # How long a batch of n creates takes to be answered: the hang-ups are spread over its first half
    # (answers come faster than one by one once the first scopes are up).
    socks = [start_create({}) for _ in range(n)]
    start = time.monotonic()
    ids = []
    for s in socks:
        s.settimeout(30)
        status, _, body = rawhttp.Reader(s).final()
        assert status == 200, (status, body)
        s.close()
        ids.append(json.loads(body)["session_id"])
    batch = time.monotonic() - start
    for sid in ids:
        assert delete_session(sid).status == 200

    since = time.time()
    socks = [start_create({}) for _ in range(n)]
    start = time.monotonic()
    answered = []
    for i, s in enumerate(socks):
        time.sleep(max(0.0, start + i * batch / (2 * n) - time.monotonic()))
        s.shutdown(socket.SHUT_WR)
    for s in socks:
        s.settimeout(30)
        r = rawhttp.Reader(s).final()
        if r is not None and r[0] == 200:
            answered.append(json.loads(r[2])["session_id"])
        else:
            assert r is None, r
        s.close()
    for sid in answered:
        assert delete_session(sid).status == 200
    counted, scopes = released(baseline, units_before)
    by_gateway = journal_count(since, "SCOPEBOX_EVENT=session-abandoned")
    print(f"\n{n} creates hung up over {batch * 500:.0f} ms (half what {n} creates take to be answered): "
          f"{len(answered)} answered first, {n - len(answered)} abandoned ({by_gateway} of them released by the "
          f"gateway, the answer having crossed the hang-up); back to the baseline {counted * 1000:.0f} ms after "
          f"the last, scopes gone after {scopes * 1000:.0f} ms")
    delete_session(create_session())


# A bus call whose "hangup" pipe loses its writer 'hold' seconds into the call (busctl can't pass
# fds); prints "ok ..." or the error's name and message.
BUS_CALL = r"""
import json, os, sys, time
import dbus
member, hold, args, options = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    time.sleep(hold)
    os._exit(0)
os.close(w)
obj = dbus.SystemBus().get_object("io.scopebox.SessionManager1", "/io/scopebox/SessionManager1", introspect=False)
options = dbus.Dictionary({**options, "hangup": dbus.types.UnixFd(r)}, signature="sv")
try:
    out = obj.get_dbus_method(member, "io.scopebox.SessionManager1")(*args, options, timeout=30)
    print("ok", out)
except dbus.DBusException as e:
    print(e.get_dbus_name(), e.get_dbus_message())
    sys.exit(1)
"""


def bus_call_with_hangup(user, member, args, options, hold):
    as_user = [] if user == "root" else ["setpriv", f"--reuid={user}", f"--regid={'nogroup' if user == 'nobody' else user}",
                                         "--clear-groups"]
    return in_system(*as_user, "/usr/bin/python3", "-c", BUS_CALL, member, str(hold), json.dumps(args),
                     json.dumps(options))


def archive_digest(stem):
    path = f"/var/lib/scopebox-storage/hangup/workspaces/{stem}.tgz"
    r = in_system("sh", "-c", f"stat -c %Y.%s {path} && sha256sum {path}")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_hangup_only_ever_ends_the_callers_own_create(session, stalled):
    """Nobody can turn the hang-up against someone else's session or archive: a key holder's
    abandoned creates naming another client's session or archive leave both untouched (not even
    the archive they restored is written back); an unauthenticated client creates nothing; a local
    process that may not call the manager can't pass a hang-up pipe, and one that may (root, the
    gateway's user) ends only the create it makes itself; no other call takes the option."""
    victim = session
    run(victim, "open('/workspace/mine.txt', 'w').write('mine')")
    stem = "hangup_" + secrets.token_hex(6)
    owner = create_session(archive_key=stem, storage=LOCAL_STORAGE)
    run(owner, "open('/workspace/kept.txt', 'w').write('kept')")
    assert delete_session(owner).json == {"ok": True, "archive": "stored"}
    digest = archive_digest(stem)
    units_before = run_units()
    baseline = live_sessions()

    # A key holder: creates naming the victim and the owner's archive, abandoned before any answer.
    socks = [start_create(body) for body in ({"session_id": victim}, {"archive_key": stem, "storage": LOCAL_STORAGE},
                                             {"session_id": victim, "archive_key": stem, "storage": LOCAL_STORAGE})]
    for s in socks:
        s.close()
    # No key: refused before anything is asked of the manager.
    anonymous = start_create({"session_id": victim}, headers=[])
    anonymous.close()
    released(baseline, units_before)

    # On the bus. A user the policy doesn't let call the manager can't pass a pipe at all.
    r = bus_call_with_hangup("nobody", "CreateSession", [], {}, hold=1)
    assert r.returncode != 0 and "org.freedesktop.DBus.Error.AccessDenied" in r.stdout, r
    # A release takes no hang-up pipe: one naming the victim with one is refused, before anything.
    r = bus_call_with_hangup("root", "ReleaseSession", [victim], {}, hold=0.2)
    assert r.returncode != 0 and "Unknown option 'hangup'" in r.stdout, r
    # The gateway's user, hanging up during its own create (fetching from the stalled endpoint):
    # that create is cancelled, nothing else.
    block = json.dumps(s3_block(f"http://127.0.0.1:{stalled.port}"))
    r = bus_call_with_hangup("scopebox-gateway", "CreateSession", [], {"archive_key": "own", "storage": block}, hold=2)
    assert r.returncode != 0 and "io.scopebox.Error.Cancelled cancelled: the caller hung up" in r.stdout, r
    released(baseline, units_before)

    assert archive_digest(stem) == digest, "an abandoned create wrote the archive it restored"
    assert run(victim, "print(open('/workspace/mine.txt').read())")["stdout"] == "mine\n"
    assert delete_session(create_session(archive_key=stem, storage=LOCAL_STORAGE), discard=True).json == \
        {"ok": True, "archive": "discarded"}
