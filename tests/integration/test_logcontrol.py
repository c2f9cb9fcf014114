# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every daemon implements org.freedesktop.LogControl1 under its unit's BusName=, so
`systemctl service-log-level` changes its log level at run time; debug entries appear only
while the level is debug; only root may change it; and each daemon tells systemd what it is doing
(STATUS=) and is watched (WatchdogSec=)."""
import json
import re
import time

import pytest

from conftest import create_session, delete_session, in_system, request, run

SERVICES = ["scopebox-gateway.service", "scopebox-session-manager.service", "scopebox-storage-agent.service"]


def activate(service):
    """Make sure the daemon runs: the gateway and manager through a request, the agent by a call."""
    if service == "scopebox-storage-agent.service":
        r = in_system("busctl", "call", "io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1",
                      "io.scopebox.StorageAgent1", "GetVersion")
        assert r.returncode == 0, r.stderr
    else:
        r = request("GET", "/healthz")
        assert r.status == 200, r


def show(service, prop):
    r = in_system("systemctl", "show", "-P", prop, service, check=True)
    return r.stdout.strip()


@pytest.mark.parametrize("service", SERVICES)
def test_service_log_level_round_trip(service):
    activate(service)
    r = in_system("systemctl", "service-log-level", service)
    assert r.returncode == 0, r.stderr
    before = r.stdout.strip()
    assert before in ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"), before
    try:
        activate(service)
        r = in_system("systemctl", "service-log-level", service, "debug")
        assert r.returncode == 0, r.stderr
        r = in_system("systemctl", "service-log-level", service)
        assert r.stdout.strip() == "debug", r
        bus_name = show(service, "BusName")
        r = in_system("busctl", "get-property", bus_name, "/org/freedesktop/LogControl1",
                      "org.freedesktop.LogControl1", "SyslogIdentifier", check=True)
        assert r.stdout.strip() == f's "{service.removesuffix(".service")}"', r.stdout
        r = in_system("systemctl", "service-log-level", service, "loud")
        assert r.returncode != 0
    finally:
        activate(service)
        in_system("systemctl", "service-log-level", service, before)


def exec_debug_entries(sid, code):
    """Runs code in the session; the gateway's debug entries about it, read once the journal holds
    the request's own (info) entry, so that an absence means something."""
    cursor = in_system("journalctl", "-n", "0", "--show-cursor", "-q", check=True).stdout
    cursor = cursor.strip().split("cursor: ")[-1]
    run(sid, code)
    deadline = time.monotonic() + 10
    while True:
        r = in_system("journalctl", "-u", "scopebox-gateway", f"--after-cursor={cursor}", "-o", "json", "-q")
        entries = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        if any(e.get("SCOPEBOX_HTTP_PATH") == "/exec" and e.get("SCOPEBOX_SESSION_ID") == sid for e in entries):
            break
        assert time.monotonic() < deadline, "the exec's request entry never reached the journal"
        time.sleep(0.1)
    return [e["MESSAGE"] for e in entries
            if e.get("PRIORITY") == "7" and f"Exec in session {sid} finished" in e.get("MESSAGE", "")]


def test_debug_entries_follow_the_level():
    """The gateway logs each exec's outcome at debug: absent at info, present once raised."""
    sid = create_session()
    service = "scopebox-gateway.service"
    try:
        assert in_system("systemctl", "service-log-level", service).stdout.strip() == "info"
        assert exec_debug_entries(sid, "print(1)") == []
        in_system("systemctl", "service-log-level", service, "debug", check=True)
        try:
            assert len(exec_debug_entries(sid, "print(2)")) == 1
        finally:
            in_system("systemctl", "service-log-level", service, "info", check=True)
        assert exec_debug_entries(sid, "print(3)") == []
    finally:
        delete_session(sid)


def test_only_root_may_change_the_level():
    activate("scopebox-gateway.service")
    r = in_system("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                  "busctl", "set-property", "io.scopebox.Gateway1", "/org/freedesktop/LogControl1",
                  "org.freedesktop.LogControl1", "LogLevel", "s", "debug")
    assert r.returncode != 0
    assert "denied" in r.stderr.lower() or "access" in r.stderr.lower(), r.stderr
    assert in_system("systemctl", "service-log-level", "scopebox-gateway.service").stdout.strip() != "debug"


@pytest.mark.parametrize("service", SERVICES)
def test_status_and_watchdog(service):
    activate(service)
    assert show(service, "WatchdogUSec") == "1min"
    status = show(service, "StatusText")
    expected = {"scopebox-gateway.service": r"Serving on \d+ sockets?, \d+ requests? in flight",
                "scopebox-session-manager.service": r"\d+ sessions?, \d+ execs? running",
                "scopebox-storage-agent.service": r"\d+ transfers? in progress, [1-9]\d* calls? served"}[service]
    assert re.match(expected, status), status
