# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every runner the session manager forked is reaped (issue 13, finding 6): after many dify runs,
whose ephemeral sessions end while their scopes stop, and after sidecar sessions come and go, the
manager has no zombie children."""
import concurrent.futures
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
