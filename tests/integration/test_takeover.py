# SPDX-License-Identifier: LGPL-2.1-or-later
"""A create for a key whose workspace is still here takes it over (issue 30, finding 7), and a
storage block given by the client never costs data (issue 30): with the S3 test server stalled
(SIGSTOP) during a release's upload, or killed for a few seconds during it, the next create of the
same archive_key answers 200 with that session and its workspace, never 503 "still being
archived"; its release then stores the newest workspace after the earlier upload. A storage
endpoint the agent's policy refuses fails the create rather than start it empty, and keeps a
released workspace pending instead of skipping it. The S3 server is on the loopback, allowed for
the take-over tests as test_durability.py does; the refusals use the installed policy as it is."""
import concurrent.futures
import json
import subprocess
import time

from conftest import create_session, delete_session, manager_sessions, request, run, wait_until
from test_durability import READ, SERVER, ctl, s3, s3_down, s3_storage, s3_up, write_version  # noqa: F401


def pending():
    """Released sessions whose archive is not stored yet: {id: row} (scopeboxctl archives list)."""
    return {a["id"]: a for a in json.loads(ctl("archives", "list", "--json")) if "id" in a}


def s3_pause(server, what):
    subprocess.run([str(SERVER), what, server["data"]], check=True, capture_output=True, timeout=60)


def workspace_is(sid, digest, version):
    assert run(sid, READ, timeout_ms=120000)["stdout"] == f"{digest} {version} []\n"


def restored_is(stem, st, digest, version):
    sid = create_session(archive_key=stem, storage=st)
    try:
        workspace_is(sid, digest, version)
    finally:
        delete_session(sid, discard=True, archive_key=stem, storage=st)


def test_create_takes_over_a_release_whose_upload_is_stalled(s3):
    st = s3_storage(s3)
    stem = f"stalled_{time.time_ns()}"
    sid = create_session(archive_key=stem, storage=st)
    digest = write_version(sid, "v1")
    s3_pause(s3, "pause")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            release = pool.submit(delete_session, sid)
            # Its first attempt is under way (the upload stalls on the server).
            wait_until(lambda: pending().get(sid, {}).get("attempts", 0) >= 1, 60, "the release's attempt")
            t0 = time.monotonic()
            r = request("POST", "/sessions", {"archive_key": stem, "storage": st, "idle_ttl_sec": 600})
            print(f"create during a stalled upload answered in {time.monotonic() - t0:.2f}s")
            assert r.status == 200 and r.json == {"session_id": sid}, r
            # Whoever released it hears that the workspace is kept (and now taken over).
            assert release.result(timeout=60).json == {"ok": True, "archive": "pending"}
        assert sid not in pending()
        workspace_is(sid, digest, "v1")
        digest = write_version(sid, "v2")
    finally:
        s3_pause(s3, "resume")
    # Its release waits for the earlier upload, then stores the newest workspace over it.
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    restored_is(stem, st, digest, "v2")


def test_create_takes_over_a_release_whose_storage_died_mid_upload(s3):
    """The server killed for a few seconds: whatever the release's archive is doing when the
    create comes (failed and waiting, or a retry under way), the create gets the workspace."""
    st = s3_storage(s3)
    stem = f"killed_{time.time_ns()}"
    sid = create_session(archive_key=stem, storage=st)
    for version in ("v1", "v2", "v3"):
        digest = write_version(sid, version, size=4 << 20)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            release = pool.submit(delete_session, sid)
            s3_down(s3)
            try:
                assert release.result(timeout=200).json["archive"] in ("pending", "stored")
                stored_already = sid not in pending()
                if not stored_already:
                    ctl("archives", "retry")
                    r = request("POST", "/sessions", {"archive_key": stem, "storage": st})
                    assert r.status == 200 and r.json == {"session_id": sid}, r
            finally:
                s3_up(s3)
        if stored_already:
            # The upload beat the outage: that is fine too, and a create restores it.
            sid = create_session(archive_key=stem, storage=st)
        workspace_is(sid, digest, version)
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    restored_is(stem, st, digest, "v3")


# ---- the storage agent's policy refuses the endpoint: a loopback address, neither allowed by the
# installed default nor by this file's allowance of 127.0.0.1 for the S3 test server ----

REFUSED = {"provider": "s3", "prefix": "refused/", "s3_bucket": "b", "s3_endpoint": "http://127.0.0.2:9",
           "s3_access_key": "AKIDSCOPEBOXTEST", "s3_secret_key": "secret"}


def test_a_create_whose_storage_is_refused_fails():
    """Not an empty session over the client's archive: the create fails with the refusal (the
    same answer as the storage endpoints give), and leaves no session behind."""
    before = set(manager_sessions())
    r = request("POST", "/sessions", {"archive_key": f"refused_{time.time_ns()}", "storage": REFUSED})
    assert r.status == 400, r
    assert r.json == {"detail": "storage endpoint not allowed"}, r.json
    wait_until(lambda: set(manager_sessions()) <= before, 30, "the refused create's session to go")


def test_a_release_whose_storage_is_refused_keeps_the_workspace():
    """Released to a refused endpoint: kept, pending with the reason, retried, never removed; the
    client takes it over with a create, or discards it."""
    stem = f"refused_{time.time_ns()}"
    sid = create_session(archive_key=stem)
    digest = write_version(sid, "kept")
    r = delete_session(sid, storage=REFUSED)
    assert r.status == 200 and r.json == {"ok": True, "archive": "pending"}, r
    entry = pending()[sid]
    assert entry["archive"] == stem and "not allowed" in entry["last_error"], entry
    ctl("archives", "retry")
    wait_until(lambda: pending().get(sid, {}).get("attempts", 0) > entry["attempts"], 30, "a failed retry")
    assert sid in pending()
    r = request("POST", "/sessions", {"archive_key": stem, "storage": REFUSED})
    assert r.status == 200 and r.json == {"session_id": sid}, r
    workspace_is(sid, digest, "kept")
    r = delete_session(sid, discard=True, archive_key=stem, storage=REFUSED)
    assert r.json == {"ok": True, "archive": "discarded"}, r
    assert sid not in pending()


def test_a_workspace_too_large_to_archive_is_kept_for_its_user():
    """Larger than SANDBOX_MAX_ARCHIVE_BYTES: not destroyed at its release (the stored archive
    would silently be the older one) but kept, pending with the reason; its user takes it over
    with a create, makes it smaller, and the next release stores it."""
    from test_lifecycle import manager_environment
    st = {"provider": "local", "prefix": "workspaces/"}
    stem = f"too_large_{time.time_ns()}"
    with manager_environment(SANDBOX_MAX_ARCHIVE_BYTES="64K"):
        sid = create_session(archive_key=stem, storage=st)
        assert run(sid, "import os\nopen('/workspace/noise.bin', 'wb').write(os.urandom(256 * 1024))\n"
                        "open('/workspace/keep.txt', 'w').write('keep')")["exit_code"] == 0
        assert delete_session(sid).json == {"ok": True, "archive": "pending"}
        entry = pending()[sid]
        assert "larger than SANDBOX_MAX_ARCHIVE_BYTES" in entry["last_error"], entry
        # Tried again on request: still too large, still kept.
        ctl("archives", "retry")
        wait_until(lambda: pending().get(sid, {}).get("attempts", 0) > entry["attempts"], 30, "the retry")
        assert sid in pending()
        r = request("POST", "/sessions", {"archive_key": stem, "storage": st})
        assert r.status == 200 and r.json == {"session_id": sid}, r
        assert run(sid, "import os\nos.remove('/workspace/noise.bin')")["exit_code"] == 0
        assert delete_session(sid).json == {"ok": True, "archive": "stored"}
        sid = create_session(archive_key=stem, storage=st)
        try:
            assert run(sid, "print(open('/workspace/keep.txt').read())")["stdout"] == "keep\n"
        finally:
            delete_session(sid, discard=True, archive_key=stem, storage=st)
