# SPDX-License-Identifier: LGPL-2.1-or-later
"""Large replies are produced as they are sent (issue 14): a 50 MiB exec reply arrives intact
(base64 from the runner's memfd, never built whole), a dify run's 2 MiB of odd stdout arrives as
the composed body would have it, and clients that never read their replies hold no gateway heap
while others are served."""
import base64
import hashlib
import json
import time
import urllib.error
import urllib.request

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import api_key, create_session, delete_session, in_system, request, run
from rawhttp import auth, connect, head

DIFY_URL = "http://127.0.0.1:8194"

MIB = 1 << 20
# 50 MiB in three files: SANDBOX_MAX_ARTIFACT_BYTES (20M) each, SANDBOX_MAX_TOTAL_ARTIFACT_BYTES (50M).
WRITE_OUTPUTS = """
import hashlib, os
os.makedirs('/workspace/outputs', exist_ok=True)
for name, size in (('a.bin', 20 << 20), ('b.bin', 20 << 20), ('c.bin', 10 << 20)):
    data = os.urandom(size)
    with open('/workspace/outputs/' + name, 'wb') as f:
        f.write(data)
    print(name, hashlib.sha256(data).hexdigest())
"""


def dify_run(code):
    body = json.dumps({"language": "python3", "code": code}).encode()
    req = urllib.request.Request(DIFY_URL + "/v1/sandbox/run", data=body, method="POST",
                                 headers={"X-Api-Key": api_key(), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, json.loads(r.read())


def gateway_memory():
    """The gateway's private (anonymous) and mapped shared memory, KiB."""
    pid = in_system("systemctl", "show", "-p", "MainPID", "--value", "scopebox-gateway.service").stdout.strip()
    assert pid not in ("", "0")
    status = in_system("cat", f"/proc/{pid}/status", check=True).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["RssAnon"].split()[0]), int(fields["RssShmem"].split()[0])


def test_fifty_mib_reply_arrives_intact(sibling):
    r = run(sibling, WRITE_OUTPUTS, timeout_ms=60000)
    digests = dict(line.split() for line in r["stdout"].splitlines())
    files = {f["name"]: f for f in r["files"]}
    assert sorted(files) == ["a.bin", "b.bin", "c.bin"], r["stdout"]
    for name, f in files.items():
        data = base64.b64decode(f["data_base64"], validate=True)
        assert hashlib.sha256(data).hexdigest() == digests[name], name
        assert f["mime_type"] == "application/octet-stream"
    # The same through /files/get, also streamed.
    g = request("POST", "/files/get", {"session_id": sibling, "path": "/workspace/outputs/b.bin"})
    assert g.status == 200
    assert hashlib.sha256(base64.b64decode(g.json["data_base64"], validate=True)).hexdigest() == digests["b.bin"]
    assert int(g.headers["Content-Length"]) == len(g.body)


def test_long_dify_output_is_escaped_as_sent():
    # 2 MiB of stdout with every kind of byte: escapes, multi-byte characters, broken sequences.
    code = ("import sys\n"
            "chunk = b'plain \"q\" \\\\ \\x01\\t\\n\\xc3\\xa4\\xe4\\xb8\\xad\\xf0\\x9f\\x98\\x80\\xff\\xc3 '\n"
            "sys.stdout.buffer.write(chunk * (2 * 1024 * 1024 // len(chunk)))\n"
            "sys.stdout.flush()\n"
            "sys.stderr.write('e' * 300000)\n"
            "raise SystemExit(3)\n")
    status, body = dify_run(code)
    assert status == 200 and body["code"] == 0, (status, body)
    data = body["data"]
    chunk = b'plain "q" \\ \x01\t\n\xc3\xa4\xe4\xb8\xad\xf0\x9f\x98\x80\xff\xc3 '
    expected = (chunk * (2 * 1024 * 1024 // len(chunk))).decode("utf-8", errors="replace")
    assert data["stdout"] == expected
    assert data["stderr"] == "e" * 300000
    assert data["error"] == "process exited with code 3\n" + "e" * 300000
    assert data["exit_code"] == 3


def test_unread_replies_hold_no_gateway_heap(sibling):
    """Clients that ask for 50 MiB replies and never read them: before, each reply was composed
    whole on the gateway's heap (28 of them held +1.1 GiB). Now the heap stays flat, and another
    client is answered as usual meanwhile."""
    sessions = [create_session() for _ in range(3)]
    sockets = []
    anon0, shmem0 = gateway_memory()
    peak = (anon0, shmem0)
    served = []
    try:
        for sid in sessions:
            assert run(sid, WRITE_OUTPUTS, timeout_ms=60000)["files"]
        for _ in range(3):
            for sid in sessions:
                b = json.dumps({"session_id": sid, "code": WRITE_OUTPUTS, "timeout_ms": 60000}).encode()
                s = connect(timeout=60)
                s.sendall(head("POST", "/exec", [auth(), ("Content-Type", "application/json"),
                                                 ("Content-Length", str(len(b)))]) + b)
                sockets.append(s)
            # The sessions' execs have finished once a file call gets through their queues.
            for sid in sessions:
                assert request("POST", "/files/list", {"session_id": sid}).status == 200
            anon, shmem = gateway_memory()
            peak = (max(peak[0], anon), max(peak[1], shmem))
            # Another client meanwhile.
            t = time.monotonic()
            assert request("GET", "/healthz", key=None, timeout=10).status == 200
            assert run(sibling, "print(6 * 7)")["stdout"] == "42\n"
            served.append(time.monotonic() - t)
        print(f"\n{len(sockets)} unread 50 MiB replies: gateway RssAnon {anon0 // 1024} -> peak "
              f"{peak[0] // 1024} MiB, RssShmem {shmem0 // 1024} -> peak {peak[1] // 1024} MiB; another "
              f"client's healthz+exec took at most {max(served) * 1000:.0f} ms")
        # Each of them was 67 MiB of base64: composed whole, 9 replies would take 600 MiB of heap.
        assert peak[0] - anon0 < 128 * 1024, (anon0, peak)
    finally:
        for s in sockets:
            s.close()
        for sid in sessions:
            delete_session(sid)
