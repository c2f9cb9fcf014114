# SPDX-License-Identifier: LGPL-2.1-or-later
"""Escape attempts run as user code through POST /exec: raw syscalls (ctypes, x86_64 numbers)
that would leave the sandbox or gain privilege, foreign syscall ABIs, set-id binaries, device
nodes, writable paths, terminal injection and socket families. Each case asserts the errno name,
the exit code or the exact listing that SECURITY.md §1.2/§1.3 call for (the target policy:
an allow-list with default ENOSYS, an EPERM deny list, a KILL list)."""
import json
import signal
import subprocess
import sys

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import run, session  # noqa: F401 (fixture)

SIGSYS = 31

# Prepended to every probe: sc(nr, *args) issues a raw syscall and answers "OK" or the errno
# name. Integers are passed as C longs (64-bit registers), bytes as char *, None as NULL.
PRELUDE = r'''
import ctypes, errno, json, os, stat, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def sc(nr, *args):
    conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    if r == -1:
        e = ctypes.get_errno()
        return errno.errorcode.get(e, str(e))
    return "OK"

def buf(n):
    return ctypes.create_string_buffer(n)

def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno))

def raw_clone(flags):
    """clone(flags | SIGCHLD) without glibc's wrapper; a child leaves at once with status 7."""
    pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(flags | 17), None, None, None, ctypes.c_long(0))
    if pid == 0:
        os._exit(7)
    if pid < 0:
        return errno.errorcode[ctypes.get_errno()]
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def devno(st):
    return [stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)]
'''


def probe(sid, body, timeout_ms=20000):
    """Run PRELUDE + body; it must exit 0 with an empty stderr. Returns stdout's lines."""
    res = run(sid, PRELUDE + body, timeout_ms=timeout_ms)
    assert res["exit_code"] == 0 and res["stderr"] == "", res
    return res["stdout"].splitlines()


def probe_json(sid, body, timeout_ms=20000):
    """Run a probe whose last stdout line is JSON."""
    return json.loads(probe(sid, body, timeout_ms)[-1])


# Calls §1.3 denies softly (EPERM) or answers ENOSYS for: (name, nr, Python argument source,
# expected errno name). Where possible the arguments would make the call succeed, or fail
# otherwise, for an unprivileged caller without the filter (setuid to one's own uid, syncfs of a
# pipe, SCHED_OTHER, a user-mode userfaultfd, name_to_handle_at's size probe, io_setup), so the
# errno can only come from seccomp; for the others the kernel's own EPERM is a second line.
DENIED = [
    # Mounts and root changes.
    ("mount", 165, 'b"none", b"/tmp", b"tmpfs", 0, None', "EPERM"),
    ("umount2", 166, 'b"/workspace", 2', "EPERM"),
    ("pivot_root", 155, 'b"/tmp", b"/tmp"', "EPERM"),
    ("chroot", 161, 'b"/tmp"', "EPERM"),
    ("fsopen", 430, 'b"tmpfs", 0', "EPERM"),
    ("open_tree", 428, '-100, b"/tmp", 1', "EPERM"),
    ("move_mount", 429, '-100, b"/tmp", -100, b"/workspace", 0', "EPERM"),
    ("mount_setattr", 442, '-100, b"/tmp", 0, buf(32), 32', "EPERM"),
    # Other processes and the keyring.
    ("ptrace_traceme", 101, "0, 0, 0, 0", "EPERM"),
    ("ptrace_attach_pid1", 101, "16, 1, 0, 0", "EPERM"),
    ("ptrace_seize_pid1", 101, "0x4206, 1, 0, 0", "EPERM"),
    ("process_vm_readv_self", 310, "os.getpid(), None, 0, None, 0, 0", "EPERM"),
    ("process_vm_writev_self", 311, "os.getpid(), None, 0, None, 0, 0", "EPERM"),
    ("kcmp_self", 312, "os.getpid(), os.getpid(), 0, 1, 1", "EPERM"),
    ("pidfd_getfd", 438, "0, 0, 0", "EPERM"),
    ("keyctl_session_keyring", 250, "0, -3, 1", "EPERM"),
    ("add_key", 248, 'b"user", b"scopebox", b"x", 1, -3', "EPERM"),
    ("request_key", 249, 'b"user", b"scopebox", None, 0', "EPERM"),
    # Kernel attack surface.
    ("bpf", 321, "0, buf(128), 128", "EPERM"),
    ("perf_event_open", 298, "buf(128), 0, -1, -1, 0", "EPERM"),
    ("userfaultfd_user_mode", 323, "1", "EPERM"),
    ("seccomp_query", 317, "2, 0, buf(4)", "EPERM"),
    ("name_to_handle_at", 303, '-100, b"/workspace", buf(136), buf(4), 0', "EPERM"),
    ("open_by_handle_at", 304, "-100, buf(136), 0", "EPERM"),
    # Watches on the host's inodes (/usr, /etc, the fonts) would show what others open and run.
    ("fanotify_init", 300, "0, 0", "EPERM"),
    ("fanotify_mark", 301, "-1, 0, 0, -100, None", "EPERM"),
    ("inotify_init", 253, "", "EPERM"),
    ("inotify_init1", 294, "0", "EPERM"),
    ("inotify_add_watch", 254, '-1, b"/usr/bin", 0x20', "EPERM"),
    ("inotify_rm_watch", 255, "-1, 1", "EPERM"),
    # Credentials: even setting the current ids is refused.
    ("setuid_own", 105, "1000", "EPERM"),
    ("setgid_own", 106, "1000", "EPERM"),
    ("setresuid_noop", 117, "-1, -1, -1", "EPERM"),
    ("setgroups", 116, "0, None", "EPERM"),
    ("capset_to_nothing", 126, "(ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()", "EPERM"),
    ("setxattr", 188, 'b"/workspace", b"user.scopebox", b"x", 1, 0', "EPERM"),
    # Host-wide I/O, scheduling and memory policy.
    ("sync", 162, "", "EPERM"),
    ("syncfs", 306, "1", "EPERM"),
    ("mlockall", 151, "1", "EPERM"),
    ("sched_setscheduler", 144, "0, 0, buf(4)", "EPERM"),
    ("set_mempolicy", 238, "0, None, 0", "EPERM"),
    # ENOSYS: libc and runtimes fall back.
    ("clone3_newuser", 435, "(ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17), 88", "ENOSYS"),
    ("io_uring_setup", 425, "1, buf(120)", "ENOSYS"),
    ("io_uring_enter", 426, "0, 0, 0, 0, None, 0", "ENOSYS"),
    ("io_uring_register", 427, "0, 0, None, 0", "ENOSYS"),
    ("io_setup", 206, "1, buf(8)", "ENOSYS"),
]


def _call_source(nr, args):
    return f"sc({nr}, {args})" if args else f"sc({nr})"


@pytest.mark.parametrize("name,nr,args,expected", DENIED, ids=[d[0] for d in DENIED])
def test_denied_syscall(session, name, nr, args, expected):
    assert probe(session, f"print({_call_source(nr, args)})") == [expected]


# Named by no list of §1.3: the filter's default answers ENOSYS. Without a filter each would
# succeed or fail otherwise (EINVAL, EBADF, EFAULT).
DEFAULT_ENOSYS = [
    ("remap_file_pages", "216, 0, 0, 0, 0, 0"),
    ("process_mrelease", "448, -1, 0"),
    ("ioprio_get", "252, 1, 0"),
    ("cachestat", "451, 0, None, None, 0"),
]


@pytest.mark.parametrize("name,args", DEFAULT_ENOSYS, ids=[d[0] for d in DEFAULT_ENOSYS])
def test_call_outside_the_allow_list_is_enosys(session, name, args):
    assert probe(session, f"print(sc({args}))") == ["ENOSYS"]


# prctl() options outside the allowed few (§1.3 conditional rules). The kernel would let the
# first two and PR_SET_SECCOMP's argument check through for this caller.
PRCTL_REFUSED = {
    "set_ptracer_any": "0x59616d61, -1",
    "set_dumpable": "4, 1",
    "set_seccomp_filter": "22, 2, None",
    "set_mm": "35, 8, 0",
    "cap_ambient_raise": "47, 2, 13",
    "set_securebits": "28, 0",
}


@pytest.mark.parametrize("option", list(PRCTL_REFUSED))
def test_prctl_option_outside_the_allowed_set_is_refused(session, option):
    out = probe(session, f"print(sc(157, {PRCTL_REFUSED[option]}))")
    assert out in (["EPERM"], ["ENOSYS"]), out


def test_ioctl_outside_the_allowed_set_is_refused(session):
    """FIGETBSZ and FIOQSIZE on a regular file would succeed for anyone; the filter lets only
    the terminal and fd-flag requests of §1.3 through (refused as ENOTTY or ENOSYS)."""
    out = probe(session, '''
fd = os.open("/workspace/plain", os.O_RDWR | os.O_CREAT)
n = ctypes.c_long(0)
print(sc(16, fd, 2, ctypes.byref(n)), sc(16, fd, 0x5460, ctypes.byref(n)))
''')
    assert len(out) == 1 and all(r in ("ENOTTY", "ENOSYS") for r in out[0].split()), out


def test_allowed_prctl_and_ioctl_options_still_work(session):
    """The conditional rules let the harmless options through (§1.3)."""
    out = probe(session, '''
r, w = os.pipe()
os.write(w, b"abc")
n = ctypes.c_int(0)
print(sc(16, r, 0x541B, ctypes.byref(n)), n.value)        # FIONREAD
print(sc(16, r, 0x5451, None))                            # FIOCLEX
print(sc(157, 15, b"scopebox", 0, 0, 0))                  # PR_SET_NAME
print(libc.prctl(39, 0, 0, 0, 0), libc.prctl(21, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP
print(open("/proc/self/comm").read().strip())
''')
    assert out == ["OK 3", "OK", "OK", "1 2", "scopebox"], out


NAMESPACE_FLAGS = {
    "newns": 0x00020000,
    "newcgroup": 0x02000000,
    "newuts": 0x04000000,
    "newipc": 0x08000000,
    "newuser": 0x10000000,
    "newpid": 0x20000000,
    "newnet": 0x40000000,
}


@pytest.mark.parametrize("flag", list(NAMESPACE_FLAGS) + ["newtime"])
def test_unshare_of_each_namespace_is_eperm(session, flag):
    value = NAMESPACE_FLAGS.get(flag, 0x80)  # CLONE_NEWTIME only exists for unshare/clone3
    assert probe(session, f"print(sc(272, {value:#x}))") == ["EPERM"]


@pytest.mark.parametrize("flag", list(NAMESPACE_FLAGS))
def test_clone_with_namespace_flag_is_eperm(session, flag):
    assert probe(session, f"print(raw_clone({NAMESPACE_FLAGS[flag]:#x}))") == ["EPERM"]


def test_clone_without_namespace_flags_still_forks_and_threads(session):
    """The clone rule is a mask, not a blanket ban: fork, threads and subprocess work."""
    out = probe(session, '''
import threading
print(raw_clone(0))
t = threading.Thread(target=lambda: None); t.start(); t.join()
print(subprocess.run(["/bin/sh", "-c", "echo sub"], capture_output=True, text=True).stdout.strip())
''')
    assert out == ["7", "sub"]


def test_setns_into_init_namespaces_is_refused(session):
    """PID 1's namespace files are out of reach, and setns() to any namespace fd is EPERM."""
    out = probe_json(session, '''
res = {}
for ns in sorted(os.listdir("/proc/self/ns")):
    try:
        fd = os.open("/proc/1/ns/" + ns, os.O_RDONLY)
    except OSError as e:
        init = ename(e)
    else:
        init = "setns:" + sc(308, fd, 0)
        os.close(fd)
    fd = os.open("/proc/self/ns/" + ns, os.O_RDONLY)
    res[ns] = [init, sc(308, fd, 0)]
    os.close(fd)
print(json.dumps(res))
''')
    assert {"mnt", "net", "pid", "user", "uts", "ipc", "cgroup"} <= set(out), out
    for ns, (init, own) in out.items():
        assert init in ("ENOENT", "EACCES", "EPERM", "setns:EPERM"), (ns, init)
        assert own == "EPERM", (ns, own)


def test_ptrace_and_memory_access_to_a_sibling_process_are_eperm(session):
    out = probe(session, '''
p = subprocess.Popen(["sleep", "30"])
print(sc(101, 16, p.pid, 0, 0))                       # PTRACE_ATTACH
print(sc(101, 0x4206, p.pid, 0, 0))                   # PTRACE_SEIZE
print(sc(310, p.pid, None, 0, None, 0, 0))            # process_vm_readv
print(sc(311, p.pid, None, 0, None, 0, 0))            # process_vm_writev
print(sc(312, os.getpid(), p.pid, 0, 0, 0))           # kcmp
p.kill(); p.wait()
''')
    assert out == ["EPERM"] * 5


# Calls that kill the process (SIGSYS): no legitimate use in a runner. Arguments are harmless;
# several of them (adjtimex, sysfs, modify_ldt, settimeofday(NULL, NULL)) would even succeed
# for an unprivileged caller without the filter.
KILLED = [
    ("reboot", 169, "0xfee1dead, 672274793, 0x4321fedc, None"),
    ("kexec_load", 246, "0, 0, None, 0"),
    ("init_module", 175, 'None, 0, b""'),
    ("finit_module", 313, '-1, b"", 0'),
    ("delete_module", 176, 'b"scopebox", 0'),
    ("syslog", 103, "10, None, 0"),
    ("iopl", 172, "3"),
    ("ioperm", 173, "0x80, 1, 1"),
    ("swapon", 167, 'b"/tmp/swap", 0'),
    ("acct", 163, "None"),
    ("settimeofday", 164, "None, None"),
    ("clock_settime", 227, "0, buf(16)"),
    ("adjtimex", 159, "buf(208)"),
    ("sethostname", 170, 'b"x", 1'),
    ("setdomainname", 171, 'b"x", 1'),
    ("modify_ldt", 154, "0, buf(16), 16"),
    ("vhangup", 153, ""),
    ("quotactl", 179, "0, None, 0, None"),
    ("sysfs", 139, "3"),
    ("uselib", 134, 'b"/tmp/x"'),
]


def assert_killed_by_policy(res):
    """Killed for the call before it could return, and reported as SIGSYS (whether the kernel
    killed it, SECCOMP_RET_KILL_PROCESS, or the sandbox's supervisor did)."""
    assert res["exit_code"] == 128 + SIGSYS, res
    assert res["stdout"] == "before\n", res


@pytest.mark.parametrize("name,nr,args", KILLED, ids=[k[0] for k in KILLED])
def test_kill_list_syscall_kills_the_process(session, name, nr, args):
    code = PRELUDE + f'print("before", flush=True)\nprint({_call_source(nr, args)})\nprint("after")\n'
    assert_killed_by_policy(run(session, code))


def test_kill_list_call_cannot_be_survived_with_a_sigsys_handler(session):
    res = run(session, PRELUDE + '''
import signal
signal.signal(signal.SIGSYS, lambda *a: print("caught", flush=True))
print("before", flush=True)
print(sc(163, None))   # acct
print("after")
''')
    assert_killed_by_policy(res)


def test_kill_list_call_from_a_thread_kills_the_whole_process(session):
    res = run(session, PRELUDE + '''
import threading, time
print("before", flush=True)
t = threading.Thread(target=lambda: sc(153))   # vhangup
t.start(); t.join()
time.sleep(0.5)
print("after")
''')
    assert_killed_by_policy(res)


# 32-bit int 0x80 getpid (eax = 20), and the x32 ABI's getpid (39 | __X32_SYSCALL_BIT).
FOREIGN_ABI = {
    "int80": '''
import mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20; int 0x80; ret
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("before", flush=True)
print(f())
''',
    "x32": '''
print("before", flush=True)
print(sc(0x40000000 | 39))
''',
}


def _host_faults_on(abi):
    """Some hosts' kernels have no 32-bit entry at all (ia32_emulation=0, some hypervisors'
    guests): int 0x80 faults (SIGSEGV) before any filter sees it. Ask the host itself, without
    a sandbox."""
    if abi != "int80":
        return False
    r = subprocess.run([sys.executable, "-c", "import ctypes\n" + FOREIGN_ABI[abi]], capture_output=True)
    return r.returncode == -signal.SIGSEGV


@pytest.mark.parametrize("abi", list(FOREIGN_ABI))
def test_foreign_syscall_abi_kills_the_process(session, abi):
    res = run(session, PRELUDE + FOREIGN_ABI[abi])
    # The call never runs: the filter kills the process, or the host's kernel has no such entry.
    expected = {128 + SIGSYS} | ({128 + signal.SIGSEGV} if _host_faults_on(abi) else set())
    assert res["exit_code"] in expected, res
    assert res["stdout"] == "before\n", res


def test_no_capabilities_no_new_privs_and_seccomp_also_in_children(session):
    """The payload and a binary it executes hold no capability of any set, run with
    no_new_privs and a seccomp filter, and the filter still refuses unshare in the child."""
    out = probe_json(session, '''
def fields(text):
    keep = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    return {l.split(":")[0]: l.split()[1] for l in text.splitlines() if l.split(":")[0] in keep}
child = subprocess.run(["/usr/bin/cat", "/proc/self/status"], capture_output=True, text=True).stdout
grandchild = subprocess.run([sys.executable, "-c", """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.syscall(272, 0x10000000), ctypes.get_errno())
"""], capture_output=True, text=True).stdout.split()
print(json.dumps({"self": fields(open("/proc/self/status").read()), "child": fields(child),
                  "child_unshare": grandchild}))
''')
    zero = "0000000000000000"
    for who in ("self", "child"):
        assert out[who] == {"CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero,
                            "CapAmb": zero, "NoNewPrivs": "1", "Seccomp": "2"}, (who, out)
    assert out["child_unshare"] == ["-1", "1"], out  # EPERM


def test_uid_and_gid_are_1000_everywhere(session):
    out = probe_json(session, '''
st = {l.split(":")[0]: l.split()[1:] for l in open("/proc/self/status").read().splitlines()
      if l.startswith(("Uid:", "Gid:", "Groups:"))}
open("/workspace/owned", "w").close()
f = os.stat("/workspace/owned")
child = subprocess.run(["/usr/bin/id"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"resuid": os.getresuid(), "resgid": os.getresgid(), "groups": os.getgroups(),
                  "status": st, "file": [f.st_uid, f.st_gid], "id": child}))
''')
    assert out["resuid"] == [1000, 1000, 1000] and out["resgid"] == [1000, 1000, 1000], out
    assert out["groups"] == [], out
    assert out["status"] == {"Uid": ["1000"] * 4, "Gid": ["1000"] * 4, "Groups": []}, out
    assert out["file"] == [1000, 1000], out
    assert out["id"] == "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)", out


SETUID_BINARIES = ["su", "passwd", "mount", "umount", "newgrp", "chsh", "chfn", "gpasswd"]


@pytest.mark.parametrize("name", SETUID_BINARIES)
def test_setuid_binary_runs_without_privilege(session, name):
    """With no_new_privs the set-uid bit is ignored, so the loader does not run in secure mode:
    it honours LD_SHOW_AUXV and shows AT_SECURE 0 and the caller's euid (a privileged exec
    would drop the variable and print nothing)."""
    out = probe_json(session, f'''
path = "/usr/bin/{name}"
if not os.path.exists(path):
    print(json.dumps(None)); sys.exit(0)
env = dict(os.environ, LD_SHOW_AUXV="1")
try:
    p = subprocess.run([path, "--help"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=env, timeout=10)
    text = p.stdout
except subprocess.TimeoutExpired as e:
    text = (e.stdout or b"").decode()
aux = dict(l.split(":", 1) for l in text.splitlines() if l.startswith("AT_") and ":" in l)
keep = ("AT_SECURE", "AT_UID", "AT_EUID", "AT_EGID")
print(json.dumps({{"setuid": bool(os.stat(path).st_mode & stat.S_ISUID),
                  "aux": {{k: v.strip() for k, v in aux.items() if k in keep}}}}))
''')
    if out is None:
        pytest.skip(f"/usr/bin/{name} is not installed")
    assert out["setuid"] is True, out  # the case has teeth only if the bit is there
    assert out["aux"] == {"AT_SECURE": "0", "AT_UID": "1000", "AT_EUID": "1000", "AT_EGID": "1000"}, out


def test_setuid_mount_cannot_mount(session):
    out = probe_json(session, '''
before = open("/proc/self/mountinfo").read()
os.makedirs("/tmp/m", exist_ok=True)
p = subprocess.run(["/usr/bin/mount", "-t", "tmpfs", "none", "/tmp/m"], capture_output=True, text=True)
q = subprocess.run(["/usr/bin/umount", "/tmp"], capture_output=True, text=True)
print(json.dumps({"mount": p.returncode, "umount": q.returncode,
                  "unchanged": before == open("/proc/self/mountinfo").read()}))
''')
    assert out["mount"] != 0 and out["umount"] != 0, out
    assert out["unchanged"] is True, out


def test_dev_holds_exactly_the_minimal_device_set(session):
    out = probe_json(session, '''
nodes = {n: devno(os.stat("/dev/" + n)) for n in ("null", "zero", "full", "random", "urandom")}
present = [p for p in ("/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/tty", "/dev/console",
                       "/dev/ptmx", "/dev/pts", "/dev/net/tun", "/dev/fuse", "/dev/kvm", "/dev/vda",
                       "/dev/sda", "/dev/loop0", "/dev/loop-control", "/dev/dri", "/dev/log")
           if os.path.lexists(p)]
print(json.dumps({"list": sorted(os.listdir("/dev")), "nodes": nodes, "present": present}))
''')
    assert out["list"] == ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom",
                           "zero"], out
    assert out["nodes"] == {"null": [True, 1, 3], "zero": [True, 1, 5], "full": [True, 1, 7],
                            "random": [True, 1, 8], "urandom": [True, 1, 9]}, out
    assert out["present"] == [], out


def test_mknod_of_devices_is_refused_but_mkfifo_works(session):
    out = probe_json(session, '''
res = {
    "chr_mknod": sc(133, b"/tmp/mem", 0o20666, (1 << 8) | 1),              # /dev/mem, 1:1
    "chr_mknodat": sc(259, -100, b"/workspace/kmsg", 0o20666, (1 << 8) | 11),  # /dev/kmsg
    "blk_mknodat": sc(259, -100, b"/tmp/vda", 0o60666, (254 << 8) | 0),
    "fifo_mknodat": sc(259, -100, b"/workspace/fifo2", 0o10600, 0),
}
os.mkfifo("/tmp/fifo")
res["mkfifo"] = stat.S_ISFIFO(os.stat("/tmp/fifo").st_mode)
res["created"] = [p for p in ("/tmp/mem", "/workspace/kmsg", "/tmp/vda") if os.path.lexists(p)]
print(json.dumps(res))
''')
    # §1.3: mknod is allowed only for unprivileged file types; device nodes are refused.
    for k in ("chr_mknod", "chr_mknodat", "blk_mknodat"):
        assert out[k] in ("ENOSYS", "EPERM"), out
    assert out["created"] == [], out
    assert out["fifo_mknodat"] == "OK" and out["mkfifo"] is True, out


def test_sys_is_absent_and_proc_sys_is_read_only(session):
    out = probe_json(session, '''
res = {"sys": os.path.lexists("/sys")}
for p in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches",
          "/proc/sysrq-trigger"):
    try:
        fd = os.open(p, os.O_WRONLY)
    except OSError as e:
        res[p] = ename(e)
    else:
        res[p] = "opened-null" if devno(os.fstat(fd)) == [True, 1, 3] else "opened"
        os.close(fd)
print(json.dumps(res))
''')
    assert out.pop("sys") is False, out
    sysrq = out.pop("/proc/sysrq-trigger")
    assert sysrq in ("ENOENT", "EACCES", "EROFS", "opened-null"), sysrq
    for p, r in out.items():
        assert r in ("EROFS", "EACCES"), (p, r)


def test_root_usr_and_etc_are_read_only(session):
    """Nothing can be created outside the writable mounts (EROFS, whatever the directory's
    owner), and existing system files cannot be opened for writing."""
    out = probe_json(session, '''
def try_open(p, flags):
    try:
        os.close(os.open(p, flags, 0o644))
        return "WRITABLE"
    except OSError as e:
        return ename(e)
new = {p: try_open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL) for p in
       ("/x", "/usr/x", "/usr/lib/x", "/etc/x", "/exec/x", "/home/x", "/dev/x", "/bin/x", "/proc/x")}
old = {p: try_open(p, os.O_WRONLY | os.O_APPEND) for p in
       ("/usr/bin/python3", "/etc/passwd", "/etc/hosts", "/etc/ld.so.cache", "/exec/cell.py")}
print(json.dumps({"new": new, "old": old}))
''')
    proc = out["new"].pop("/proc/x")
    assert proc in ("EROFS", "EACCES", "ENOENT"), proc
    assert out["new"] == {p: "EROFS" for p in out["new"]}, out
    assert all(r in ("EROFS", "EACCES") for r in out["old"].values()), out


def test_only_workspace_tmp_home_and_shm_are_writable(session):
    """Every directory outside /proc is walked: the writable ones are exactly the four roots
    (and what lies below them); those are mounted nosuid,nodev (/dev/shm also noexec)."""
    out = probe_json(session, '''
ROOTS = ("/workspace", "/tmp", "/home/sandbox", "/dev/shm")
writable = []
for top in sorted(os.listdir("/")):
    path = "/" + top
    if top == "proc" or os.path.islink(path) or not os.path.isdir(path):
        continue
    for d, subdirs, _ in os.walk(path):
        if d in ROOTS:
            subdirs[:] = []
        if os.access(d, os.W_OK):
            writable.append(d)
opts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    opts[f[4]] = f[5].split(",")
rw = sorted(m for m, o in opts.items() if "rw" in o)
print(json.dumps({"writable": sorted(writable), "rw_mounts": rw, "opts": {r: opts.get(r) for r in ROOTS}}))
''', timeout_ms=60000)
    roots = ["/dev/shm", "/home/sandbox", "/tmp", "/workspace"]
    assert out["writable"] == roots, out["writable"]
    devices = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
    assert sorted(set(out["rw_mounts"]) - devices - {"/proc"}) == roots, out["rw_mounts"]
    for r in roots:
        assert {"rw", "nosuid", "nodev"} <= set(out["opts"][r]), (r, out["opts"][r])
    assert "noexec" in out["opts"]["/dev/shm"], out["opts"]


TIOCSTI = {"tiocsti": 0x5412, "tiocsti_high_bits": 0x100005412, "tiocsti_all_high_bits": 0xFFFFFFFF00005412,
           "tioclinux": 0x541C}


@pytest.mark.parametrize("cmd", list(TIOCSTI))
def test_terminal_injection_ioctl_is_eperm(session, cmd):
    """TIOCSTI/TIOCLINUX are refused on every fd, whatever the upper 32 bits hold
    (CVE-2019-10063); without the rule the kernel would answer ENOTTY here."""
    out = probe(session, f'''
c = ctypes.c_char(b"x")
fds = [0, 1, 2, os.open("/dev/null", os.O_RDWR)]
print(" ".join(sc(16, fd, {TIOCSTI[cmd]:#x}, ctypes.byref(c)) for fd in fds))
''')
    assert out == ["EPERM EPERM EPERM EPERM"]


def test_no_controlling_terminal(session):
    out = probe_json(session, '''
try:
    os.open("/dev/tty", os.O_RDWR); tty = "opened"
except OSError as e:
    tty = ename(e)
print(json.dumps({"leader": os.getsid(0) == os.getpid(), "tty": tty,
                  "isatty": [os.isatty(f) for f in (0, 1, 2)]}))
''')
    assert out == {"leader": True, "tty": "ENOENT", "isatty": [False, False, False]}, out


def test_personality_cannot_disable_aslr(session):
    out = probe(session, '''
print(sc(135, 0x0040000))   # ADDR_NO_RANDOMIZE
print(sc(135, 0x0400000))   # READ_IMPLIES_EXEC
print(sc(135, 0))           # PER_LINUX: allowed
print(open("/proc/self/personality").read().strip())
''')
    # §1.3: only the query and PER_LINUX are allowed.
    assert out[0] in ("ENOSYS", "EPERM") and out[1] in ("ENOSYS", "EPERM"), out
    assert out[2:] == ["OK", "00000000"], out


SOCKETS = {
    # name: (family, type, protocol, accepted answers) of socket(); "pair_" names socketpair()
    "unix": (1, 1, 0, ("OK",)),
    "pair_unix": (1, 1, 0, ("OK",)),
    "pair_inet": (2, 1, 0, ("EAFNOSUPPORT", "ENOSYS")),
    "netlink": (16, 3, 0, ("EAFNOSUPPORT",)),
    "packet": (17, 3, 0x300, ("EAFNOSUPPORT",)),
    "alg": (38, 5, 0, ("EAFNOSUPPORT", "ENOSYS")),
    "vsock": (40, 1, 0, ("EAFNOSUPPORT", "ENOSYS")),
    "key": (15, 3, 2, ("EAFNOSUPPORT", "ENOSYS")),
    "inet": (2, 1, 0, ("EAFNOSUPPORT", "ENOSYS", "EPERM")),
    "inet6": (10, 1, 0, ("EAFNOSUPPORT", "ENOSYS", "EPERM")),
}


@pytest.mark.parametrize("family", list(SOCKETS))
def test_socket_family(session, family):
    af, kind, proto, expected = SOCKETS[family]
    if family.startswith("pair_"):
        call = f"sc(53, {af}, {kind}, {proto}, buf(8))"
    else:
        call = f"sc(41, {af}, {kind}, {proto})"
    out = probe(session, f"print({call})")
    assert len(out) == 1 and out[0] in expected, out


def test_no_network_route_to_the_internet_or_the_host(session):
    """Only lo exists, no route, no host listener is visible, and connecting to a public
    address or to the gateway on the host's loopback fails."""
    out = probe_json(session, '''
import socket
res = {}
for name, addr in (("internet", ("1.1.1.1", 443)), ("host_gateway", ("127.0.0.1", 48217))):
    try:
        socket.create_connection(addr, timeout=3).close(); res[name] = "CONNECTED"
    except OSError as e:
        res[name] = ename(e) if e.errno else type(e).__name__
try:
    socket.getaddrinfo("example.com", 443); res["dns"] = "RESOLVED"
except OSError as e:
    res["dns"] = type(e).__name__
res["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
res["routes"] = open("/proc/net/route").read().splitlines()[1:]
res["listen"] = [l.split()[1] for l in open("/proc/net/tcp").read().splitlines()[1:]]
print(json.dumps(res))
''')
    assert out["internet"] != "CONNECTED" and out["host_gateway"] != "CONNECTED", out
    assert out["dns"] == "gaierror", out
    assert out["ifaces"] == ["lo"], out
    assert out["routes"] == [] and out["listen"] == [], out


def test_kill_reaches_only_the_sandbox(session):
    """kill(-1) kills the exec's own processes and nothing else; PID 1 of the sandbox cannot
    be killed by the payload."""
    out = probe(session, '''
import signal
p = subprocess.Popen(["sleep", "30"])
os.kill(-1, signal.SIGKILL)
print(p.wait())
try:
    os.kill(1, signal.SIGKILL); print("OK")
except OSError as e:
    print(ename(e))
print("alive")
''')
    assert out[0] == "-9", out
    assert out[1] in ("EPERM", "OK") and out[2] == "alive", out
