# SPDX-License-Identifier: LGPL-2.1-or-later
"""dify runs as the session manager makes them: a fresh sandbox per run, MAX_WORKERS at once,
networks only where the operator and the request both want one (slirp4netns, no route to the
host's loopback, the operator's proxies), trace context in the journal, nothing left behind."""
import concurrent.futures
import contextlib
import json
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import api_key, in_system, pooled_units

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
        # What is left is the pool (at most 2 by default), never a session a run used.
        left = runner_scopes() - before
        if not left - pooled_units() and len(left) <= 2:
            break
        time.sleep(0.1)
    assert not left - pooled_units() and len(left) <= 2, (left, pooled_units())


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


def host_addresses():
    """The host's own addresses that are not loopback, as the kernel lists them."""
    out = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    return [a["local"] for i in json.loads(out) for a in i.get("addr_info", [])
            if not a["local"].startswith(("127.", "::1"))]


@contextlib.contextmanager
def listeners(addresses):
    """A TCP server on each address that greets whoever connects with a token; yields
    {address: (port, token)} and the set of addresses that saw a connection."""
    servers, seen, stop = {}, set(), threading.Event()
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        srv = socket.socket(family)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind((address, 0))
        except OSError:
            srv.close()  # a link-local address needs its interface; tentative v6 addresses
            continue
        srv.listen(8)
        srv.settimeout(0.2)
        servers[address] = (srv, srv.getsockname()[1], secrets.token_hex(8))

    def serve(address, srv, token):
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            seen.add(address)
            c.sendall(token.encode())
            c.close()

    threads = [threading.Thread(target=serve, args=(a, srv, token), daemon=True)
               for a, (srv, _, token) in servers.items()]
    for t in threads:
        t.start()
    try:
        yield {a: (port, token) for a, (_, port, token) in servers.items()}, seen
    finally:
        stop.set()
        for t in threads:
            t.join()
        for srv, _, _ in servers.values():
            srv.close()


NET_PROBE = """
import json, os, socket, time
def attempt(host, port):
    start = time.monotonic()
    try:
        s = socket.create_connection((host, port), timeout=3)
        r = s.recv(100).decode()
    except OSError as e:
        r = type(e).__name__ + ':' + str(e.errno)
    return r, time.monotonic() - start
targets = json.loads(%r)
# At once: a dropped packet costs the whole timeout.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max(len(targets), 1)) as pool:
    results = list(pool.map(lambda t: attempt(*t), targets))
print(json.dumps({host: r for (host, _), r in zip(targets, results)}))
print(os.environ.get('HTTP_PROXY'), os.environ.get('HTTPS_PROXY'))
print(open('/etc/resolv.conf').read().split())
"""


def probe(targets, **extra):
    """Connects from a run to each (host, port) at once: {host: greeting or "Error:errno"}, the
    seconds each attempt took, and the run's proxy and resolver lines."""
    data = ok_data(*dify_run(NET_PROBE % json.dumps(targets), enable_network=True, **extra))
    lines = data["stdout"].splitlines()
    answers = json.loads(lines[0])
    return ({h: r for h, (r, _) in answers.items()}, {h: t for h, (_, t) in answers.items()}), lines[1:]


# What a run sees for a destination it may not reach: slirp4netns's connect() is refused at once
# (EPERM from the network filter) and slirp answers the SYN with ICMP net unreachable.
UNREACHABLE = "OSError:101"  # ENETUNREACH
# Its own loopback (0.0.0.0 and 127.0.0.1, IPv4-mapped or not, are the run's own namespace's):
# nobody listens there.
OWN_LOOPBACK_EMPTY = "ConnectionRefusedError:111"
# Well under the probe's 3 s timeout: a drop would cost all of it.
AT_ONCE_SEC = 1.5


OWN_LOOPBACK_ADDRESSES = ("0.0.0.0", "127.0.0.1", "::ffff:0.0.0.0", "::ffff:127.0.0.1")


def assert_refused_at_once(results, times):
    for host, r in results.items():
        assert r == (OWN_LOOPBACK_EMPTY if host in OWN_LOOPBACK_ADDRESSES else UNREACHABLE), (host, results)
        assert times[host] < AT_ONCE_SEC, (host, times)


def test_network_only_when_the_operator_and_the_request_allow_it():
    with listeners(host_addresses()[:1]) as (servers, seen):
        (ip, (port, token)), = servers.items()
        # Operator says no: a request asking for it is refused, one not asking has none.
        with dify_environment(ENABLE_NETWORK=0):
            status, body = dify_run(NET_PROBE % json.dumps([]), enable_network=True)
            assert status == 200 and body["code"] == -400 and body["data"] is None, body
        data = ok_data(*dify_run("import socket\ntry:\n    socket.create_connection(('%s', %d), timeout=3)\n"
                                 "except OSError as e:\n    print(e.errno)\n" % (ip, port)))
        assert data["stdout"] == "97\n"  # EAFNOSUPPORT: no inet sockets at all

        with dify_environment(HTTP_PROXY="http://proxy.invalid:3128", HTTPS_PROXY="http://proxy.invalid:3129"):
            _, rest = probe([])
            assert rest[0] == "http://proxy.invalid:3128 http://proxy.invalid:3129"
            assert rest[1] == "['nameserver', '10.0.2.3']"
            # Allowed by the operator but not asked for: still no network, no proxies.
            data = ok_data(*dify_run("import os\nprint(os.environ.get('HTTP_PROXY'))\n"
                                     "import socket\ntry:\n    socket.socket()\nexcept OSError as e:\n"
                                     "    print(e.errno)\n"))
            assert data["stdout"] == "None\n97\n"


EXTRA_ADDRESS = "198.51.100.77"  # TEST-NET-2


def test_a_runs_network_reaches_no_address_of_the_host():
    """ENABLE_NETWORK is on by default (Dify always asks). Every address of the host, v4 and v6,
    through every alias of it (slirp's 10.0.2.2, 0.0.0.0, IPv4-mapped), stays silent; and so
    does an address that appears while the service runs."""
    # An extra address, as a bridge coming up would add one (no dummy links on every kernel: lo).
    in_system("ip", "addr", "add", EXTRA_ADDRESS + "/32", "dev", "lo", check=True)
    try:
        addresses = host_addresses()
        assert EXTRA_ADDRESS in addresses, addresses
        with listeners(addresses + ["0.0.0.0"]) as (servers, seen):
            targets = [(a, port) for a, (port, _) in servers.items() if a != "0.0.0.0"]
            any_port = servers["0.0.0.0"][0]
            targets += [("0.0.0.0", any_port), ("10.0.2.2", any_port), ("127.0.0.1", any_port)]
            targets += [("::ffff:" + a, port) for a, port in targets if "." in a and a != "10.0.2.2"]
            targets += [("169.254.169.254", 80)]  # cloud metadata: link-local, never listed anywhere
            (results, times), _ = probe(targets)
            assert not seen, (seen, results)
            # Each one fails, at once, with the same errno; none just times out.
            assert_refused_at_once(results, times)
        # The operator may allow one (a proxy on the host): exactly that one is reached, through
        # the loopback like every address of the host.
        ip = next(a for a in addresses if "." in a and a != EXTRA_ADDRESS)
        with dify_environment(SANDBOX_DIFY_NETWORK_ALLOW=f"{ip}/32"), \
                listeners([ip, EXTRA_ADDRESS]) as (servers, seen):
            (results, times), _ = probe([(a, port) for a, (port, _) in servers.items()])
            assert results[ip] == servers[ip][1] and seen == {ip}, results
            assert results[EXTRA_ADDRESS] == UNREACHABLE and times[EXTRA_ADDRESS] < AT_ONCE_SEC, (results, times)
    finally:
        in_system("ip", "addr", "del", EXTRA_ADDRESS + "/32", "dev", "lo")


def test_addresses_the_host_routes_to_itself_are_not_reached():
    """"This host" is what the kernel delivers locally, not a list of interface addresses: any
    address of a prefix on lo, and of a `local` (AnyIP) route, is as unreachable as the host's own,
    and fails as fast."""
    on_lo, anyip = ("11.99.0.0/24", "11.99.0.7"), ("11.98.0.0/24", "11.98.0.5")
    in_system("ip", "addr", "add", "11.99.0.1/24", "dev", "lo", check=True)
    in_system("ip", "route", "add", "local", anyip[0], "dev", "lo", check=True)
    try:
        addresses = host_addresses()
        assert on_lo[1] not in addresses and anyip[1] not in addresses, addresses
        time.sleep(0.5)  # the manager hears of the routes; until then the loopback drop holds
        with listeners([on_lo[1], anyip[1]]) as (servers, seen):
            assert set(servers) == {on_lo[1], anyip[1]}, servers
            targets = [(a, port) for a, (port, _) in servers.items()]
            targets += [("::ffff:" + a, port) for a, port in targets]
            (results, times), _ = probe(targets)
            assert not seen, (seen, results)
            assert_refused_at_once(results, times)
    finally:
        in_system("ip", "route", "del", "local", anyip[0], "dev", "lo")
        in_system("ip", "addr", "del", "11.99.0.1/24", "dev", "lo")


OWN_LOOPBACK = """
import http.server, socket, threading, urllib.request

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"served on " + self.server.server_address[0].encode())

    def log_message(self, *args):
        pass

class V6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6

opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for cls, host, url in [(http.server.ThreadingHTTPServer, "127.0.0.1", "http://127.0.0.1:%d/"),
                       (V6, "::1", "http://[::1]:%d/"),
                       (http.server.ThreadingHTTPServer, "0.0.0.0", "http://127.0.0.1:%d/")]:
    server = cls((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(opener.open(url % server.server_address[1], timeout=3).read().decode())
    server.shutdown()
    server.server_close()
"""


def test_a_runs_own_loopback_works():
    """A local server inside the run (what multiprocessing managers, notebooks' kernels, test
    servers do), reached from the same run: its loopback is its own, nothing filters it."""
    data = ok_data(*dify_run(OWN_LOOPBACK, enable_network=True))
    assert data["stdout"] == "served on 127.0.0.1\nserved on ::1\nserved on 0.0.0.0\n", data


LATE_PROBE = """
import socket, time
reached = []
deadline = time.monotonic() + 9
while time.monotonic() < deadline:
    try:
        reached.append(socket.create_connection((%r, %d), timeout=0.5).recv(100).decode())
    except OSError:
        time.sleep(0.2)
print(reached)
"""


def test_an_address_that_appears_during_a_run_is_not_reached():
    # The run is going before the address exists; the scope's filter must follow the host.
    late, port = "198.51.100.78", 47117
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(dify_run, LATE_PROBE % (late, port), enable_network=True)
        time.sleep(3)
        in_system("ip", "addr", "add", late + "/32", "dev", "lo", check=True)
        try:
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((late, port))
            srv.listen(8)
            srv.settimeout(0.2)
            seen = 0
            while not future.done():
                try:
                    c, _ = srv.accept()
                except OSError:
                    continue
                seen += 1
                c.sendall(b"reached")
                c.close()
            srv.close()
            data = ok_data(*future.result())
            assert (seen, data["stdout"]) == (0, "[]\n"), (seen, data)
        finally:
            in_system("ip", "addr", "del", late + "/32", "dev", "lo")


def test_var_tmp_is_world_writable_and_sticky():
    # dify-sandbox's newer tests expect it; here it is the run's /tmp.
    data = ok_data(*dify_run("import os, stat\nm = os.stat('/var/tmp').st_mode\n"
                             "print(bool(m & stat.S_ISVTX), bool(m & stat.S_IWOTH))\n"
                             "open('/var/tmp/x', 'w').write('1'); print(open('/tmp/x').read())\n"))
    assert data["stdout"] == "True True\n1\n", data
