# SPDX-License-Identifier: LGPL-2.1-or-later
"""The balancer's rules (packaging/haproxy/scopebox-haproxy-config) with HAProxy itself in front
of stand-in nodes (fakenode.py): which node each request reaches, and what the balancer answers
on its own. Quick and needs no sandbox; test_cluster.py runs real nodes."""
import hashlib
import json
import os
import pathlib
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fakenode import FakeNode  # noqa: E402
from httpc import call, wait  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
GENERATOR = REPO / "packaging/haproxy/scopebox-haproxy-config"
GONE = {"detail": "session not found or not running"}
UNAUTHORIZED = b'{"error":"unauthorized"}'     # the gateway's, src/gateway/http-router.c
BUFSIZE = 65536


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Balancer:
    def __init__(self, nodes, bufsize=BUFSIZE):
        self.nodes = {n.tag: n for n in nodes}
        self.dir = tempfile.mkdtemp(prefix="scopebox-lb-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        self.key = secrets.token_urlsafe(32)
        self.key_file = os.path.join(self.dir, "api-key")
        self.hash_file = os.path.join(self.dir, "key.sha256")
        with open(os.open(self.key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self.key + "\n")
        subprocess.run([sys.executable, str(GENERATOR), "--listen", f"127.0.0.1:{self.port}",
                        *(["--bufsize", str(bufsize)] if bufsize else []), "--inter", "200", "--fall", "1", "--rise", "1",
                        "--log", "none", "--api-key-file", self.key_file, "--key-hash-file", self.hash_file,
                        "--output", self.cfg, *[n.spec() for n in nodes]], check=True)
        subprocess.run(["haproxy", "-c", "-q", "-f", self.cfg], check=True)
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "haproxy.log"), "w"))
        wait(lambda: self.request("GET", "/healthz")[0] == 200)

    def request(self, method, path, body=None, raw=None, key=True, headers=None):
        return call(self.url, method, path, body=body, raw=raw, headers=headers,
                    key=self.key if key is True else key, timeout=30)

    def routed(self):
        """Requests that reached a node other than HAProxy's own health checks."""
        return [(t, r) for t, n in self.nodes.items() for r in list(n.requests) if r[1] != "/healthz"]

    def create(self):
        status, doc, hdrs = self.request("POST", "/sessions", {})
        assert status == 200, (status, doc)
        return doc["session_id"], hdrs.get("X-Scopebox-Node")

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def lb():
    nodes = [FakeNode("a1"), FakeNode("b2")]
    b = Balancer(nodes)
    yield b
    b.close()
    for n in nodes:
        n.close()


@pytest.fixture(autouse=True)
def healthy_nodes(lb):
    """Every test starts with both nodes healthy and taking sessions."""
    for n in lb.nodes.values():
        n.healthy, n.agent, n.draining = True, "ready up 100%", False
    wait(lambda: {lb.create()[1] for _ in range(6)} == {"a1", "b2"})


def test_generator_validates(tmp_path):
    gen = [sys.executable, str(GENERATOR), "--log", "none"]
    hashf = str(tmp_path / "h")
    for bad in (["A1=127.0.0.1:1:2"], ["a1=127.0.0.1:1"], ["123456789=h:1:2"], ["a1=h:0:2"],
                ["a=h:1:2", "ab=h:3:4"], ["a1=h:1:2", "a1=h:3:4"], ["--key-hash-file", "rel", "a1=h:1:2"]):
        r = subprocess.run(gen + (bad if "--key-hash-file" in bad else ["--key-hash-file", hashf, *bad]),
                           capture_output=True, text=True)
        assert r.returncode == 2 and "scopebox-haproxy-config:" in r.stderr, (bad, r)
        assert not os.path.exists(hashf)
    # No configuration without the key check.
    r = subprocess.run(gen + ["a1=h:1:2"], capture_output=True, text=True)
    assert r.returncode == 2 and "--key-hash-file" in r.stderr and not r.stdout, r
    # Keys the gateway would refuse are refused here too; no digest is written for them.
    for key in (b"", b"\n", b" k\n", b"k \n", b"k\x01k", b"k\nk", b"x" * 4097):
        (tmp_path / "k").write_bytes(key)
        r = subprocess.run(gen + ["--api-key-file", str(tmp_path / "k"), "--key-hash-file", hashf, "a1=h:1:2"],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--api-key-file" in r.stderr and not r.stdout, (key, r)
        assert not os.path.exists(hashf)


def test_key_digest_file(lb):
    """Only root reads the digest; the key itself is in no file the balancer writes, nor in the
    configuration (which names the key file nowhere)."""
    st = os.stat(lb.hash_file)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    text = pathlib.Path(lb.hash_file).read_text()
    assert lb.key not in text and hashlib.sha256(lb.key.encode()).hexdigest() in text
    cfg = pathlib.Path(lb.cfg).read_text()
    assert lb.key not in cfg and lb.key_file not in cfg and lb.hash_file in cfg
    for name in os.listdir(lb.dir):
        if name not in ("api-key",):
            assert lb.key.encode() not in pathlib.Path(lb.dir, name).read_bytes(), name


def test_example_is_the_generators_output(tmp_path):
    """packaging/haproxy/scopebox.cfg is what its first lines say produced it; HAProxy accepts it
    once the key's digest is in place, and refuses to start without it."""
    example = (REPO / "packaging/haproxy/scopebox.cfg").read_text()
    cmd = example.splitlines()[1].split("scopebox-haproxy-config ", 1)[1].split()
    out = subprocess.run([sys.executable, str(GENERATOR), *cmd], capture_output=True, text=True, check=True)
    assert out.stdout == example
    hashf = cmd[cmd.index("--key-hash-file") + 1]
    missing = tmp_path / "missing.sha256"
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(example.replace(hashf, str(missing)))
    r = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert r.returncode != 0 and str(missing) in r.stderr, r
    missing.write_text(hashlib.sha256(b"k").hexdigest() + "\n")
    r = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_creates_spread_and_requests_follow_their_session(lb):
    sids = [lb.create() for _ in range(8)]
    assert {tag for _, tag in sids} == {"a1", "b2"}
    for sid, tag in sids:
        assert sid.startswith(tag)
        for path in ("/exec", "/exec/cancel", "/files/get", "/files/list", "/files/reset-inputs"):
            status, doc, hdrs = lb.request("POST", path, {"code": "x" * 100, "session_id": sid})
            assert (status, hdrs["X-Scopebox-Node"], doc["node"]) == (200, tag, tag), (path, doc)
        # The reset names its session in the path; with a body, or none.
        for body in ({}, None):
            status, doc, hdrs = lb.request("POST", f"/sessions/{sid}/reset", body)
            assert (status, hdrs["X-Scopebox-Node"], doc["node"]) == (200, tag, tag), doc
        status, doc, hdrs = lb.request("DELETE", f"/sessions/{sid}", {})
        assert (status, hdrs["X-Scopebox-Node"]) == (200, tag)


def test_body_order_and_size(lb):
    sid, tag = lb.create()
    node = lb.nodes[tag]
    # Aivory's client sends its members in Go's key order: session_id after the data. Whole
    # bodies are read: routed wherever the member sits.
    small = json.dumps({"data_base64": "QQ==" * 10000, "path": "a", "session_id": sid}).encode()
    assert len(small) < BUFSIZE - 2048
    status, doc, hdrs = lb.request("POST", "/files", raw=small)
    assert (status, hdrs["X-Scopebox-Node"], doc["bytes"]) == (200, tag, len(small))
    # Larger than the buffer, session_id first: found in the start, the whole body is passed on.
    big = json.dumps({"session_id": sid, "path": "a", "data_base64": "QQ==" * 100000}).encode()
    status, doc, hdrs = lb.request("POST", "/files", raw=big)
    assert (status, hdrs["X-Scopebox-Node"], doc["bytes"]) == (200, tag, len(big))
    # Larger than the buffer, session_id last: the balancer cannot know the node; refused by it.
    # HAProxy's health checks reach the node at any time: count only what is not one.
    def routed():
        return [r for r in node.requests if r[1] != "/healthz"]
    before = len(routed())
    big_last = json.dumps({"data_base64": "QQ==" * 100000, "path": "a", "session_id": sid}).encode()
    status, doc, hdrs = lb.request("POST", "/files", raw=big_last)
    assert status == 413 and "X-Scopebox-Node" not in hdrs, doc
    assert doc == {"detail": f"no session_id in the part of the body the balancer reads "
                             f"(tune.bufsize {BUFSIZE}); send session_id first or a smaller body"}
    assert len(routed()) == before
    # A session_id inside a string of the start is not taken for the member.
    trick = json.dumps({"code": f'"session_id": "{sid}"' + "x" * BUFSIZE, "session_id": sid}).encode()
    status, doc, hdrs = lb.request("POST", "/exec", raw=trick)
    assert status == 413, doc


def test_unknown_ids_are_gone_at_the_balancer(lb):
    for sid in ("c3" + "0" * 30, "0" * 32, "a" + "0" * 31):
        status, doc, hdrs = lb.request("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
        assert hdrs["Content-Type"] == "application/json"
        status, doc, hdrs = lb.request("POST", "/files/reset-inputs", {"session_id": sid})
        assert (status, doc) == (200, {"ok": False, "session_gone": True}) and "X-Scopebox-Node" not in hdrs
        status, doc, hdrs = lb.request("POST", "/exec/cancel", {"session_id": sid})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
        status, doc, hdrs = lb.request("POST", f"/sessions/{sid}/reset", {})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
        # A release goes to a node, which releases what it does not have (idempotent).
        status, doc, hdrs = lb.request("DELETE", f"/sessions/{sid}", {"discard": True})
        assert (status, doc) == (200, {"ok": True}) and hdrs["X-Scopebox-Node"] in lb.nodes
    # Foreign tag of a known node, but never minted there: the node says gone.
    status, doc, hdrs = lb.request("POST", "/exec", {"session_id": "a1" + "f" * 30, "code": "1"})
    assert (status, doc, hdrs["X-Scopebox-Node"]) == (404, GONE, "a1")
    # Malformed ids and bodies are a node's to answer, as without a balancer.
    for body in ({"session_id": "nothex", "code": "1"}, {"session_id": "A1" + "0" * 30},
                 {"session_id": 5}, {"code": "1"}):
        status, doc, hdrs = lb.request("POST", "/exec", body)
        assert status in (400, 422) and hdrs["X-Scopebox-Node"] in lb.nodes, (body, status, doc)
    status, doc, hdrs = lb.request("POST", "/exec", raw=b"{not json")
    assert status == 422 and hdrs["X-Scopebox-Node"] in lb.nodes
    status, doc, hdrs = lb.request("DELETE", "/sessions/xyz", {})
    assert status == 400 and hdrs["X-Scopebox-Node"] in lb.nodes


def test_node_down_its_sessions_are_gone_the_others_stay(lb):
    a = [s for s, t in (lb.create() for _ in range(10)) if t == "a1"]
    b = [s for s, t in (lb.create() for _ in range(10)) if t == "b2"]
    assert a and b
    lb.nodes["a1"].healthy = False
    wait(lambda: lb.request("POST", "/exec", {"session_id": a[0], "code": "1"})[0] == 404)
    for sid in a:
        for method, path, body in (("POST", "/exec", {"session_id": sid, "code": "1"}),
                                   ("POST", "/exec/cancel", {"session_id": sid}),
                                   ("POST", f"/sessions/{sid}/reset", None)):
            status, doc, hdrs = lb.request(method, path, body)
            assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs, path
    for sid in b:
        for method, path, body in (("POST", "/exec", {"session_id": sid, "code": "1"}),
                                   ("POST", "/exec/cancel", {"session_id": sid}),
                                   ("POST", f"/sessions/{sid}/reset", None)):
            status, doc, hdrs = lb.request(method, path, body)
            assert (status, hdrs["X-Scopebox-Node"]) == (200, "b2"), path
    assert {lb.create()[1] for _ in range(6)} == {"b2"}
    # Back up: its sessions answer again (the node kept them).
    lb.nodes["a1"].healthy = True
    wait(lambda: lb.request("POST", "/exec", {"session_id": a[0], "code": "1"})[0] == 200)


def test_drain_takes_no_new_sessions_and_keeps_its_own(lb):
    a = [s for s, t in (lb.create() for _ in range(10)) if t == "a1"]
    lb.nodes["a1"].agent = "drain"
    time.sleep(0.6)
    assert {lb.create()[1] for _ in range(8)} == {"b2"}
    for sid in a:
        status, doc, hdrs = lb.request("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, hdrs["X-Scopebox-Node"]) == (200, "a1")
    # Full ("up 0%"): no new sessions either.
    lb.nodes["a1"].agent = "ready up 0%"
    time.sleep(0.6)
    assert {lb.create()[1] for _ in range(8)} == {"b2"}
    # A node refusing creates (draining before its agent said so) costs the client nothing.
    lb.nodes["a1"].agent, lb.nodes["a1"].draining = "ready up 100%", True
    time.sleep(0.6)
    assert {lb.create()[1] for _ in range(8)} == {"b2"}


def test_stateless_routes_and_metrics(lb):
    seen = set()
    for _ in range(6):
        status, doc, hdrs = lb.request("POST", "/v1/sandbox/run", {"language": "python3", "code": "1"})
        assert status == 200
        seen.add(hdrs["X-Scopebox-Node"])
    assert seen == {"a1", "b2"}
    assert lb.request("GET", "/health")[0] == 200
    assert lb.request("POST", "/storage/gc", {"max_age_seconds": 1})[0] == 200
    status, doc, hdrs = lb.request("GET", "/metrics")
    assert (status, doc) == (404, {"detail": "metrics are per node: scrape each node directly"})
    # With one node unhealthy, the stateless routes use the other.
    lb.nodes["b2"].healthy = False
    wait(lambda: lb.request("GET", "/healthz")[2].get("X-Scopebox-Node") == "a1" and
         {lb.request("GET", "/health")[2].get("X-Scopebox-Node") for _ in range(4)} == {"a1"})


def head(method, path, length, extra=()):
    return (f"{method} {path} HTTP/1.1\r\nHost: scopebox\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n" + "".join(f"{h}\r\n" for h in extra) + "\r\n").encode()


def read_answer(s, timeout=10):
    """The raw answer up to the end of its body (or of the connection): (status, headers, body, raw)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head_, _, body = data.partition(b"\r\n\r\n")
    lines = head_.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    while len(body) < int(hdrs.get("content-length", 0)):
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), hdrs, body, head_ + b"\r\n\r\n" + body


def test_keyless_refused_before_the_body(lb):
    """A client without the key announces 1 MiB and sends its first KiB, then nothing: the 401 comes
    while the rest is unsent, the connection is closed, and no node sees a byte of it."""
    sids = {tag: sid for sid, tag in (lb.create() for _ in range(6))}
    before = len(lb.routed())
    for tag, sid in sids.items():
        for path in ("/exec", "/files", "/exec/cancel"):
            for auth in ((), ("Authorization: Bearer wrong-key",), (f"X-Api-Key: {lb.key}x",),
                         (f"Authorization: {lb.key}",), ("Authorization: Bearer",)):
                start = json.dumps({"session_id": sid, "path": "a", "data_base64": ""})[:-2].encode()
                with socket.create_connection(("127.0.0.1", lb.port)) as s:
                    s.sendall(head("POST", path, 1 << 20, auth) + start + b"Q" * (1024 - len(start)))
                    status, hdrs, body, _ = read_answer(s)
                    assert (status, body) == (401, UNAUTHORIZED), (path, auth, status, body)
                    assert "x-scopebox-node" not in hdrs and hdrs["connection"] == "close"
                    # Closed: the balancer reads none of the rest.
                    assert s.recv(1) == b""
    assert len(lb.routed()) == before


def haproxy_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024


def test_keyless_bodies_take_no_memory():
    """With the default 1 MiB buffers, 100 keyless clients that each push up to 900 KiB of a 1 MiB
    body at once. Buffered (option http-buffer-request before any key check, as it was), HAProxy
    grew by 36 MiB here and took more the more clients came; refused on the head, it stays put."""
    node = FakeNode("c3")
    b = Balancer([node], bufsize=None)
    socks = []
    try:
        sid = b.create()[0]
        before_rss, before = haproxy_rss(b.proc.pid), len(b.routed())
        body = json.dumps({"session_id": sid, "code": ""})[:-2].encode() + b"x" * (900 * 1024)
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", b.port))
            socks.append(s)
            s.settimeout(10)
            try:
                s.sendall(head("POST", "/exec", 1 << 20) + body)
            except (BrokenPipeError, ConnectionResetError):
                pass        # refused and closed while we were still sending
        grown = haproxy_rss(b.proc.pid) - before_rss
        assert grown < 8 << 20, f"HAProxy grew by {grown} bytes for 100 keyless clients"
        for s in socks:
            try:
                status, hdrs, body_, _ = read_answer(s)
            except ConnectionResetError:
                continue    # the answer was lost to the reset our unread bytes caused
            assert (status, body_) == (401, UNAUTHORIZED)
        assert len(b.routed()) == before
    finally:
        for s in socks:
            s.close()
        b.close()
        node.close()


def test_keyless_answers_name_no_node(lb):
    """Whatever a keyless client asks, with one node down and ids of a live node, of the down one
    and of no node: the same plain 401, byte for byte, as the gateway's own, and nothing reaches a
    node. The dify routes answer with the bare status, as the gateway does."""
    live = next(s for s, t in (lb.create() for _ in range(10)) if t == "b2")
    down = next(s for s, t in (lb.create() for _ in range(10)) if t == "a1")
    lb.nodes["a1"].healthy = False
    wait(lambda: lb.request("POST", "/exec", {"session_id": down, "code": "1"})[0] == 404)
    before = len(lb.routed())
    answers = {}
    for sid in (live, down, "f9" + "0" * 30, "nothex"):
        for method, path, body in (
                ("POST", "/exec", {"session_id": sid, "code": "1"}),
                ("POST", "/exec/cancel", {"session_id": sid}),
                ("POST", "/files", {"session_id": sid, "path": "a", "data_base64": "QQ=="}),
                ("POST", "/files/get", {"session_id": sid, "path": "a"}),
                ("POST", "/files/list", {"session_id": sid}),
                ("POST", "/files/reset-inputs", {"session_id": sid}),
                ("POST", f"/sessions/{sid}/reset", {}),
                ("DELETE", f"/sessions/{sid}", {}),
                ("POST", "/sessions", {}), ("GET", "/healthz", None), ("GET", "/health", None),
                ("GET", "/metrics", None), ("POST", "/storage/gc", {"max_age_seconds": 1}),
                ("GET", "/no/such/path", None), ("PUT", "/exec", {}),
                ("POST", "/v1/sandbox/run", {"language": "python3", "code": "1"}),
                ("GET", "/v1/sandbox/dependencies", None),
                ("POST", "/v1/sandbox/dependencies/update", {}),
                ("GET", "/v1/sandbox/dependencies/refresh", None)):
            data = json.dumps(body).encode() if body is not None else b""
            for auth in ((), ("Authorization: Bearer nope",), ("X-Api-Key: nope",)):
                with socket.create_connection(("127.0.0.1", lb.port)) as s:
                    s.sendall(head(method, path, len(data), ("Connection: close", *auth)) + data)
                    status, hdrs, body_, raw = read_answer(s)
                assert status == 401 and "x-scopebox-node" not in hdrs, (method, path, raw)
                assert b"a1" not in raw and b"b2" not in raw, raw
                dify = path.startswith("/v1/sandbox/") and method != "PUT"
                assert body_ == (b"" if dify else UNAUTHORIZED), (method, path, raw)
                answers.setdefault(dify, set()).add(raw)
    # One answer for all of them (and one for the dify routes): nothing tells them apart.
    assert len(answers[False]) == 1 and len(answers[True]) == 1, answers
    assert len(lb.routed()) == before
    # The key holder still gets everything, through either header where the node takes it.
    assert lb.request("POST", "/v1/sandbox/run", {"language": "python3", "code": "1"}, key=None,
                      headers={"X-Api-Key": lb.key})[0] == 200
