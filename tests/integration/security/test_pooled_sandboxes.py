"""A dify run's sandbox is no sidecar session (issue 31, finding 2).

A key holder who learns the id of a pooled run sandbox (the journal names it) tries every sidecar
endpoint on it: each answers exactly what it answers for an id nobody holds, nothing reaches the
sandbox's workspace, the sandbox stays in the pool untouched, and the dify runs it then serves find
nothing planted. The manager's ListSessions and scopeboxctl list no run sandbox as a session, and
scopeboxctl inspects and kills none; the operator sees them apart (ListRunSandboxes, scopeboxctl
runs)."""
import base64
import json
import secrets
import urllib.error
import urllib.request

import pytest

from conftest import (api_key, delete_session, in_system, manager_run_sandboxes, manager_sessions, request, wait_until,
                      workspace_has)
from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)

DIFY_URL = "http://127.0.0.1:8194"
POOL_SIZE = 2  # SANDBOX_DIFY_POOL_SIZE as installed (docs/configuration.md)


def dify_run(code, traceparent):
    body = json.dumps({"language": "python3", "code": code}).encode()
    req = urllib.request.Request(DIFY_URL + "/v1/sandbox/run", data=body, method="POST",
                                 headers={"X-Api-Key": api_key(), "Content-Type": "application/json",
                                          "traceparent": traceparent})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, data = r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        status, data = e.code, json.loads(e.read() or b"null")
    assert status == 200 and data["code"] == 0, (status, data)
    return data["data"]


def traced_run(code):
    """A dify run: its output, and the id of the session it ran in (its journal entry says)."""
    trace = secrets.token_hex(16)
    data = dify_run(code, f"00-{trace}-{secrets.token_hex(8)}-01")

    def finished():
        out = in_system("journalctl", "-o", "json", f"SCOPEBOX_TRACE_ID={trace}").stdout
        for line in out.splitlines():
            e = json.loads(line) if line.strip() else {}
            if "finished" in e.get("MESSAGE", ""):
                return e
        return None

    entry = wait_until(finished, 10, "the run's journal entry")
    return data, entry["SCOPEBOX_SESSION_ID"], "in pooled session" in entry["MESSAGE"]


def ready_pool():
    """Ids of the pooled sandboxes ready for a run (root's view, ListRunSandboxes)."""
    return {sid for sid, p in manager_run_sandboxes().items()
            if p.get("pooled") and p["state"] == "running" and p["execs"] == 0}


def attacks(sid, module):
    """Every sidecar endpoint that names a session, as a key holder would call it on sid: file
    upload, download and listing, exec (plain, reported, streamed), cancel, reset of the kernel and
    of the inputs, release with and without archiving; and routes that do not exist."""
    planted = base64.b64encode(b"import os\nos.system('touch /workspace/pwned')\n").decode()
    return [
        ("POST", "/files", {"session_id": sid, "path": f"/workspace/{module}.py", "data_base64": planted}),
        ("POST", "/files", {"session_id": sid, "path": "requests.py", "data_base64": planted}),
        ("POST", "/files", {"session_id": sid, "path": "/workspace/uploads/sitecustomize.py",
                            "data_base64": planted}),
        ("POST", "/files/get", {"session_id": sid, "path": "/workspace/requests.py"}),
        ("POST", "/files/get", {"session_id": sid, "path": "/workspace/outputs"}),
        ("POST", "/files/list", {"session_id": sid}),
        ("POST", "/files/reset-inputs", {"session_id": sid}),
        ("POST", "/exec", {"session_id": sid, "code": f"open('/workspace/{module}.py', 'w').write('x = 1')"}),
        ("POST", "/exec", {"session_id": sid, "code": "print(1)", "report": True}),
        ("POST", "/exec", {"session_id": sid, "code": "print(1)", "stream": True}),
        ("POST", "/exec/cancel", {"session_id": sid}),
        ("POST", f"/sessions/{sid}/reset", None),
        ("GET", f"/sessions/{sid}", None),
        ("GET", f"/files?session_id={sid}", None),
        ("DELETE", f"/sessions/{sid}", {}),
        ("DELETE", f"/sessions/{sid}", {"discard": True}),
    ]


@pytest.fixture
def pool():
    """The pool, filled by a run (it starts with the first), and its ready sandboxes' ids."""
    traced_run("print(1)")
    return wait_until(lambda: (lambda ids: ids if len(ids) >= POOL_SIZE else None)(ready_pool()), 30,
                      "the pool to be ready")


def test_sidecar_endpoints_answer_a_pooled_id_as_an_unknown_one(pool):
    module = "planted_" + secrets.token_hex(4)
    unknown = secrets.token_hex(16)
    for sid in pool:
        # What the attacker starts from: the journal names the pooled sandbox.
        assert in_system("journalctl", "-o", "cat", f"SCOPEBOX_SESSION_ID={sid}").stdout.strip(), sid
        for (method, path, body), (_, upath, ubody) in zip(attacks(sid, module), attacks(unknown, module)):
            got = request(method, path, body)
            want = request(method, upath, ubody)
            assert (got.status, got.body) == (want.status, want.body), (method, path, body, got, want)
            # An unknown id's answer, as docs/api.md has it (routes that do not exist: their own).
            if path.startswith(("/files", "/exec")) and method == "POST" and path != "/files/reset-inputs":
                assert (got.status, got.json) == (404, {"detail": "session not found or not running"}), got

    # A create can't be made to take it over either: archive_key is a name, never a session id.
    for sid in pool:
        r = request("POST", "/sessions", {"archive_key": sid})
        assert r.status == 200 and r.json["session_id"] not in pool, r
        delete_session(r.json["session_id"])

    # Nothing was written, released or run: each is still in the pool, as it was; no session.
    now = manager_run_sandboxes()
    assert not set(manager_sessions()) & pool, (manager_sessions(), pool)
    for sid in pool:
        info = now.get(sid)
        assert info and info["pooled"] and info["state"] == "running" and info["execs"] == 0, (sid, info)
        for name in (f"{module}.py", "requests.py", "pwned"):
            assert not workspace_has(sid, name), (sid, name)


SEEN = """\
import os, sys
print(os.path.exists('/workspace/{m}.py'), os.path.exists('/workspace/requests.py'),
      os.path.exists('/workspace/pwned'))
sys.path.insert(0, '/workspace')
try:
    import {m}
    print('imported')
except ModuleNotFoundError:
    print('absent')
"""


def test_the_runs_a_targeted_sandbox_serves_see_nothing_planted(pool):
    module = "planted_" + secrets.token_hex(4)
    for sid in pool:
        # The writes alone: an exec or a release would take the sandbox out of the pool anyway.
        for method, path, body in attacks(sid, module):
            if path == "/files":
                assert request(method, path, body).status == 404

    data, served_by, from_pool = traced_run(SEEN.format(m=module))
    # The next run took one of the sandboxes the attacker aimed at.
    assert from_pool and served_by in pool, (served_by, pool)
    assert data["stdout"] == "False False False\nabsent\n", data


def ctl(*args):
    return in_system("scopeboxctl", *args)


def test_scopeboxctl_shows_no_run_sandbox_as_a_session(pool):
    r = ctl("sessions", "--json")
    assert r.returncode == 0, r.stderr
    listed = {s["id"] for s in json.loads(r.stdout)}
    assert not listed & pool, (listed, pool)
    r = ctl("sessions")
    assert r.returncode == 0, r.stderr
    assert not any(sid in r.stdout for sid in pool), r.stdout
    assert "dify run sandbox" in r.stdout, r.stdout
    for sid in pool:
        for verb in ("inspect", "kill"):
            r = ctl(verb, sid)
            assert r.returncode != 0 and f"{sid}: no such session." in r.stderr, r
            # ... as for an id nobody holds.
            unknown = ctl(verb, secrets.token_hex(16))
            assert r.returncode == unknown.returncode == 4, (r, unknown)
    # The operator's own list of them: each pooled one, as pooled; none of them a session.
    r = ctl("runs", "--json")
    assert r.returncode == 0, r.stderr
    runs = {s["id"]: s for s in json.loads(r.stdout)}
    assert pool <= set(runs), (runs, pool)
    assert all(runs[sid]["pooled"] and runs[sid]["ephemeral"] for sid in pool), runs
    r = ctl("runs")
    assert r.returncode == 0 and all(sid in r.stdout for sid in pool), r.stdout
    # Still in the pool: a kill of their ids ended nothing.
    assert pool <= ready_pool()
