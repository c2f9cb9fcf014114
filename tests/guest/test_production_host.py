# SPDX-License-Identifier: LGPL-2.1-or-later
"""The package on the host it is made for (issue 33): Debian with systemd as PID 1 and only the
unified cgroup v2 hierarchy, the .deb installed by apt (tests/guest/run, tools/guest). Every other
stage runs in tools/sysbox on a hybrid (v1 controllers) host; each test here names the cgroup v2
path it exercises. The module runs in order and ends with the purge."""
import json
import re
import shlex
import time

from conftest import DEB, PREVIOUS_DEB, SLICE, call, cgroup_file, create_session, events, guest, guest_out
from conftest import guest_python, install, release, run, scope_dir

GiB = 1024 ** 3
# The package's defaults (conf/scopebox.conf): nothing is configured in the guest.
MEMORY_LIMIT = 2 * GiB
PIDS_LIMIT = 256
# How long the first start of the daemons may take under software emulation (a bound, not speed).
HEALTHY_BOUND_SEC = 180


def test_guest_is_systemd_on_the_unified_hierarchy_only():
    """/sys/fs/cgroup is cgroup2 and no v1 hierarchy is mounted anywhere."""
    assert guest_out("cat /proc/1/comm").strip() == "systemd"
    assert guest_out("stat -f -c %T /sys/fs/cgroup").strip() == "cgroup2fs"
    mounts = guest_out("findmnt -n -t cgroup -o TARGET || true")
    assert mounts.strip() == "", mounts
    assert guest_out("systemctl is-system-running").strip() == "running"


def test_apt_installed_the_package_and_its_socket_listens():
    """apt-get installed the .deb (no cgroup path: the package's own installation) and the
    sockets listen."""
    status = guest_out("dpkg-query -W -f '${db:Status-Status} ${Version}' scopebox")
    assert status.startswith("installed "), status
    for unit in ("scopebox-gateway.socket", "scopebox-gateway-agent.socket"):
        assert guest(f"systemctl is-active {unit}").stdout.strip() == "active", unit
    # As a balancer's probe would: /healthz answers within 2 s, so it says 503 "session manager
    # unavailable" while the manager's bus activation (its first start, slow under emulation)
    # takes longer; then the manager is up and it says 200.
    deadline = time.monotonic() + HEALTHY_BOUND_SEC
    while True:
        status, health = call("GET", "/healthz")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert status == 200 and health["ok"] is True, health


def test_doctor_finds_the_unified_hierarchy_and_nothing_failed():
    """scopeboxctl doctor's cgroup check reads /sys/fs/cgroup's file system type: "unified"."""
    checks = {c["name"]: c for c in json.loads(guest_out("scopeboxctl --json doctor"))["checks"]}
    failed = {n: c for n, c in checks.items() if c["state"] == "failed"}
    assert not failed, failed
    assert checks["cgroup"]["state"] == "ok", checks["cgroup"]


def test_smoke_flow_in_a_scope_of_the_unified_hierarchy():
    """Create, exec, write and read a file, release; the session's scope is
    /sys/fs/cgroup/scopebox.slice/scopebox-runner-<id>.scope with the v2 limits (memory.max,
    memory.swap.max, pids.max) and cgroup.kill, and it is gone after the release."""
    sid = create_session()
    scope = scope_dir(sid)
    assert int(cgroup_file(sid, "memory.max")) == MEMORY_LIMIT
    assert cgroup_file(sid, "memory.swap.max").strip() == "0"
    assert int(cgroup_file(sid, "pids.max")) == PIDS_LIMIT
    assert guest(f"test -f {scope}/cgroup.kill").returncode == 0
    assert cgroup_file(sid, "cgroup.procs").split(), "the runner is in its scope"

    res = run(sid, "print(6 * 7)")
    assert res["stdout"] == "42\n" and res["exit_code"] == 0, res
    status, body = call("POST", "/files", {"session_id": sid, "path": "/workspace/in.txt",
                                           "data_base64": "aGVsbG8="})
    assert status == 200 and body == {"ok": True}, body
    res = run(sid, "t = open('/workspace/in.txt').read()\nopen('/workspace/out.txt', 'w').write(t.upper())")
    assert res["exit_code"] == 0, res
    status, body = call("POST", "/files/get", {"session_id": sid, "path": "/workspace/out.txt"})
    assert status == 200 and body["data_base64"] == "SEVMTE8=", body

    release(sid)
    deadline = time.monotonic() + 30
    while guest(f"test -e {scope}").returncode == 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert guest(f"test -e {scope}").returncode == 1, "scope left after release"


def test_memory_limit_kill_is_reported_from_memory_events(session):
    """The v2 memory controller enforces memory.max; the runner reads the scope's memory.events
    (oom_kill) and reports the kill as "memory"."""
    before = events(session, "memory.events")
    res = run(session, "b = []\nwhile True: b.append(bytearray(64 * 1024 * 1024))", report=True)
    assert res["exit_reason"] == "memory" and res["exit_code"] == 128 + 9, res
    after = events(session, "memory.events")
    assert after["oom_kill"] > before["oom_kill"], (before, after)
    # The session survives its exec's kill.
    assert run(session, "print('alive')")["stdout"] == "alive\n"


def test_tasks_limit_is_reported_from_pids_events(session):
    """pids.max refuses the 257th task; the runner reads the scope's pids.events (max) and
    reports "tasks"."""
    before = events(session, "pids.events")
    code = ("import threading\nev = threading.Event()\n"
            "while True:\n    threading.Thread(target=ev.wait, daemon=True).start()\n")
    res = run(session, code, report=True)
    assert res["exit_reason"] == "tasks", res
    after = events(session, "pids.events")
    assert after["max"] > before["max"], (before, after)


# Each attempt's outcome, and whether it came before the timeout (a dropped packet costs all
# of it: refused means at once).
NET_PROBE = """
import json, socket, time
def attempt(host, port):
    start = time.monotonic()
    try:
        socket.create_connection((host, port), timeout=20).close()
        r = "connected"
    except OSError as e:
        r = type(e).__name__ + ':' + str(e.errno)
    return r, time.monotonic() - start < 10
print(json.dumps({h: attempt(h, p) for h, p in %s}))
"""


# An address the guest gets while the service runs (TEST-NET-2): the manager follows the routing
# tables, so a run cannot reach it either.
NEW_ADDRESS = "198.51.100.7"


def test_dify_run_with_network_reaches_out_but_not_the_guest():
    """A dify run with enable_network: its slirp4netns is judged by the manager's BPF programs
    attached (cgroup_sock_addr, cgroup_skb) to <run scope>/net in /sys/fs/cgroup/scopebox.slice,
    which need the unified hierarchy. The archive host of the guest's apt sources is reached; the
    guest's own addresses, where sshd listens, are not (ENETUNREACH at once), also one added after
    the manager started, though the guest itself reaches them all."""
    guest_out(f"ip address add {NEW_ADDRESS}/32 dev lo")
    try:
        own = [a["local"] for i in json.loads(guest_out("ip -4 -j address show"))
               for a in i["addr_info"] if not a["local"].startswith("127.")]
        assert NEW_ADDRESS in own and len(own) >= 2, own
        for addr in own:
            assert guest_python(f"import socket; socket.create_connection(('{addr}', 22), timeout=10)"
                                "; print('ok')").strip() == "ok"
        sources = guest_out("cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true")
        archive = re.search(r"^(?:URIs:|deb)\s.*?\bhttps?://([^/\s:]+)", sources, re.M).group(1)
        targets = [(archive, 80)] + [(addr, 22) for addr in own]
        status, body = call("POST", "/v1/sandbox/run", {"language": "python3", "enable_network": True,
                                                        "code": NET_PROBE % json.dumps(targets)}, dify=True)
    finally:
        guest_out(f"ip address del {NEW_ADDRESS}/32 dev lo")
    assert status == 200 and body["code"] == 0, body
    results = json.loads(body["data"]["stdout"])
    assert results[archive] == ["connected", True], results
    for addr in own:
        assert results[addr] == ["OSError:101", True], (addr, results)
    # The plain contract: a dify run prints.
    status, body = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)",
                                                    "enable_network": True}, dify=True)
    assert status == 200 and body["code"] == 0 and body["data"]["stdout"] == "1\n", body


# Run by root in the guest: a child moves itself into the cgroup given, then connects; prints what
# became of each connect, from inside and (the control) from the root shell's own cgroup.
# IPAddressDeny= drops the packets (cgroup_skb): a refused TCP connect times out.
UNIT_PROBE = """
import json, os, socket, sys
cgroup, targets = sys.argv[1], json.loads(sys.argv[2])
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as e:
        return "errno:%s" % e.errno
out = {"outside": [connect(h, p) for h, p in targets]}
r, w = os.pipe()
if os.fork() == 0:
    with open(cgroup + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    os.write(w, json.dumps([connect(h, p) for h, p in targets]).encode())
    os._exit(0)
os.close(w)
out["inside"] = json.loads(os.read(r, 65536))
os.wait()
print(json.dumps(out))
"""
LINK_LOCAL = "169.254.77.1"


def test_daemons_ip_address_deny_is_enforced_by_the_unified_hierarchy():
    """IPAddressDeny= of the gateway (any) and of the storage agent (link-local, the metadata
    addresses) are cgroup BPF programs systemd attaches to /sys/fs/cgroup/system.slice/<unit>,
    which only the unified hierarchy has (on a hybrid host systemd only logs): a process moved
    into the unit's cgroup loses what the unit denies (its SYNs dropped), and only that, while
    the root shell reaches the same addresses (the archive host; sshd on a link-local address
    added to lo for the test)."""
    sources = guest_out("cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true")
    archive = re.search(r"^(?:URIs:|deb)\s.*?\bhttps?://([^/\s:]+)", sources, re.M).group(1)
    archive_ip = guest_python(f"import socket; print(socket.gethostbyname('{archive}'))").strip()
    cases = {"scopebox-gateway.service": [((archive_ip, 80), "timeout")],
             "scopebox-storage-agent.service": [((archive_ip, 80), "connected"), ((LINK_LOCAL, 22), "timeout")]}
    guest_out(f"ip address add {LINK_LOCAL}/32 dev lo")
    try:
        for unit, expected in cases.items():
            guest_out(f"systemctl start {unit}")
            cgroup = "/sys/fs/cgroup" + guest_out(f"systemctl show -p ControlGroup --value {unit}").strip()
            targets = [list(t) for t, _ in expected]
            out = json.loads(guest_out(f"python3 -c {shlex.quote(UNIT_PROBE)} {shlex.quote(cgroup)} "
                                       f"{shlex.quote(json.dumps(targets))}"))
            assert out["inside"] == [v for _, v in expected], (unit, out)
            assert out["outside"] == ["connected"] * len(targets), (unit, out)
    finally:
        guest_out(f"ip address del {LINK_LOCAL}/32 dev lo")


def test_data_stack_plots_in_the_sandbox_and_is_refused_nothing(session):
    """The data stack as apt resolved it in the guest: numpy on OpenBLAS (checked in the
    sandbox's own maps), pandas and a matplotlib PNG from a session in
    /sys/fs/cgroup/scopebox.slice/scopebox-runner-<id>.scope, and the sandbox refuses it nothing
    (OpenBLAS places each buffer with mbind(MPOL_PREFERRED, no nodes), which the filter allows)."""
    code = ("import numpy as np, pandas as pd, matplotlib.pyplot as plt\n"
            "a = np.arange(4.0).reshape(2, 2)\nprint((a @ a).tolist(), pd.Series([1, 2]).sum())\n"
            "print(any('openblas' in l for l in open('/proc/self/maps')))\n"
            "plt.plot([1, 2, 3]); plt.title('图表'); plt.savefig('/workspace/outputs/p.png')\n")
    res = run(session, code)
    assert res["exit_code"] == 0 and res["stdout"] == "[[2.0, 3.0], [6.0, 11.0]] 3\nTrue\n", res
    assert [(f["name"], f["mime_type"]) for f in res["files"]] == [("p.png", "image/png")], res
    assert "blocked_syscalls" not in res, res


def test_upgrade_from_the_previous_package_keeps_a_live_session_and_the_configuration():
    """apt-get installs the package over the previous one (the last that passed this stage, or
    this one): the live session's scope in /sys/fs/cgroup/scopebox.slice stays, with its
    workspace; the operator's configuration and the key stay; the socket comes back."""
    install(PREVIOUS_DEB)
    key = guest_out("cat /etc/scopebox/api-key")
    sid = create_session()
    try:
        assert run(sid, "open('/workspace/kept.txt', 'w').write('before')")["exit_code"] == 0
        guest_out("echo '# operator was here' >> /etc/scopebox/scopebox.conf")
        install(DEB)
        assert guest_out("cat /etc/scopebox/api-key") == key
        assert "# operator was here" in guest_out("cat /etc/scopebox/scopebox.conf").splitlines()
        assert guest("systemctl is-active scopebox-gateway.socket").stdout.strip() == "active"
        assert guest(f"test -d {scope_dir(sid)}").returncode == 0
        res = run(sid, "print(open('/workspace/kept.txt').read())")
        assert res["stdout"] == "before\n", res
    finally:
        release(sid)


DAEMONS = ("scopebox-gateway.socket", "scopebox-gateway.service", "scopebox-session-manager.service",
           "scopebox-storage-agent.service")


def manager_call(method, sid):
    """A call of the session manager's on a session, as the gateway makes it (root here)."""
    return guest(f"busctl --json=short call io.scopebox.SessionManager1 /io/scopebox/SessionManager1 "
                 f"io.scopebox.SessionManager1 {method} s {sid}")


def test_pause_freezes_the_sandbox_below_the_scope_and_not_the_runner():
    """PauseSession (the E2B API's pause) on cgroup v2: the stateful kernel moves into
    /sys/fs/cgroup/scopebox.slice/scopebox-runner-<id>.scope/payload, frozen (cgroup.freeze),
    the runner stays in the scope; the session answers 409 "session is paused" and keeps its
    interpreter across ResumeSession; a release of a paused session leaves no scope."""
    status, created = call("POST", "/sessions", {"stateful": True})
    assert status == 200, created
    sid = created["session_id"]
    assert run(sid, "x = 6 * 7")["exit_code"] == 0
    r = manager_call("PauseSession", sid)
    assert r.returncode == 0, r.stdout + r.stderr
    payload = f"{scope_dir(sid)}/payload"
    deadline = time.monotonic() + 10
    while "frozen 1" not in guest_out(f"cat {payload}/cgroup.events") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "frozen 1" in guest_out(f"cat {payload}/cgroup.events")
    assert guest_out(f"cat {payload}/cgroup.procs").split(), "the kernel is in the frozen cgroup"
    runner = cgroup_file(sid, "cgroup.procs").split()
    assert [guest_out(f"cat /proc/{p}/comm").strip() for p in runner] == ["scopebox-runner"], runner
    status, body = call("POST", "/exec", {"session_id": sid, "code": "print(x)"})
    assert status == 409 and body == {"detail": "session is paused"}, body
    assert manager_call("PauseSession", sid).returncode != 0, "a second pause is refused"
    r = manager_call("ResumeSession", sid)
    assert r.returncode == 0 and json.loads(r.stdout)["data"] == [True], r.stdout + r.stderr
    assert run(sid, "print(x)")["stdout"] == "42\n"
    assert manager_call("PauseSession", sid).returncode == 0
    release(sid)
    deadline = time.monotonic() + 30
    while guest(f"test -e {scope_dir(sid)}").returncode == 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert guest(f"test -e {scope_dir(sid)}").returncode == 1, "scope left after the release"


def test_restart_of_every_daemon_keeps_a_live_session(session):
    """The manager takes its sessions back after a restart: the scope
    /sys/fs/cgroup/scopebox.slice/scopebox-runner-<id>.scope and its workspace stay."""
    res = run(session, "open('/workspace/kept.txt', 'w').write('before')")
    assert res["exit_code"] == 0, res
    procs = cgroup_file(session, "cgroup.procs").split()
    guest_out("systemctl restart " + " ".join(DAEMONS))
    for unit in ("scopebox-gateway.socket", "scopebox-session-manager.service"):
        assert guest(f"systemctl is-active {unit}").stdout.strip() == "active", unit
    res = run(session, "print(open('/workspace/kept.txt').read())")
    assert res["stdout"] == "before\n", res
    assert set(procs) & set(cgroup_file(session, "cgroup.procs").split()), "the runner kept its scope"


def test_purge_leaves_no_scope_and_no_configuration():
    """apt-get purge with a live session: no unit of the package is left active and no
    scopebox-runner-*.scope is left in /sys/fs/cgroup/scopebox.slice."""
    sid = create_session()
    assert guest(f"test -d {scope_dir(sid)}").returncode == 0
    r = guest("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q scopebox", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    units = guest_out("systemctl list-units --all --no-legend --plain 'scopebox*'")
    assert not [line for line in units.splitlines() if " active " in f" {line} "], units
    scopes = guest_out(f"ls -d {SLICE}/scopebox-runner-*.scope 2>/dev/null || true")
    assert scopes.strip() == "", scopes
    assert guest("pgrep -f /usr/libexec/scopebox/").returncode == 1
    for path in ("/etc/scopebox", "/var/lib/scopebox", "/var/cache/scopebox"):
        assert guest(f"test -e {path}").returncode == 1, path
