# SPDX-License-Identifier: LGPL-2.1-or-later
"""The installed units pass systemd-analyze verify; the bus policy files are well-formed XML and
activation goes through systemd only."""
import configparser
import pathlib
import subprocess

import pytest

UNITDIR = pathlib.Path("/lib/systemd/system")
UNITS = ["scopebox-gateway.socket", "scopebox-gateway.service", "scopebox-session-manager.service",
         "scopebox-storage-agent.service", "scopebox.slice"]
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
