# SPDX-License-Identifier: LGPL-2.1-or-later
"""The exec result says which system call the sandbox refused (blocked_syscalls, and a note on
stderr when the code failed); calls with no legitimate use kill the process (SIGSYS)."""
from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import run, session  # noqa: F401 (fixture)

LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def blocked(res):
    return {(b["name"], b["verdict"]): b["count"] for b in res.get("blocked_syscalls", [])}


def test_refused_call_is_named_and_soft(session):
    res = run(session, LIBC + "r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
                              "print(r, os.strerror(ctypes.get_errno()))\n")
    assert res["exit_code"] == 0
    assert res["stdout"] == "-1 Operation not permitted\n"
    assert blocked(res) == {("mount", "EPERM"): 1}
    # The code handled the refusal: no note on its stderr.
    assert "[sandbox]" not in res["stderr"]


def test_failure_gets_a_note_naming_the_call(session):
    res = run(session, "import os\nos.setuid(0)\n")
    assert res["exit_code"] == 1
    assert "PermissionError" in res["stderr"]
    assert blocked(res) == {("setuid", "EPERM"): 1}
    assert res["stderr"].rstrip().endswith("[sandbox] the sandbox refused these system calls: setuid (EPERM)")


def test_network_refusal_is_named(session):
    res = run(session, "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n")
    assert res["exit_code"] == 1
    assert blocked(res).get(("socket", "EAFNOSUPPORT")) == 1
    assert "socket (EAFNOSUPPORT)" in res["stderr"]


def test_counts_repeat_calls(session):
    res = run(session, LIBC + "for _ in range(5):\n    libc.unshare(0x10000000)\n")
    assert res["exit_code"] == 0
    assert blocked(res) == {("unshare", "EPERM"): 5}


def test_kill_list_call_kills_with_a_note(session):
    # reboot: the sandbox filter kills; init_module: a filter of the manager's unit says EPERM
    # first (ProtectKernelModules=), the kill still wins.
    for nr in (169, 175):
        res = run(session, LIBC + "print('before', flush=True)\nlibc.syscall(%d, 0, 0, 0, 0)\nprint('after')\n" % nr)
        assert res["stdout"] == "before\n"
        assert res["exit_code"] == 159  # SIGSYS
        assert "blocked_syscalls" not in res
        assert res["stderr"].endswith(
            "[sandbox] killed: the code made a system call that is never allowed in the sandbox (SIGSYS)")


def test_unknown_call_gets_enosys_and_a_number(session):
    res = run(session, LIBC + "print(libc.syscall(1000), os.strerror(ctypes.get_errno()))\n")
    assert res["stdout"] == "-1 Function not implemented\n"
    assert blocked(res) == {("syscall_1000", "ENOSYS"): 1}


def test_children_are_reported_too(session):
    res = run(session, "import subprocess, sys\n"
                       "r = subprocess.run([sys.executable, '-c', 'import os; os.setgid(0)'])\n"
                       "print(r.returncode)\n")
    assert res["stdout"] == "1\n"
    assert blocked(res) == {("setgid", "EPERM"): 1}


def test_expected_probes_and_the_data_stack_report_nothing(session):
    # clone3 (threads) and io_uring are answered by the kernel; the data stack refuses nothing.
    res = run(session, "import threading, multiprocessing, subprocess\n"
                       "import numpy, pandas, matplotlib\nmatplotlib.use('Agg')\n"
                       "import matplotlib.pyplot as plt\n"
                       "t = threading.Thread(target=print, args=('t',)); t.start(); t.join()\n"
                       "with multiprocessing.Pool(2) as p: print(p.map(abs, [-1, -2]))\n"
                       "print(subprocess.run(['true']).returncode)\n"
                       "plt.plot([1, 2]); plt.savefig('/tmp/x.png')\n", timeout_ms=120000)
    assert res["exit_code"] == 0, res["stderr"]
    assert "blocked_syscalls" not in res
    assert res["stderr"] == ""


MBIND = LIBC + ("import mmap\n"
                "libc.syscall.restype = ctypes.c_long\n"
                "m = mmap.mmap(-1, 1 << 20)\n"
                "addr = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
                "node = ctypes.c_ulong(1)\n"
                "def mbind(mode, nodes, maxnode, flags):\n"
                "    r = libc.syscall(237, ctypes.c_void_p(addr), ctypes.c_ulong(1 << 20), ctypes.c_ulong(mode),\n"
                "                     nodes, ctypes.c_ulong(maxnode), ctypes.c_uint(flags))\n"
                "    return r if r == 0 else os.strerror(ctypes.get_errno())\n")


def test_openblas_local_node_mbind_is_allowed_and_nothing_else(session):
    # OpenBLAS's buffers: mbind(MPOL_PREFERRED=1, no nodes, flags 0), the kernel's own default
    # placement (production hosts resolve the data stack's BLAS to OpenBLAS; issue 33). A node
    # set, mode flags (MPOL_F_STATIC_NODES) or a page move (MPOL_MF_MOVE) stay refused and named.
    res = run(session, MBIND + "print(mbind(1, None, 0, 0))\n"
                               "print(mbind(2, ctypes.byref(node), 2, 0))\n"
                               "print(mbind(1 | (1 << 15), None, 0, 0))\n"
                               "print(mbind(1, None, 0, 2))\n")
    assert res["exit_code"] == 0, res["stderr"]
    assert res["stdout"].splitlines() == ["0"] + ["Operation not permitted"] * 3
    assert blocked(res) == {("mbind", "EPERM"): 3}
