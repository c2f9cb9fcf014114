# SPDX-License-Identifier: LGPL-2.1-or-later
"""Concurrency races on one session: parallel execs (serialised, each sees the workspace the
previous one left, none lost), execs and file calls racing DELETE, double DELETE, uploads and
reset-inputs racing an exec that writes the same files, parallel uploads to one path, and storms
of create/delete cycles. Every call answers with one of the contract's outcomes (never a 5xx),
no API call sees the middle of an exec, and a released session leaves no scope, runtime
directory, state file, process or sandbox uid behind."""
import base64
import concurrent.futures
import json
import os
import secrets
import shutil
import tarfile
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import (create_session, delete_session, in_system, manager_run_sandboxes, request, run,  # noqa: F401
                      session, session_info, start_request, wait_until, workspace_has)
from test_paths import check, content_of, listing, read, reset_inputs, write

GONE = {"detail": "session not found or not running"}
RELEASED = {"ok": True}
RESET_OK = {"ok": True, "session_gone": False}
RESET_GONE = {"ok": False, "session_gone": True}
ROOT = "/var/lib/scopebox-storage"
STATE_DIR = "/var/lib/scopebox/sessions"

SNAPSHOT = r"""
systemctl list-units --all --plain --no-legend 'scopebox-runner-*' | awk '{print "unit", $1}'
ls -1 /run/scopebox/sessions 2>/dev/null | sed 's/^/run /'
pgrep -a -f 'scopebox-[r]unner' | sed 's/^/proc /'
ps -eo uid=,pid=,comm= | awk '$1 >= 1000 && $1 != 65534 {print "uid", $1, $2, $3}'
"""


def session_uid(sid):
    """The host uid the manager gave the session (recorded in its state file)."""
    with open(f"{STATE_DIR}/{sid}.json") as f:
        return json.load(f)["uid"]


def leftovers(sids, uids=None):
    """What the released sessions 'sids' still have: {sid: [what, ...]} (their uids, when given
    as {sid: uid}, still running something counts), and any process running as a sandbox uid
    that belongs to no live session."""
    out = in_system("sh", "-c", SNAPSHOT).stdout.splitlines()
    left = {}
    for sid in sids:
        what = [line for line in out if sid in line]
        if uids and sid in uids:
            what += [line for line in out if line.startswith(f"uid {uids[sid]} ")]
        if os.path.exists(f"{STATE_DIR}/{sid}.json"):
            what.append("state file")
        if what:
            left[sid] = what
    # Live sessions may run something (an exec that has not quite ended), and so may the dify
    # runs' sandboxes (a pooled one's prepared sandbox waits under its uid, with its network);
    # nothing else may run under a sandbox uid.
    live = {p["uid"] for p in manager_run_sandboxes().values()}
    for name in os.listdir(STATE_DIR):
        try:
            with open(os.path.join(STATE_DIR, name)) as f:
                live.add(json.load(f)["uid"])
        except (OSError, ValueError, KeyError):
            pass
    running = [line for line in out if line.startswith("uid ") and int(line.split()[1]) not in live]
    return left, running


def assert_all_gone(sids, uids=None, wait=30):
    deadline = time.monotonic() + wait
    while True:
        left, running = leftovers(sids, uids)
        if (not left and not running) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (left, running) == ({}, []), (left, running)


def exec_request(sid, code, timeout_ms=30000):
    return request("POST", "/exec", {"session_id": sid, "code": code, "timeout_ms": timeout_ms},
                   timeout=timeout_ms / 1000 + 200)


# What the tests wait for instead of sleeping: the manager's view of the session (which asking
# does not change), or what the code left in the workspace.

def accepted(sid, n=1):
    """The manager has taken n execs of the session (running or queued)."""
    return session_info(sid).get("execs", 0) >= n


def exec_running(sid):
    return session_info(sid).get("exec_running", False)


def queued(sid, n):
    """n calls of the session wait behind the one in flight."""
    return session_info(sid).get("queued", 0) >= n


# Serialised execs.

def test_eight_parallel_execs_are_serialised(session):
    code = ("import os, time\n"
            "p = '/workspace/counter'\n"
            "n = int(open(p).read()) if os.path.exists(p) else 0\n"
            # Between the read and the write: the window two execs at once would lose an update in.
            "time.sleep(0.05)\n"
            "open(p + '.tmp', 'w').write(str(n + 1))\n"
            "os.replace(p + '.tmp', p)\n"
            "open('/workspace/outputs/seen-%d' % n, 'w').write(str(n))\n"
            "print(n)\n")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: exec_request(session, code), range(8)))
    assert [r.status for r in results] == [200] * 8, results
    docs = [r.json for r in results]
    assert all(d["exit_code"] == 0 and d["stderr"] == "" for d in docs), docs
    # Each saw what the one before it left: no lost update, no two at once.
    assert sorted(int(d["stdout"]) for d in docs) == list(range(8)), docs
    # Each reported exactly the artifact it made.
    for d in docs:
        assert [f["name"] for f in d["files"]] == ["seen-" + d["stdout"].strip()], d
    assert content_of(read(session, "counter")) == b"8"


# Racing DELETE.

# When the DELETE is sent: at once (a true race with the exec's request), once the manager has
# the exec, once the runner executes it, and once the code is at work (it wrote /workspace/x).
EXEC_PHASES = {
    "at-once": lambda sid: True,
    "accepted": accepted,
    "running": exec_running,
    "in-the-code": lambda sid: workspace_has(sid, "x"),
}


@pytest.mark.parametrize("phase", list(EXEC_PHASES))
def test_exec_racing_delete(phase):
    sid = create_session()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        ex = pool.submit(exec_request, sid, "import time\nopen('/workspace/x', 'w').write('x')\ntime.sleep(20)\n")
        wait_until(lambda: EXEC_PHASES[phase](sid), 60, f"the exec to be {phase}")
        d = delete_session(sid)
        e = ex.result(timeout=120)
    check(d, 200, RELEASED)
    check(e, 404, GONE)
    check(delete_session(sid), 200, RELEASED)
    check(exec_request(sid, "print(1)"), 404, GONE)
    assert_all_gone([sid])


def test_double_delete_archives_once():
    prefix = f"secsuite-races-{secrets.token_hex(4)}"
    storage = {"provider": "local", "prefix": prefix + "/"}
    stem = "double_delete"
    sid = create_session(archive_key=stem, storage=storage)
    try:
        run(sid, "open('/workspace/a.txt', 'w').write('a' * 1000)")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: delete_session(sid), range(4)))
        # Each hears the outcome once it is known; one that comes after the end finds it gone.
        assert all(r.status == 200 and r.json in ({"ok": True, "archive": "stored"}, RELEASED) for r in results), \
            results
        assert {"ok": True, "archive": "stored"} in [r.json for r in results], results
        assert_all_gone([sid])
        path = f"{ROOT}/{prefix}/workspaces/{stem}.tgz"
        with tarfile.open(path, "r:gz") as t:
            assert t.extractfile("./a.txt").read() == b"a" * 1000
        assert sorted(os.listdir(os.path.dirname(path))) == [f"{stem}.tgz"]  # no staging left over
    finally:
        shutil.rmtree(f"{ROOT}/{prefix}", ignore_errors=True)


def test_queued_calls_racing_delete():
    """Calls queued behind a running exec when the session is released: each gets the
    contract's "gone" answer, none a 5xx or a 429."""
    sid = create_session()
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        # Long enough never to end by itself: the DELETE stops it.
        first = pool.submit(exec_request, sid, "import time\ntime.sleep(20)\n")
        wait_until(lambda: exec_running(sid), 60, "the first exec to run")
        calls = {
            "write": pool.submit(write, sid, "uploads/q.txt", b"q"),
            "read": pool.submit(read, sid, "uploads/q.txt"),
            "list": pool.submit(request, "POST", "/files/list", {"session_id": sid}),
            "reset": pool.submit(reset_inputs, sid),
            "exec": pool.submit(exec_request, sid, "print(1)"),
        }
        wait_until(lambda: queued(sid, len(calls)), 60, f"{len(calls)} calls queued behind the exec")
        d = delete_session(sid)
        results = {k: f.result(timeout=120) for k, f in calls.items()}
        first = first.result(timeout=120)
    check(d, 200, RELEASED)
    check(first, 404, GONE)
    for k, r in results.items():
        if k == "reset":
            check(r, 200, RESET_GONE)
        else:
            check(r, 404, GONE)
    assert_all_gone([sid])


def test_reset_inputs_racing_delete():
    sid = create_session()
    write(sid, "uploads/u.txt")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        reset = pool.submit(reset_inputs, sid)
        d = pool.submit(delete_session, sid)
        reset, d = reset.result(timeout=60), d.result(timeout=60)
    check(d, 200, RELEASED)
    assert (reset.status, reset.json) in ((200, RESET_OK), (200, RESET_GONE)), reset
    assert_all_gone([sid])


def test_delete_racing_an_exec_that_writes_is_not_archived_torn():
    """A session released while its code still writes: the exec is stopped first (no process of
    it left), then the workspace as it was then is archived (nothing writes while the archive is
    made), and no staging file is left behind."""
    prefix = f"secsuite-races-{secrets.token_hex(4)}"
    storage = {"provider": "local", "prefix": prefix + "/"}
    sid = create_session(archive_key="racing_archive", storage=storage)
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            ex = pool.submit(exec_request, sid, "import os, time\n"
                                                "for i in range(100):\n"
                                                "    open('/workspace/f%03d' % i, 'w').write('x' * 10000)\n"
                                                "    time.sleep(0.1)\n")
            # Released once the code has written a few files and while it still writes (10 s).
            wait_until(lambda: workspace_has(sid, "f002"), 60, "the code to have written f002")
            d = delete_session(sid)
            e = ex.result(timeout=120)
        check(d, 200, {"ok": True, "archive": "stored"})
        check(e, 404, GONE)
        assert_all_gone([sid])
        path = f"{ROOT}/{prefix}/workspaces/racing_archive.tgz"
        with tarfile.open(path, "r:gz") as t:
            members = sorted((m for m in t.getmembers() if m.name.startswith("./f")), key=lambda m: m.name)
        # What the code had written when it was stopped: its first files, each whole but the last.
        assert [m.name for m in members] == [f"./f{i:03d}" for i in range(len(members))], members
        assert 0 < len(members) < 100 and all(m.size == 10000 for m in members[:-1]), members
        assert [f for _, _, fs in os.walk(f"{ROOT}/{prefix}") for f in fs] == ["racing_archive.tgz"]
        log = in_system("journalctl", "-o", "cat", "--no-pager", f"SCOPEBOX_SESSION_ID={sid}").stdout
        assert "was stopped: its session is released." in log, log
    finally:
        shutil.rmtree(f"{ROOT}/{prefix}", ignore_errors=True)


# File calls racing an exec on the same files.

WRITER = ("import json, os, time\n"
          "p = '/workspace/uploads/race.txt'\n"
          "start = open(p).read() if os.path.exists(p) else None\n"
          "deadline = time.monotonic() + 1\n"
          "i = 0\n"
          "while time.monotonic() < deadline:\n"
          "    with open(p, 'w') as f:\n"
          "        f.write('exec-%d' % i)\n"
          "        f.flush()\n"
          "        f.write(' still writing')\n"
          "    i += 1\n"
          "open(p, 'w').write('exec-final')\n"
          "print(json.dumps(start))\n")


@pytest.mark.parametrize("upload_first", [True, False])
def test_upload_racing_an_exec_writing_the_same_file(session, upload_first):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        if upload_first:
            # The exec is sent once the whole upload has been: it races the upload's handling.
            up = pool.submit(start_request("POST", "/files", {
                "session_id": session, "path": "uploads/race.txt",
                "data_base64": base64.b64encode(b"uploaded").decode()}))
            ex = pool.submit(exec_request, session, WRITER)
        else:
            ex = pool.submit(exec_request, session, WRITER)
            wait_until(lambda: exec_running(session) or ex.done(), 60, "the exec to run")
            up = pool.submit(write, session, "uploads/race.txt", b"uploaded")
        reads = [pool.submit(read, session, "uploads/race.txt") for _ in range(5)]
        up, ex = up.result(timeout=120), ex.result(timeout=120)
        reads = [f.result(timeout=120) for f in reads]
    check(up, 200, {"ok": True})
    assert ex.status == 200 and ex.json["exit_code"] == 0, ex
    start = json.loads(ex.json["stdout"])
    final = content_of(read(session, "uploads/race.txt"))
    # Either the upload came first and the exec found it, or it came after the whole exec; an
    # upload sent while the exec runs waits for all of it.
    outcomes = (("uploaded", b"exec-final"), (None, b"uploaded")) if upload_first else ((None, b"uploaded"),)
    assert (start, final) in outcomes, (start, final)
    # No read saw the exec at work.
    for r in reads:
        assert (r.status == 404 and r.json == {"detail": "file not found"}) or \
            content_of(r) in (b"uploaded", b"exec-final"), r


def test_reads_never_see_an_exec_at_work(session):
    code = ("import time\n"
            "deadline = time.monotonic() + 3\n"
            "while time.monotonic() < deadline:\n"
            "    with open('/workspace/outputs/log.txt', 'w') as f:\n"
            "        f.write('partial'); f.flush(); f.write(' and more')\n"
            "open('/workspace/outputs/log.txt', 'w').write('final')\n")
    with concurrent.futures.ThreadPoolExecutor(13) as pool:
        ex = pool.submit(exec_request, session, code)
        wait_until(lambda: exec_running(session) or ex.done(), 60, "the exec to run")
        reads, lists = [], []
        for _ in range(6):
            reads.append(pool.submit(read, session, "outputs/log.txt"))
            lists.append(pool.submit(request, "POST", "/files/list", {"session_id": session}))
        # They all came while the exec was at work.
        wait_until(lambda: queued(session, 12) or ex.done(), 60, "the file calls queued behind the exec")
        assert not ex.done(), "the exec ended before the file calls were queued behind it"
        ex = ex.result(timeout=120)
        reads = [f.result(timeout=120) for f in reads]
        lists = [f.result(timeout=120) for f in lists]
    assert ex.status == 200 and ex.json["exit_code"] == 0, ex
    for r in reads:
        assert content_of(r) == b"final", r
    for r in lists:
        assert (r.status, r.json) == (200, {"files": [{"path": "outputs/log.txt", "size": 5}]}), r


def test_parallel_uploads_to_one_path(session):
    payloads = [bytes([i]) * (256 * 1024) for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: write(session, "uploads/same.bin", p), payloads))
    assert [(r.status, r.json) for r in results] == [(200, {"ok": True})] * 8, results
    assert content_of(read(session, "uploads/same.bin")) in payloads
    # One file, whole, and no temporary file left beside it.
    assert listing(session) == [{"path": "uploads/same.bin", "size": 256 * 1024}]
    got = run(session, "import os\nprint(os.listdir('/workspace/uploads'))")
    assert got["stdout"] == "['same.bin']\n", got


def test_reset_inputs_racing_an_exec_filling_uploads(session):
    code = ("import os, time\n"
            "for i in range(200):\n"
            "    open('/workspace/uploads/f%03d' % i, 'w').write('x')\n"
            "    if i % 20 == 0: time.sleep(0.3)\n"
            "print(len(os.listdir('/workspace/uploads')))\n")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        ex = pool.submit(exec_request, session, code)
        wait_until(lambda: exec_running(session) or ex.done(), 60, "the exec to run")
        reset = pool.submit(reset_inputs, session)
        wait_until(lambda: queued(session, 1) or ex.done(), 60, "the reset queued behind the exec")
        assert not ex.done(), "the exec ended before the reset was queued behind it"
        up = pool.submit(write, session, "uploads/new.txt", b"new")
        ex, reset, up = ex.result(timeout=120), reset.result(timeout=120), up.result(timeout=120)
    assert ex.status == 200 and ex.json["stdout"] == "200\n", ex  # the exec had them all
    check(reset, 200, RESET_OK)
    check(up, 200, {"ok": True})
    names = [f["path"] for f in listing(session)]
    # Whole operations in the order they were queued: the exec, the reset, the upload; never a
    # half-emptied directory.
    assert names == ["uploads/new.txt"], names
    got = run(session, "import os\nprint(os.path.isdir('/workspace/uploads'), os.path.islink('/workspace/uploads'),\n"
                       "      os.stat('/workspace/uploads').st_uid)")
    assert got["stdout"] == "True False 1000\n", got


# Storms.

def cycle(i):
    sid = create_session()
    uid = session_uid(sid)
    if i % 3 == 0:
        assert run(sid, "print(1)")["stdout"] == "1\n"
    if i % 5 == 0:
        check(write(sid, "uploads/x.txt", b"x"), 200, {"ok": True})
    check(delete_session(sid), 200, RELEASED)
    return sid, uid


def test_create_delete_storm():
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        uids = dict(pool.map(cycle, range(50)))
    sids = list(uids)
    assert len(sids) == 50
    # Sessions alive at the same time never share a host uid (at most 4 at once here, and the
    # pool hands ids round instead of reusing them at once: all 50 differ).
    assert len(set(uids.values())) == 50, uids
    assert_all_gone(sids, uids)
    for sid in sids:
        check(exec_request(sid, "print(1)"), 404, GONE)


# When each cycle's DELETE is sent, in turn: as in EXEC_PHASES (the short exec may end before
# the manager is seen running it or the code writing), and after the exec's answer.
CYCLE_PHASES = {
    "at-once": lambda sid, ex: True,
    "accepted": lambda sid, ex: ex.done() or accepted(sid),
    "running": lambda sid, ex: ex.done() or exec_running(sid),
    "in-the-code": lambda sid, ex: ex.done() or workspace_has(sid, "started"),
    "answered": lambda sid, ex: ex.done(),
}


def racing_cycle(i):
    phase = list(CYCLE_PHASES)[i % len(CYCLE_PHASES)]
    sid = create_session()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        ex = pool.submit(exec_request, sid, "import time\nopen('/workspace/started', 'w').close()\n"
                                            "time.sleep(0.3)\nprint('done')\n")
        wait_until(lambda: CYCLE_PHASES[phase](sid, ex), 60, f"the exec to be {phase}")
        d = pool.submit(delete_session, sid)
        ex, d = ex.result(timeout=120), d.result(timeout=120)
    check(d, 200, RELEASED)
    ok = ex.status == 200 and ex.json["stdout"] == "done\n" and ex.json["exit_code"] == 0
    if phase == "answered":
        assert ok, ex
    else:
        assert ok or (ex.status, ex.json) == (404, GONE), ex
    return sid


def test_exec_and_delete_storm():
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        sids = list(pool.map(racing_cycle, range(20)))
    assert_all_gone(sids)
