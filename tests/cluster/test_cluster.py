# SPDX-License-Identifier: LGPL-2.1-or-later
"""A real cluster (tools/cluster up 2: two nodes, each a private systemd running the installed
build, HAProxy in front, the S3 test server behind) through the balancer: sessions spread and
stay on their node, drain, a node killed (its sessions gone, re-created elsewhere from their
archives), a node flapping, the dify API balanced. Needs root, like the integration tests."""
import pathlib
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from httpc import call, wait  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tools/cluster"
GONE = {"detail": "session not found or not running"}
SECRET = "ScopeboxTestSecretKey/0123456789+abcdefgh"


class Cluster:
    def __init__(self, env):
        self.url = env["SANDBOX_URL"]
        self.key = env["SANDBOX_API_KEY"]
        self.s3 = env["SANDBOX_S3_ENDPOINT"]
        self.nodes = {k[len("SANDBOX_NODE_"):].lower(): v for k, v in env.items() if k.startswith("SANDBOX_NODE_")}

    def call(self, method, path, body=None, **kw):
        return call(self.url, method, path, body=body, key=self.key, **kw)

    def create(self, **body):
        status, doc, hdrs = self.call("POST", "/sessions", body)
        assert status == 200, (status, doc)
        sid = doc["session_id"]
        assert hdrs["X-Scopebox-Node"] == sid[:2], (sid, hdrs["X-Scopebox-Node"])
        return sid

    def run(self, sid, code):
        status, doc, hdrs = self.call("POST", "/exec", {"session_id": sid, "code": code})
        assert status == 200, (status, doc)
        assert hdrs["X-Scopebox-Node"] == sid[:2]
        return doc

    def node(self, tag, *args, check=True):
        r = subprocess.run([str(CLUSTER), "node", tag, *args], capture_output=True, text=True, timeout=180)
        # A failure says why: the script's own words (a port held, a node that did not answer).
        assert not check or r.returncode == 0, (f"tools/cluster node {tag} {' '.join(args)}: exit "
                                                f"{r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return r

    def storage(self):
        return {"provider": "s3", "prefix": "cluster/", "s3_bucket": "scopebox-test", "s3_region": "us-east-1",
                "s3_endpoint": self.s3, "s3_access_key": "AKIDSCOPEBOXTEST", "s3_secret_key": SECRET}

    def creates_land_on(self, n=6):
        """The nodes n new sessions land on (released again at once)."""
        tags = set()
        for _ in range(n):
            sid = self.create()
            tags.add(sid[:2])
            self.call("DELETE", f"/sessions/{sid}", {"discard": True})
        return tags


@pytest.fixture(scope="module")
def cluster():
    subprocess.run([str(CLUSTER), "down"], capture_output=True, timeout=300)
    up = subprocess.run([str(CLUSTER), "up", "2"], capture_output=True, text=True, timeout=600)
    try:
        assert up.returncode == 0, up.stderr
        env = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
        yield Cluster(env)
    finally:
        down = subprocess.run([str(CLUSTER), "down"], capture_output=True, text=True, timeout=300)
        assert down.returncode == 0, down.stderr
        assert not pathlib.Path("/run/scopebox-cluster").exists()


def test_up_prints_what_make_run_prints(cluster):
    assert cluster.url == "http://127.0.0.1:28300" and len(cluster.key) >= 40
    assert set(cluster.nodes) == {"a1", "b2"}
    for tag, url in cluster.nodes.items():
        status, doc, hdrs = call(url, "GET", "/healthz")
        assert status == 200 and doc["ok"] is True and doc["node"] == tag, doc
        assert hdrs["X-Scopebox-Node"] == tag
        # The same key on every node.
        status, _, _ = call(url, "POST", "/files/list", {"session_id": "0" * 32}, key=cluster.key)
        assert status == 404
    # The default service is not the cluster's: its own port, untouched.
    assert call("http://127.0.0.1:48217", "GET", "/healthz")[0] in (200, None)


def test_sessions_spread_and_every_request_lands_on_its_node(cluster):
    sids = [cluster.create() for _ in range(6)]
    assert {s[:2] for s in sids} == {"a1", "b2"}
    for sid in sids:
        assert cluster.run(sid, "print(6 * 7)")["stdout"] == "42\n"
        for path, body in (("/files", {"path": "uploads/in.txt", "data_base64": "aGk="}),
                           ("/files/get", {"path": "uploads/in.txt"}), ("/files/list", {}),
                           ("/files/reset-inputs", {})):
            status, doc, hdrs = cluster.call("POST", path, {**body, "session_id": sid})
            assert status == 200 and hdrs["X-Scopebox-Node"] == sid[:2], (path, status, doc)
        status, doc, hdrs = cluster.call("DELETE", f"/sessions/{sid}", {})
        assert (status, doc, hdrs["X-Scopebox-Node"]) == (200, {"ok": True}, sid[:2])
        # Released: gone, from its own node.
        status, doc, hdrs = cluster.call("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, doc, hdrs["X-Scopebox-Node"]) == (404, GONE, sid[:2])


def test_go_client_key_order_is_routed(cluster):
    """Aivory's Go client marshals maps: members in key order, session_id after code and data."""
    sid = cluster.create()
    data = "QUJD" * 50000         # 200 kB of base64 before session_id
    raw = ('{"data_base64":"%s","path":"uploads/big.bin","session_id":"%s"}' % (data, sid)).encode()
    status, doc, hdrs = cluster.call("POST", "/files", raw=raw)
    assert (status, doc, hdrs["X-Scopebox-Node"]) == (200, {"ok": True}, sid[:2])
    raw = ('{"code":"import os\\nprint(os.path.getsize(\'/workspace/uploads/big.bin\'))",'
           '"session_id":"%s","timeout_ms":30000}' % sid).encode()
    status, doc, hdrs = cluster.call("POST", "/exec", raw=raw)
    assert status == 200 and doc["stdout"] == "150000\n", doc
    cluster.call("DELETE", f"/sessions/{sid}", {})


def test_garbage_and_foreign_ids(cluster):
    for sid in ("c3" + "0" * 30, "ff" + "1" * 30):
        status, doc, hdrs = cluster.call("POST", "/exec", {"session_id": sid, "code": "1"})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
        assert hdrs["Content-Type"] == "application/json"
    # A well-formed id with a node's tag that the node never minted: that node says gone.
    status, doc, hdrs = cluster.call("POST", "/files/list", {"session_id": "a1" + "0" * 30})
    assert (status, doc, hdrs["X-Scopebox-Node"]) == (404, GONE, "a1")
    # A node refuses another node's ids, even sent to it directly.
    sid = cluster.create()
    other = next(t for t in cluster.nodes if t != sid[:2])
    status, doc, hdrs = call(cluster.nodes[other], "POST", "/exec", {"session_id": sid, "code": "1"}, key=cluster.key)
    assert (status, doc, hdrs["X-Scopebox-Node"]) == (404, GONE, other)
    cluster.call("DELETE", f"/sessions/{sid}", {})
    # Malformed: a node answers, as without a balancer.
    status, doc, hdrs = cluster.call("POST", "/exec", {"session_id": "xyz", "code": "1"})
    assert (status, doc) == (400, {"detail": "invalid session_id"}) and hdrs["X-Scopebox-Node"] in cluster.nodes


def test_cancel_and_reset_reach_the_sessions_node(cluster):
    """/exec/cancel (session_id in the body) and /sessions/{id}/reset (in the path) land on the node
    of the session for every node; before, half of them reached the other node and got 404."""
    sids = {}
    while set(sids) != set(cluster.nodes):
        sid = cluster.create(stateful=True)
        if sid[:2] in sids:
            cluster.call("DELETE", f"/sessions/{sid}", {})
        else:
            sids[sid[:2]] = sid
    for tag, sid in sids.items():
        assert cluster.run(sid, "x = 41")["exit_code"] == 0
        for _ in range(4):
            status, doc, hdrs = cluster.call("POST", "/exec/cancel", {"session_id": sid})
            assert (status, doc, hdrs["X-Scopebox-Node"]) == (409, {"detail": "no exec is running"}, tag)
            status, doc, hdrs = cluster.call("POST", f"/sessions/{sid}/reset")
            assert (status, doc, hdrs["X-Scopebox-Node"]) == (200, {"ok": True}, tag)
        # Reset on its own node: the next cell has a fresh interpreter.
        doc = cluster.run(sid, "print('x' in globals())")
        assert doc["stdout"] == "False\n" and doc.get("kernel") == "new", doc
        cluster.call("DELETE", f"/sessions/{sid}", {})
    for sid in ("c3" + "0" * 30,):
        status, doc, hdrs = cluster.call("POST", "/exec/cancel", {"session_id": sid})
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
        status, doc, hdrs = cluster.call("POST", f"/sessions/{sid}/reset")
        assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs


def test_keyless_gets_the_gateways_401_from_the_balancer(cluster):
    """Without the key the balancer answers what a node would, and nothing more: same status and
    body as the node's own 401, no node tag, whatever the path."""
    sid = cluster.create()
    node = cluster.nodes[sid[:2]]
    for method, path, body in (("POST", "/exec", {"session_id": sid, "code": "1"}),
                               ("POST", "/exec/cancel", {"session_id": sid}),
                               ("POST", f"/sessions/{sid}/reset", {}), ("GET", "/healthz", None),
                               ("POST", "/sessions", {}), ("GET", "/metrics", None),
                               ("POST", "/v1/sandbox/run", {"language": "python3", "code": "1"})):
        for key, headers in ((None, None), ("wrong", None), (None, {"X-Api-Key": "wrong"})):
            status, doc, hdrs = call(cluster.url, method, path, body=body, key=key, headers=headers)
            assert status == 401 and "X-Scopebox-Node" not in hdrs, (method, path, status, doc)
            if path != "/healthz":
                n_status, n_doc, _ = call(node, method, path, body=body, key=key, headers=headers)
                assert (status, doc) == (n_status, n_doc), (method, path)
            else:
                assert doc == {"error": "unauthorized"}
    cluster.call("DELETE", f"/sessions/{sid}", {})


def test_dify_api_is_balanced(cluster):
    seen = set()
    for _ in range(6):
        status, doc, hdrs = call(cluster.url, "POST", "/v1/sandbox/run",
                                 {"language": "python3", "code": "print(1)", "enable_network": False},
                                 headers={"X-Api-Key": cluster.key})
        assert status == 200 and doc["code"] == 0 and doc["data"]["stdout"] == "1\n", doc
        seen.add(hdrs["X-Scopebox-Node"])
    assert seen == {"a1", "b2"}


def test_drain(cluster):
    mine = cluster.create()
    while mine[:2] != "a1":
        cluster.call("DELETE", f"/sessions/{mine}", {})
        mine = cluster.create()
    cluster.node("a1", "exec", "scopeboxctl", "drain")
    try:
        # /healthz reuses a healthy answer for up to a second.
        wait(lambda: call(cluster.nodes["a1"], "GET", "/healthz")[1]["draining"] is True, timeout=5,
             what="a1's /healthz says draining")
        wait(lambda: cluster.creates_land_on(4) == {"b2"}, timeout=15, what="creates avoid a1")
        assert cluster.creates_land_on(6) == {"b2"}
        # Its own sessions keep working through the balancer.
        assert cluster.run(mine, "print('still here')")["stdout"] == "still here\n"
    finally:
        cluster.node("a1", "exec", "scopeboxctl", "undrain")
    wait(lambda: "a1" in cluster.creates_land_on(4), timeout=15, what="creates reach a1 again")
    cluster.call("DELETE", f"/sessions/{mine}", {})


def test_node_killed_sessions_come_back_elsewhere_from_their_archives(cluster):
    st = cluster.storage()
    stem = f"cluster_{time.time_ns()}"
    on_a1 = {}
    for name in ("archived", "live"):
        sid = cluster.create(archive_key=f"{stem}_{name}", storage=st)
        while sid[:2] != "a1":
            cluster.call("DELETE", f"/sessions/{sid}", {"discard": True})
            sid = cluster.create(archive_key=f"{stem}_{name}", storage=st)
        cluster.run(sid, f"open('/workspace/{name}.txt', 'w').write('{name} workspace')")
        on_a1[name] = sid
    survivor = cluster.create()
    while survivor[:2] != "b2":
        survivor = cluster.create()
    # Released before the node dies: archived in S3.
    status, doc, _ = cluster.call("DELETE", f"/sessions/{on_a1['archived']}", {})
    assert (status, doc) == (200, {"ok": True, "archive": "stored"}), doc

    cluster.node("a1", "stop")
    try:
        wait(lambda: cluster.call("POST", "/exec", {"session_id": on_a1["live"], "code": "1"})[0] == 404,
             timeout=20, what="a1's sessions answer 404")
        for sid in on_a1.values():
            status, doc, hdrs = cluster.call("POST", "/exec", {"session_id": sid, "code": "1"})
            assert (status, doc) == (404, GONE) and "X-Scopebox-Node" not in hdrs
            status, doc, _ = cluster.call("POST", "/files/reset-inputs", {"session_id": sid})
            assert (status, doc) == (200, {"ok": False, "session_gone": True})
        # What Aivory's client does next: a new session with the same archive_key, on a live node.
        back = cluster.create(archive_key=f"{stem}_archived", storage=st)
        assert back[:2] == "b2"
        assert cluster.run(back, "print(open('/workspace/archived.txt').read())")["stdout"] == "archived workspace\n"
        # Never archived: its workspace died with its node.
        lost = cluster.create(archive_key=f"{stem}_live", storage=st)
        assert cluster.run(lost, "import os\nprint(os.path.exists('/workspace/live.txt'))")["stdout"] == "False\n"
        assert cluster.run(survivor, "print('unaffected')")["stdout"] == "unaffected\n"
        for sid in (back, lost):
            cluster.call("DELETE", f"/sessions/{sid}", {"discard": True})
    finally:
        cluster.node("a1", "start")
    wait(lambda: "a1" in cluster.creates_land_on(4), timeout=20, what="a1 takes sessions again")
    cluster.call("DELETE", f"/sessions/{survivor}", {})


def test_flapping_node_does_not_lose_the_other_nodes_sessions(cluster):
    keep = [s for s in (cluster.create() for _ in range(6)) if s[:2] == "b2"]
    assert keep
    for sid in keep:
        cluster.run(sid, "open('/workspace/n.txt', 'w').write('0')")
    for i in range(2):
        cluster.node("a1", "stop")
        for sid in keep:
            assert cluster.run(sid, f"print(open('/workspace/n.txt').read(), {i})")["stdout"] == f"0 {i}\n"
        cluster.node("a1", "start")
        for sid in keep:
            assert cluster.run(sid, "print('ok')")["stdout"] == "ok\n"
    wait(lambda: cluster.creates_land_on(4) == {"a1", "b2"}, timeout=20, what="both nodes take sessions")
    for sid in keep:
        cluster.call("DELETE", f"/sessions/{sid}", {})
