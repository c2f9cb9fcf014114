# SPDX-License-Identifier: LGPL-2.1-or-later
"""Helpers of the production-host stage (tests/guest/run): the package installed with apt in a
Debian guest with systemd as PID 1 and only the unified cgroup v2 hierarchy (tools/guest). HTTP
goes from the host through the loopback ports tools/guest forwards to the guest's loopback, where
the gateway listens as installed; commands run in the guest over ssh."""
import json
import os
import pathlib
import shlex
import subprocess
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
GUEST = REPO / "tools/guest"
# The unified hierarchy's scopes of the package (units/scopebox.slice, the runner's scope names).
SLICE = "/sys/fs/cgroup/scopebox.slice"


# The package under test and the one the upgrade starts from (tests/guest/run sets both; by hand
# they default to the stage's last build).
DEB = os.environ.get("GUEST_DEB") or \
    next(iter(sorted(REPO.glob("build/guest-deb/scopebox_*_amd64.deb"))), None)
PREVIOUS_DEB = os.environ.get("GUEST_PREVIOUS_DEB") or DEB


def guest_env():
    r = subprocess.run([str(GUEST), "env"], capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in r.stdout.split())


ENV = guest_env()


def guest(script, timeout=300, check=False):
    """A shell command line run as root in the guest."""
    r = subprocess.run([str(GUEST), "ssh", script], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, (script, r.stdout, r.stderr)
    return r


def guest_out(script, timeout=300):
    return guest(script, timeout=timeout, check=True).stdout


def guest_python(code, timeout=120):
    """Python code run by the guest's own python3 (as root, outside any sandbox)."""
    return guest_out(f"python3 -c {shlex.quote(code)}", timeout=timeout)


def install(deb):
    """apt-get install a .deb in the guest (tools/guest install: over any installed version)."""
    r = subprocess.run([str(GUEST), "install", str(deb)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


_KEY = []


def api_key():
    if not _KEY:
        _KEY.append(guest_out("cat /etc/scopebox/api-key").strip())
    return _KEY[0]


def call(method, path, body=None, dify=False, timeout=300):
    """One request to the installed gateway: the sidecar API, or the dify one (dify=True).
    Returns (status, decoded JSON or the raw body)."""
    port = ENV["GUEST_DIFY_PORT"] if dify else ENV["GUEST_API_PORT"]
    headers = {"Content-Type": "application/json"}
    if dify:
        headers["X-Api-Key"] = api_key()
    else:
        headers["Authorization"] = f"Bearer {api_key()}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw


def create_session():
    status, created = call("POST", "/sessions", {})
    assert status == 200, created
    return created["session_id"]


def run(sid, code, timeout_ms=120000, **extra):
    status, res = call("POST", "/exec", {"session_id": sid, "code": code, "timeout_ms": timeout_ms, **extra})
    assert status == 200, res
    return res


def release(sid):
    status, body = call("DELETE", f"/sessions/{sid}", {})
    assert status == 200, body


def scope_dir(sid):
    return f"{SLICE}/scopebox-runner-{sid}.scope"


def cgroup_file(sid, name):
    return guest_out(f"cat {scope_dir(sid)}/{name}")


def events(sid, name):
    """A flat-keyed cgroup v2 file of the session's scope (memory.events, pids.events)."""
    return {k: int(v) for k, v in (line.split() for line in cgroup_file(sid, name).splitlines())}


@pytest.fixture
def session():
    sid = create_session()
    yield sid
    call("DELETE", f"/sessions/{sid}", {})
