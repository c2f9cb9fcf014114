# SPDX-License-Identifier: LGPL-2.1-or-later
"""The service set as systemd runs it: bus activation, users, bus policy, idle reaping."""
import time

import pytest

from conftest import create_session, in_system, manager_sessions, request, run


def test_storage_agent_is_bus_activated_under_its_own_user():
    r = in_system("busctl", "call", "io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1",
                  "io.scopebox.StorageAgent1", "GetVersion")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('s "'), r.stdout
    pid = in_system("systemctl", "show", "-p", "MainPID", "--value", "scopebox-storage-agent.service").stdout.strip()
    assert pid and pid != "0"
    user = in_system("ps", "-o", "user=", "-p", pid).stdout.strip()
    assert user == "scopebox-storage"


def test_session_manager_runs_as_root_and_gateway_as_its_user():
    for unit, want in (("scopebox-gateway.service", "scopebox-gateway"),
                       ("scopebox-session-manager.service", "root")):
        request("GET", "/healthz", key=None)  # make sure both are up
        pid = in_system("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
        assert pid and pid != "0", unit
        assert in_system("ps", "-o", "user=", "-p", pid).stdout.strip() == want


def test_bus_policy_refuses_other_users():
    # Only root and scopebox-gateway may call the session manager or the storage agent.
    for dest, path, iface, method in (
            ("io.scopebox.SessionManager1", "/io/scopebox/SessionManager1", "io.scopebox.SessionManager1",
             "GetHealth"),
            ("io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1", "io.scopebox.StorageAgent1",
             "GetVersion")):
        r = in_system("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                      "busctl", "call", dest, path, iface, method)
        assert r.returncode != 0
        assert "Access denied" in r.stderr or "AccessDenied" in r.stderr, r.stderr
    r = in_system("setpriv", "--reuid=scopebox-gateway", "--regid=scopebox-gateway", "--clear-groups",
                  "busctl", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                  "io.scopebox.SessionManager1", "GetHealth")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ba{sv} true"), r.stdout
    # Listing and inspecting sessions and run sandboxes is for root (scopeboxctl), not the gateway.
    for method, args in (("ListSessions", []), ("ListRunSandboxes", []), ("GetSession", ["s", "0" * 32])):
        r = in_system("setpriv", "--reuid=scopebox-gateway", "--regid=scopebox-gateway", "--clear-groups",
                      "busctl", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                      "io.scopebox.SessionManager1", method, *args)
        assert r.returncode != 0 and ("Access denied" in r.stderr or "AccessDenied" in r.stderr), (method, r)
    for method in ("ListSessions", "ListRunSandboxes"):
        r = in_system("busctl", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                      "io.scopebox.SessionManager1", method)
        assert r.returncode == 0 and r.stdout.startswith("a(sa{sv})"), (method, r)



def test_manager_options_are_checked():
    # A method's a{sv} of options: an unknown key, or a known one of another type, is refused
    # with InvalidArgs naming it, before anything is started.
    call = ("busctl", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
            "io.scopebox.SessionManager1", "CreateSession")
    for options, text in ((["1", "bogus", "b", "true"], "Unknown option 'bogus'."),
                          (["1", "stateful", "s", "yes"], "Option 'stateful' must be of type 'b'."),
                          (["1", "idle_ttl_sec", "u", "5"], "Option 'idle_ttl_sec' must be of type 't'."),
                          (["2", "stateful", "b", "true", "hangup", "s", "x"],
                           "Option 'hangup' must be of type 'h'.")):
        r = in_system(*call, "a{sv}", *options)
        assert r.returncode != 0 and text in r.stderr, (options, r)
    r = in_system("busctl", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                  "io.scopebox.SessionManager1", "ReleaseSession", "sa{sv}", "0" * 32, "1", "discard", "t", "1")
    assert r.returncode != 0 and "Option 'discard' must be of type 'b'." in r.stderr, r

def test_idle_session_is_reaped():
    sid = create_session(idle_ttl_sec=2)
    assert run(sid, "print(1)")["stdout"] == "1\n"
    unit = f"scopebox-runner-{sid}.scope"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if in_system("systemctl", "is-active", unit).stdout.strip() != "active":
            break
        time.sleep(0.5)
    r = request("POST", "/exec", {"session_id": sid, "code": "print(1)"})
    assert r.status == 404 and r.json == {"detail": "session not found or not running"}, r
    assert in_system("systemctl", "is-active", unit).stdout.strip() != "active"


def live_sessions():
    r = in_system("busctl", "get-property", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                  "io.scopebox.SessionManager1", "Sessions")
    assert r.stdout.startswith("u "), r
    return int(r.stdout.split()[1])


def test_max_sessions_limit():
    # SANDBOX_MAX_SESSIONS defaults to 16; other tests' sessions may be alive too, so create
    # until refused and check the count the manager reports at that moment.
    sids = []
    try:
        for _ in range(17):
            r = request("POST", "/sessions", {})
            if r.status != 200:
                break
            sids.append(r.json["session_id"])
        assert r.status == 429 and r.json == {"detail": "too many active sessions"}, r
        # Counted are the sidecar sessions; dify runs' and the run pool's (ephemeral) never are, nor listed.
        assert sum(not p["ephemeral"] for p in manager_sessions().values()) == 16
        assert not any(p["ephemeral"] for p in manager_sessions().values())
        assert live_sessions() >= 16
    finally:
        for sid in sids:
            request("DELETE", f"/sessions/{sid}", {})
    r = request("POST", "/sessions", {})
    assert r.status == 200
    request("DELETE", f"/sessions/{r.json['session_id']}", {})


@pytest.mark.parametrize("daemon,iface,path,method", [
    ("scopebox-session-manager", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1", "ResetKernel"),
    ("scopebox-storage-agent", "io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1", "CollectGarbage"),
])
def test_installed_interface_xml_is_what_the_daemon_serves(daemon, iface, path, method):
    # /usr/share/dbus-1/interfaces/ has the XML the daemon makes from its vtable, and the running
    # daemon introspects the same methods, signatures and argument names.
    import xml.etree.ElementTree as ET

    installed = in_system("cat", f"/usr/share/dbus-1/interfaces/{iface}.xml")
    assert installed.returncode == 0, installed.stderr
    printed = in_system(f"/usr/libexec/scopebox/{daemon}", f"--bus-introspect={iface}")
    assert printed.returncode == 0 and printed.stdout == installed.stdout, printed
    assert in_system(f"/usr/libexec/scopebox/{daemon}", "--bus-introspect=list").stdout == iface + "\n"
    wrong = in_system(f"/usr/libexec/scopebox/{daemon}", "--bus-introspect=org.example.Nope1")
    assert wrong.returncode != 0 and "list" in wrong.stderr, wrong
    live = in_system("busctl", "introspect", "--xml-interface", iface, path)
    assert live.returncode == 0, live.stderr

    def methods(xml):
        node = ET.fromstring(xml.split("\n", 2)[2] if xml.startswith("<!DOCTYPE") else xml)
        return {m.get("name"): [(a.get("type"), a.get("name"), a.get("direction")) for a in m.iter("arg")]
                for i in node.iter("interface") if i.get("name") == iface for m in i.iter("method")}

    want = methods(installed.stdout)
    assert method in want, want
    assert methods(live.stdout) == want
