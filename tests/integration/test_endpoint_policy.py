# SPDX-License-Identifier: LGPL-2.1-or-later
"""The storage endpoint policy as it ships: no SANDBOX_STORAGE_ALLOWED_NETWORKS or _ENDPOINTS, no
loopback allowlist (docs/storage.md). A public-range S3 stand-in (tests/storage/s3server) runs in a
network namespace this test creates, reached through a veth pair from the host's namespace (which
the private systemd shares): sessions archive to it and restore from it. The addresses the host
answers for itself although no interface lists them as its own — one inside a prefix added to lo,
one in a `local` (AnyIP) route — are refused by name (io.scopebox.Error.StorageRefused), and a
listener on 0.0.0.0 that would answer there gets no connection. When the agent cannot ask the
kernel (its unit without AF_NETLINK, as before issue 30), it fails closed: PolicyUnavailable, no
connection, nothing skipped. Every namespace, address and route is removed, even on failure."""
import contextlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import REPO, STORAGE_AGENT, create_session, delete_session, in_system, journal_cursor, request, run
from conftest import storage_put as put

SERVER = REPO / "tests/storage/s3server/run"
SECRET = "ScopeboxTestSecretKey/0123456789+abcdefgh"
NS = "scopebox-epol"
VETH_HOST, VETH_NS = "sbepol0", "sbepol1"
# Public, non-reserved addresses (11.0.0.0/8 is an ordinary unicast block): none of the documented
# internal ranges applies, only the kernel's routes tell these apart.
HOST_ADDR, SERVER_ADDR = "11.130.0.1", "11.130.0.2"
LO_PREFIX, LO_TARGET = "11.99.0.1/24", "11.99.0.7"
LOCAL_ROUTE, LOCAL_TARGET = "11.98.0.0/24", "11.98.0.5"
REFUSED = "io.scopebox.Error.StorageRefused"
UNAVAILABLE = "io.scopebox.Error.PolicyUnavailable"


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check:
        assert r.returncode == 0, (args, r.stderr)
    return r


def remove_network():
    """Whatever an earlier run may have left: the namespace (its veth end goes with it), the host's
    end, the lo prefix, the local route. Missing ones are not an error."""
    ip("netns", "del", NS, check=False)
    ip("link", "del", VETH_HOST, check=False)
    ip("addr", "del", LO_PREFIX, "dev", "lo", check=False)
    ip("route", "del", "local", LOCAL_ROUTE, "dev", "lo", "table", "local", check=False)


def cgroup_hierarchy():
    """Which cgroup setup the service runs on here: unified (v2) or hybrid/legacy (v1 controllers)."""
    fs = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    if fs == "cgroup2fs":
        return "unified (cgroup v2)"
    return "hybrid (cgroup v1 controllers" + (", cgroup2 on /sys/fs/cgroup/unified)"
                                              if os.path.ismount("/sys/fs/cgroup/unified") else ")")


@pytest.fixture(scope="module", autouse=True)
def record_cgroup_hierarchy():
    print(f"\ncgroup hierarchy of this run: {cgroup_hierarchy()}")


@pytest.fixture(scope="module")
def public_s3():
    """The S3 stand-in at http://11.130.0.2:<port>, in its own namespace behind a veth pair."""
    remove_network()
    data = tempfile.mkdtemp(prefix="scopebox-epol-")
    try:
        ip("netns", "add", NS)
        ip("-n", NS, "link", "set", "lo", "up")
        ip("link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS)
        ip("link", "set", VETH_NS, "netns", NS)
        ip("addr", "add", f"{HOST_ADDR}/30", "dev", VETH_HOST)
        ip("link", "set", VETH_HOST, "up")
        ip("-n", NS, "addr", "add", f"{SERVER_ADDR}/30", "dev", VETH_NS)
        ip("-n", NS, "link", "set", VETH_NS, "up")
        ip("-n", NS, "route", "add", "default", "via", HOST_ADDR)
        # Started inside the namespace, listening on all of its addresses; "run start" probes it on
        # the namespace's own loopback.
        out = subprocess.run(["ip", "netns", "exec", NS, "env", "S3_TEST_HOST=0.0.0.0", str(SERVER), "start", "0",
                              data], capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        port = int(pathlib.Path(data, "port").read_text())
        endpoint = f"http://{SERVER_ADDR}:{port}"
        # The host reaches it through the veth, as an ordinary remote host.
        route = ip("route", "get", SERVER_ADDR).stdout
        assert f"dev {VETH_HOST}" in route and not route.startswith("local"), route
        yield {"endpoint": endpoint, "data": data}
    finally:
        subprocess.run([str(SERVER), "stop", data], capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)
        remove_network()


def storage(endpoint, prefix="policy/"):
    return {"provider": "s3", "prefix": prefix, "s3_bucket": "scopebox-test", "s3_region": "us-east-1",
            "s3_endpoint": endpoint, "s3_access_key": "AKIDSCOPEBOXTEST", "s3_secret_key": SECRET}


def server_log(s3):
    """The S3 requests the stand-in answered (its hooks answer loopback peers: asked from inside)."""
    port = s3["endpoint"].rsplit(":", 1)[1]
    r = subprocess.run(["ip", "netns", "exec", NS, "curl", "-fsS", f"http://127.0.0.1:{port}/__test__/log"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# Runs inside the system that runs scopebox: one call to the storage agent, the answer as JSON.
AGENT_CALL = r'''
import json, os, sys
import dbus

agent = dbus.Interface(dbus.SystemBus().get_object("io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1"),
                       "io.scopebox.StorageAgent1")
def plain(v):
    if isinstance(v, dbus.Boolean):
        return bool(v)
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, int):
        return int(v)
    return str(v)

method, args = sys.argv[1], json.loads(sys.argv[2])
try:
    out = getattr(agent, method)(*args, timeout=120)
    if method == "OpenArchive":
        os.close(out[1].take())
        out = [out[0]]
    print(json.dumps({"result": plain(out) if out is not None else None}))
except dbus.exceptions.DBusException as e:
    print(json.dumps({"error": e.get_dbus_name(), "message": e.get_dbus_message()}))
'''


def agent_call(method, *args):
    r = in_system("/usr/bin/python3", "-c", AGENT_CALL, method, json.dumps(args))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@contextlib.contextmanager
def listener():
    """A TCP listener on 0.0.0.0 (every address of the host, those it answers for by route too):
    yields (port, accepted), accepted counting the connections it got."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(16)
    accepted = []
    stop = threading.Event()

    def serve():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            accepted.append(peer)
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        stop.set()
        t.join()
        srv.close()


def test_the_install_is_the_default_one():
    """What this file tests is the installed default: the agent's environment and configuration name
    no allowlist, and its unit lets it ask the kernel for routes."""
    env = in_system("systemctl", "show", "-p", "Environment", "-p", "DropInPaths", STORAGE_AGENT, check=True).stdout
    assert "SANDBOX_STORAGE_ALLOWED" not in env, env
    conf = in_system("cat", "/etc/scopebox/scopebox.conf", check=True).stdout
    assert not [line for line in conf.splitlines() if line.strip().startswith("SANDBOX_STORAGE_ALLOWED")], conf
    families = in_system("systemctl", "show", "-p", "RestrictAddressFamilies", STORAGE_AGENT, check=True).stdout
    assert "AF_NETLINK" in families, families


def test_a_public_endpoint_archives_and_restores(public_s3):
    st = storage(public_s3["endpoint"], prefix=f"policy{time.time_ns()}/")
    stem = f"epol_{time.time_ns()}"
    sid = create_session(archive_key=stem, storage=st)
    run(sid, "open('/workspace/public.txt', 'w').write('through the veth')")
    r = delete_session(sid)
    assert (r.status, r.json) == (200, {"ok": True, "archive": "stored"}), r
    key = f"{st['prefix']}workspaces/{stem}.tgz"
    puts = [e for e in server_log(public_s3) if e["method"] == "PUT" and e["key"] == key]
    assert puts and puts[-1]["status"] == 200, puts
    sid2 = create_session(archive_key=stem, storage=st)
    try:
        assert run(sid2, "print(open('/workspace/public.txt').read())")["stdout"] == "through the veth\n"
    finally:
        delete_session(sid2, discard=True, archive_key=stem, storage=st)
    gets = [e for e in server_log(public_s3) if e["method"] == "GET" and e["key"] == key]
    assert gets and gets[-1]["status"] == 200, gets
    # The object endpoints take the same block.
    r = put(st, "mineru/public.pdf", b"%PDF")
    assert r.status == 200, r


@contextlib.contextmanager
def host_route(kind):
    """An address the host answers for although no interface has it: inside a prefix added to lo
    ('prefix'), or in a local route ('local'). Yields the target address; removed afterwards."""
    if kind == "prefix":
        ip("addr", "add", LO_PREFIX, "dev", "lo")
        target, undo = LO_TARGET, ("addr", "del", LO_PREFIX, "dev", "lo")
    else:
        ip("route", "add", "local", LOCAL_ROUTE, "dev", "lo")
        target, undo = LOCAL_TARGET, ("route", "del", "local", LOCAL_ROUTE, "dev", "lo", "table", "local")
    try:
        yield target
    finally:
        ip(*undo, check=False)


@pytest.mark.parametrize("kind", ["prefix", "local"], ids=["inside-a-prefix-on-lo", "local-route"])
def test_addresses_the_host_answers_for_are_refused(kind):
    with host_route(kind) as target, listener() as (port, accepted):
        # The target is live: a connection from the host reaches the listener.
        with socket.create_connection((target, port), timeout=5):
            pass
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted, f"nothing listens at {target}:{port}: the test would prove nothing"
        accepted.clear()
        # Not an interface address: the list the policy used to consult does not have it.
        assert target not in ip("-4", "addr").stdout
        assert ip("route", "get", target).stdout.startswith("local "), ip("route", "get", target).stdout

        st = storage(f"http://{target}:{port}")
        stem = f"ssrf_{kind}_{time.time_ns()}"
        cursor = journal_cursor()
        # By name, from the agent itself: every method that connects.
        refused = {"error": REFUSED, "message": "storage endpoint not allowed"}
        assert agent_call("OpenArchive", json.dumps(st), stem) == refused
        assert agent_call("DeleteArchive", json.dumps(st), stem) == refused
        assert agent_call("DeleteObject", json.dumps(st), "mineru/x") == refused
        assert agent_call("QuarantineArchive", json.dumps(st), stem) == refused
        assert agent_call("ListQuarantinedArchives", json.dumps(st)) == refused
        # Through the API: never a success (400 once the gateway maps the name; the create may not
        # start empty, nor the put store anything).
        r = request("POST", "/sessions", {"archive_key": stem, "storage": st})
        assert r.status != 200, r
        r = put(st, "mineru/x.pdf", b"x")
        assert r.status != 200, r
        r = request("POST", "/storage/gc", {"max_age_seconds": 60, "storage": st})
        assert (r.status, r.json) == (200, {"deleted": 0, "scanned": 0, "freed_bytes": 0}), r
        assert accepted == [], f"the agent connected to {target}:{port}: {accepted}"
        log = in_system("journalctl", "-o", "cat", "--no-pager", f"--after-cursor={cursor}",
                        "-u", STORAGE_AGENT).stdout
        assert "the kernel routes it to this host itself" in log, log[-3000:]
        assert SECRET not in log


@contextlib.contextmanager
def agent_without_netlink():
    """The agent's unit as it was before issue 30: no AF_NETLINK (a runtime drop-in; removed and the
    agent restarted afterwards)."""
    path = f"/run/systemd/system/{STORAGE_AGENT}.d/test-no-netlink.conf"
    in_system("sh", "-c", f"mkdir -p {os.path.dirname(path)} && printf '[Service]\\nRestrictAddressFamilies=\\n"
              f"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\\n' > {path}", check=True)
    in_system("systemctl", "daemon-reload", check=True)
    in_system("systemctl", "restart", STORAGE_AGENT, check=True)
    try:
        yield
    finally:
        in_system("rm", "-f", path)
        in_system("systemctl", "daemon-reload")
        in_system("systemctl", "restart", STORAGE_AGENT)


def test_without_the_route_lookup_the_policy_fails_closed(public_s3):
    st = storage(public_s3["endpoint"], prefix=f"closed{time.time_ns()}/")
    stem = f"closed_{time.time_ns()}"
    before = len(server_log(public_s3))
    with agent_without_netlink():
        families = in_system("systemctl", "show", "-p", "RestrictAddressFamilies", STORAGE_AGENT).stdout
        assert "AF_NETLINK" not in families, families
        unavailable = agent_call("OpenArchive", json.dumps(st), stem)
        assert unavailable["error"] == UNAVAILABLE, unavailable
        assert "retry later" in unavailable["message"], unavailable
        assert agent_call("DeleteObject", json.dumps(st), "mineru/x")["error"] == UNAVAILABLE
        r = request("POST", "/storage/gc", {"max_age_seconds": 60, "storage": st})
        assert r.status != 200, r  # never the zeros of a refused block
        # A create with that block neither starts empty nor succeeds.
        r = request("POST", "/sessions", {"archive_key": stem, "storage": st})
        assert r.status != 200, r
    # Nothing reached the server meanwhile.
    assert server_log(public_s3)[before:] == []
    # Back to the shipped unit: the same block works.
    assert agent_call("OpenArchive", json.dumps(st), stem) == {"result": [False]}
