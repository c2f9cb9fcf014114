# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared helpers of the black-box tests: HTTP calls against the running service and commands
run inside the system that hosts it (the host's systemd, or the private one of tools/sysbox)."""
import base64
import contextlib
import http.client
import json
import os
import pathlib
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
BASE_URL = os.environ.get("SANDBOX_URL", "http://127.0.0.1:48217")


def api_key():
    key = os.environ.get("SANDBOX_API_KEY")
    if key:
        return key
    with open("/etc/scopebox/api-key") as f:
        return f.readline().strip()


class Response:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


# Bodies of every response while a test records them (the security suite checks that no host
# secret ever appears in anything the service answers).
RECORDED = None


def record_responses(enabled):
    global RECORDED
    RECORDED = [] if enabled else None


def _recorded(resp):
    if RECORDED is not None:
        RECORDED.append(resp.body)
    return resp


def request(method, path, body=None, key=..., headers=None, raw=None, timeout=120):
    """One HTTP request. body is JSON-encoded unless raw bytes are given. key=... means the
    configured key, None means no Authorization header."""
    hdrs = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    if key is ...:
        key = api_key()
    if key is not None:
        hdrs.setdefault("Authorization", f"Bearer {key}")
    req = urllib.request.Request(BASE_URL + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return _recorded(Response(r.status, r.read(), dict(r.headers)))
    except urllib.error.HTTPError as e:
        return _recorded(Response(e.code, e.read(), dict(e.headers)))


def storage_put(storage, key, data, **extra):
    """POST /storage/put of raw bytes with a storage block."""
    return request("POST", "/storage/put", {"key": key, "data_base64": base64.b64encode(data).decode(),
                                            "storage": storage, **extra})


def fetch(url):
    """GET a (presigned) URL: (status, body), also for error statuses."""
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def in_system(*cmd, check=False, timeout=60):
    """Run a command inside the system that runs scopebox (systemctl, journalctl, ...)."""
    host_systemd = os.path.isdir("/run/systemd/system") and \
        pathlib.Path("/proc/1/comm").read_text().strip() == "systemd"
    argv = list(cmd) if host_systemd else [str(REPO / "tools/sysbox"), "exec", *cmd]
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def system_python(script, *args, timeout=60):
    """Run a Python script inside the system that runs scopebox (as root there)."""
    r = in_system("/usr/bin/python3", "-c", script, *args, timeout=timeout)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout


# Lists the processes of one session's scope (or of every session's, for "*"), from its cgroups
# (every hierarchy that has the scope, and every cgroup below it).
SCOPE_PIDS = r"""
import os
def scope_pids(sid):
    name = 'scopebox-runner-%s.scope' % sid if sid != '*' else None
    pids = set()
    for root, dirs, files in os.walk('/sys/fs/cgroup'):
        base = os.path.basename(root)
        if (name and base == name) or (not name and base.startswith('scopebox-runner-') and base.endswith('.scope')):
            for r2, d2, f2 in os.walk(root):
                try:
                    pids |= {int(x) for x in open(os.path.join(r2, 'cgroup.procs')).read().split()}
                except (OSError, ValueError):
                    pass
            dirs[:] = []
    return pids
"""

SCOPE_PROCS = SCOPE_PIDS + r"""
import json, sys
sid = sys.argv[1]
out = []
for p in sorted(scope_pids(sid)):
    try:
        st = dict(l.rstrip('\n').split(':\t', 1) for l in open('/proc/%d/status' % p) if ':\t' in l)
        cmd = open('/proc/%d/cmdline' % p, 'rb').read().decode(errors='replace').split('\0')
        out.append({'pid': p, 'ppid': int(st['PPid']), 'comm': st['Name'], 'uid': st['Uid'],
                    'cmdline': [c for c in cmd if c]})
    except (OSError, KeyError, ValueError):
        pass
print(json.dumps(out))
"""


def scope_processes(sid):
    return json.loads(system_python(SCOPE_PROCS, sid))


def manager_list(method):
    """One of the session manager's lists (root's view, as scopeboxctl's) as {id: {property: value}}."""
    r = in_system("busctl", "--json=short", "call", "io.scopebox.SessionManager1", "/io/scopebox/SessionManager1",
                  "io.scopebox.SessionManager1", method, check=True)
    return {sid: {k: v["data"] for k, v in props.items()} for sid, props in json.loads(r.stdout)["data"][0]}


def manager_sessions():
    """The session manager's ListSessions: its sessions, never a dify run's sandbox."""
    return manager_list("ListSessions")


def manager_run_sandboxes():
    """The session manager's ListRunSandboxes: the dify runs' sandboxes, pooled or serving a run."""
    return manager_list("ListRunSandboxes")


def pooled_units():
    """Scopes of the dify run pool's sessions (SANDBOX_DIFY_POOL_SIZE): started for runs to come, never used."""
    return {p["unit"] for p in manager_run_sandboxes().values() if p.get("pooled") and p["execs"] == 0}


STORAGE_AGENT = "scopebox-storage-agent.service"


@contextlib.contextmanager
def unit_environment(unit, name, assignments):
    """The unit restarted with each 'VAR=value' of assignments in its environment, the way an
    operator sets one for that daemon alone (a runtime drop-in's Environment=,
    docs/configuration.md); the drop-in is removed and the unit restarted afterwards."""
    path = f"/run/systemd/system/{unit}.d/{name}.conf"
    lines = "".join(f"Environment={a}\\n" for a in assignments)
    in_system("sh", "-c", f"mkdir -p {os.path.dirname(path)} && printf '[Service]\\n{lines}' > {path}", check=True)
    in_system("systemctl", "daemon-reload", check=True)
    in_system("systemctl", "restart", unit, check=True)
    try:
        yield
    finally:
        in_system("rm", "-f", path)
        in_system("systemctl", "daemon-reload")
        in_system("systemctl", "restart", unit)


def storage_agent_setting(name, assignment):
    """The storage agent restarted with 'VAR=value' in its environment; undone afterwards."""
    return unit_environment(STORAGE_AGENT, name, [assignment])


# The S3/OSS test server listens on the loopback, an internal address that storage blocks of
# requests may not reach unless the operator allows it (docs/storage.md).
LOOPBACK_STORAGE = "SANDBOX_STORAGE_ALLOWED_NETWORKS=127.0.0.1/32"


def create_session(**body):
    r = request("POST", "/sessions", body)
    assert r.status == 200, r
    sid = r.json["session_id"]
    assert len(sid) == 32
    return sid


def delete_session(sid, **body):
    return request("DELETE", f"/sessions/{sid}", body)


def run(sid, code, timeout_ms=30000, **extra):
    r = request("POST", "/exec", {"session_id": sid, "code": code, "timeout_ms": timeout_ms, **extra},
                timeout=timeout_ms / 1000 + 60)
    assert r.status == 200, r
    return r.json


@pytest.fixture
def session():
    sid = create_session()
    yield sid
    delete_session(sid)


def journal_cursor():
    """The cursor of the journal's newest entry: what exec_starts(after=) reads past."""
    out = in_system("journalctl", "-n", "1", "-o", "json", check=True).stdout
    return json.loads(out.splitlines()[-1])["__CURSOR"]


EXEC_START = "SCOPEBOX_EXEC_START"


def exec_starts(sid=None, after=None, count=1, wait=3.0):
    """How the execs of session sid (or, with after=journal_cursor(), every exec since then: the
    dify runs' sessions are their own) started, by the runner's exec-end entries: a list of
    'template' or 'cold', oldest first, one per exec. Waits up to wait seconds for count of them
    (the journal writes a moment after the answer); returns what it found then."""
    # Filtered here, not by journalctl: its field matches combined with --after-cursor miss
    # entries of runners that exited right after writing them.
    match = [f"SCOPEBOX_SESSION_ID={sid}"] if sid else []
    if after:
        match.append(f"--after-cursor={after}")
    deadline = time.monotonic() + wait
    while True:
        out = in_system("journalctl", "-o", "json", "--no-pager", *match).stdout
        starts = {}
        for line in out.splitlines():
            if line.strip():
                e = json.loads(line)
                if e.get(EXEC_START) not in ("template", "cold"):
                    continue
                # Exec ids count per session: two dify runs' sessions may both have the first.
                key = (e.get("SCOPEBOX_SESSION_ID"), e["SCOPEBOX_EXEC_ID"]) if e.get("SCOPEBOX_EXEC_ID") else e["__CURSOR"]
                starts.setdefault(key, e[EXEC_START])
        if len(starts) >= count or time.monotonic() > deadline:
            return list(starts.values())
        time.sleep(0.1)


def exec_start(sid, count=1):
    """How the latest exec of session sid started ('template' or 'cold'; None: no entry says)."""
    starts = exec_starts(sid, count=count)
    return starts[-1] if starts else None


def wait_until(predicate, timeout, what, interval=0.1):
    """Poll predicate() until it returns something true and return that; fail naming what was
    awaited (and what predicate last returned) if it has not come true within timeout seconds.
    What tests wait on instead of sleeping for a guessed while."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def session_info(sid):
    """The manager's info of one session (docs/dbus-api.md, ListSessions): state, execs (accepted,
    queued ones included), exec_running, queued (calls behind the one in flight), runner_pid, ...;
    {} once the manager no longer holds it. Asking does not reset the session's idle timer."""
    return manager_sessions().get(sid, {})


def workspace_has(sid, path):
    """Whether the session's /workspace holds path now, seen from outside the API (which would
    wait behind a running exec): through the runner's mount namespace, where the workspace is
    mounted below /run/scopebox/sessions/<id>/root. False while the runner is unknown. Also for a
    dify run's sandbox."""
    pid = (session_info(sid) or manager_run_sandboxes().get(sid, {})).get("runner_pid")
    if not pid:
        return False
    r = in_system("test", "-e", f"/proc/{pid}/root/run/scopebox/sessions/{sid}/root/workspace/{path}")
    return r.returncode == 0


def start_request(method, path, body=None, key=..., timeout=120):
    """Send a whole JSON request and return a function that waits for its Response (as request()
    gives it): when this returns, the service has been sent everything of the request, so a
    request made after it is surely the later one to arrive."""
    url = urllib.parse.urlsplit(BASE_URL)
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    if key is ...:
        key = api_key()
    if key is not None:
        hdrs["Authorization"] = f"Bearer {key}"
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    conn.request(method, path, json.dumps(body) if body is not None else None, hdrs)

    def response():
        try:
            r = conn.getresponse()
            return _recorded(Response(r.status, r.read(), dict(r.getheaders())))
        finally:
            conn.close()
    return response


@pytest.fixture(autouse=True, scope="module")
def no_illegal_session_transition(request):
    """After every integration module: no session took a transition its table refuses
    (session_enter() logs SCOPEBOX_EVENT=session-illegal-transition at LOG_CRIT and refuses it)."""
    if pathlib.Path(request.fspath).parent.name != "integration":
        yield
        return
    cursor = journal_cursor()
    yield
    # Filtered here, not by journalctl (its field matches with --after-cursor miss entries).
    out = in_system("journalctl", "-o", "json", "--no-pager", f"--after-cursor={cursor}",
                    "--output-fields=SCOPEBOX_EVENT,MESSAGE").stdout
    entries = [e.get("MESSAGE") for e in map(json.loads, filter(None, out.splitlines()))
               if e.get("SCOPEBOX_EVENT") == "session-illegal-transition"]
    assert not entries, entries
