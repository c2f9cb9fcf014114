# SPDX-License-Identifier: LGPL-2.1-or-later
"""The Aliyun OSS provider end to end against the test server's OSS mode, which recomputes every
V1 signature with ali-oss's own signing code (tests/storage/s3server): put with signed URLs
(altered and expired refused), delete, gc over more than one listing page (the continuation token
is a signed sub-resource), archives through OSS, and an outage."""
import concurrent.futures
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from conftest import LOOPBACK_STORAGE, REPO, create_session, delete_session, fetch, request, run
from conftest import storage_agent_setting
from conftest import storage_put as put

SERVER = REPO / "tests/storage/s3server/run"
KEY_ID, SECRET = "LTAIscopeboxTEST", "ScopeboxOssTestSecret0123456789"


@pytest.fixture(scope="module")
def oss():
    data = tempfile.mkdtemp(prefix="scopebox-oss-")
    out = subprocess.run([str(SERVER), "start-oss", "0", data], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    endpoint = out.stdout.strip().splitlines()[-1]
    assert endpoint.startswith("http://127.0.0.1:"), out.stdout
    with storage_agent_setting("test-loopback-storage", LOOPBACK_STORAGE):
        yield endpoint
    subprocess.run([str(SERVER), "stop", data], capture_output=True, timeout=60)
    shutil.rmtree(data, ignore_errors=True)


def storage(endpoint, prefix="aivory/"):
    return {"provider": "aliyun_oss", "prefix": prefix, "oss_bucket": "scopebox-test", "oss_endpoint": endpoint,
            "oss_access_key_id": KEY_ID, "oss_access_key_secret": SECRET}


def test_put_gives_a_working_signed_url(oss):
    st = storage(oss)
    body = bytes(range(256)) * 10
    r = put(st, "mineru/doc one+x.pdf", body, content_type="application/pdf", expires_in=600)
    assert r.status == 200, r
    assert r.json["provider"] == "aliyun_oss" and r.json["key"] == "aivory/mineru/doc one+x.pdf"
    assert fetch(r.json["url"]) == (200, body)
    url = r.json["url"]
    i = url.index("Signature=") + len("Signature=")
    bad = url[:i] + ("A" if url[i] != "A" else "B") + url[i + 1:]
    assert fetch(bad)[0] == 403


def test_expired_url_is_refused(oss):
    r = put(storage(oss), "mineru/short.txt", b"short", expires_in=1)
    assert r.status == 200, r
    time.sleep(2.5)
    assert fetch(r.json["url"])[0] == 403


def test_delete_with_and_without_prefix(oss):
    st = storage(oss)
    for key in ("mineru/a.txt", "aivory/mineru/a.txt"):
        assert put(st, "mineru/a.txt", b"a").status == 200
        r = request("POST", "/storage/delete", {"key": key, "storage": st})
        assert r.status == 200 and r.json == {"ok": True, "key": "aivory/mineru/a.txt"}, r


def test_gc_pages_through_more_than_a_thousand_objects(oss):
    st = storage(oss, prefix=f"gc{time.time_ns()}/")
    base = st["prefix"].rstrip("/")
    keys = [f"workspaces/old{i:04d}.tgz" for i in range(1003)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda k: put(st, k, b"x" * 10).status, keys)) == [200] * len(keys)
    assert put(st, "workspaces/new.tgz", b"n").status == 200
    assert put(st, "mineru/old.pdf", b"pdf").status == 200
    for prefix in (f"{base}/workspaces/old", f"{base}/mineru/"):
        q = urllib.parse.urlencode({"bucket": "scopebox-test", "prefix": prefix, "seconds": 10 * 86400})
        urllib.request.urlopen(urllib.request.Request(f"{oss}/__test__/age?{q}", method="POST", data=b""), timeout=30)
    r = request("POST", "/storage/gc", {"max_age_seconds": 7 * 86400, "storage": st}, timeout=600)
    assert r.status == 200, r
    assert r.json == {"deleted": 1004, "scanned": 1005, "freed_bytes": 1003 * 10 + 3}, r.json


def test_archives_through_oss(oss):
    st = storage(oss)
    stem = f"oss_{time.time_ns()}"
    sid = create_session(archive_key=stem, storage=st)
    run(sid, "open('/workspace/oss.txt', 'w').write('via oss')")
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    sid2 = create_session(archive_key=stem, storage=st)
    try:
        assert run(sid2, "print(open('/workspace/oss.txt').read())")["stdout"] == "via oss\n"
    finally:
        delete_session(sid2, discard=True, archive_key=stem, storage=st)


def test_outage_gives_502(oss):
    down = storage("http://127.0.0.1:9")
    assert put(down, "mineru/x.pdf", b"x").status == 502
    # Whether an archive exists can't be known: the create fails, clearly, and can be retried.
    r = request("POST", "/sessions", {"archive_key": "oss_outage", "storage": down})
    assert r.status == 503 and "storage server unreachable" in r.json["detail"], r
    # Nothing to restore: the session works; its archive can't be stored and stays pending
    # until the client discards it.
    sid = create_session(storage=down)
    assert run(sid, "print(1)")["stdout"] == "1\n"
    assert delete_session(sid).json == {"ok": True, "archive": "pending"}
    assert delete_session(sid, discard=True).json["archive"] == "discarded"
