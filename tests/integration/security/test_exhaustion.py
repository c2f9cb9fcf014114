# SPDX-License-Identifier: LGPL-2.1-or-later
"""Resource exhaustion by user code through POST /exec: processes, threads, memory, disk
space, inodes, descriptors, output volume, survivors and CPU. Each case asserts the limit's
exact symptom (errno name, exit code, COMPAT's truncation or timeout text), that nothing the
code started outlives its exec (seen from inside and from the host), and that the session is
still usable afterwards; the suite's invariants check the service and a sibling session."""
import concurrent.futures
import secrets
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import in_system, run, session  # noqa: F401 (fixture)

SIGKILL = 9
TASKS_MAX = 256
OUTPUT_CAP = 32768
STDOUT_MARK = "\n... [truncated, stdout exceeded 32KB]"
STDERR_MARK = "\n... [truncated, stderr exceeded 32KB]"

# Lists what of the exec is left: the processes /proc shows besides the probe itself, and
# whether it can still fork.
LEFTOVERS = r'''
import os, subprocess
me = os.getpid()
others = []
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != me:
        try:
            others.append(open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip())
        except OSError:
            pass
print(sorted(others), subprocess.run(["/bin/echo", "forked"], capture_output=True, text=True).stdout.strip())
'''


def assert_clean(sid):
    """The session answers, no process of an earlier exec is visible, and fork works."""
    res = run(sid, LEFTOVERS)
    assert res["exit_code"] == 0 and res["stdout"] == "[] forked\n", res


def assert_gone_on_host(marker):
    """No process in the whole system (seen from the service's systemd) carries marker."""
    pattern = "[" + marker[0] + "]" + marker[1:]  # never matches pgrep's own command line
    r = in_system("pgrep", "-f", pattern)
    assert r.returncode == 1 and r.stdout == "", r


def test_fork_bomb_hits_the_task_limit(session, sibling):
    """Every process forks until the scope's TasksMax refuses (EAGAIN); the exec ends when the
    first one gives up, and takes the whole tree with it."""
    code = '''
import os, time, errno
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(errno.errorcode[e.errno], n <= %d, flush=True)
        break
    if pid == 0:
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.05)
    n += 1
''' % TASKS_MAX
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(run, session, code, 30000)
        time.sleep(1)
        assert run(sibling, "print(6 * 7)")["stdout"] == "42\n"
        res = bomb.result(timeout=90)
    assert res["exit_code"] == 0 and res["stdout"] == "EAGAIN True\n", res
    assert_clean(session)


def test_thread_bomb_hits_the_task_limit(session):
    res = run(session, '''
import threading
ev = threading.Event()
threads = []
try:
    while True:
        t = threading.Thread(target=ev.wait)
        t.start()
        threads.append(t)
except RuntimeError as e:
    print(e, 0 < len(threads) < %d)
ev.set()
for t in threads:
    t.join()
''' % TASKS_MAX, timeout_ms=30000)
    assert res["exit_code"] == 0 and res["stdout"] == "can't start new thread True\n", res
    assert_clean(session)


def test_memory_bomb_is_stopped_at_the_scope_limit(session):
    """Allocating (and touching) far more than MemoryMax ends in the OOM kill or MemoryError,
    never in a host OOM, and the session goes on."""
    res = run(session, '''
print("start", flush=True)
chunks = []
while True:
    chunks.append(bytearray(b"\\1") * (64 << 20))
''', timeout_ms=120000)
    assert res["exit_code"] in (128 + SIGKILL, 1), res
    if res["exit_code"] == 1:
        assert res["stderr"].rstrip().endswith("MemoryError"), res
    assert res["stdout"] == "start\n", res
    assert_clean(session)


def test_memory_spread_over_processes_is_bounded_together(session):
    """Four children of 768 MiB each fit under no per-process limit but exceed the session's
    MemoryMax together: at least one of them is killed (SIGKILL) or gets MemoryError."""
    res = run(session, '''
import os
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(b"\\1") * (768 << 20)
            import time; time.sleep(3)
            os._exit(0)
        except MemoryError:
            os._exit(3)
    kids.append(pid)
print(sorted(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids))
''', timeout_ms=60000)
    assert res["exit_code"] == 0, res
    codes = eval(res["stdout"])
    assert any(c in (-SIGKILL, 3) for c in codes), codes
    assert_clean(session)


@pytest.mark.parametrize("where", ["/workspace", "/tmp", "/home/sandbox", "/dev/shm"])
def test_disk_fill_gives_enospc_and_the_session_recovers(session, where):
    res = run(session, f'''
import os, errno
fd = os.open("{where}/fill", os.O_WRONLY | os.O_CREAT)
chunk = b"\\0" * (4 << 20)
written = 0
try:
    while True:
        written += os.write(fd, chunk)
except OSError as e:
    print(errno.errorcode[e.errno], written > 32 << 20)
''', timeout_ms=60000)
    assert res["exit_code"] == 0 and res["stdout"] == "ENOSPC True\n", res
    # Still full: code runs, a small write fails; after deleting, writing works again.
    res = run(session, f'''
import os, errno
path = "{where}/fill"
try:
    with open("{where}/more", "wb") as f:
        f.write(b"x" * (1 << 20))
    print("written")
except OSError as e:
    print(errno.errorcode[e.errno])
if os.path.exists(path):
    os.unlink(path)
with open("{where}/after", "wb") as f:
    f.write(b"y" * (1 << 20))
print(os.path.getsize("{where}/after"))
''')
    shm = where == "/dev/shm"  # a fresh tmpfs per exec: nothing carries over
    assert res["exit_code"] == 0, res
    assert res["stdout"] == ("written\n" if shm else "ENOSPC\n") + "1048576\n", res


@pytest.mark.parametrize("where", ["/workspace", "/tmp"])
def test_inode_bomb_gives_enospc_and_the_session_recovers(session, where):
    res = run(session, f'''
import os, errno
os.mkdir("{where}/inodes")
n = 0
try:
    while True:
        os.close(os.open(f"{where}/inodes/{{n}}", os.O_WRONLY | os.O_CREAT))
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n > 1000)
''', timeout_ms=60000)
    assert res["exit_code"] == 0 and res["stdout"] == "ENOSPC True\n", res
    res = run(session, f'''
import os, shutil
shutil.rmtree("{where}/inodes")
for i in range(100):
    open(f"{where}/f{{i}}", "w").close()
print(len([f for f in os.listdir("{where}") if f.startswith("f")]))
''', timeout_ms=60000)
    assert res["exit_code"] == 0 and res["stdout"] == "100\n", res


def test_fd_bomb_hits_emfile_at_the_rlimit(session):
    res = run(session, '''
import errno, resource
fds = []
try:
    while True:
        fds.append(open("/dev/null"))
except OSError as e:
    print(errno.errorcode[e.errno], 1000 < len(fds) < 1024)
print(resource.getrlimit(resource.RLIMIT_NOFILE))
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    print("raised")
except (ValueError, OSError) as e:
    print(type(e).__name__)
''')
    assert res["exit_code"] == 0 and res["stdout"] == "EMFILE True\n(1024, 1024)\nValueError\n", res


def test_one_gigabyte_of_stdout_is_cut_at_the_cap(session):
    res = run(session, '''
import sys
chunk = b"x" * (1 << 20)
for _ in range(1024):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
print("done", file=sys.stderr)
''', timeout_ms=120000)
    assert res["exit_code"] == 0, res
    assert res["stdout"] == "x" * OUTPUT_CAP + STDOUT_MARK, res["stdout"][-100:]
    assert res["stderr"] == "done\n", res


def test_huge_single_line_on_stderr_is_cut_at_the_cap(session):
    res = run(session, '''
import sys
chunk = b"y" * (1 << 20)
for _ in range(256):
    sys.stderr.buffer.write(chunk)
print("done")
''', timeout_ms=120000)
    assert res["exit_code"] == 0, res
    assert res["stderr"] == "y" * OUTPUT_CAP + STDERR_MARK, res["stderr"][-100:]
    assert res["stdout"] == "done\n", res


def test_stdout_and_stderr_flooded_at_once(session):
    """Both pipes are drained together: a full stderr pipe cannot stall stdout or the exec."""
    res = run(session, '''
import os, threading
def flood(fd, byte):
    chunk = byte * (1 << 16)
    for _ in range(1024):
        os.write(fd, chunk)
t = threading.Thread(target=flood, args=(2, b"e"))
t.start()
flood(1, b"o")
t.join()
''', timeout_ms=120000)
    assert res["exit_code"] == 0, res
    assert res["stdout"] == "o" * OUTPUT_CAP + STDOUT_MARK
    assert res["stderr"] == "e" * OUTPUT_CAP + STDERR_MARK


def test_daemon_that_ignores_sigterm_is_gone_by_the_next_exec(session):
    """Double fork, setsid, stdio closed, SIGTERM/SIGHUP/SIGINT ignored: the classic daemon
    does not survive the exec that started it."""
    marker = "scopebox-daemon-" + secrets.token_hex(8)
    res = run(session, f'''
import os, signal, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execv(sys.executable, [sys.executable, "-c",
                 "import signal as s, time\\n"
                 "for n in (s.SIGTERM, s.SIGHUP, s.SIGINT): s.signal(n, s.SIG_IGN)\\n"
                 "time.sleep(600)", "{marker}"])
    os._exit(0)
os.wait()
print("spawned")
''')
    assert res["exit_code"] == 0 and res["stdout"] == "spawned\n", res
    assert_clean(session)
    assert_gone_on_host(marker)


def test_background_sleeps_are_gone_by_the_next_exec(session):
    """Plain, setsid'd with an empty environment (drops any marker a sweep could look for), and
    nohup'd from a shell."""
    marker = f"4{secrets.randbelow(10 ** 6):06d}.5"
    res = run(session, f'''
import subprocess
subprocess.Popen(["sleep", "{marker}"])
subprocess.Popen(["/usr/bin/sleep", "{marker}"], start_new_session=True, env={{}},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.run(["/bin/sh", "-c", "nohup sleep {marker} >/dev/null 2>&1 &"])
print("spawned")
''')
    assert res["exit_code"] == 0 and res["stdout"] == "spawned\n", res
    assert_clean(session)
    assert_gone_on_host("sleep " + marker)


def test_background_child_holding_the_output_pipe_does_not_hold_the_exec(session):
    """The exec ends with its payload, not with the last holder of its stdout."""
    res = run(session, '''
import subprocess
subprocess.Popen(["sleep", "300"])
print("done")
''', timeout_ms=20000)
    assert res["exit_code"] == 0 and res["stdout"] == "done\n", res
    assert_clean(session)


def test_busy_loop_is_killed_at_the_timeout(session):
    res = run(session, '''
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGALRM):
    signal.signal(s, signal.SIG_IGN)
print("start", flush=True)
while True:
    pass
''', timeout_ms=1000)
    assert res["exit_code"] == 124, res
    assert res["stdout"] == "start\n", res
    assert res["stderr"] == "\n[sandbox] execution exceeded 1.000s and was killed", res
    assert_clean(session)


def test_timeout_kills_the_whole_tree(session):
    """Setsid'd children busy-looping and a stopped payload are all killed at timeout_ms; the
    text names the effective timeout."""
    marker = "scopebox-tree-" + secrets.token_hex(8)
    res = run(session, f'''
import os, signal, subprocess, sys
for _ in range(3):
    subprocess.Popen([sys.executable, "-c", "while True: pass", "{marker}"], start_new_session=True)
print("stopping", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
''', timeout_ms=1500)
    assert res["exit_code"] == 124, res
    assert res["stdout"] == "stopping\n", res
    assert res["stderr"] == "\n[sandbox] execution exceeded 1.500s and was killed", res
    assert_clean(session)
    assert_gone_on_host(marker)


def test_cpu_burn_in_many_threads_does_not_starve_a_sibling(session, sibling):
    """Sixteen threads hashing without the GIL run into the timeout; meanwhile another session
    keeps answering."""
    code = '''
import hashlib, threading
data = b"x" * (8 << 20)
def burn():
    while True:
        hashlib.sha256(data).digest()
for _ in range(16):
    threading.Thread(target=burn, daemon=True).start()
print("burning", flush=True)
threading.Event().wait()
'''
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        burn = pool.submit(run, session, code, 5000)
        time.sleep(1)
        answers = [run(sibling, "print(sum(range(10)))")["stdout"] for _ in range(3)]
        res = burn.result(timeout=60)
    assert answers == ["45\n"] * 3, answers
    assert res["exit_code"] == 124 and res["stdout"] == "burning\n", res
    assert res["stderr"] == "\n[sandbox] execution exceeded 5.000s and was killed", res


def test_orphaned_zombies_are_reaped_inside_the_sandbox(session):
    """Twice TasksMax grandchildren are orphaned and exit: the sandbox's PID 1 reaps them, so
    they never add up to the task limit."""
    res = run(session, '''
import os
n = 0
for _ in range(%d):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    n += 1
print(n)
''' % (2 * TASKS_MAX), timeout_ms=60000)
    assert res["exit_code"] == 0 and res["stdout"] == f"{2 * TASKS_MAX}\n", res
    assert_clean(session)


def test_zombie_storm_of_unreaped_children_is_cleaned_up(session):
    """Children that exit and are never waited for fill the task limit (EAGAIN); they vanish
    with the exec."""
    res = run(session, '''
import errno, os
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print(errno.errorcode[e.errno], 0 < n < %d)
        break
    if pid == 0:
        os._exit(0)
    n += 1
zombies = sum(1 for p in os.listdir("/proc") if p.isdigit() and
              open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
print(zombies > 0)
''' % TASKS_MAX, timeout_ms=30000)
    assert res["exit_code"] == 0 and res["stdout"] == "EAGAIN True\nTrue\n", res
    assert_clean(session)


def test_code_cannot_exempt_itself_from_the_oom_killer(session):
    res = run(session, '''
import errno
def write(value):
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(value)
        return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]
print(open("/proc/self/oom_score_adj").read().strip(), write("-1000"), write("1000"))
''')
    assert res["exit_code"] == 0, res
    before, lower, higher = res["stdout"].split()
    assert int(before) >= 0 and lower == "EACCES" and higher == "OK", res
