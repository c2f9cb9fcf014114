# SPDX-License-Identifier: LGPL-2.1-or-later
"""The session manager's host check, end to end under its real unit: at start it logs one
structured warning per weak kernel setting, and none for the others. The kernel is shared with the
system that runs scopebox, so this side reads the same values."""
import json
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from conftest import in_system  # noqa: E402

UNIT = "scopebox-session-manager.service"

# name: (at least, at most) — an independent copy of docs/security.md §1.5.
SYSCTLS = {
    "fs.protected_symlinks": (1, None),
    "fs.protected_hardlinks": (1, None),
    "fs.protected_fifos": (1, None),
    "fs.protected_regular": (2, None),
    "dev.tty.legacy_tiocsti": (None, 0),
    "kernel.io_uring_disabled": (2, None),
    "kernel.unprivileged_bpf_disabled": (1, None),
    "kernel.perf_event_paranoid": (2, None),
    "vm.unprivileged_userfaultfd": (None, 0),
    "kernel.dmesg_restrict": (1, None),
    "kernel.kptr_restrict": (1, None),
    "fs.suid_dumpable": (None, 0),
}


def expected_weak():
    weak = {}
    for name, (lo, hi) in SYSCTLS.items():
        path = "/proc/sys/" + name.replace(".", "/")
        if not os.path.exists(path):
            continue
        value = int(pathlib.Path(path).read_text().strip())
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            weak[name] = str(value)
    return weak


def cgroup_unified():
    # Only the root of a cgroup2 hierarchy has cgroup.controllers.
    return pathlib.Path("/sys/fs/cgroup/cgroup.controllers").exists()


@pytest.fixture(scope="module")
def entries():
    try:
        r = in_system("systemctl", "is-active", "scopebox-gateway.socket")
    except OSError as e:
        pytest.skip(f"no system to look into: {e}")
    if r.stdout.strip() != "active":
        pytest.skip("scopebox is not installed and running there (tools/install, tools/run)")
    # Bus-activated: make sure this invocation exists, then read only its entries.
    assert in_system("systemctl", "start", UNIT).returncode == 0
    inv = in_system("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout.strip()
    assert inv
    r = in_system("journalctl", "--no-pager", "-o", "json", f"_SYSTEMD_INVOCATION_ID={inv}")
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def test_one_warning_per_weak_sysctl(entries):
    logged = {e["SCOPEBOX_SYSCTL"]: e for e in entries if "SCOPEBOX_SYSCTL" in e}
    weak = expected_weak()
    got = {k: v["SCOPEBOX_VALUE"] for k, v in logged.items() if k in SYSCTLS}
    assert got == weak
    for name, e in logged.items():
        assert e["PRIORITY"] == "4", e
        assert e["SCOPEBOX_RECOMMENDED"], e
        assert name in e["MESSAGE"] and e["SCOPEBOX_RECOMMENDED"] in e["MESSAGE"], e
    assert len([e for e in entries if "SCOPEBOX_SYSCTL" in e]) == len(logged), "logged twice"


def test_cgroup_hierarchy_reported_as_it_is(entries):
    logged = {e["SCOPEBOX_SYSCTL"]: e for e in entries if "SCOPEBOX_SYSCTL" in e}
    if cgroup_unified():
        assert "cgroup" not in logged
    else:
        assert logged["cgroup"]["SCOPEBOX_VALUE"] in ("hybrid", "legacy")
        assert logged["cgroup"]["SCOPEBOX_RECOMMENDED"] == "unified"


def test_swap_reported_only_where_limits_miss_it(entries):
    logged = {e["SCOPEBOX_SYSCTL"]: e for e in entries if "SCOPEBOX_SYSCTL" in e}
    areas = [l for l in pathlib.Path("/proc/swaps").read_text().splitlines()[1:] if l.strip()]
    if areas and not cgroup_unified():
        assert logged["swap"]["SCOPEBOX_RECOMMENDED"] == "off"
    else:
        assert "swap" not in logged


def test_every_setting_was_readable(entries):
    # Under the unit's sandboxing (ProtectKernelTunables, ProtectProc) every file is still readable.
    failed = [e["MESSAGE"] for e in entries
              if e["MESSAGE"].startswith("Failed to read host setting")]
    assert failed == []


def test_manager_runs_despite_weak_settings(entries):
    assert in_system("systemctl", "is-active", UNIT).stdout.strip() == "active"
