# SPDX-License-Identifier: LGPL-2.1-or-later
"""Information leaks, probed by user code through POST /exec: host files and sockets, the
service's secrets (the API key, the canary), other sessions' files, processes and IPC objects,
the sandbox's own PID 1, the environment, kernel and host details. Secrets the code searches
for are handed to it masked (XOR with a random pad), so the cell file never holds them and a
hit can only come from where the test looks."""
import concurrent.futures
import json
import os
import secrets
import socket
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import api_key, create_session, delete_session, in_system, run, session  # noqa: F401


def probe_json(sid, code, timeout_ms=30000):
    """Run code whose last stdout line is JSON; it must exit 0 with an empty stderr."""
    res = run(sid, "import json, os\n" + code, timeout_ms=timeout_ms)
    assert res["exit_code"] == 0 and res["stderr"] == "", res
    return json.loads(res["stdout"].splitlines()[-1])


def masked(secret):
    """A Python expression that rebuilds the secret's bytes at run time."""
    raw = secret.encode()
    pad = secrets.token_bytes(len(raw))
    mix = bytes(a ^ b for a, b in zip(raw, pad))
    return f"bytes(a ^ b for a, b in zip(bytes.fromhex({mix.hex()!r}), bytes.fromhex({pad.hex()!r})))"


# Searches the places user code can read for NEEDLE (bytes) and prints the paths that hold it:
# every file below the given trees (not following links), and environ/cmdline/status/mountinfo
# of every visible process.
SEARCH = r'''
def search(needle, trees, names_only=()):
    hits = []
    def scan(path):
        try:
            with open(path, "rb") as f:
                if needle in f.read(64 << 20):
                    hits.append(path)
        except OSError:
            pass
    for top in trees:
        for d, subdirs, files in os.walk(top):
            for name in files:
                scan(os.path.join(d, name))
    for top in names_only:
        for d, subdirs, files in os.walk(top):
            if d == "/proc":
                subdirs[:] = []
            for name in subdirs + files:
                if needle in os.fsencode(name):
                    hits.append(os.path.join(d, name))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]:
        for f in ("environ", "cmdline", "status", "mountinfo", "cgroup", "comm"):
            scan(f"/proc/{pid}/{f}")
    for f in ("/proc/cmdline", "/proc/mounts", "/proc/1/environ", "/proc/1/cmdline"):
        scan(f)
    return hits
'''

READABLE_TREES = ("/etc", "/exec", "/workspace", "/tmp", "/home", "/dev/shm")

HOST_PATHS = [
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/ssh",
    "/etc/machine-id",
    "/etc/scopebox",
    "/etc/scopebox/api-key",
    "/var/lib/scopebox",
    "/run/dbus/system_bus_socket",
    "/run/systemd/journal/socket",
    "/run/systemd/private",
    "/run/credentials",
    "/dev/log",
    "/root",
    "/var/log",
    "/srv",
]


@pytest.mark.parametrize("path", HOST_PATHS)
def test_host_path_is_absent(session, path):
    out = probe_json(session, f'''
try:
    os.lstat({path!r}); r = "PRESENT"
except OSError as e:
    import errno; r = errno.errorcode[e.errno]
print(json.dumps(r))
''')
    assert out == "ENOENT"


def test_canary_files_are_absent_and_their_secret_is_nowhere(session, canary):
    out = probe_json(session, SEARCH + f'''
absent = all(not os.path.lexists(p) for p in {canary.paths!r})
control = search(b"nobody:x:" + b"65534", {READABLE_TREES!r})  # split: not in this cell
print(json.dumps({{"absent": absent, "control": control,
                  "hits": search({masked(canary.secret)}, {READABLE_TREES!r}, ("/",))}}))
''', timeout_ms=60000)
    assert out == {"absent": True, "control": ["/etc/passwd"], "hits": []}, out


def test_api_key_is_nowhere_the_code_can_read(session):
    """Not in any visible process's environ or cmdline, /etc, the mount table, the kernel
    command line or the session's own trees."""
    out = probe_json(session, SEARCH + f'''
print(json.dumps(search({masked(api_key())}, {READABLE_TREES!r})))
''', timeout_ms=60000)
    assert out == [], out


CURATED_ETC = {"passwd", "group", "hosts", "hostname", "nsswitch.conf", "localtime", "ld.so.cache",
               "alternatives", "fonts", "mime.types", "protocols", "services", "matplotlibrc"}


def test_etc_holds_only_the_curated_files(session):
    out = probe_json(session, '''
print(json.dumps({"etc": sorted(os.listdir("/etc")),
                  "passwd": [l.split(":")[:2] for l in open("/etc/passwd").read().splitlines()],
                  "group": [l.split(":")[0] for l in open("/etc/group").read().splitlines()],
                  "hosts": [l.split()[0] for l in open("/etc/hosts").read().splitlines() if l.strip()]}))
''')
    assert set(out["etc"]) <= CURATED_ETC, sorted(set(out["etc"]) - CURATED_ETC)
    assert {"passwd", "group", "hosts", "nsswitch.conf", "localtime", "ld.so.cache"} <= set(out["etc"]), out
    assert out["passwd"] == [["root", "x"], ["sandbox", "x"], ["nobody", "x"]], out
    assert sorted(out["group"]) == ["nogroup", "root", "sandbox"], out
    assert out["hosts"] == ["127.0.0.1", "::1"], out


def test_another_sessions_files_are_invisible():
    """Session A leaves a secret in every writable place; session B searches its whole tree for
    the name and its readable trees for the content."""
    secret = "LEAK-" + secrets.token_hex(16)
    a, b = create_session(), create_session()
    try:
        res = run(a, f'''
import os
for d in ("/workspace", "/workspace/outputs", "/tmp", "/home/sandbox"):
    with open(os.path.join(d, "{secret}.txt"), "w") as f:
        f.write("{secret}")
print("planted")
''')
        assert res["stdout"] == "planted\n", res
        out = probe_json(b, SEARCH + f'''
print(json.dumps(search({masked(secret)}, {READABLE_TREES!r}, ("/",))))
''', timeout_ms=60000)
        assert out == [], out
        # A still sees its own files: the search would have found them.
        res = run(a, f"import os\nprint(sorted(os.listdir('/tmp')).count('{secret}.txt'))")
        assert res["stdout"] == "1\n", res
    finally:
        delete_session(a)
        delete_session(b)


HOLDER = r'''
import ctypes, os, subprocess, sys, time
SECRET = "{secret}"
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shm = libc.shmget({key}, 4096, 0o1666)           # IPC_CREAT | 0666
ctypes.memmove(libc.shmat(shm, None, 0), SECRET.encode(), len(SECRET))
mq = libc.msgget({key}, 0o1666)
with open("/dev/shm/" + SECRET, "w") as f:
    f.write(SECRET)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", SECRET],
                         env={{"LEAK": SECRET}})
print(time.time(), shm >= 0, mq >= 0, flush=True)
time.sleep({hold})
print(time.time())
child.kill()
'''


def test_another_sessions_processes_and_ipc_are_invisible():
    """While session A runs a process with a secret in its argv and environment and holds a
    SysV shared memory segment, a message queue and a /dev/shm file, session B sees none of
    them: only its own processes, no IPC objects under A's key."""
    secret = "LEAK-" + secrets.token_hex(16)
    key = secrets.randbelow(1 << 30) + 1
    a, b = create_session(), create_session()
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            holder = pool.submit(run, a, HOLDER.format(secret=secret, key=key, hold=6), 30000)
            time.sleep(2.5)
            out = probe_json(b, SEARCH + f'''
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
found = search({masked(secret)}, ("/dev/shm", "/tmp", "/workspace"), ("/",))
shm = libc.shmget({key}, 0, 0); shm_errno = ctypes.get_errno()
mq = libc.msgget({key}, 0); mq_errno = ctypes.get_errno()
ipc = [len(open("/proc/sysvipc/" + n).read().splitlines()) - 1 for n in ("shm", "msg", "sem")]
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({{"t": time.time(), "hits": found, "shm": [shm, shm_errno], "mq": [mq, mq_errno],
                  "ipc": ipc, "pids": pids, "me": os.getpid()}}))
''')
            held = holder.result(timeout=60)
        assert held["exit_code"] == 0, held
        start, ok_shm, ok_mq = held["stdout"].split("\n")[0].split()
        end = float(held["stdout"].split("\n")[1])
        assert ok_shm == "True" and ok_mq == "True", held
        assert float(start) < out["t"] < end, "B's search did not overlap A's lifetime"
        assert out["hits"] == [], out
        assert out["shm"] == [-1, 2] and out["mq"] == [-1, 2], out  # ENOENT
        assert out["ipc"] == [0, 0, 0], out
        assert set(out["pids"]) <= {1, out["me"]}, out
    finally:
        delete_session(a)
        delete_session(b)


def test_sessions_run_under_distinct_host_uids():
    """Inside, every payload is uid 1000; on the host each session has a uid of its own (not 0,
    not shared), so kill, ptrace, /proc and file access between sessions fail even if a
    namespace were misconfigured."""
    marks = {}
    sessions = [create_session(), create_session()]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = []
            for sid in sessions:
                marks[sid] = "scopebox-uid-" + secrets.token_hex(8)
                code = ("import os, subprocess, sys\n"
                        "subprocess.run([sys.executable, '-c', 'import time; time.sleep(4)', "
                        f"'{marks[sid]}'])\n"
                        "print(os.getuid())\n")
                futures.append(pool.submit(run, sid, code, 30000))
            time.sleep(2)
            ps = in_system("ps", "-eo", "uid=,args=").stdout
            results = [f.result(timeout=60) for f in futures]
        assert [r["stdout"] for r in results] == ["1000\n", "1000\n"], results
        host_uids = {}
        for line in ps.splitlines():
            uid, _, args = line.strip().partition(" ")
            for sid, mark in marks.items():
                if mark in args:
                    host_uids[sid] = int(uid)
        assert len(host_uids) == 2, ps
        a, b = (host_uids[s] for s in sessions)
        assert a != b, host_uids
        assert 0 not in (a, b) and 1000 not in (a, b), host_uids
    finally:
        for sid in sessions:
            delete_session(sid)


def test_proc_shows_only_the_sandbox(session):
    """A fresh PID namespace with its own procfs: the payload and its children only, a single
    NSpid level, and no host process name anywhere. The payload's parent is the sandbox's PID 1
    (cold), or the template's child outside the namespace, which it cannot see (getppid() 0)."""
    out = probe_json(session, '''
import subprocess, time
child = subprocess.Popen(["sleep", "10"])
# Popen returns once the exec closed its pipe, which the kernel does just before it renames the
# process: wait for the name (at most 2 s) rather than catch the child between the two.
for _ in range(200):
    if open(f"/proc/{child.pid}/comm").read().strip() == "sleep":
        break
    time.sleep(0.01)
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
comms = {}
for p in pids:
    try:
        comms[p] = open(f"/proc/{p}/comm").read().strip()
    except OSError:
        comms[p] = None
nspid = [l.split()[1:] for l in open("/proc/self/status").read().splitlines() if l.startswith("NSpid:")][0]
print(json.dumps({"pids": pids, "comms": sorted(c for c in comms.values() if c), "me": os.getpid(),
                  "ppid": os.getppid(), "child": child.pid, "nspid": nspid}))
child.kill()
''')
    assert set(out["pids"]) <= {1, out["me"], out["child"]}, out
    assert {out["me"], out["child"]} <= set(out["pids"]), out
    assert out["comms"] == ["python3", "sleep"] or out["comms"] == ["python3", "sandbox-init", "sleep"], out
    assert out["ppid"] in (0, 1) and out["nspid"] == [str(out["me"])], out


def test_sandbox_init_environ_and_cmdline_hold_nothing(session):
    out = probe_json(session, '''
res = {}
for f in ("environ", "cmdline", "maps", "mem"):
    try:
        with open("/proc/1/" + f, "rb") as fh:
            data = fh.read(4096)
        res[f] = "EMPTY" if not data else "READ"
    except OSError as e:
        import errno; res[f] = errno.errorcode[e.errno]
print(json.dumps(res))
''')
    for f, r in out.items():
        assert r in ("ENOENT", "EACCES", "EPERM", "ESRCH", "EMPTY"), (f, r)


DOCUMENTED_ENV = {"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "PYTHONUNBUFFERED",
                  "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "MPLBACKEND", "MPLCONFIGDIR",
                  "OPENBLAS_NUM_THREADS"}


def test_environment_holds_exactly_the_documented_keys(session):
    out = probe_json(session, '''
import subprocess
raw = open("/proc/self/environ", "rb").read().split(b"\\0")
child = subprocess.run(["/usr/bin/env"], capture_output=True, text=True).stdout.splitlines()
print(json.dumps({"own": sorted(k.split(b"=")[0].decode() for k in raw if k),
                  "child": sorted(l.split("=")[0] for l in child),
                  "values": {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR", "LANG",
                                                         "PYTHONUNBUFFERED")}}))
''')
    assert set(out["own"]) == DOCUMENTED_ENV, sorted(set(out["own"]) ^ DOCUMENTED_ENV)
    assert set(out["child"]) == DOCUMENTED_ENV, sorted(set(out["child"]) ^ DOCUMENTED_ENV)
    assert out["values"] == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/sandbox",
                             "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}, out


def test_only_stdio_descriptors_are_inherited(session):
    """No descriptor of the runner or the service reaches the code; stdin is /dev/null."""
    out = probe_json(session, '''
import stat
open_fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd); open_fds.append(fd)
    except OSError:
        pass
s = os.fstat(0)
print(json.dumps({"extra": open_fds,
                  "stdin": [stat.S_ISCHR(s.st_mode), os.major(s.st_rdev), os.minor(s.st_rdev)],
                  "stdout": stat.S_ISFIFO(os.fstat(1).st_mode),
                  "stderr": stat.S_ISFIFO(os.fstat(2).st_mode)}))
''')
    assert out == {"extra": [], "stdin": [True, 1, 3], "stdout": True, "stderr": True}, out


def test_host_abstract_unix_sockets_are_unreachable(session):
    """The sandbox has its own network namespace, so abstract sockets listening on the host
    (ours, and every other the host has) cannot be reached or even seen."""
    name = "scopebox-suite-" + secrets.token_hex(8)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(8)
    listener.setblocking(False)
    host = sorted({l.split()[-1][1:] for l in open("/proc/net/unix").read().splitlines()[1:]
                   if l.split()[-1].startswith("@") and len(l.split()) == 8})[:30]
    try:
        out = probe_json(session, f'''
import socket, errno
names = {[name] + [n for n in host if n != name]!r}
res = {{}}
for n in names:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\\0" + n); res[n] = "CONNECTED"
    except OSError as e:
        res[n] = errno.errorcode[e.errno]
    s.close()
visible = open("/proc/net/unix").read()
print(json.dumps({{"res": res, "visible": [n for n in names if n in visible]}}))
''')
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert out["res"][name] == "ECONNREFUSED", out
    assert set(out["res"].values()) == {"ECONNREFUSED"}, out
    assert out["visible"] == [], out


def test_hostname_and_cgroup_paths_are_the_sandboxes(session):
    out = probe_json(session, '''
import socket
print(json.dumps({"hostname": socket.gethostname(), "uname": os.uname().nodename,
                  "proc": open("/proc/sys/kernel/hostname").read().strip(),
                  "cgroup": [l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()]}))
''')
    assert out["hostname"] == out["uname"] == out["proc"] == "sandbox", out
    assert out["hostname"] != os.uname().nodename
    assert set(out["cgroup"]) == {"/"}, out  # no scope or session name of the host's tree


def test_session_id_and_host_layout_are_not_visible(session):
    """The code's view of mounts, cgroups and processes names no session id, no state
    directory and no unit."""
    out = probe_json(session, SEARCH + f'''
hits = {{}}
for needle in ({session!r}, "/var/lib/scopebox", "scopebox-runner", "/run/scopebox"):
    found = search(needle.encode(), ())
    if found:
        hits[needle] = found
print(json.dumps(hits))
''')
    assert out == {}, out


def test_kernel_information_files_are_masked(session):
    out = probe_json(session, '''
res = {}
for p in ("/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/interrupts", "/proc/sched_debug",
          "/proc/kcore", "/proc/kmsg", "/proc/kpagecount", "/proc/kpageflags", "/proc/latency_stats"):
    try:
        with open(p, "rb") as f:
            res[p] = "EMPTY" if not f.read(4096) else "READ"
    except OSError as e:
        import errno; res[p] = errno.errorcode[e.errno]
print(json.dumps(res))
''')
    for p, r in out.items():
        assert r in ("EMPTY", "ENOENT", "EACCES", "EPERM"), (p, r)


def test_a_crash_leaves_no_core_file(session):
    res = run(session, "import ctypes, resource\n"
                       "print(resource.getrlimit(resource.RLIMIT_CORE), flush=True)\n"
                       "ctypes.string_at(0)\n")
    assert res["exit_code"] == 128 + 11, res  # SIGSEGV
    assert res["stdout"] == "(0, 0)\n", res
    out = probe_json(session, '''
cores = [os.path.join(d, f) for top in ("/workspace", "/tmp", "/home/sandbox") for d, _, fs in os.walk(top)
         for f in fs if f.startswith("core")]
print(json.dumps(cores))
''')
    assert out == [], out
