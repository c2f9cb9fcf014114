# SPDX-License-Identifier: LGPL-2.1-or-later
"""make run / make stop: a second run restarts cleanly, and stop leaves no process, mount,
cgroup or scope behind. Runs last: it restarts the service set."""
import glob
import os
import pathlib
import subprocess
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
HOST_SYSTEMD = os.path.isdir("/run/systemd/system") and \
    pathlib.Path("/proc/1/comm").read_text().strip() == "systemd"


def tools_run(*args):
    return subprocess.run([str(REPO / "tools/run"), *args], capture_output=True, text=True, timeout=180)


def healthy():
    try:
        with urllib.request.urlopen("http://127.0.0.1:48217/healthz", timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


def test_run_twice_restarts_cleanly():
    for _ in range(2):
        r = tools_run()
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert "SANDBOX_URL=http://127.0.0.1:48217" in lines
        key = [l for l in lines if l.startswith("SANDBOX_API_KEY=")]
        assert key and len(key[0]) > len("SANDBOX_API_KEY=") + 20
        assert healthy()


@pytest.mark.skipif(HOST_SYSTEMD, reason="tools/sysbox is only used where systemd is not PID 1")
def test_stop_leaves_nothing_behind():
    r = tools_run()
    assert r.returncode == 0, r.stderr
    # A live session, so that stop has a scope and a runner to clean up.
    key = open("/etc/scopebox/api-key").readline().strip()
    req = urllib.request.Request("http://127.0.0.1:48217/sessions", data=b"{}", method="POST",
                                 headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200

    r = tools_run("--stop")
    assert r.returncode == 0, r.stderr
    assert not healthy()
    assert not os.path.exists("/run/scopebox-sysbox")
    # No cgroup of the private system in any hierarchy.
    assert glob.glob("/sys/fs/cgroup/*/scopebox-sysbox") == []
    assert glob.glob("/sys/fs/cgroup/scopebox-sysbox") == []
    # No process of it: nothing runs our binaries or a second systemd --system.
    for comm_path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmd = pathlib.Path(comm_path).read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        assert b"scopebox-runner" not in cmd and b"scopebox-session-manager" not in cmd, cmd
        assert b"systemd --system --unit=scopebox-sysbox.target" not in cmd, cmd
    # No mount of it left in the host's namespace.
    mounts = pathlib.Path("/proc/self/mountinfo").read_text()
    assert "/run/credentials" not in mounts and "scopebox" not in mounts
    # The host's /dev/log was not replaced by a dangling link.
    assert not os.path.islink("/dev/log") or os.path.exists("/dev/log")

    r = tools_run()
    assert r.returncode == 0, r.stderr
    assert healthy()
