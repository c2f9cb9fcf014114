# SPDX-License-Identifier: LGPL-2.1-or-later
"""dify runs as the session manager makes them: a fresh sandbox per run, MAX_WORKERS at once,
networks only where the operator and the request both want one (slirp4netns, no route to the
host's loopback, the operator's proxies), trace context in the journal, nothing left behind."""
import concurrent.futures
import contextlib
import json
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import api_key, in_system

DIFY_URL = "http://127.0.0.1:8194"
UNITS = ("scopebox-session-manager.service", "scopebox-gateway.service")


def dify_run(code, language="python3", headers=None, **extra):
    body = json.dumps({"language": language, "code": code, **extra}).encode()
    hdrs = {"X-Api-Key": api_key(), "Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(DIFY_URL + "/v1/sandbox/run", data=body, method="POST", headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@contextlib.contextmanager
def dify_environment(**env):
    """Run the manager and the gateway with extra settings (runtime drop-ins), then restore."""
    lines = "\\n".join(f"Environment={k}={v}" for k, v in env.items())
    for unit in UNITS:
        d = f"/run/systemd/system/{unit}.d"
        in_system("sh", "-c", f"mkdir -p {d} && printf '[Service]\\n{lines}\\n' > {d}/test-dify.conf", check=True)
    in_system("systemctl", "daemon-reload", check=True)
    in_system("systemctl", "restart", *UNITS, check=True)
    try:
        yield
    finally:
        for unit in UNITS:
            in_system("rm", "-f", f"/run/systemd/system/{unit}.d/test-dify.conf")
        in_system("systemctl", "daemon-reload")
        in_system("systemctl", "restart", *UNITS)


def ok_data(status, body):
    assert status == 200 and body["code"] == 0, (status, body)
    return body["data"]


def test_each_run_gets_a_fresh_sandbox():
    first = ok_data(*dify_run("open('/workspace/mark', 'w').write('x'); open('/tmp/mark', 'w').write('x')\n"
                              "import os; print(os.getuid())"))
    assert first["stdout"] == "1000\n"
    second = ok_data(*dify_run("import os; print(os.path.exists('/workspace/mark'), os.path.exists('/tmp/mark'))"))
    assert second["stdout"] == "False False\n"


def runner_scopes():
    out = in_system("systemctl", "list-units", "--no-legend", "--plain", "scopebox-runner-*").stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_runs_leave_no_scope_behind():
    before = runner_scopes()  # other tests' sessions may be alive
    for _ in range(3):
        ok_data(*dify_run("print(1)"))
    for _ in range(50):
        left = runner_scopes() - before
        if not left:
            break
        time.sleep(0.1)
    assert not left, left


def test_at_most_max_workers_run_at_once():
    code = ("import time\nstart = time.time()\ntime.sleep(0.6)\nprint(start, time.time())\n")
    with dify_environment(MAX_WORKERS=2):
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda _: dify_run(code), range(6)))
    spans = []
    for status, body in results:
        start, end = map(float, ok_data(status, body)["stdout"].split())
        spans.append((start, end))
    # The most runs alive at any one moment.
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    alive = peak = 0
    for _, delta in events:
        alive += delta
        peak = max(peak, alive)
    assert peak <= 2, spans
    assert len(spans) == 6


def test_journal_carries_the_trace_context():
    user = "user-" + secrets.token_hex(6)
    trace = secrets.token_hex(16)
    span = secrets.token_hex(8)
    ok_data(*dify_run("print(1)", headers={"traceparent": f"00-{trace}-{span}-01", "X-User-ID": user,
                                            "X-User-Type": "account"}))
    out = ""
    for _ in range(20):
        out = in_system("journalctl", "-o", "json", f"SCOPEBOX_USER_ID={user}").stdout
        if "finished" in out:
            break
        time.sleep(0.2)
    entries = [json.loads(line) for line in out.splitlines() if line.strip()]
    finished = [e for e in entries if "finished" in e.get("MESSAGE", "")]
    assert finished, entries
    assert finished[0]["SCOPEBOX_TRACE_ID"] == trace
    assert finished[0]["SCOPEBOX_SPAN_ID"] == span
    assert finished[0]["SCOPEBOX_USER_TYPE"] == "account"


@pytest.fixture
def host_listener():
    """A TCP server on the host's own address (not loopback) that greets whoever connects."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect(("192.0.2.254", 9))  # no packet is sent; this only picks the outgoing address
    host_ip = probe.getsockname()[0]
    probe.close()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host_ip, 0))
    srv.listen(8)
    token = secrets.token_hex(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.sendall(token.encode())
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield host_ip, srv.getsockname()[1], token
    stop.set()
    t.join()
    srv.close()


NET_PROBE = """
import os, socket
def attempt(host, port):
    try:
        s = socket.create_connection((host, port), timeout=5)
        return s.recv(100).decode()
    except OSError as e:
        return type(e).__name__ + ':' + str(e.errno)
print(attempt(%r, %d))
print(attempt('10.0.2.2', %d))
print(os.environ.get('HTTP_PROXY'), os.environ.get('HTTPS_PROXY'))
print(open('/etc/resolv.conf').read().split())
"""


def test_network_only_when_the_operator_and_the_request_allow_it(host_listener):
    ip, port, token = host_listener
    code = NET_PROBE % (ip, port, port)
    # Operator says no (the default): a request asking for it is refused, one not asking has none.
    status, body = dify_run(code, enable_network=True)
    assert status == 200 and body["code"] == -400 and body["data"] is None, body
    data = ok_data(*dify_run("import socket\ntry:\n    socket.create_connection(('%s', %d), timeout=3)\n"
                             "except OSError as e:\n    print(e.errno)\n" % (ip, port)))
    assert data["stdout"] == "97\n"  # EAFNOSUPPORT: no inet sockets at all

    with dify_environment(ENABLE_NETWORK=1, HTTP_PROXY="http://proxy.invalid:3128",
                          HTTPS_PROXY="http://proxy.invalid:3129"):
        data = ok_data(*dify_run(code, enable_network=True))
        lines = data["stdout"].splitlines()
        assert lines[0] == token                        # the host's address: reached through slirp4netns
        assert lines[1] == "OSError:101"                 # its loopback: ENETUNREACH
        assert lines[2] == "http://proxy.invalid:3128 http://proxy.invalid:3129"
        assert lines[3] == "['nameserver', '10.0.2.3']"
        # Allowed by the operator but not asked for: still no network, no proxies.
        data = ok_data(*dify_run("import os\nprint(os.environ.get('HTTP_PROXY'))\n"
                                 "import socket\ntry:\n    socket.socket()\nexcept OSError as e:\n    print(e.errno)\n"))
        assert data["stdout"] == "None\n97\n"


def test_var_tmp_is_world_writable_and_sticky():
    # dify-sandbox's newer tests expect it; here it is the run's /tmp.
    data = ok_data(*dify_run("import os, stat\nm = os.stat('/var/tmp').st_mode\n"
                             "print(bool(m & stat.S_ISVTX), bool(m & stat.S_IWOTH))\n"
                             "open('/var/tmp/x', 'w').write('1'); print(open('/tmp/x').read())\n"))
    assert data["stdout"] == "True True\n1\n", data
