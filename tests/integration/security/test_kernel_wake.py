# SPDX-License-Identifier: LGPL-2.1-or-later
"""A stateful session's kernel runs nothing between cells (issue 31, finding 3).

The kernel is PID-visible inside its sandbox: /proc lists it (only PID 1, root's, is hidden) and
every process it starts knows it as its parent. So a cell can leave behind children that
continue it (SIGCONT) the moment it is stopped, and a thread in it that works on: a kernel woken
that way would run between cells with no timeout and no CPU limit, racing the runner's file
operations. As an attacker in the sandbox tries it, the kernel must stay still until the next
cell; and a kernel that ran anyway (here continued from outside, where nothing of the sandbox
can reach) is ended at the next cell, which then runs in a fresh interpreter and says so."""
import base64
import json
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import (create_session, delete_session, in_system, journal_cursor, request, run, scope_processes,
                      wait_until)

# A thread of the kernel that counts into /workspace/stamps as long as it runs (one write each:
# a stop never leaves the file half written).
STAMPER = r"""
import os, threading, time
def stamp():
    fd = os.open('/workspace/stamps', os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    n = 0
    while True:
        n += 1
        os.pwrite(fd, b'%012d' % n, 0)
        time.sleep(0.002)
threading.Thread(target=stamp, daemon=True).start()
"""

# Left behind by the cell: children that continue their parent, the kernel, as fast as they can.
WAKERS = r"""
import os, signal, threading
kernel = os.getpid()
def waker():
    while True:
        try:
            os.kill(kernel, signal.SIGCONT)
        except OSError:
            os._exit(0)
for _ in range(3):
    if os.fork() == 0:
        waker()
"""
# And a thread of the kernel that starts a new one whenever one is killed (it runs only while the
# kernel does: the moment something continues it).
RESPAWNER = r"""
def respawn():
    while True:
        pid = os.fork()
        if pid == 0:
            waker()
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
threading.Thread(target=respawn, daemon=True).start()
"""


@pytest.fixture
def kernel():
    sid = create_session(stateful=True)
    yield sid
    delete_session(sid)


def stamps(sid):
    r = request("POST", "/files/get", {"session_id": sid, "path": "stamps"})
    assert r.status == 200, r
    return base64.b64decode(r.json["data_base64"])


def kernel_pids(sid):
    return [p["pid"] for p in scope_processes(sid) if any(c.endswith("kernel.py") for c in p["cmdline"])]


def woken_entries(cursor):
    # Filtered here: journalctl's field matches with --after-cursor miss entries (conftest).
    out = in_system("journalctl", "-o", "json", "--no-pager", f"--after-cursor={cursor}").stdout
    entries = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [e for e in entries if e.get("SCOPEBOX_EVENT") == "kernel-woken"]


def still_between_cells(sid, pause=1.5):
    """Whether the kernel's stamper wrote nothing for 'pause' seconds after the cell."""
    first = stamps(sid)
    time.sleep(pause)
    return stamps(sid) == first


@pytest.mark.parametrize("attack", [WAKERS, WAKERS + RESPAWNER] * 2, ids=["children", "respawned"] * 2)
def test_leftover_children_cannot_wake_the_kernel(kernel, attack):
    res = run(kernel, attack + STAMPER + "x = 41\ntime.sleep(0.3)\nprint(kernel)")
    assert res["exit_code"] == 0 and res["kernel"] == "new", res
    assert still_between_cells(kernel), "the kernel ran between cells"
    # Nothing of the cell is left either: the kernel is the scope's only live process of the
    # session's user (PID 1 and the runner are root's; the children it must reap are zombies,
    # which have no command line).
    procs = [p for p in scope_processes(kernel) if p["uid"].split()[0] != "0" and p["cmdline"]]
    assert len(procs) == 1 and [p["pid"] for p in procs] == kernel_pids(kernel), procs
    # The kernel was never woken, so it goes on: its state and its threads are there, and the
    # stamper runs again during the cell.
    before = int(stamps(kernel))
    res = run(kernel, "time.sleep(0.2)\nprint(x + 1)")
    assert res["stdout"] == "42\n" and res["kernel"] == "running", res
    assert int(stamps(kernel)) > before
    assert still_between_cells(kernel, 1.0), "the kernel ran between cells"


def test_a_kernel_that_ran_between_cells_is_ended(kernel):
    res = run(kernel, STAMPER + "x = 41\ntime.sleep(0.1)")
    assert res["exit_code"] == 0 and res["kernel"] == "new", res
    assert still_between_cells(kernel, 0.5)
    pids = kernel_pids(kernel)
    assert len(pids) == 1, pids
    cursor = journal_cursor()
    # Something nobody foresaw continues it: from outside the sandbox, where only root can.
    assert in_system("kill", "-CONT", str(pids[0])).returncode == 0
    first = stamps(kernel)
    wait_until(lambda: stamps(kernel) != first, 10, "the continued kernel to run")

    # The next cell finds that the kernel ran: it is ended, the cell runs in a new one (nothing
    # of the old state), as after a kernel that died between cells; no crash is reported.
    res = run(kernel, "print('x' in globals())")
    assert res["exit_code"] == 0 and res["stdout"] == "False\n" and res["kernel"] == "new", res
    assert "the kernel ended" not in res["stderr"], res
    assert kernel_pids(kernel) != pids
    assert still_between_cells(kernel, 0.5), "the old kernel's thread still runs"
    entries = wait_until(lambda: woken_entries(cursor), 5, "the runner's entry about the woken kernel")
    assert [e["SCOPEBOX_SESSION_ID"] for e in entries] == [kernel], entries
    assert entries[0]["PRIORITY"] == "4", entries
    assert run(kernel, "print(2)")["kernel"] == "running"
