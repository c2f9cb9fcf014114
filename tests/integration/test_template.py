# SPDX-License-Identifier: LGPL-2.1-or-later
"""The template (SANDBOX_PRELOAD, scopebox-template.service): every python exec's payload is
forked from one interpreter that has already imported the preload modules. Each exec is a new
child of it, so nothing one exec leaves behind reaches the next, and the code can't tell the
difference from `python3 /exec/cell.py` except by the time it takes. Both paths, template and
cold, are held to the same guarantees in test_engine.py."""
import time

from conftest import run, session  # noqa: F401 (fixture)
from test_lifecycle import manager_environment


PRELOADED = "import sys\nprint('pandas' in sys.modules, 'matplotlib.pyplot' in sys.modules)\n"


def test_preloaded_modules_are_there_before_the_code(session):
    # A service that has just started may still be importing (its execs start cold meanwhile):
    # once one exec came from the template, the next ones back to back all do.
    for _ in range(200):
        if run(session, PRELOADED)["stdout"] == "True True\n":
            break
        time.sleep(0.3)
    for _ in range(3):
        res = run(session, PRELOADED)
        assert res["stdout"] == "True True\n", res


def test_a_variable_does_not_survive(session):
    run(session, "secret_value = 42\n")
    res = run(session, "print('secret_value' in globals())\n")
    assert res["stdout"] == "False\n", res


def test_a_monkey_patched_module_does_not_survive(session):
    run(session, "import json, pandas\njson.dumps = lambda *a, **k: 'patched'\npandas.DataFrame = None\n")
    res = run(session, "import json, pandas\nprint(json.dumps([1]), pandas.DataFrame is None)\n")
    assert res["stdout"] == "[1] False\n", res


def test_an_open_file_does_not_survive(session):
    res = run(session, "f = open('/workspace/held.txt', 'w')\nimport os\nprint(f.fileno())\n")
    assert res["exit_code"] == 0
    res = run(session, "import os\ntargets = []\n"
                       "for fd in os.listdir('/proc/self/fd'):\n"
                       "    try:\n        targets.append(os.readlink('/proc/self/fd/' + fd))\n"
                       "    except OSError:\n        pass  # the directory's own fd, closed by now\n"
                       "print([t for t in targets if 'held' in t])\n")
    assert res["stdout"] == "[]\n", res


def test_a_thread_does_not_survive(session):
    res = run(session, "import threading, time\n"
                       "def beat():\n"
                       "    while True:\n"
                       "        open('/workspace/beat', 'a').write('x'); time.sleep(0.05)\n"
                       "threading.Thread(target=beat, daemon=True).start()\n"
                       "time.sleep(0.2)\n")
    assert res["exit_code"] == 0
    res = run(session, "import os, threading, time\n"
                       "a = os.path.getsize('/workspace/beat'); time.sleep(0.3); b = os.path.getsize('/workspace/beat')\n"
                       "print(a == b, threading.active_count(), len(os.listdir('/proc/self/task')))\n")
    assert res["stdout"].split()[0] == "True", res
    assert res["stdout"].split()[1] == "1", res


def test_workspace_modules_are_imported_fresh(session):
    run(session, "open('/workspace/mymod.py', 'w').write('VALUE = 1\\n')\nimport mymod\nprint(mymod.VALUE)\n")
    run(session, "open('/workspace/mymod.py', 'w').write('VALUE = 2\\n')\n")
    res = run(session, "import mymod\nprint(mymod.VALUE)\n")
    assert res["stdout"] == "2\n", res


def test_the_code_sees_an_ordinary_script(session):
    res = run(session, "import sys\nprint(__name__, __file__, sys.argv, sys.path[0])\n"
                       "def f(x):\n    return x * x\n"
                       "import multiprocessing\n"
                       "with multiprocessing.Pool(2) as p:\n    print(p.map(f, [1, 2, 3]))\n")
    assert res["stdout"] == "__main__ /exec/cell.py ['/exec/cell.py'] /exec\n[1, 4, 9]\n", res


PATHS = ("import os, sys, site\nimport wsmod\n"
         "print(sys.path)\nprint(os.environ.get('PYTHONPATH'), site.ENABLE_USER_SITE, wsmod.WHERE)\n")


def test_paths_arrive_with_the_code_as_a_cold_interpreter_has_them(session):
    # The template imports nothing of the session's (it has no PYTHONPATH, its own /workspace
    # and home are empty); the cell gets /exec, /workspace and the user site (with its .pth
    # files) in the cold interpreter's order. The same session, cold: its manager restarts
    # without preloading (its runner keeps running: the next exec tells it).
    res = run(session, "import os, site\nopen('/workspace/wsmod.py', 'w').write('WHERE = \"workspace\"\\n')\n"
                       "os.makedirs(site.getusersitepackages(), exist_ok=True)\n"
                       "open(os.path.join(site.getusersitepackages(), 'extra.pth'), 'w').write('/workspace/extra\\n')\n"
                       "os.makedirs('/workspace/extra', exist_ok=True)\n")
    assert res["exit_code"] == 0, res
    warm = run(session, "import sys\nprint('pandas' in sys.modules)\n" + PATHS)
    assert warm["stdout"].startswith("True\n"), warm
    with manager_environment(SANDBOX_PRELOAD=0):
        cold = run(session, "import sys\nprint('pandas' in sys.modules)\n" + PATHS)
    assert cold["stdout"].startswith("False\n"), cold
    assert warm["stdout"].split("\n", 1)[1] == cold["stdout"].split("\n", 1)[1], (warm, cold)
    paths = eval(cold["stdout"].splitlines()[1])
    assert paths[:2] == ["/exec", "/workspace"], paths
    assert "/workspace/extra" in paths and paths.index("/workspace/extra") < paths.index("/usr/lib/python3/dist-packages")
    assert cold["stdout"].splitlines()[2] == "/workspace True workspace", cold


def test_errors_and_exit_codes_look_like_the_interpreters(session):
    res = run(session, "x = 1\ny = x / 0\n")
    assert res["exit_code"] == 1
    assert res["stderr"] == ('Traceback (most recent call last):\n  File "/exec/cell.py", line 2, in <module>\n'
                             '    y = x / 0\n        ~~^~~\nZeroDivisionError: division by zero\n'), res
    res = run(session, "print(\n")
    assert res["exit_code"] == 1
    assert res["stderr"].startswith('  File "/exec/cell.py", line 1\n    print(\n'), res
    assert "SyntaxError: '(' was never closed" in res["stderr"]
    res = run(session, "import sys\nsys.exit('bye')\n")
    assert (res["exit_code"], res["stderr"]) == (1, "bye\n"), res
    res = run(session, "raise SystemExit(3)\n")
    assert res["exit_code"] == 3, res


def test_exit_keeps_unflushed_files_threads_and_atexit(session):
    res = run(session, "f = open('/workspace/outputs/unclosed.txt', 'w')\nf.write('kept')\n"
                       "import atexit, threading, time\n"
                       "atexit.register(lambda: print('atexit'))\n"
                       "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n")
    assert res["stdout"] == "thread\natexit\n", res
    assert [f["name"] for f in res["files"]] == ["unclosed.txt"], res


def test_preloading_can_be_switched_off(session):
    with manager_environment(SANDBOX_PRELOAD=0):
        from conftest import create_session, delete_session
        sid = create_session()
        try:
            res = run(sid, "import sys\nprint('pandas' in sys.modules)\n")
            assert res["stdout"] == "False\n", res
        finally:
            delete_session(sid)
