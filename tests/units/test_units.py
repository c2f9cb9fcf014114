# SPDX-License-Identifier: LGPL-2.1-or-later
"""The installed units pass systemd-analyze verify; the bus policy files are well-formed XML and
activation goes through systemd only; the gateway's MemoryMax= follows from its budgets."""
import configparser
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
UNITDIR = pathlib.Path("/lib/systemd/system")
MIB = 1024 * 1024
UNITS = ["scopebox-gateway.socket", "scopebox-gateway-agent.socket", "scopebox-gateway-e2b.socket", "scopebox-gateway.service", "scopebox-session-manager.service",
         "scopebox-storage-agent.service", "scopebox-template.service", "scopebox.slice"]
POLICIES = ["io.scopebox.Gateway1", "io.scopebox.SessionManager1", "io.scopebox.StorageAgent1"]


@pytest.mark.parametrize("unit", UNITS)
def test_unit_verifies(unit):
    path = UNITDIR / unit
    assert path.exists(), path
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # Warnings count as failures: a unit that systemd grumbles about is a bug.
    noise = [l for l in r.stderr.splitlines() if "scopebox" in l]
    assert not noise, r.stderr


@pytest.mark.parametrize("name", POLICIES)
def test_bus_policy_is_well_formed(name):
    path = pathlib.Path("/usr/share/dbus-1/system.d") / f"{name}.conf"
    r = subprocess.run(["xmllint", "--noout", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", [p for p in POLICIES if p != "io.scopebox.Gateway1"])
def test_bus_activation_goes_through_systemd(name):
    path = pathlib.Path("/usr/share/dbus-1/system-services") / f"{name}.service"
    cp = configparser.ConfigParser()
    cp.read(path)
    s = cp["D-BUS Service"]
    assert s["Name"] == name
    assert s["Exec"] == "/bin/false"
    assert s["SystemdService"].startswith("scopebox-")


def size(text):
    m = re.fullmatch(r"(\d+)([KMGT]?)", text.strip())
    assert m, text
    return int(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " ")


def test_gateway_memory_max_covers_its_budgets():
    """MemoryMax= of the gateway = body budget + one largest body (json-c's copy while it is
    parsed) + 256 MiB, from the constants and defaults in the sources; no MemoryHigh=."""
    unit = (REPO / "units/scopebox-gateway.service.in").read_text()
    settings = dict(re.findall(r"^(Memory\w+)=(.*)$", unit, re.M))
    header = (REPO / "src/gateway/gateway-server.h").read_text()
    budget = 1 << int(re.search(r"#define HTTP_BODY_BUDGET_MIN\s+\(1ULL << (\d+)\)", header).group(1))
    conf = (REPO / "conf/scopebox.conf").read_text()
    bodies = [size(v) for v in re.findall(r"^#SANDBOX_MAX_(?:STORAGE_)?BODY_BYTES=(\S+)$", conf, re.M)]
    assert len(bodies) == 2, bodies
    # The budget is what the gateway computes at start with the default limits.
    budget = max(budget, 2 * max(bodies))
    assert size(settings["MemoryMax"]) == budget + max(bodies) + 256 * MIB, settings
    assert "MemoryHigh" not in settings
