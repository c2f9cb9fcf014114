# SPDX-License-Identifier: LGPL-2.1-or-later
"""The balancer's rules (packaging/haproxy/scopebox-haproxy-config) with HAProxy itself in front
of stand-in nodes (fakenode.py): which node each request reaches, and what the balancer answers
on its own. Quick and needs no sandbox; test_cluster.py runs real nodes."""
import json
import os
import pathlib
import shutil
import socket
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
BUFSIZE = 65536


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Balancer:
    def __init__(self, nodes):
        self.nodes = {n.tag: n for n in nodes}
        self.dir = tempfile.mkdtemp(prefix="scopebox-lb-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        subprocess.run([sys.executable, str(GENERATOR), "--listen", f"127.0.0.1:{self.port}",
                        "--bufsize", str(BUFSIZE), "--inter", "200", "--fall", "1", "--rise", "1",
                        "--log", "none", "--output", self.cfg, *[n.spec() for n in nodes]], check=True)
        subprocess.run(["haproxy", "-c", "-q", "-f", self.cfg], check=True)
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.dir, "haproxy.log"), "w"))
        wait(lambda: self.request("GET", "/healthz")[0] == 200)

    def request(self, method, path, body=None, raw=None):
        return call(self.url, method, path, body=body, raw=raw, key="k", timeout=30)

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


def test_generator_validates():
    gen = [sys.executable, str(GENERATOR), "--log", "none"]
    for bad in (["A1=127.0.0.1:1:2"], ["a1=127.0.0.1:1"], ["123456789=h:1:2"], ["a1=h:0:2"],
                ["a=h:1:2", "ab=h:3:4"], ["a1=h:1:2", "a1=h:3:4"]):
        r = subprocess.run(gen + bad, capture_output=True, text=True)
        assert r.returncode == 2 and "scopebox-haproxy-config:" in r.stderr, (bad, r)


def test_example_is_the_generators_output():
    """packaging/haproxy/scopebox.cfg is what its first lines say produced it."""
    example = (REPO / "packaging/haproxy/scopebox.cfg").read_text()
    cmd = example.splitlines()[1].split("scopebox-haproxy-config ", 1)[1].split()
    out = subprocess.run([sys.executable, str(GENERATOR), *cmd], capture_output=True, text=True, check=True)
    assert out.stdout == example
    r = subprocess.run(["haproxy", "-c", "-f", str(REPO / "packaging/haproxy/scopebox.cfg")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_creates_spread_and_requests_follow_their_session(lb):
    sids = [lb.create() for _ in range(8)]
    assert {tag for _, tag in sids} == {"a1", "b2"}
    for sid, tag in sids:
        assert sid.startswith(tag)
        for path in ("/exec", "/files/get", "/files/list", "/files/reset-inputs"):
            status, doc, hdrs = lb.request("POST", path, {"code": "x" * 100, "session_id": sid})
            assert (status, hdrs["X-Scopebox-Node"], doc["node"]) == (200, tag, tag), (path, doc)
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
        status, doc, hdrs = lb.request("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
    for sid in b:
        status, doc, hdrs = lb.request("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, hdrs["X-Scopebox-Node"]) == (200, "b2")
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
