# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exec engine (issue 17): python execs and dify python runs start as children forked by
the shared template (scopebox-template.service, SANDBOX_PRELOAD_MODULES already imported), or
cold (`python3 /exec/cell.py`) when preloading is off (SANDBOX_PRELOAD=0) or the template is
missing. Every guarantee is checked on both paths: nothing of one exec reaches the next or
another session, the sandbox and its limits are the same, the code sees an ordinary script.
The runner's exec-end entry says which way each exec started (SCOPEBOX_EXEC_START); on the
template path every exec of a test must have used the template, back to back, without waiting.
The template itself is out of reach of the sandboxes and of unprivileged host users."""
import json
import time

import pytest

from conftest import (create_session, delete_session, exec_start, exec_starts, in_system, journal_cursor, run,
                      unit_environment)
from test_dify import not_permitted
from test_dify_runs import dify_run, ok_data
from test_lifecycle import manager_environment

TEMPLATE_UNIT = "scopebox-template.service"
TEMPLATE_SOCKET = "/run/scopebox-template/python.sock"

# "template" first: the tests that only make sense with a template (parametrized with
# ["template"] below) share its parameter index and so run in its group.
PATHS = ["template", "cold"]


@pytest.fixture(scope="module", params=PATHS)
def path(request):
    """How the module's execs start. The cold set runs under one manager restart with
    SANDBOX_PRELOAD=0 (and one back)."""
    if request.param == "cold":
        with manager_environment(SANDBOX_PRELOAD=0):
            yield "cold"
    else:
        # Type=notify: the start returns once the template listens with its modules imported.
        in_system("systemctl", "start", TEMPLATE_UNIT, check=True)
        yield "template"


template_only = pytest.mark.parametrize("path", ["template"], indirect=True)


class Box:
    """A session and the number of execs made in it, so that afterwards the journal can say
    whether each of them started the way the test's path wants."""

    def __init__(self, path):
        self.path = path
        self.sid = create_session()
        self.execs = 0

    def run(self, code, timeout_ms=30000):
        self.execs += 1
        return run(self.sid, code, timeout_ms)

    def out(self, code, timeout_ms=30000):
        """stdout of an exec that must succeed."""
        res = self.run(code, timeout_ms)
        assert res["exit_code"] == 0, res
        return res["stdout"]

    def check_starts(self):
        # On the template path each exec, back to back, is a child of the template. (The cold
        # path's entries are checked by test_execs_start_the_way_the_setting_says.)
        if self.path == "template" and self.execs:
            starts = exec_starts(self.sid, count=self.execs)
            assert starts == ["template"] * self.execs, \
                f"session {self.sid}: {self.execs} execs started {starts}, all should be from the template"


@pytest.fixture
def boxes(path):
    """A factory of sessions on the test's path; all are checked and released afterwards."""
    made = []

    def make():
        made.append(Box(path))
        return made[-1]

    yield make
    try:
        for b in made:
            b.check_starts()
    finally:
        for b in made:
            delete_session(b.sid)


@pytest.fixture
def box(boxes):
    return boxes()


# ---- which way execs start ----

MODULES = "import sys\nprint('numpy' in sys.modules, 'pandas' in sys.modules, 'matplotlib.pyplot' in sys.modules)\n"


def test_execs_start_the_way_the_setting_says(box, path):
    # The preloaded modules are there before the code imports anything, on the first exec of a
    # new session and on back-to-back ones; cold, the interpreter has imported none of them.
    want = "True True True\n" if path == "template" else "False False False\n"
    for i in range(3):
        assert box.out(MODULES) == want, (path, i)
    assert exec_starts(box.sid, count=3) == [path] * 3
    assert exec_start(box.sid, count=3) == path


def test_dify_runs_start_the_way_the_setting_says(path):
    cursor = journal_cursor()
    for _ in range(2):
        assert ok_data(*dify_run("print(6 * 7)"))["stdout"] == "42\n"
    assert exec_starts(after=cursor, count=2) == [path] * 2


# ---- nothing of one exec reaches the next, or another session ----

def test_a_variable_does_not_survive(boxes):
    a, b = boxes(), boxes()
    assert a.out("secret_value = 42\nimport builtins\nbuiltins.leaked = 'x'\nprint(secret_value)\n") == "42\n"
    probe = "import builtins\nprint('secret_value' in globals(), hasattr(builtins, 'leaked'))\n"
    assert a.out(probe) == "False False\n"
    assert b.out(probe) == "False False\n"


def test_a_monkey_patched_module_does_not_survive(boxes):
    a, b = boxes(), boxes()
    a.out("import json, pandas, numpy\njson.dumps = lambda *a, **k: 'patched'\npandas.DataFrame = None\n"
          "numpy.pi = 3\nimport sys\nsys.modules['planted'] = json\n"
          "open('/workspace/mymod.py', 'w').write('VALUE = 1\\n')\nimport mymod\n")
    a.out("open('/workspace/mymod.py', 'w').write('VALUE = 2\\n')\n")
    probe = ("import sys\nprint('planted' in sys.modules, 'mymod' in sys.modules)\n"
             "import json, pandas, numpy\nprint(json.dumps([1]), pandas.DataFrame is None, numpy.pi > 3.14)\n")
    assert a.out(probe) == "False False\n[1] False True\n"
    assert b.out(probe) == "False False\n[1] False True\n"
    # A workspace module is imported from its file as it is now.
    assert a.out("import mymod\nprint(mymod.VALUE)\n") == "2\n"


FDS = ("import os\nfds = {}\n"
       "for fd in os.listdir('/proc/self/fd'):\n"
       "    try:\n        fds[int(fd)] = os.readlink('/proc/self/fd/' + fd)\n"
       "    except OSError:\n        pass  # listdir's own descriptor, closed by now\n"
       "print(fds)\n")


def test_an_open_file_does_not_survive(box):
    box.out("import os, socket\nf = open('/workspace/held.txt', 'w')\nr, w = os.pipe()\n"
            "os.set_inheritable(r, True)\nsock = socket.socketpair()\nprint(f.fileno())\n")
    fds = eval(box.out(FDS))
    # What python3 /exec/cell.py has: stdin /dev/null, stdout and stderr pipes, nothing else.
    assert sorted(fds) == [0, 1, 2], fds
    assert fds[0] == "/dev/null" and fds[1].startswith("pipe:") and fds[2].startswith("pipe:"), fds


def test_a_thread_does_not_survive(box):
    box.out("import threading, time\n"
            "def beat():\n"
            "    while True:\n"
            "        open('/workspace/beat', 'a').write('x'); time.sleep(0.05)\n"
            "threading.Thread(target=beat, daemon=True).start()\n"
            "time.sleep(0.2)\n")
    out = box.out("import os\nprint(len(os.listdir('/proc/self/task')))\n"
                  "import threading, time\n"
                  "a = os.path.getsize('/workspace/beat'); time.sleep(0.3); b = os.path.getsize('/workspace/beat')\n"
                  "print(a == b, threading.active_count())\n")
    assert out == "1\nTrue 1\n", out


def test_a_signal_handler_does_not_survive(box):
    box.out("import signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('handled'))\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})\n"
            "import os\nos.kill(os.getpid(), signal.SIGUSR1)\n")
    out = box.out("import signal\n"
                  "print(signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n"
                  "print(signal.pthread_sigmask(signal.SIG_BLOCK, []))\n")
    assert out == "True True\nset()\n", out
    # The default disposition is in force: SIGUSR1 ends the process.
    res = box.run("import os, signal\nos.kill(os.getpid(), signal.SIGUSR1)\nprint('survived')\n")
    assert (res["exit_code"], res["stdout"]) == (128 + 10, ""), res


# ---- random state: every exec and every session draws its own ----

def draws(b, code):
    return b.out(code).split()


def check_fresh_each_time(boxes, code):
    a, b = boxes(), boxes()
    first, second, other = draws(a, code), draws(a, code), draws(b, code)
    assert first and first != second and first != other and second != other, (first, second, other)


def test_random_state_differs_between_execs_and_sessions(boxes):
    check_fresh_each_time(boxes, "import random\nprint(random.random(), random.random(), random.getrandbits(64))\n")


def test_random_seed_of_one_exec_does_not_fix_the_next(box):
    seeded = box.out("import random\nrandom.seed(1)\nprint(random.random())\n")
    assert seeded == "0.13436424411240122\n"
    nxt = [box.out("import random\nprint(random.random())\n") for _ in range(2)]
    assert seeded not in nxt and nxt[0] != nxt[1], nxt


def test_numpy_random_state_differs_between_execs_and_sessions(boxes):
    check_fresh_each_time(boxes, "import numpy\nprint(*numpy.random.rand(3))\n")
    b = boxes()
    seeded = b.out("import numpy\nnumpy.random.seed(1)\nprint(*numpy.random.rand(3))\n")
    assert b.out("import numpy\nprint(*numpy.random.rand(3))\n") != seeded


def test_multiprocessing_authkey_differs_between_execs_and_sessions(boxes):
    check_fresh_each_time(boxes, "import multiprocessing\nprint(multiprocessing.current_process().authkey.hex())\n")


def test_os_urandom_and_what_uses_it_differ_between_execs_and_sessions(boxes):
    check_fresh_each_time(boxes, "import os, uuid, secrets, tempfile\n"
                                 "print(os.urandom(16).hex(), uuid.uuid4(), secrets.token_hex(8))\n"
                                 "print(next(tempfile._get_candidate_names()))\n")


# ---- the sandbox: identity, privileges, process attributes ----

IDENTITY = r'''
import json, os, resource, sys
st = {}
for line in open('/proc/self/status'):
    k, v = line.split(':', 1)
    st[k] = v.strip()
print(json.dumps({
    'uid': [os.getuid(), os.geteuid(), os.getgid(), os.getegid()], 'groups': os.getgroups(),
    'pid': os.getpid(), 'status': st, 'cwd': os.getcwd(), 'umask': os.umask(0o22),
    'cgroup': open('/proc/self/cgroup').read().split('\n'),
    'uid_map': open('/proc/self/uid_map').read().split(), 'gid_map': open('/proc/self/gid_map').read().split(),
    'environ': dict(os.environ),
    'rlimits': {r: resource.getrlimit(getattr(resource, r)) for r in dir(resource) if r.startswith('RLIMIT_')},
    'oom_score_adj': open('/proc/self/oom_score_adj').read().strip(), 'nice': os.nice(0),
    'leader': [os.getpgrp() == os.getpid(), os.getsid(0) == os.getpid()],
}))
'''

ENVIRON = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/sandbox", "USER": "sandbox",
           "LOGNAME": "sandbox", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib",
           "PYTHONPATH": "/workspace", "OPENBLAS_NUM_THREADS": "1"}
ZERO_CAPS = "0000000000000000"

# Attributes that depend on the host (limits inherited from the system manager, the OOM score
# of the session's scope): whichever path runs first records them, the other must match.
SEEN = {}


def test_the_sandbox_identity_and_privileges(box, path):
    got = json.loads(box.out(IDENTITY))
    st = got["status"]
    assert got["uid"] == [1000] * 4 and got["groups"] == [], got["uid"]
    assert st["Uid"].split() == ["1000"] * 4 and st["Gid"].split() == ["1000"] * 4, st
    # The sandbox's own user namespace: uid 1000 is one host uid of the session's pool.
    assert got["uid_map"][0] == "1000" and got["uid_map"][2] == "1" and int(got["uid_map"][1]) >= 65536, got
    assert got["gid_map"][0] == "1000" and got["gid_map"][2] == "1", got
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert st[cap] == ZERO_CAPS, (cap, st[cap])
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    # In the sandbox's PID namespace (one level seen from its /proc), and a small number there.
    assert got["pid"] < 16 and st["NSpid"] == str(got["pid"]), (got["pid"], st["NSpid"])
    assert st["Threads"] == "1", st
    # Signals as a fresh interpreter sets them: SIGPIPE and SIGXFSZ ignored, SIGINT caught.
    assert (st["SigBlk"], st["SigIgn"], st["SigCgt"]) == (ZERO_CAPS, "0000000001001000", "0000000000000002"), st
    assert got["cwd"] == "/workspace" and got["umask"] == 0o22, got
    # The session's cgroup namespace: the scope is its root.
    assert all(line.endswith(":/") for line in got["cgroup"] if line), got["cgroup"]
    assert got["environ"] == ENVIRON, got["environ"]
    assert got["rlimits"]["RLIMIT_CORE"] == [0, 0], got["rlimits"]
    host = {k: got[k] for k in ("rlimits", "oom_score_adj", "nice", "leader")}
    other = next((v for p, v in SEEN.items() if p != path), None)
    SEEN[path] = host
    if other is not None:
        assert host == other, f"{path} gives {host}, the other path {other}"


def test_the_code_sees_an_ordinary_script(box):
    # What python3 /exec/cell.py gives, compared with a fresh python3 started in the same sandbox.
    probe = ("import sys, locale, time\n"
             "print(repr((sys.flags, sys.executable, sys.prefix, sys.getfilesystemencoding(),"
             " sys.stdout.encoding, locale.setlocale(locale.LC_CTYPE), time.tzname, sys.path[2:])))\n")
    res = box.run("import sys, subprocess\n"
                  "print(__name__, __file__, sys.argv, sys.path[:2])\n"
                  "print(sys.argv[0] == __file__ == sys.modules['__main__'].__file__)\n"
                  "open('/tmp/ref.py', 'w').write(%r)\n"
                  "exec(%r)\n"
                  "sys.stdout.flush()\n"
                  "subprocess.run(['python3', '/tmp/ref.py'], check=True)\n"
                  "def f(x):\n    return x * x\n"
                  "import multiprocessing\n"
                  "with multiprocessing.Pool(2) as p:\n    print(p.map(f, [1, 2, 3]))\n" % (probe, probe))
    assert res["exit_code"] == 0, res
    lines = res["stdout"].splitlines()
    assert lines[0] == "__main__ /exec/cell.py ['/exec/cell.py'] ['/exec', '/workspace']", lines
    assert lines[1] == "True", lines
    assert lines[2] == lines[3], lines
    assert "'/usr/lib/python3/dist-packages'" in lines[2], lines
    assert lines[4] == "[1, 4, 9]", lines


def test_os_fork_works(box):
    out = box.out("import os\npid = os.fork()\n"
                  "if pid == 0:\n    os._exit(7)\n"
                  "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), pid != os.getpid())\n")
    assert out == "7 True\n", out


def test_numpy_and_matplotlib_work_after_the_start(box):
    # Libraries imported before the fork (BLAS threads, font caches) still work in the child.
    res = box.run("import numpy, matplotlib.pyplot as plt\n"
                  "a = numpy.random.rand(300, 300)\n"
                  "print(numpy.allclose(a @ numpy.linalg.inv(a), numpy.eye(300), atol=1e-6))\n"
                  "plt.plot([1, 2, 3]); plt.title('\u9500\u552e')\n"
                  "plt.savefig('/workspace/outputs/plot.png')\n", timeout_ms=60000)
    assert res["exit_code"] == 0 and res["stdout"] == "True\n", res
    assert [(f["name"], f["mime_type"]) for f in res["files"]] == [("plot.png", "image/png")], res
    assert "findfont" not in res["stderr"], res["stderr"]


# ---- blocked system calls ----

LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def blocked(res):
    return {(b["name"], b["verdict"]): b["count"] for b in res.get("blocked_syscalls", [])}


def test_blocked_syscalls_are_refused_and_reported(box):
    res = box.run(LIBC + "r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
                         "print(r, os.strerror(ctypes.get_errno()))\n")
    assert (res["exit_code"], res["stdout"]) == (0, "-1 Operation not permitted\n"), res
    assert blocked(res) == {("mount", "EPERM"): 1} and "[sandbox]" not in res["stderr"], res
    res = box.run("import os\nos.setuid(0)\n")
    assert res["exit_code"] == 1 and blocked(res) == {("setuid", "EPERM"): 1}, res
    assert res["stderr"].rstrip().endswith("[sandbox] the sandbox refused these system calls: setuid (EPERM)"), res
    res = box.run("import subprocess, sys\n"
                  "print(subprocess.run([sys.executable, '-c', 'import os; os.setgid(0)']).returncode)\n")
    assert res["stdout"] == "1\n" and blocked(res) == {("setgid", "EPERM"): 1}, res
    res = box.run(LIBC + "print('before', flush=True)\nlibc.syscall(169, 0, 0, 0, 0)\nprint('after')\n")  # reboot
    assert (res["exit_code"], res["stdout"]) == (159, "before\n") and "blocked_syscalls" not in res, res
    assert res["stderr"].endswith(
        "[sandbox] killed: the code made a system call that is never allowed in the sandbox (SIGSYS)"), res
    # An exec that refuses nothing reports nothing: the start itself made no refused call.
    res = box.run("print(1)\n")
    assert res["stdout"] == "1\n" and "blocked_syscalls" not in res and res["stderr"] == "", res


# ---- processes, limits, timeouts ----

PROCS = ("import os\nmine = str(os.getpid())\n"
         "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and p != mine))\n")


def test_no_process_outlives_its_exec(box):
    box.out("import subprocess, os, time\n"
            "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        while True:\n"
            "            open('/workspace/daemon.beat', 'a').write('x'); time.sleep(0.05)\n"
            "    os._exit(0)\n"
            "time.sleep(0.2)\n")
    out = box.out(PROCS + "import time\na = os.path.getsize('/workspace/daemon.beat')\n"
                          "time.sleep(0.3)\nprint(a == os.path.getsize('/workspace/daemon.beat'))\n")
    assert out == "[]\nTrue\n", out


def test_the_memory_limit_kills_the_exec_and_the_session_survives(box):
    res = box.run("chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))\n", timeout_ms=120000)
    # The session's scope (SANDBOX_MEMORY_LIMIT) OOM-kills the process: 128 + SIGKILL.
    assert res["exit_code"] == 137, res
    assert box.out("print('still here')\n") == "still here\n"


def test_the_task_limit_of_the_session_applies(box):
    # Threads count against the scope's TasksMax (256 by default, with the runner's own).
    out = box.out("import threading\nev = threading.Event()\nn = 0\n"
                  "try:\n"
                  "    for _ in range(400):\n"
                  "        threading.Thread(target=ev.wait, daemon=True).start(); n += 1\n"
                  "except RuntimeError as e:\n    print('refused', e)\n"
                  "print(n)\nev.set()\n", timeout_ms=60000)
    lines = out.splitlines()
    assert lines[0] == "refused can't start new thread", out
    assert 200 < int(lines[1]) < 256, out


def test_a_timeout_kills_the_exec_and_what_it_started(box):
    t = time.monotonic()
    res = box.run("import subprocess, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                  "print('start', flush=True)\ntime.sleep(30)\n", timeout_ms=1000)
    assert time.monotonic() - t < 20
    assert (res["exit_code"], res["stdout"]) == (124, "start\n"), res
    assert res["stderr"].endswith("\n[sandbox] execution exceeded 1.000s and was killed"), res
    assert box.out(PROCS) == "[]\n"


# ---- results: artifacts, exit codes, tracebacks ----

def test_artifacts_come_from_workspace_outputs(box):
    res = box.run("import os\nos.makedirs('/workspace/outputs/sub', exist_ok=True)\n"
                  "open('/workspace/outputs/a.txt', 'w').write('hello')\n"
                  "open('/workspace/outputs/sub/b.csv', 'w').write('x,y\\n')\n"
                  "open('/workspace/not-an-output.txt', 'w').write('no')\n")
    assert [(f["name"], f["mime_type"]) for f in res["files"]] == [("a.txt", "text/plain"), ("b.csv", "text/csv")], res
    assert res["files"][0]["data_base64"] == "aGVsbG8="
    assert box.run("print(1)\n")["files"] == []


def test_exit_codes_and_tracebacks_are_the_interpreters(box):
    res = box.run("import sys\nprint('to err', file=sys.stderr)\nsys.exit(3)\n")
    assert (res["exit_code"], res["stderr"]) == (3, "to err\n"), res
    res = box.run("x = 1\ny = x / 0\n")
    assert res["exit_code"] == 1
    assert res["stderr"] == ('Traceback (most recent call last):\n  File "/exec/cell.py", line 2, in <module>\n'
                             '    y = x / 0\n        ~~^~~\nZeroDivisionError: division by zero\n'), res
    res = box.run("def f():\n    raise ValueError('bad')\n\nf()\n")
    assert res["exit_code"] == 1 and '  File "/exec/cell.py", line 4, in <module>\n' in res["stderr"] and \
        '  File "/exec/cell.py", line 2, in f\n' in res["stderr"], res
    res = box.run("print(\n")
    assert res["exit_code"] == 1 and res["stderr"].startswith('  File "/exec/cell.py", line 1\n    print(\n'), res
    res = box.run("import sys\nsys.exit('bye')\n")
    assert (res["exit_code"], res["stderr"]) == (1, "bye\n"), res
    res = box.run("import os\nprint('x')\nos._exit(7)\n")
    assert res["exit_code"] == 7, res
    res = box.run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert res["exit_code"] == 128 + 15, res
    # A normal end flushes files, waits for threads, runs atexit.
    res = box.run("f = open('/workspace/outputs/unclosed.txt', 'w')\nf.write('kept')\n"
                  "import atexit, threading, time\n"
                  "atexit.register(lambda: print('atexit'))\n"
                  "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n")
    assert res["stdout"] == "thread\natexit\n" and [f["name"] for f in res["files"]] == ["unclosed.txt"], res


# ---- dify runs ----

def check_dify_starts(path, cursor, count):
    if path == "template":
        assert exec_starts(after=cursor, count=count) == ["template"] * count


def test_dify_runs_are_stateless(path):
    cursor = journal_cursor()
    first = ok_data(*dify_run("import json, sys\nsecret_value = 42\njson.dumps = None\n"
                              "sys.modules['planted'] = json\nopen('/tmp/mark', 'w').write('x')\nprint('set')\n"))
    assert first["stdout"] == "set\n", first
    second = ok_data(*dify_run("import json, os, sys\n"
                               "print('secret_value' in globals(), 'planted' in sys.modules, json.dumps([1]),"
                               " os.path.exists('/tmp/mark'))\n"))
    assert second["stdout"] == "False False [1] False\n", second
    check_dify_starts(path, cursor, 2)


def test_dify_exception_has_difys_error_shape(path):
    cursor = journal_cursor()
    data = ok_data(*dify_run('def f():\n    raise ValueError("bad input")\n\nf()\n'))
    assert data["exit_code"] == 255, data
    assert data["stderr"] == ('Traceback (most recent call last):\n'
                              '  File "/exec/cell.py", line 4, in <module>\n    f()\n'
                              '  File "/exec/cell.py", line 2, in f\n    raise ValueError("bad input")\n'
                              'ValueError: bad input\n'), data
    assert data["error"] == "process exited with code 255\n" + data["stderr"], data
    data = ok_data(*dify_run("import sys\nprint(__name__, __file__, sys.argv, sys.path[0])\nsys.exit(3)\n"))
    assert data["exit_code"] == 3 and data["stdout"] == "__main__ /exec/cell.py ['/exec/cell.py'] /exec\n", data
    check_dify_starts(path, cursor, 2)


def test_dify_fork_is_refused(path):
    cursor = journal_cursor()
    data = ok_data(*dify_run("import os\nprint(os.fork())\nprint(123)\n"))
    assert not_permitted(data), data
    assert "123" not in data["stdout"] and "Operation not permitted" in data["stderr"], data
    check_dify_starts(path, cursor, 1)


# ---- the template is out of reach ----

def template_pid():
    r = in_system("systemctl", "show", "-p", "MainPID", "--value", TEMPLATE_UNIT)
    return int(r.stdout.strip() or 0)


@template_only
def test_the_template_is_out_of_reach_from_a_sandbox(box):
    pid = template_pid()
    assert pid > 0, f"{TEMPLATE_UNIT} is not running"
    res = box.run(LIBC + "import errno, signal, socket\n"
                  "print(os.path.exists('/run/scopebox-template'), os.path.exists(%r))\n"
                  "s = socket.socket(socket.AF_UNIX)\n"
                  "try:\n    s.connect(%r); print('connected')\n"
                  "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
                  # Every process this one can see: itself only (the sandbox's init is hidden).
                  "mine = os.getpid()\n"
                  "print([p for p in os.listdir('/proc') if p.isdigit() and int(p) != mine])\n"
                  "def attempt(f):\n"
                  "    try:\n        f(); return 'ok'\n"
                  "    except OSError as e:\n        return errno.errorcode[e.errno]\n"
                  "def ptrace(p):\n"
                  "    if libc.ptrace(16, p, None, None) != 0:\n"  # PTRACE_ATTACH
                  "        raise OSError(ctypes.get_errno(), 'ptrace')\n"
                  "for p in sorted({%d, 1}):\n"
                  "    if p != mine:\n"
                  "        print(p == 1, attempt(lambda: os.kill(p, 0)), attempt(lambda: ptrace(p)))\n"
                  # Everything it may signal: nothing outside the sandbox.
                  "print(attempt(lambda: os.kill(-1, signal.SIGKILL)))\n"
                  "print('alive')\n" % (TEMPLATE_SOCKET, TEMPLATE_SOCKET, pid))
    lines = res["stdout"].splitlines()
    assert lines[:3] == ["False False", "ENOENT", "[]"], res
    for line in lines[3:-2]:
        is_init, kill, trace = line.split()
        assert kill in ("ESRCH", "EPERM") and trace in ("ESRCH", "EPERM"), res
        if is_init == "False":
            assert kill == "ESRCH", res  # the template's pid means nothing in the sandbox
    assert lines[-2] in ("ok", "ESRCH", "EPERM") and lines[-1] == "alive", res
    # The template is untouched and still serves the next exec (Box checks that it is template).
    assert template_pid() == pid
    assert box.out("print(2)\n") == "2\n"


@template_only
def test_a_host_user_cannot_connect_to_the_template(box):
    assert in_system("test", "-S", TEMPLATE_SOCKET).returncode == 0, f"no socket at {TEMPLATE_SOCKET}"
    gateway = in_system("id", "-u", "scopebox-gateway").stdout.strip() or "995"
    connect = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
               "try:\n    s.connect(%r); print('connected')\n"
               "except OSError as e:\n    print(type(e).__name__)\n" % TEMPLATE_SOCKET)
    # nobody, the gateway's user, a uid of the sessions' pool (what an escaped sandbox would be).
    for uid in ("65534", gateway, "1879049192"):
        r = in_system("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "python3", "-c", connect)
        assert r.stdout == "PermissionError\n", (uid, r)
    assert box.out("print(1)\n") == "1\n"


@template_only
def test_execs_still_work_while_the_template_is_stopped(box):
    box.path = "mixed"  # this test checks its execs' starts itself
    try:
        in_system("systemctl", "stop", TEMPLATE_UNIT, check=True)
        for i in range(2):
            assert box.out(MODULES) == "False False False\n"
        assert exec_starts(box.sid, count=2) == ["cold", "cold"]
        # Type=notify: the start returns once it serves, so the very next exec is its child.
        in_system("systemctl", "start", TEMPLATE_UNIT, check=True)
        assert in_system("systemctl", "show", "-p", "StatusText", "--value", TEMPLATE_UNIT).stdout.startswith(
            "Serving, ")
        assert box.out(MODULES) == "True True True\n"
        assert exec_start(box.sid, count=box.execs) == "template"
    finally:
        in_system("systemctl", "start", TEMPLATE_UNIT)


# ---- the template's own life: renewal, and what a root process may send it ----

def template_restarts():
    r = in_system("systemctl", "show", "-p", "NRestarts", "--value", TEMPLATE_UNIT)
    return int(r.stdout.strip() or 0)


def until_from_template(box, code=MODULES, tries=40):
    """Execs until one starts from the template (it may be importing); returns its stdout."""
    for _ in range(tries):
        out = box.out(code)
        if exec_start(box.sid, count=box.execs) == "template":
            return out
        time.sleep(0.3)
    raise AssertionError(f"no exec of session {box.sid} started from the template")


@template_only
def test_the_template_is_renewed_after_its_max_age(box):
    box.path = "mixed"  # execs start cold while the template is replaced
    try:
        with unit_environment(TEMPLATE_UNIT, "max-age", ["SANDBOX_TEMPLATE_MAX_AGE_SECONDS=6"]):
            until_from_template(box)
            first, restarts = template_pid(), template_restarts()
            # Children of one template share its str hash secret; the next template has its own.
            seed = until_from_template(box, "print(hash('scopebox-hash-probe'))\n")
            for _ in range(60):
                if template_pid() not in (0, first):
                    break
                # Past its age it refuses: the exec starts cold, and succeeds.
                assert box.out("print(3)\n") == "3\n"
                time.sleep(0.5)
            assert template_pid() not in (0, first), "the template outlived SANDBOX_TEMPLATE_MAX_AGE_SECONDS"
            assert template_restarts() > restarts
            status = in_system("journalctl", "-o", "cat", "-u", TEMPLATE_UNIT, "-n", "40").stdout
            assert "status=75" in status, status
            again = until_from_template(box, "print(hash('scopebox-hash-probe'))\n")
            assert again != seed, (seed, again)
    finally:
        until_from_template(box)  # ready for the tests after this one


@template_only
def test_the_template_is_renewed_when_the_operators_packages_change(box):
    site = "/var/lib/scopebox/site-packages"
    probe = "import scopebox_site_probe\nprint(scopebox_site_probe.VALUE)\n"
    assert in_system("test", "-e", site).returncode != 0, "the test needs no site directory yet"
    box.path = "mixed"
    until_from_template(box)
    first = template_pid()
    try:
        # What `scopeboxctl packages install` does: a new root-owned directory renamed into place.
        in_system("sh", "-c", f"mkdir -m 755 {site}.new && echo 'VALUE = 7' > {site}.new/scopebox_site_probe.py"
                  f" && mv {site}.new {site}", check=True)
        # The template imported before the directory existed: it refuses (ESTALE), the exec
        # starts cold and sees the module, and a new template that has it takes over.
        res = box.run(probe)
        assert res["exit_code"] == 0 and res["stdout"] == "7\n", res
        assert exec_start(box.sid, count=box.execs) == "cold"
        assert until_from_template(box, probe) == "7\n"
        assert template_pid() != first
    finally:
        in_system("rm", "-rf", site, f"{site}.new")
        until_from_template(box)
    res = box.run(probe)
    assert res["exit_code"] == 1 and "ModuleNotFoundError" in res["stderr"], res


# A local root process (the only kind the socket accepts) that sends what no runner sends.
MALFORMED = r'''
import os, socket, struct
PATH = "/run/scopebox-template/python.sock"

def ask(data, fds):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(PATH)
    socket.send_fds(s, [data], fds)
    r = s.recv(8)
    return struct.unpack("<ii", r)[0] if len(r) == 8 else "closed"

def header(magic=0x53425450, version=1, profile=0, env=b"", n_cgroups=1, timeout=1000, cpus=100):
    return struct.pack("<6I3Q2Q2I", magic, version, profile, len(env), n_cgroups, 0, timeout, 0, cpus,
                       0, 0, 0, 0) + env

null = [os.open("/dev/null", os.O_RDONLY) for _ in range(12)]
cases = [b"x", header(magic=1), header(version=2), header(profile=2), header(env=b"A=1"),
         header(env=b"A=\x01\x00"), header(env=b"=x\x00"), header(timeout=0), header(cpus=0),
         header(n_cgroups=0), header(n_cgroups=17), header() + b"trailing"]
print([ask(c, null) for c in cases])
print(ask(header(), null[:5]), ask(header(n_cgroups=2), null))
# The right shape, but a "cgroup directory" that is /dev/null.
print(ask(header(), null))
'''


@template_only
def test_malformed_requests_leave_the_template_serving(box):
    until_from_template(box)
    pid = template_pid()
    r = in_system("python3", "-c", MALFORMED)
    assert r.returncode == 0, r
    ebadmsg = 74
    assert r.stdout.splitlines() == [str([ebadmsg] * 12), f"{ebadmsg} {ebadmsg}", str(ebadmsg)], r.stdout
    assert template_pid() == pid
    assert box.out(MODULES) == "True True True\n"


@template_only
def test_with_preloading_off_the_template_stays_down(box):
    box.path = "mixed"
    try:
        with unit_environment(TEMPLATE_UNIT, "off", ["SANDBOX_PRELOAD=0"]):
            restarts = template_restarts()
            time.sleep(3)
            show = in_system("systemctl", "show", "-p", "ActiveState,Result,ExecMainStatus",
                             TEMPLATE_UNIT).stdout.split("\n")
            assert {"ActiveState=inactive", "Result=success", "ExecMainStatus=0"} <= set(show), show
            assert template_restarts() == restarts
            # The manager still thinks preloading is on: it asks, finds no template, starts cold.
            assert box.out(MODULES) == "False False False\n"
            assert exec_start(box.sid, count=box.execs) == "cold"
    finally:
        until_from_template(box)
