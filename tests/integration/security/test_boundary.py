# SPDX-License-Identifier: LGPL-2.1-or-later
"""The sandbox boundary of issue 13: nothing a session's code controls steers a root process,
and nothing of a session runs outside an exec.

  - reset-inputs while the session's code swaps uploads/ and skills/ with symlinks to root-only
    host files (renameat2 RENAME_EXCHANGE in a tight loop) never changes those files;
  - code planted in the workspace or the sandbox's home (sitecustomize.py, a shadowing numpy.py,
    a .pth file in the user site) never runs between execs, and nothing an exec starts (double
    fork, setsid) outlives it;
  - the archive helper (creating and extracting workspace archives) is isolated like an exec:
    seccomp beyond the runner's, no_new_privs, not root, no capabilities, a few fds and no
    socket or directory outside the workspace, its own network and user namespaces; the archive
    still round-trips;
  - read-only binds cover their submounts (every mount at or below /usr and /etc is
    ro,nosuid,nodev inside the sandbox);
  - inotify and fanotify are refused, and the refusal is named in blocked_syscalls;
  - 100,000 empty directories under outputs/ don't break execs or /files/list (the cost is
    printed as a ratio, never asserted).
Judged from outside (processes, cgroups, /proc and files of the private system) and through the
API only."""
import base64
import concurrent.futures
import json
import os
import re
import secrets
import shutil
import statistics
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import (SCOPE_PIDS, create_session, delete_session, in_system, request, run,  # noqa: F401
                      scope_processes, session, system_python)

RESET_OK = {"ok": True, "session_gone": False}
STORAGE_ROOT = "/var/lib/scopebox-storage"
TOKEN = "bndry"                      # in the names of everything the planted code starts


# ---- helpers ----

def reset_inputs(sid):
    return request("POST", "/files/reset-inputs", {"session_id": sid}, timeout=300)


def put_file(sid, path, data):
    r = request("POST", "/files", {"session_id": sid, "path": path,
                                   "data_base64": base64.b64encode(data).decode()})
    assert (r.status, r.json) == (200, {"ok": True}), r
    return r




def planted_processes(sid):
    """Processes of the session that the planted code (or an exec) started: a sleep, or
    anything carrying TOKEN in its name or command line."""
    return [p for p in scope_processes(sid)
            if p["comm"] == "sleep" or TOKEN in p["comm"] or any(TOKEN in c for c in p["cmdline"])]


def wait_no_planted(sid, grace=2.0):
    deadline = time.monotonic() + grace
    while True:
        left = planted_processes(sid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# ---- 1. reset-inputs racing a symlink swapper ----

# The swapper: exchanges /workspace/<dir> with a symlink to a host path, as fast as it can.
SWAPPER = r"""
import ctypes, os, threading, time
_libc = ctypes.CDLL(None, use_errno=True)

def _swap(name, target, until):
    link = '/workspace/.%s-swap-%s' % (TOKEN, name)
    path = ('/workspace/' + name).encode()
    n = 0
    while time.time() < until and not os.path.exists('/workspace/.%s-stop' % TOKEN):
        try:
            if not os.path.lexists(link):
                os.symlink(target, link)
        except OSError:
            pass
        if _libc.syscall(316, -100, link.encode(), -100, path, 2) == 0:   # renameat2(RENAME_EXCHANGE)
            n += 1
    return n

def swap_all(targets, seconds):
    until = time.time() + seconds
    counts = []
    ts = [threading.Thread(target=lambda a=a: counts.append(_swap(*a, until))) for a in targets]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)

def swap_detached(targets, seconds):
    # Double fork and setsid: a swapper that tries to outlive whatever started it.
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                try:
                    swap_all(targets, seconds)
                finally:
                    os._exit(0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
"""


def swapper_code(targets, body):
    return (f"TOKEN = {TOKEN!r}\nTARGETS = {targets!r}\n" + SWAPPER + body)


def make_canary(path, secret):
    r = in_system("sh", "-c", 'umask 077 && mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1" && '
                  'chown 0:0 "$1" && chmod 0600 "$1"', "sh", path, secret)
    assert r.returncode == 0, r


def canary_state(path):
    st = in_system("stat", "-c", "%a %u %g %F", path)
    cat = in_system("cat", path)
    return st.stdout.strip(), cat.stdout


def test_reset_inputs_racing_a_symlink_swapper_leaves_host_files_alone():
    tag = secrets.token_hex(6)
    secret = "BOUNDARY-" + secrets.token_hex(16)
    canaries = {"uploads": f"/var/lib/scopebox/boundary-canary-{tag}",
                "skills": f"/run/scopebox-boundary-canary-{tag}"}
    targets = sorted(canaries.items())
    for path in canaries.values():
        make_canary(path, secret)
    expected = ("600 0 0 regular file", secret)
    for path in canaries.values():
        assert canary_state(path) == expected
    sid = create_session()
    answers = []
    try:
        # Planted so that any interpreter of the session starts a detached swapper (between
        # execs too, were the workspace's code to run there), and an exec starting one itself.
        site = swapper_code(targets, "try:\n    swap_detached(TARGETS, 20)\nexcept Exception:\n    pass\n")
        plant = ("open('/workspace/sitecustomize.py', 'w').write(%r)\n" % site +
                 swapper_code(targets, "swap_detached(TARGETS, 20)\nprint('planted')\n"))
        res = run(sid, plant)
        assert res["exit_code"] == 0 and res["stdout"] == "planted\n", res

        # Phase 1: between execs, after the exec started its swapper.
        time.sleep(1.0)
        for _ in range(50):
            answers.append(reset_inputs(sid))
        phase1 = {p: canary_state(p) for p in canaries.values()}

        # Phase 2: reset-inputs from threads while a long exec swaps in the foreground (they
        # queue behind it), and more right after it.
        long_exec = swapper_code(targets, "print('swapped', swap_all(TARGETS, 4) > 1000)\n")
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            ex = pool.submit(run, sid, long_exec, 60000)
            time.sleep(0.5)
            racing = [pool.submit(reset_inputs, sid) for _ in range(20)]
            res = ex.result(timeout=300)
            answers += [f.result(timeout=300) for f in racing]
        # The swapper really swaps (many successful exchanges).
        assert res["exit_code"] == 0 and res["stdout"] == "swapped True\n", res
        for _ in range(10):
            answers.append(reset_inputs(sid))
        time.sleep(0.5)
        for _ in range(10):
            answers.append(reset_inputs(sid))

        final = {p: canary_state(p) for p in canaries.values()}
        assert phase1 == {p: expected for p in canaries.values()}, \
            f"a host file changed during reset-inputs between execs: {phase1}"
        assert final == {p: expected for p in canaries.values()}, \
            f"a host file changed during reset-inputs around a swapping exec: {final}"
        assert [(r.status, r.json) for r in answers] == [(200, RESET_OK)] * len(answers), \
            [r for r in answers if (r.status, r.json) != (200, RESET_OK)][:5]

        # The inputs are real, empty directories again.
        put_file(sid, f"/workspace/.{TOKEN}-stop", b"")
        assert (r := reset_inputs(sid)).json == RESET_OK, r
        res = run(sid, "import os\n"
                       "print([(d, os.path.islink('/workspace/' + d), os.path.isdir('/workspace/' + d),\n"
                       "        os.listdir('/workspace/' + d)) for d in ('uploads', 'skills')])\n")
        assert res["stdout"] == "[('uploads', False, True, []), ('skills', False, True, [])]\n", res
    finally:
        delete_session(sid)
        for path in canaries.values():
            in_system("rm", "-f", path)
        try:  # /var/lib is the host's too: gone even if the private system was restarting
            os.unlink(canaries["uploads"])
        except OSError:
            pass


# ---- 2. nothing of a session runs outside an exec ----

# What the planted files run: a marker with the time, a setsid'd sleep, and a double-forked
# child (named TOKEN-...) that leaves a marker every half second.
PAYLOAD = r"""
import os, subprocess, time
def _bndry(kind):
    try:
        os.makedirs('/workspace/markers', exist_ok=True)
        open('/workspace/markers/%s-%d-%d' % (kind, time.time_ns(), os.getpid()), 'w').close()
    except Exception:
        pass
    try:
        subprocess.Popen(['sleep', '600'], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except Exception:
        pass
    try:
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if os.fork() == 0:
                    try:
                        import ctypes
                        ctypes.CDLL(None).prctl(15, b'bndry-' + kind.encode()[:8], 0, 0, 0)
                    except Exception:
                        pass
                    for _ in range(1200):
                        try:
                            open('/workspace/markers/%s.late-%d-%d' % (kind, time.time_ns(), os.getpid()), 'w').close()
                        except Exception:
                            pass
                        time.sleep(0.5)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    except Exception:
        pass
"""

HOME_SITE = "/home/sandbox/.local/lib/python3.11/site-packages"

VECTORS = {
    "sitecustomize": "open('/workspace/sitecustomize.py', 'w').write(PAYLOAD + '_bndry(\"sitecust\")\\n')\n",
    "numpy": "open('/workspace/numpy.py', 'w').write(PAYLOAD + '_bndry(\"numpy\")\\n')\n",
    "pth": ("import os\n"
            f"os.makedirs({HOME_SITE!r}, exist_ok=True)\n"
            "open('/home/sandbox/.local/bndry_payload.py', 'w').write(PAYLOAD + '_bndry(\"pth\")\\n')\n"
            f"open({HOME_SITE!r} + '/evil.pth', 'w').write(\n"
            "    \"import os; exec(compile(open('/home/sandbox/.local/bndry_payload.py').read(), 'bndry', 'exec'), {'__name__': 'bndry'})\\n\")\n"),
}

READ_MARKERS = ("import json, os\n"
                "d = '/workspace/markers'\n"
                "print(json.dumps(sorted(os.listdir(d)) if os.path.isdir(d) else []))\n")


def markers_between(names, start, end):
    """Markers written in (start, end) (seconds since the epoch; the sandbox and this process
    read the same CLOCK_REALTIME)."""
    out = []
    for n in names:
        m = re.fullmatch(r"([a-z.]+)-(\d+)-(\d+)", n)
        if m and start < int(m.group(2)) / 1e9 < end:
            out.append(n)
    return out


# Starts a new interpreter inside the exec the way the session's own code would, to show that
# the planted file is live (it runs there, which is allowed).
TRIGGER = {"sitecustomize": "pass", "numpy": "import numpy", "pth": "pass"}
KIND = {"sitecustomize": "sitecust", "numpy": "numpy", "pth": "pth"}


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_planted_code_never_runs_between_execs(vector):
    sid = create_session()
    try:
        res = run(sid, f"PAYLOAD = {PAYLOAD!r}\n" + VECTORS[vector] +
                  "import os, subprocess, sys\n"
                  f"subprocess.run([sys.executable, '-c', {TRIGGER[vector]!r}], stderr=subprocess.DEVNULL)\n"
                  f"print(any(n.startswith({KIND[vector] + '-'!r}) for n in os.listdir('/workspace/markers')))\n")
        assert res["exit_code"] == 0, res
        assert res["stdout"] == "True\n", f"the planted {vector} file never ran, not even in an exec: {res}"
        violations = []
        for rnd in range(2):
            after_exec = time.time()
            # Long enough for the runner to prepare its next interpreter (~250 ms after an exec).
            time.sleep(3)
            left = planted_processes(sid)
            if left:
                violations.append(f"round {rnd}: processes of the session between execs: {left}")
            before_next = time.time()
            res = run(sid, READ_MARKERS)
            assert res["exit_code"] == 0, res
            early = markers_between(json.loads(res["stdout"]), after_exec, before_next)
            if early:
                violations.append(f"round {rnd}: planted code ran between execs: {early[:6]}")
        assert violations == [], violations
    finally:
        delete_session(sid)


def test_processes_forked_by_an_exec_do_not_outlive_it(session):
    code = ("import ctypes, os, subprocess, time\n"
            "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execv('/bin/sleep', ['bndry-sleep', '600'])\n"
            "    if os.fork() == 0:\n"
            "        ctypes.CDLL(None).prctl(15, b'bndry-child', 0, 0, 0)\n"
            "        time.sleep(600)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "time.sleep(0.3)\n"
            "print('forked')\n")
    res = run(session, code)
    assert res["exit_code"] == 0 and res["stdout"] == "forked\n", res
    assert wait_no_planted(session) == []
    time.sleep(1)
    assert planted_processes(session) == []


# ---- 3. the archive helper ----

# Waits for a process of a session's scope that holds one of the workspace's "bigdata-" files
# open (the helper reading or writing it) and reports what it can reach.
ARCHIVE_POLL = SCOPE_PIDS + r"""
import json, os, stat, sys, time
sid, marker, wait = sys.argv[1], sys.argv[2], float(sys.argv[3])
def status(p):
    return dict(l.rstrip('\n').split(':\t', 1) for l in open('/proc/%d/status' % p) if ':\t' in l)
deadline = time.monotonic() + wait
while time.monotonic() < deadline:
    pids = scope_pids(sid)
    for p in pids:
        try:
            fds = {}
            for fd in os.listdir('/proc/%d/fd' % p):
                try:
                    fds[fd] = os.readlink('/proc/%d/fd/%s' % (p, fd))
                except OSError:
                    pass
            hit = [fd for fd, v in fds.items() if marker in v]
            if not hit:
                continue
            ws_dev = os.stat('/proc/%d/fd/%s' % (p, hit[0])).st_dev
            st = status(p)
            runner = p
            while status(runner)['PPid'] and int(status(runner)['PPid']) in pids:
                runner = int(status(runner)['PPid'])
            rst = status(runner)
            kinds = {}
            for fd, v in fds.items():
                try:
                    s = os.stat('/proc/%d/fd/%s' % (p, fd))
                    kinds[fd] = {'target': v, 'dir': stat.S_ISDIR(s.st_mode), 'in_workspace': s.st_dev == ws_dev}
                except OSError:
                    kinds[fd] = {'target': v, 'dir': False, 'in_workspace': False}
            ns = lambda q, n: os.readlink('/proc/%d/ns/%s' % (q, n))
            print(json.dumps({
                'pid': p, 'runner': runner, 'scope_pids': sorted(pids),
                'status': {k: st.get(k) for k in ('Name', 'Uid', 'Gid', 'CapEff', 'CapPrm', 'CapBnd',
                                                 'NoNewPrivs', 'Seccomp', 'Seccomp_filters')},
                'runner_seccomp_filters': rst.get('Seccomp_filters'),
                'fds': kinds,
                'net': ns(p, 'net'), 'runner_net': ns(runner, 'net'), 'host_net': ns(1, 'net'),
                'user': ns(p, 'user'), 'runner_user': ns(runner, 'user')}))
            sys.exit(0)
        except (OSError, KeyError, ValueError):
            pass
    time.sleep(0.01)
print('null')
"""


def watch_helper(sid, wait):
    out = in_system("/usr/bin/python3", "-c", ARCHIVE_POLL, sid, "bigdata-", str(wait))
    assert out.returncode == 0, out
    return json.loads(out.stdout)


def isolation_problems(rep):
    if rep is None:
        return ["the archive helper was never seen"]
    st, bad = rep["status"], []
    if st["Seccomp"] != "2":
        bad.append(f"Seccomp {st['Seccomp']}")
    if int(st["Seccomp_filters"] or 0) <= int(rep["runner_seccomp_filters"] or 0):
        bad.append(f"no seccomp filter of its own ({st['Seccomp_filters']} filters, the runner has "
                   f"{rep['runner_seccomp_filters']})")
    if st["NoNewPrivs"] != "1":
        bad.append("no_new_privs not set")
    if "0" in st["Uid"].split() or "0" in st["Gid"].split():
        bad.append(f"root ids: Uid {st['Uid']} Gid {st['Gid']}")
    if int(st["CapEff"], 16) or int(st["CapPrm"], 16):
        bad.append(f"capabilities CapEff {st['CapEff']} CapPrm {st['CapPrm']}")
    fds = rep["fds"]
    if len(fds) > 16:
        bad.append(f"{len(fds)} fds open")
    for fd, k in sorted(fds.items()):
        if k["target"].startswith("socket:"):
            bad.append(f"fd {fd} is a socket ({k['target']})")
        if k["dir"] and not k["in_workspace"]:
            bad.append(f"fd {fd} is a directory outside the workspace ({k['target']})")
    if rep["net"] in (rep["host_net"], rep["runner_net"]):
        bad.append(f"shares the network namespace {rep['net']} of the host or the runner")
    if rep["user"] == rep["runner_user"]:
        bad.append(f"shares the runner's user namespace {rep['user']}")
    return bad


def test_archive_helper_is_isolated_like_an_exec():
    prefix = f"secsuite-boundary-{secrets.token_hex(4)}"
    storage = {"provider": "local", "prefix": prefix + "/"}
    stem = "boundary_archive"
    # 150 MiB of random data: the archive helper gzips it for seconds, within
    # SANDBOX_MAX_ARCHIVE_BYTES (200M) and the 512M workspace.
    write = ("import hashlib, json, os\n"
             "h = {}\n"
             "for i in range(3):\n"
             "    m = hashlib.sha256()\n"
             "    with open('/workspace/bigdata-%d.bin' % i, 'wb') as f:\n"
             "        for _ in range(50):\n"
             "            b = os.urandom(1 << 20); m.update(b); f.write(b)\n"
             "    h['bigdata-%d.bin' % i] = m.hexdigest()\n"
             "os.makedirs('/workspace/outputs/sub', exist_ok=True)\n"
             "open('/workspace/outputs/sub/small.txt', 'w').write('small')\n"
             "print(json.dumps(h))\n")
    check = ("import hashlib, json\n"
             "h = {}\n"
             "for i in range(3):\n"
             "    m = hashlib.sha256()\n"
             "    with open('/workspace/bigdata-%d.bin' % i, 'rb') as f:\n"
             "        for b in iter(lambda: f.read(1 << 20), b''):\n"
             "            m.update(b)\n"
             "    h['bigdata-%d.bin' % i] = m.hexdigest()\n"
             "print(json.dumps(h), open('/workspace/outputs/sub/small.txt').read())\n")
    sid = create_session(archive_key=stem, storage=storage)
    sid2 = None
    try:
        res = run(sid, write, timeout_ms=120000)
        assert res["exit_code"] == 0, res
        hashes = json.loads(res["stdout"])

        # Release (archive) while watching the scope from outside.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            watch = pool.submit(watch_helper, sid, 60)
            time.sleep(0.5)
            release = pool.submit(delete_session, sid)
            archiving = watch.result(timeout=120)
            released = release.result(timeout=300)
        assert (released.status, released.json) == (200, {"ok": True, "archive": "stored"}), released

        # Restore (extract) into a new session, watched the same way.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            watch = pool.submit(watch_helper, "*", 60)
            time.sleep(0.5)
            created = pool.submit(create_session, archive_key=stem, storage=storage)
            restoring = watch.result(timeout=120)
            sid2 = created.result(timeout=300)
        res = run(sid2, check, timeout_ms=120000)
        assert res["exit_code"] == 0, res
        assert res["stdout"] == json.dumps(hashes) + " small\n", "the archive did not round-trip"

        print("\narchive helper while archiving:", json.dumps(archiving))
        print("archive helper while restoring:", json.dumps(restoring))
        problems = {"archive": isolation_problems(archiving), "restore": isolation_problems(restoring)}
        assert problems == {"archive": [], "restore": []}, problems
    finally:
        delete_session(sid)
        if sid2:
            delete_session(sid2, discard=True, archive_key=stem, storage=storage)
        shutil.rmtree(f"{STORAGE_ROOT}/{prefix}", ignore_errors=True)


# ---- 4. read-only binds cover submounts ----

SUBMOUNTS = ["/usr/share/zoneinfo", "/etc/fonts/conf.d"]


def mountinfo_entries(text):
    """(mount point, per-mount options) of each line of a mountinfo."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4])
            out.append((point, set(f[5].split(","))))
    return out


def under(point, top):
    return point == top or point.startswith(top + "/")


def test_read_only_binds_cover_submounts():
    mounted = []
    sid = None
    try:
        for p in SUBMOUNTS:
            r = in_system("mount", "--bind", p, p)
            assert r.returncode == 0, r
            mounted.append(p)
        manager = in_system("pgrep", "-o", "-f", "/usr/libexec/scopebox/scopebox-session-manager").stdout.strip()
        assert manager, "the session manager is not running"
        points = {pt for pt, _ in mountinfo_entries(in_system("cat", f"/proc/{manager}/mountinfo").stdout)}
        missing = [p for p in SUBMOUNTS if p not in points]
        assert not missing, f"the submounts {missing} did not propagate to the session manager's mount namespace"

        sid = create_session()
        res = run(sid, "print(open('/proc/self/mountinfo').read(), end='')")
        assert res["exit_code"] == 0, res
        entries = mountinfo_entries(res["stdout"])
        seen = {pt for pt, _ in entries}
        assert all(p in seen for p in SUBMOUNTS), \
            f"the submounts are not visible in the sandbox (nothing to judge): {sorted(seen)}"
        bad = [(pt, sorted(opts)) for pt, opts in entries
               if (under(pt, "/usr") or under(pt, "/etc")) and not {"ro", "nosuid", "nodev"} <= opts]
        assert bad == [], f"mounts below /usr or /etc that are not ro,nosuid,nodev: {bad}"
        # And it holds: nothing below them can be written.
        res = run(sid, "import os\n"
                       "for p in ('/usr/share/zoneinfo/bndry', '/etc/fonts/conf.d/bndry'):\n"
                       "    try:\n"
                       "        open(p, 'w'); print(p, 'written')\n"
                       "    except OSError as e:\n"
                       "        print(p, e.errno)\n")
        assert "written" not in res["stdout"], res
    finally:
        if sid:
            delete_session(sid)
        for p in reversed(mounted):
            in_system("umount", p)


# ---- 5. inotify and fanotify ----

def test_inotify_and_fanotify_are_refused_and_named(session):
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(*a):\n"
            "    r = libc.syscall(*a)\n"
            "    return r, (ctypes.get_errno() if r < 0 else 0)\n"
            "r1 = call(294, 0)\n"                                  # inotify_init1
            "r0 = call(253)\n"                                     # inotify_init
            "fd = r1[0] if r1[0] >= 0 else (r0[0] if r0[0] >= 0 else 0)\n"
            "w = call(254, fd, b'/usr/bin', 0x20)\n"               # inotify_add_watch(IN_OPEN)
            "f = call(300, 0x200, 0)\n"                            # fanotify_init(FAN_REPORT_FID)
            "print(r1[0] < 0, r0[0] < 0, w[0] < 0, f[0] < 0)\n"
            "print(r1, r0, w, f)\n")
    res = run(session, code)
    assert res["exit_code"] == 0, res
    assert res["stdout"].splitlines()[0] == "True True True True", res
    named = {b["name"] for b in res.get("blocked_syscalls", [])}
    missing = {"inotify_init1", "inotify_init", "fanotify_init"} - named
    assert not missing, f"not named in blocked_syscalls: {sorted(missing)} (report: {res.get('blocked_syscalls')})"


# ---- 7. empty directories ----

MAKE_DIRS = ("import errno, os\n"
             "n = 0\n"
             "try:\n"
             "    for i in range(100):\n"
             "        os.mkdir('/workspace/outputs/d%03d' % i); n += 1\n"
             "        for j in range(1000):\n"
             "            os.mkdir('/workspace/outputs/d%03d/e%03d' % (i, j)); n += 1\n"
             "except OSError as e:\n"
             "    if e.errno != errno.ENOSPC:\n"
             "        raise\n"
             "print(n)\n")


def p50_costs(sid, n=3):
    execs, lists, results = [], [], []
    for _ in range(n):
        t = time.monotonic()
        res = run(sid, "print(1)", timeout_ms=120000)
        execs.append(time.monotonic() - t)
        results.append(res)
        t = time.monotonic()
        r = request("POST", "/files/list", {"session_id": sid}, timeout=300)
        lists.append(time.monotonic() - t)
        results.append(r)
    return statistics.median(execs), statistics.median(lists), results


def test_empty_directories_do_not_stall_execs():
    fresh = create_session()
    full = create_session()
    try:
        for sid in (fresh, full):
            put_file(sid, "/workspace/a.txt", b"a")
            put_file(sid, "/workspace/outputs/real.txt", b"real")
        res = run(full, MAKE_DIRS, timeout_ms=300000)
        assert res["exit_code"] == 0, res
        made = int(res["stdout"])
        assert made > 50000, f"only {made} directories could be made"
        assert res["files"] == [], "directories reported as artifacts"

        base_exec, base_list, _ = p50_costs(fresh)
        dirs_exec, dirs_list, results = p50_costs(full)
        print(f"\n{made} empty directories under outputs/: print(1) p50 {dirs_exec:.3f}s vs {base_exec:.3f}s "
              f"(ratio {dirs_exec / base_exec:.1f}), /files/list p50 {dirs_list:.3f}s vs {base_list:.3f}s "
              f"(ratio {dirs_list / base_list:.1f})")
        for r in results:
            if isinstance(r, dict):
                assert (r["exit_code"], r["stdout"], r["files"]) == (0, "1\n", []), r
            else:
                assert r.status == 200, r
                listed = r.json["files"]
                # Directories are never listed; whatever is listed is one of the two files.
                assert {f["path"] for f in listed} <= {"a.txt", "outputs/real.txt"}, listed[:5]
                assert all(f["size"] == {"a.txt": 1, "outputs/real.txt": 4}[f["path"]] for f in listed), listed
        # A new artifact next to them still comes back (informational: a scan bound may skip it).
        res = run(full, "open('/workspace/outputs/zz-new.txt', 'w').write('new')\nprint(1)\n", timeout_ms=120000)
        assert (res["exit_code"], res["stdout"]) == (0, "1\n"), res
        print("artifact beside them:", [f["name"] for f in res["files"]], "stderr:", res["stderr"][-200:])
    finally:
        delete_session(fresh)
        delete_session(full)
