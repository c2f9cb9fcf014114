# SPDX-License-Identifier: LGPL-2.1-or-later
"""Issue 30, findings 4, 5 and 8 (in part). A daemon that stops answering (SIGSTOP) is reported, not
waited for: /healthz names it within 2 s, and a request waiting for it ends within 3 s with 503;
everything works again once it runs. A long exec is not a wedge. The idle exit gives the bus name
back and answers every call queued for it before the daemon exits: calls made across several idle
exits all get their answer. A session whose record cannot be used ends as stale, and does not keep
the manager from exiting when idle.

The bounds asserted are the ones docs/operations.md documents ("Waiting for the daemons"), with a
margin for a loaded machine. The idle-exit tests shorten the idle delay through the documented
SCOPEBOX_IDLE_EXIT_SEC (a drop-in on the unit, removed afterwards): with the shipped 60 s and 30 s a
few exits would take minutes; nothing else about the install changes."""
import concurrent.futures
import json
import random
import time

from conftest import create_session, delete_session, in_system, journal_cursor, manager_sessions, request
from conftest import system_python, unit_environment, wait_until

MANAGER = "scopebox-session-manager.service"
AGENT = "scopebox-storage-agent.service"
STATE_DIR = "/var/lib/scopebox/sessions"

# docs/operations.md: /healthz answers within 2 s; a request waiting for a daemon that does not
# respond ends within 3 s. Margins for scheduling on a busy two-core VM.
HEALTH_BOUND = 2.0 + 0.5
WAIT_BOUND = 3.0 + 0.5
# How long the daemons may take to be usable again after SIGCONT (pings every second).
BACK_BOUND = 10
# systemd's "unit deactivated successfully" entry (sd-messages.h SD_MESSAGE_UNIT_SUCCESS).
UNIT_SUCCESS = "7ad2d189f7e94e70a38c781354912448"

LOCAL = {"provider": "local", "prefix": "liveness/"}


def signal(unit, sig):
    r = in_system("systemctl", "kill", "-s", sig, unit)
    assert r.returncode == 0, r.stderr


def unit_active(unit):
    return in_system("systemctl", "is-active", unit).stdout.strip()


def main_pid(unit):
    return int(in_system("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip() or 0)


def timed(method, path, body=None, **kw):
    start = time.monotonic()
    r = request(method, path, body, **kw)
    return r, time.monotonic() - start


def not_responding(r, daemon):
    return r.status == 503 and r.json.get("detail") == f"{daemon} not responding"


def health_names(r, daemon):
    return r.status == 503 and r.json == {"ok": False, "image_ready": False, "error": f"{daemon} not responding"}


def poll_health(seconds):
    """/healthz every 0.2 s for 'seconds': a list of (Response, seconds it took)."""
    answers = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        answers.append(timed("GET", "/healthz"))
        time.sleep(0.2)
    return answers


def journal_since(cursor, **fields):
    """The journal's entries since the cursor that have these fields. Filtered here, not by
    journalctl, whose field matches combined with --after-cursor miss entries (conftest.py)."""
    out = in_system("journalctl", "-o", "json", "--no-pager", f"--after-cursor={cursor}").stdout
    entries = (json.loads(line) for line in out.splitlines() if line.strip())
    return [e for e in entries if all(e.get(k) == v for k, v in fields.items())]


def exits_since(unit, cursor):
    """How many times the unit ended successfully (an idle exit) since the journal cursor."""
    return len(journal_since(cursor, UNIT=unit, MESSAGE_ID=UNIT_SUCCESS))


def healthy():
    r = request("GET", "/healthz")
    return r.status == 200 and r


# ---- a stopped session manager ----

def test_stopped_manager_is_reported_and_not_waited_for():
    sid = create_session(idle_ttl_sec=600)
    try:
        assert main_pid(MANAGER) > 0
        signal(MANAGER, "SIGSTOP")
        stopped = time.monotonic()
        try:
            with concurrent.futures.ThreadPoolExecutor(3) as pool:
                exec_ = pool.submit(timed, "POST", "/exec", {"session_id": sid, "code": "print(1)"})
                create = pool.submit(timed, "POST", "/sessions", {})
                health = pool.submit(poll_health, 4)
                (r_exec, t_exec), (r_create, t_create), answers = exec_.result(), create.result(), health.result()
        finally:
            signal(MANAGER, "SIGCONT")
        print(f"\nexec {r_exec.status} in {t_exec:.2f}s, create {r_create.status} in {t_create:.2f}s, "
              f"/healthz: {[(r.status, round(t, 2)) for r, t in answers]}")

        # The waiting requests end within the bound, retryable, naming the daemon.
        for r, took in ((r_exec, t_exec), (r_create, t_create)):
            assert not_responding(r, "session manager"), r
            assert r.headers.get("Retry-After") == "5", r.headers
            assert took <= WAIT_BOUND, took
        # Every /healthz answer came within its bound; it named the manager, and still did at the end.
        assert all(took <= HEALTH_BOUND for _, took in answers), answers
        assert health_names(answers[-1][0], "session manager"), answers[-1]
        first_503 = next(i for i, (r, _) in enumerate(answers) if r.status == 503)
        assert all(health_names(r, "session manager") for r, _ in answers[first_503:]), answers

        # Running again: healthy, the session works, creates work.
        wait_until(healthy, BACK_BOUND, "/healthz to be healthy again after SIGCONT")
        r = request("POST", "/exec", {"session_id": sid, "code": "print(6 * 7)"})
        assert r.status == 200 and r.json["stdout"] == "42\n", r
        # The create answered 503 left no session behind: its hang-up pipe was closed, so the
        # manager undid it once it ran again.
        wait_until(lambda: set(manager_sessions()) == {sid}, BACK_BOUND, "only our session to remain")
        other = create_session()
        assert delete_session(other).status == 200
    finally:
        signal(MANAGER, "SIGCONT")
        delete_session(sid)


def test_a_long_exec_is_not_a_wedge():
    """The manager answers pings while an exec runs in its sandbox: a 30 s exec completes, and
    /healthz stays healthy meanwhile."""
    sid = create_session()
    cursor = journal_cursor()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            start = time.monotonic()
            long = pool.submit(request, "POST", "/exec",
                               {"session_id": sid, "code": "import time; time.sleep(30); print('done')",
                                "timeout_ms": 60000}, timeout=120)
            answers = []
            while not long.done():
                answers.append(timed("GET", "/healthz"))
                time.sleep(1)
            r = long.result()
        assert r.status == 200 and r.json["exit_code"] == 0 and r.json["stdout"] == "done\n", r
        assert time.monotonic() - start >= 30
        assert all(a.status == 200 and took <= HEALTH_BOUND for a, took in answers), answers
        assert journal_since(cursor, SCOPEBOX_EVENT="daemon-not-responding") == []
    finally:
        delete_session(sid)


# ---- a stopped storage agent ----

def storage_delete(key):
    """A storage call that the agent answers (deleting what is not there is a success)."""
    return timed("POST", "/storage/delete", {"key": key, "storage": LOCAL})


def test_stopped_storage_agent_is_reported_and_not_waited_for():
    r, _ = storage_delete("never/was.txt")
    assert r.status == 200, r
    assert main_pid(AGENT) > 0
    signal(AGENT, "SIGSTOP")
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            delete = pool.submit(storage_delete, "never/was.txt")
            health = pool.submit(poll_health, 4)
            (r_del, t_del), answers = delete.result(), health.result()
    finally:
        signal(AGENT, "SIGCONT")
    print(f"\ndelete {r_del.status} in {t_del:.2f}s, /healthz: {[(r.status, round(t, 2)) for r, t in answers]}")

    assert not_responding(r_del, "storage agent"), r_del
    assert r_del.headers.get("Retry-After") == "5", r_del.headers
    assert t_del <= WAIT_BOUND, t_del
    assert all(took <= HEALTH_BOUND for _, took in answers), answers
    assert health_names(answers[-1][0], "storage agent"), answers[-1]

    wait_until(healthy, BACK_BOUND, "/healthz to be healthy again after SIGCONT")
    r, _ = storage_delete("never/was.txt")
    assert r.status == 200, r


# ---- idle exits under calls ----

# Runs inside the system that runs scopebox: keeps 'inflight' calls of one method to a daemon going
# for 'seconds' (each answer sends the next, a millisecond later), plus, with 'burst' > 0, that many more at once about
# every 'pause' seconds; prints the answers and the errors as JSON. Pipelined on one connection, so
# that calls are queued for the daemon at every moment, its idle exit included.
CALLS = r"""
import json, random, sys, time
import dbus, dbus.lowlevel, dbus.mainloop.glib
from gi.repository import GLib

dest, path, iface, method, seconds, inflight, burst, pause = sys.argv[1:9]
seconds, inflight, burst, pause = float(seconds), int(inflight), int(burst), float(pause)
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SystemBus()
loop = GLib.MainLoop()
end = time.monotonic() + seconds
state = {"ok": 0, "failed": 0, "errors": [], "out": 0}

def send(again):
    msg = dbus.lowlevel.MethodCallMessage(dest, path, iface, method)
    state["out"] += 1

    def done(reply):
        state["out"] -= 1
        if isinstance(reply, dbus.lowlevel.ErrorMessage):
            if len(state["errors"]) < 20:  # the first few, to show
                state["errors"].append(f"{reply.get_error_name()}: {reply.get_args_list()}")
            state["failed"] += 1
        else:
            state["ok"] += 1
        if again and time.monotonic() < end:
            GLib.timeout_add(1, lambda: send(True))  # about a thousand a second per chain
        elif state["out"] == 0 and time.monotonic() >= end:
            loop.quit()
    bus.send_message_with_reply(msg, done, 60.0)

def bursts():
    if time.monotonic() >= end:
        return False
    for _ in range(burst):
        send(False)
    GLib.timeout_add(int(random.uniform(pause - 1, pause + 1) * 1000), bursts)
    return False

def finished():
    if state["out"] > 0:
        return True  # asked again in 100 ms
    loop.quit()
    return False

for _ in range(inflight):
    send(True)
if burst:
    bursts()
GLib.timeout_add(int(seconds * 1000), lambda: GLib.timeout_add(100, finished) and False)
loop.run()
print(json.dumps({"ok": state["ok"], "failed": state["failed"], "errors": state["errors"],
                  "unanswered": state["out"]}))
"""


def calls(dest, path, iface, method, seconds, inflight, burst=0, pause=0.0):
    # Each call may wait up to its own 60 s timeout once the script has stopped sending: a slow
    # activation shows as what it is (late answers, or errors), not as the script cut short.
    r = json.loads(system_python(CALLS, dest, path, iface, method, str(seconds), str(inflight), str(burst),
                                 str(pause), timeout=seconds + 90))
    assert r["unanswered"] == 0, r
    return r


def create_release_loop(seconds, pause):
    """Creates and releases sessions from outside, each create about one idle delay after the last
    release: creates race the manager's idle exit. Returns the failures."""
    failures = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r = request("POST", "/sessions", {})
        if r.status != 200:
            failures.append(r)
            continue
        d = delete_session(r.json["session_id"])
        if d.status != 200:
            failures.append(d)
        time.sleep(random.uniform(pause - 0.5, pause + 0.5))
    return failures


def test_manager_idle_exit_answers_every_queued_call():
    assert manager_sessions() == {}
    with unit_environment(MANAGER, "liveness-idle", ["SCOPEBOX_IDLE_EXIT_SEC=3"]):
        cursor = journal_cursor()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            creates = pool.submit(create_release_loop, 40, 3.2)
            result = calls("io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                           "io.scopebox.SessionManager1", "GetHealth", 40, 4)
            failed_creates = creates.result()
        exits = exits_since(MANAGER, cursor)
    print(f"\n{result['ok']} GetHealth calls answered, {result['failed']} failed, {exits} idle exits; "
          f"{result['errors'][:3]}")
    assert exits >= 3, exits
    assert result["ok"] > 0 and result["failed"] == 0, result["errors"]
    assert failed_creates == [], failed_creates
    # Sessions created while an instance was exiting were taken over by the next one, and released.
    wait_until(lambda: manager_sessions() == {}, BACK_BOUND, "no session to remain")


def test_storage_agent_idle_exit_answers_every_queued_call():
    """Pings (org.freedesktop.DBus.Peer, which the gateway's liveness watch sends too) do not keep
    the agent from exiting when idle: sent back to back, some are always queued when it gives its
    name up. Method calls of its own come in bursts about one idle delay apart."""
    agent = ("io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1")
    with unit_environment(AGENT, "liveness-idle", ["SCOPEBOX_IDLE_EXIT_SEC=4"]):
        cursor = journal_cursor()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # Bursts 3.5 to 5.5 s apart: the agent exits 4 s after the last call, give or take its
            # timer's one-second accuracy.
            versions = pool.submit(calls, *agent, "io.scopebox.StorageAgent1", "GetVersion", 40, 0, 3, 4.5)
            pings = calls(*agent, "org.freedesktop.DBus.Peer", "Ping", 40, 4)
            versions = versions.result()
        exits = exits_since(AGENT, cursor)
    print(f"\n{pings['ok']} pings and {versions['ok']} GetVersion calls answered, "
          f"{pings['failed'] + versions['failed']} failed, {exits} idle exits; "
          f"{(pings['errors'] + versions['errors'])[:3]}")
    assert exits >= 3, exits
    assert pings["ok"] > 0 and pings["failed"] == 0, pings["errors"]
    assert versions["ok"] > 0 and versions["failed"] == 0, versions["errors"]


# ---- a record that cannot be used ----

def test_unusable_record_ends_stale_and_the_manager_still_exits_when_idle():
    assert manager_sessions() == {}
    sid = "".join(random.choice("0123456789abcdef") for _ in range(32))
    record = f"{STATE_DIR}/{sid}.json"
    # JSON, and an object, but not this session's record.
    in_system("sh", "-c", f"printf '%s' '{{\"id\": 5, \"releasing\": true}}' > {record}", check=True)
    cursor = journal_cursor()
    try:
        with unit_environment(MANAGER, "liveness-idle", ["SCOPEBOX_IDLE_EXIT_SEC=3"]):
            wait_until(lambda: unit_active(MANAGER) == "inactive", 15, "the manager to exit when idle")
            events = journal_since(cursor, SCOPEBOX_SESSION_ID=sid)
            assert any(e.get("SCOPEBOX_EVENT") == "session-stale" for e in events), events
            assert any(e.get("SCOPEBOX_SESSION_END") == "stale" for e in events), events
            assert in_system("test", "-e", record).returncode != 0, "the record is still there"
    finally:
        in_system("rm", "-f", record)
