# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every runner the session manager forked is reaped (issue 13, finding 6): after many dify runs,
whose ephemeral sessions end while their scopes stop, and after sidecar sessions come and go, the
manager has no zombie children; nor after a churn of sessions created and deleted as fast as
clients can (issue 16, finding 7), which leaves no scope, runtime directory or record either."""
import concurrent.futures
import os
import threading
import time

from conftest import create_session, delete_session, in_system, request, run
from test_dify_runs import dify_run, ok_data

MANAGER = "scopebox-session-manager.service"
RUNS = 100
# Reaping follows the scope's stop job by a SIGCHLD; give it a few seconds, not more.
REAP_WAIT_SEC = 15


def manager_pid():
    r = in_system("systemctl", "show", "-p", "MainPID", "--value", MANAGER, check=True)
    return int(r.stdout.strip() or 0)


def children(pid):
    """(pid, state, command) of every child of pid, as the private system's ps sees them."""
    r = in_system("ps", "-o", "pid=,stat=,comm=", "--ppid", str(pid))
    out = []
    for line in r.stdout.splitlines():
        fields = line.split(None, 2)
        if len(fields) >= 2:
            out.append((int(fields[0]), fields[1], fields[2] if len(fields) > 2 else ""))
    return out


def zombies(pid):
    return [c for c in children(pid) if c[1].startswith("Z")]


def wait_for_no_zombies(pid):
    deadline = time.monotonic() + REAP_WAIT_SEC
    left = zombies(pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = zombies(pid)
    return left


def test_no_zombie_runners_after_dify_runs():
    # The zombies came from a race (the scope's JobRemoved dispatched before the runner's exit);
    # health checks keep the manager's bus busy meanwhile, which makes it likelier.
    done = threading.Event()

    def health():
        while not done.is_set():
            request("GET", "/healthz")

    def one(i):
        return ok_data(*dify_run(f"print({i} * 2)"))["stdout"]

    pollers = [threading.Thread(target=health) for _ in range(4)]
    for t in pollers:
        t.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            outputs = list(pool.map(one, range(RUNS)))
    finally:
        done.set()
        for t in pollers:
            t.join()
    assert outputs == [f"{i * 2}\n" for i in range(RUNS)]

    pid = manager_pid()
    assert pid > 0, "the session manager is not running"
    left = wait_for_no_zombies(pid)
    assert not left, f"{len(left)} zombie children of the session manager ({pid}): {left[:10]}"


def test_no_zombie_runners_after_sidecar_sessions():
    def one(_):
        sid = create_session()
        try:
            assert run(sid, "print('hi')")["stdout"] == "hi\n"
        finally:
            assert delete_session(sid).status == 200
        return sid

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        sids = list(pool.map(one, range(12)))
    assert len(set(sids)) == 12

    pid = manager_pid()
    assert pid > 0, "the session manager is not running"
    left = wait_for_no_zombies(pid)
    assert not left, f"{len(left)} zombie children of the session manager ({pid}): {left[:10]}"


# Churn (issue 16, finding 7): sidecar sessions created and deleted as fast as several clients
# can, for a bounded time; afterwards no runner is left unreaped and nothing of any session is
# left behind: no scope, no runtime directory, no record.
CHURN_SEC = float(os.environ.get("SCOPEBOX_TEST_CHURN_SEC", "30"))
CHURN_CLIENTS = int(os.environ.get("SCOPEBOX_TEST_CHURN_CLIENTS", "8"))
# Scopes stop and runners get reaped within moments of the last delete; this is only a bound.
SETTLE_SEC = 30
RUNTIME_DIR = "/run/scopebox/sessions"
STATE_DIR = "/var/lib/scopebox/sessions"


def runner_scopes():
    r = in_system("systemctl", "list-units", "--all", "--plain", "--no-legend", "scopebox-runner-*.scope")
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def listing(path):
    r = in_system("ls", "-1", path)
    return set(r.stdout.split())


def leftovers(before):
    """What exists of sessions now that did not before the churn."""
    scopes, dirs, records = before
    return (runner_scopes() - scopes, listing(RUNTIME_DIR) - dirs, listing(STATE_DIR) - records)


def test_no_zombies_or_leftovers_after_session_churn():
    pid = manager_pid()
    assert pid > 0, "the session manager is not running"
    before = (runner_scopes(), listing(RUNTIME_DIR), listing(STATE_DIR))
    end = time.monotonic() + CHURN_SEC
    lock = threading.Lock()
    created, refused, failures = [0], [0], []
    max_zombies = [0]
    done = threading.Event()

    def client():
        while time.monotonic() < end:
            r = request("POST", "/sessions", {}, timeout=60)
            if r.status == 429:
                # The cap or the create queue: churn goes on, the refusal is counted.
                with lock:
                    refused[0] += 1
                time.sleep(0.05)
                continue
            if r.status != 200:
                with lock:
                    failures.append(r)
                continue
            d = delete_session(r.json["session_id"])
            with lock:
                created[0] += 1
                if d.status != 200:
                    failures.append(d)

    def sampler():
        while not done.is_set():
            n = len(zombies(pid))
            max_zombies[0] = max(max_zombies[0], n)
            done.wait(0.5)

    watcher = threading.Thread(target=sampler)
    watcher.start()
    started = time.monotonic()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=CHURN_CLIENTS) as pool:
            for f in [pool.submit(client) for _ in range(CHURN_CLIENTS)]:
                f.result()
    finally:
        elapsed = time.monotonic() - started
        done.set()
        watcher.join()

    # Settled: polled with a deadline, every figure must reach zero.
    settling = time.monotonic()
    deadline = settling + SETTLE_SEC
    while True:
        left_zombies = zombies(pid)
        left = leftovers(before)
        if (not left_zombies and not any(left)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    settle = time.monotonic() - settling
    print(f"\nchurn: {created[0]} sessions created and deleted in {elapsed:.1f}s by {CHURN_CLIENTS} clients "
          f"({created[0] / elapsed:.1f}/s), {refused[0]} creates refused with 429, max {max_zombies[0]} "
          f"zombies seen during the churn, {len(left_zombies)} left after {settle:.1f}s")
    assert not failures, failures[:5]
    assert created[0] > 0
    assert manager_pid() == pid, "the session manager restarted during the churn"
    assert not left_zombies, f"{len(left_zombies)} zombie children of the session manager ({pid}): {left_zombies[:10]}"
    scopes, dirs, records = left
    assert not scopes, f"{len(scopes)} runner scopes left: {sorted(scopes)[:5]}"
    assert not dirs, f"{len(dirs)} runtime directories left: {sorted(dirs)[:5]}"
    assert not records, f"{len(records)} session records left: {sorted(records)[:5]}"
