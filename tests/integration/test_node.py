# SPDX-License-Identifier: LGPL-2.1-or-later
"""One node of a cluster (issue 18, docs/scale-out.md): the node tag (SANDBOX_NODE_ID) in every
session id and in X-Scopebox-Node, other nodes' ids answered as unknown sessions without asking the
session manager, draining (scopeboxctl drain/undrain, persisted), the capacity in /healthz and the
HAProxy agent check on 127.0.0.1:48218. Every setting is restored afterwards."""
import concurrent.futures
import contextlib
import json
import socket
import time

import pytest

from conftest import (api_key, create_session, delete_session, in_system, journal_cursor, request, run,
                      unit_environment)

GATEWAY = "scopebox-gateway.service"
MANAGER = "scopebox-session-manager.service"
AGENT = ("127.0.0.1", 48218)
TAG = "5e"
OTHER = "a7"
UNKNOWN = {"detail": "session not found or not running"}


@contextlib.contextmanager
def node(**env):
    """Gateway and manager restarted with the settings (runtime drop-ins), then restored."""
    assignments = [f"{k}={v}" for k, v in env.items()]
    with unit_environment(MANAGER, "test-node", assignments), unit_environment(GATEWAY, "test-node", assignments):
        wait_healthy()
        yield


def wait_healthy():
    for _ in range(100):
        try:
            if request("GET", "/healthz", key=None, timeout=5).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("the gateway does not answer /healthz")


def agent_line(timeout=10):
    with socket.create_connection(AGENT, timeout=timeout) as s:
        data = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                return data.decode()
            data += chunk


def fresh_health():
    """/healthz once its cached answer (1 s) is gone."""
    time.sleep(1.1)
    r = request("GET", "/healthz", key=None)
    assert r.status == 200, r
    return r.json


def ctl(*args):
    return in_system("scopeboxctl", *args)


def dify_run(code):
    return request("POST", "/v1/sandbox/run", {"language": "python3", "code": code}, key=None,
                   headers={"X-Api-Key": api_key()})


@pytest.fixture(scope="class")
def tagged():
    with node(SANDBOX_NODE_ID=TAG):
        yield


@pytest.mark.usefixtures("tagged")
class TestTagged:
    """A node with SANDBOX_NODE_ID=TAG; the settings are restored after the class."""

    def test_ids_carry_the_tag_and_responses_name_the_node(self):
        sids = [create_session() for _ in range(3)]
        try:
            for sid in sids:
                assert sid.startswith(TAG) and len(sid) == 32 and all(c in "0123456789abcdef" for c in sid), sid
            assert len(set(sids)) == 3
            assert run(sids[0], "print(6 * 7)")["stdout"] == "42\n"
            # Every response names the node: success, client error, unauthenticated, the dify API.
            for r in (request("GET", "/healthz", key=None), request("POST", "/exec", {}),
                      request("POST", "/sessions", {}, key=None), request("GET", "/nope"),
                      dify_run("print(1)")):
                assert r.headers.get("X-Scopebox-Node") == TAG, (r, r.headers)
        finally:
            for sid in sids:
                delete_session(sid)


    def test_foreign_ids_are_unknown_sessions_without_a_bus_call(self):
        own = create_session()
        try:
            foreign = OTHER + own[2:]
            unknown = TAG + "0" * 30  # ours by tag, but no such session: what the manager answers
            routes = [
                ("POST", "/exec", lambda sid: {"session_id": sid, "code": "print(1)"}),
                ("POST", "/files", lambda sid: {"session_id": sid, "path": "a.txt", "data_base64": "aGk="}),
                ("POST", "/files/get", lambda sid: {"session_id": sid, "path": "a.txt"}),
                ("POST", "/files/list", lambda sid: {"session_id": sid}),
                ("POST", "/files/reset-inputs", lambda sid: {"session_id": sid}),
            ]
            cursor = journal_cursor()
            for method, path, body in routes:
                a, b = request(method, path, body(foreign)), request(method, path, body(unknown))
                assert (a.status, a.json) == (b.status, b.json), (path, a, b)
                assert a.headers.get("X-Scopebox-Node") == TAG
            assert request("POST", "/exec", {"session_id": foreign, "code": "1"}).json == UNKNOWN
            a, b = delete_session(foreign), delete_session(unknown)
            assert (a.status, a.json) == (b.status, b.json), (a, b)
            # The foreign id never reached the manager; the session whose digits it borrowed is intact.
            entries = in_system("journalctl", "-u", MANAGER, "--after-cursor", cursor, "-o", "verbose",
                                "--no-pager").stdout
            assert foreign not in entries
            assert run(own, "print('still here')")["stdout"] == "still here\n"
        finally:
            delete_session(own)


    def test_healthz_reports_node_and_capacity(self):
        h = fresh_health()
        assert h["ok"] is True and h["node"] == TAG and h["draining"] is False
        assert isinstance(h["sessions"], int) and h["capacity"] == 16
        before = h["sessions"]
        sid = create_session()
        try:
            assert fresh_health()["sessions"] == before + 1
            assert not any(sid in str(v) for v in fresh_health().values())
        finally:
            delete_session(sid)


def test_no_header_and_plain_ids_without_a_tag():
    wait_healthy()
    r = request("GET", "/healthz", key=None)
    assert "X-Scopebox-Node" not in r.headers, r.headers
    assert fresh_health()["node"] == ""


def test_invalid_node_id_refuses_to_start():
    path = f"/run/systemd/system/{MANAGER}.d/bad-node.conf"
    in_system("sh", "-c", f"mkdir -p /run/systemd/system/{MANAGER}.d && "
              f"printf '[Service]\\nEnvironment=SANDBOX_NODE_ID=5E\\n' > {path}", check=True)
    in_system("systemctl", "daemon-reload", check=True)
    try:
        cursor = journal_cursor()
        assert in_system("systemctl", "restart", MANAGER).returncode != 0
        for _ in range(50):
            log = in_system("journalctl", "-u", MANAGER, "--after-cursor", cursor, "-o", "cat", "--no-pager").stdout
            if "SANDBOX_NODE_ID=5E is not a valid value" in log:
                break
            time.sleep(0.1)
        assert "SANDBOX_NODE_ID=5E is not a valid value" in log, log
    finally:
        in_system("rm", "-f", path)
        in_system("systemctl", "daemon-reload")
        in_system("systemctl", "reset-failed", MANAGER)
        in_system("systemctl", "restart", MANAGER)
    wait_healthy()


@contextlib.contextmanager
def drained():
    r = ctl("drain")
    assert r.returncode == 0, r.stderr
    try:
        yield
    finally:
        r = ctl("undrain")
        assert r.returncode == 0, r.stderr


def test_drain_refuses_new_sessions_and_keeps_the_old_ones():
    sid = create_session()
    try:
        assert agent_line().startswith("ready up ")
        with drained():
            r = request("POST", "/sessions", {})
            assert (r.status, r.json) == (503, {"detail": "node is draining"}), r
            assert r.headers.get("Retry-After") == "1"
            assert run(sid, "print('busy')")["stdout"] == "busy\n"
            r = dify_run("print(40 + 2)")
            assert r.status == 200 and r.json["data"]["stdout"] == "42\n", r
            h = fresh_health()
            assert h["draining"] is True and h["ok"] is True
            assert agent_line() == "drain\n"
            status = ctl("status")
            assert "Draining:             yes" in status.stdout, status.stdout
            assert json.loads(ctl("--json", "status").stdout)["draining"] is True
            assert "Draining: no new sessions" in ctl("sessions").stdout

            # Persisted: a restarted manager still drains, and its sessions are still there.
            in_system("systemctl", "restart", MANAGER, check=True)
            assert in_system("test", "-f", "/var/lib/scopebox/draining").returncode == 0
            r = request("POST", "/sessions", {})
            assert r.status == 503, r
            assert run(sid, "print('after restart')")["stdout"] == "after restart\n"
            log = in_system("journalctl", "-u", MANAGER, "-o", "json", "--no-pager",
                            "MESSAGE_ID=18594e21a0a34882916fbe6bcc8afdf1").stdout
            assert '"SCOPEBOX_DRAINING":"1"' in log
        assert in_system("test", "-e", "/var/lib/scopebox/draining").returncode != 0
        assert fresh_health()["draining"] is False
        assert "Draining:             no" in ctl("status").stdout
        assert "Draining" not in ctl("sessions").stdout
        delete_session(create_session())
    finally:
        delete_session(sid)


def test_non_root_cannot_drain():
    for user in ("nobody", "scopebox-gateway"):
        r = in_system("setpriv", f"--reuid={user}", f"--regid={'nogroup' if user == 'nobody' else user}",
                      "--clear-groups", "busctl", "call", "io.scopebox.SessionManager1",
                      "/io/scopebox/SessionManager1", "io.scopebox.SessionManager1", "SetDraining", "b", "true")
        assert r.returncode != 0 and "Access denied" in r.stderr + r.stdout, (user, r)
    assert in_system("test", "-e", "/var/lib/scopebox/draining").returncode != 0
    assert fresh_health()["draining"] is False


def test_agent_line_follows_the_capacity():
    with node(SANDBOX_MAX_SESSIONS=2):
        time.sleep(1.1)
        assert agent_line() == "ready up 100%\n"
        a = create_session()
        try:
            time.sleep(1.1)
            assert agent_line() == "ready up 50%\n"
            b = create_session()
            try:
                time.sleep(1.1)
                assert agent_line() == "ready up 0%\n"
                h = fresh_health()
                assert (h["sessions"], h["capacity"], h["ok"]) == (2, 2, True)
                assert request("POST", "/sessions", {}).status == 429
            finally:
                delete_session(b)
        finally:
            delete_session(a)


def test_agent_socket_garbage_and_floods_do_not_stall_the_gateway():
    """An unauthenticated local process on the agent port: garbage, a large write, hundreds of
    connections held open. The agent never reads, answers each connection at once and closes
    it; HTTP clients are served all the while."""
    def garbage(n):
        with contextlib.suppress(OSError):
            with socket.create_connection(AGENT, timeout=5) as s:
                s.sendall(b"\xff\x00GET / HTTP/1.1\r\n" * n)
                s.recv(64)

    held = []
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                held.append(socket.create_connection(AGENT, timeout=5))
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            floods = [pool.submit(garbage, 65536) for _ in range(16)]
            for _ in range(20):
                start = time.monotonic()
                r = request("GET", "/healthz", key=None, timeout=5)
                assert r.status == 200 and time.monotonic() - start < 1.0, r
            for f in floods:
                f.result(timeout=30)
        # Every held connection got its line (or was closed), none waits.
        answered = 0
        for s in held:
            s.settimeout(5)
            if s.recv(64).startswith(b"ready up "):
                answered += 1
        assert answered > 0
        assert agent_line().startswith("ready up ")
    finally:
        for s in held:
            s.close()
