# SPDX-License-Identifier: LGPL-2.1-or-later
"""Damaged archives are quarantined, not obeyed (issue 30, finding 2). An archive no retry can
restore (bytes that are no archive, a torn stream, a decompression bomb, a 1 TiB sparse entry,
more entries than a workspace may hold, an entry leading out of the workspace) is moved aside to
<key>.damaged-<UTC time>, kept byte for byte and listed; the create answers 200 with
"restored": false and an empty workspace; the session's release archives to the key as usual and
a later create restores that. A failure a retry may cure still answers 503 and moves or deletes
nothing. Archives are planted in the local provider's directory as the security suite plants them
(an attacker with write access to the bucket, or a broken tool, would); one more is damaged on
its way from the S3 test server (loopback, allowed for this file as test_storage_faults.py
does)."""
import io
import json
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile

import pytest

from conftest import LOOPBACK_STORAGE, REPO, delete_session, in_system, request, run, storage_agent_setting

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "security"))
import test_archives_hostile as hostile  # noqa: E402 (the security suite's archive builders)

ROOT = hostile.ROOT
DAMAGED = re.compile(r"\.damaged-\d{8}T\d{6}Z$")
QUARANTINED_ID = "7eff1d84f21248a4a544ec9f9ee0838c"
STANDARD = {"uploads": [], "outputs": [], "skills": []}
SERVER = REPO / "tests/storage/s3server/run"
S3_SECRET = "ScopeboxTestSecretKey/0123456789+abcdefgh"


@pytest.fixture(scope="module")
def prefix():
    name = f"quarantine-{secrets.token_hex(4)}"
    r = in_system("install", "-d", "-o", "scopebox-storage", "-g", "scopebox-storage", "-m", "0700",
                  f"{ROOT}/{name}", f"{ROOT}/{name}/workspaces")
    assert r.returncode == 0, r.stderr
    yield name
    shutil.rmtree(f"{ROOT}/{name}", ignore_errors=True)


def local(prefix):
    return {"provider": "local", "prefix": prefix + "/"}


def metric(name):
    text = request("GET", "/metrics").body.decode()
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    assert m, name
    return int(m.group(1))


def listed(storage):
    """The quarantined archives the storage agent lists for the block: {full key: size}."""
    r = in_system("busctl", "--json=short", "call", "io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1",
                  "io.scopebox.StorageAgent1", "ListQuarantinedArchives", "s", json.dumps(storage))
    assert r.returncode == 0, r.stderr
    archives, truncated = json.loads(r.stdout)["data"]
    assert truncated is False
    return {a[0]: a[2] for a in archives}


def journal_of(sid):
    return in_system("journalctl", "-o", "json", "--no-pager", f"SCOPEBOX_SESSION_ID={sid}").stdout


WORKSPACE = ("import os\n"
             "print(sorted((os.path.relpath(d, '/workspace'), sorted(f)) for d, _, f in os.walk('/workspace')))\n")


def workspace(sid):
    res = run(sid, WORKSPACE)
    assert res["exit_code"] == 0, res
    return res["stdout"].strip()


def empty_workspace():
    return str(sorted([(".", []), ("outputs", []), ("skills", []), ("uploads", [])]))


def quarantined(prefix, stem):
    """The quarantine objects of the stem in the local storage directory: [path]."""
    d = f"{ROOT}/{prefix}/workspaces"
    return [f"{d}/{n}" for n in os.listdir(d) if n.startswith(f"{stem}.tgz.damaged-")]


def create(stem, storage):
    return request("POST", "/sessions", {"archive_key": stem, "storage": storage}, timeout=200)


def quarantine_case(prefix, data):
    """Plants data as the archive of a new stem and creates a session of it: the archive is moved
    aside, kept and listed, the session starts empty and says so, archives normally at its release,
    and the next create restores that."""
    st = local(prefix)
    stem = f"damaged_{secrets.token_hex(6)}"
    path = hostile.plant(prefix, stem, data)
    before = metric("scopebox_archives_quarantined_total")

    r = create(stem, st)
    assert r.status == 200, r
    sid = r.json["session_id"]
    assert r.json == {"session_id": sid, "restored": False}, r.json
    try:
        # Moved aside next to the key, byte for byte, never deleted; listed and logged.
        assert not os.path.exists(path)
        moved = quarantined(prefix, stem)
        assert len(moved) == 1 and DAMAGED.search(moved[0]), moved
        assert pathlib.Path(moved[0]).read_bytes() == data
        key = f"{prefix}/workspaces/{os.path.basename(moved[0])}"
        assert listed(st).get(key) == len(data), listed(st)
        assert metric("scopebox_archives_quarantined_total") == before + 1
        entries = [json.loads(line) for line in journal_of(sid).splitlines()]
        assert any(e.get("MESSAGE_ID") == QUARANTINED_ID and e.get("SCOPEBOX_QUARANTINE_KEY") == key
                   for e in entries), [e.get("MESSAGE") for e in entries]
        # Nothing of the damaged archive got into the workspace.
        assert workspace(sid) == empty_workspace()

        # Its release archives to the key as usual, and the next create restores that.
        assert run(sid, "open('/workspace/after.txt', 'w').write('written after the quarantine')")["exit_code"] == 0
        assert delete_session(sid).json == {"ok": True, "archive": "stored"}
        sid = None
        r = create(stem, st)
        assert r.status == 200 and r.json == {"session_id": r.json["session_id"]}, r
        sid = r.json["session_id"]
        assert run(sid, "print(open('/workspace/after.txt').read())")["stdout"] == "written after the quarantine\n"
        # The quarantined archive is still there, untouched.
        assert pathlib.Path(moved[0]).read_bytes() == data
    finally:
        if sid:
            delete_session(sid, discard=True, archive_key=stem, storage=st)
        for p in quarantined(prefix, stem):
            os.unlink(p)


# ---- each permanent class ----

def test_bytes_that_are_no_archive(prefix):
    quarantine_case(prefix, hostile.BLOBS["random"])


def test_a_torn_stream(prefix):
    data = hostile.tgz([hostile.member("a.bin", os.urandom(200 * 1024)), hostile.fine()])
    quarantine_case(prefix, data[: len(data) // 2])


def test_a_decompression_bomb(prefix):
    """4 GiB of zeros in one entry, 4 MiB compressed: over the workspace by its announced size."""
    quarantine_case(prefix, hostile.zeros_tgz([("bomb.bin", 4096)], first=[hostile.fine()]))


def sparse_tgz(real_size):
    """One GNU sparse (PAX 1.0) entry of real_size bytes holding a single 512-byte chunk at its end:
    a small archive whose one file claims a terabyte."""
    chunk = b"x" * 512
    sparse_map = f"1\n{real_size - len(chunk)}\n{len(chunk)}\n".encode()
    body = sparse_map + bytes(-len(sparse_map) % 512) + chunk
    info = tarfile.TarInfo("./GNUSparseFile.0/sparse.bin")
    info.size = len(body)
    info.mtime = 1700000000
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "./sparse.bin",
                        "GNU.sparse.realsize": str(real_size)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as t:
        t.addfile(hostile.fine()[0], io.BytesIO(hostile.fine()[1]))
        t.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def test_a_one_tebibyte_sparse_entry(prefix):
    data = sparse_tgz(1 << 40)
    assert len(data) < 4096
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        assert [(m.name, m.size) for m in t.getmembers()] == [("fine.txt", 5), ("./sparse.bin", 1 << 40)]
    quarantine_case(prefix, data)


def test_more_entries_than_a_workspace_may_hold(prefix):
    """ARCHIVE_ENTRIES_MAX (100,000) and one more: the restore stops there."""
    quarantine_case(prefix, hostile.many_empty_files_tgz(100_001))


@pytest.mark.parametrize("kind", ["dotdot", "link-out"])
def test_an_entry_leading_out_of_the_workspace(prefix, kind):
    """One such entry among good ones: an archive we wrote never has one, so this one is not the
    workspace that was stored; none of it is restored."""
    probe = f"scopebox-probe-{secrets.token_hex(6)}"
    bad = ([hostile.member(f"../{probe}", b"pwned")] if kind == "dotdot" else
           [hostile.member("esc", kind=tarfile.SYMTYPE, linkname="/etc"), hostile.member(f"esc/{probe}", b"pwned")])
    quarantine_case(prefix, hostile.tgz([hostile.fine(), *bad, hostile.fine("more.txt")]))
    assert not os.path.lexists(f"/etc/{probe}") and not os.path.lexists(f"{ROOT}/{prefix}/{probe}")


# ---- what a retry may cure: 503, nothing moved ----

def test_an_archive_that_cannot_be_read_now_is_not_quarantined(prefix):
    """The storage agent can't read the stored archive (taken away from its user): a storage
    failure, not a damaged archive. 503, the archive stays where it is, and once it is readable
    the same create restores it."""
    st = local(prefix)
    stem = f"unreadable_{secrets.token_hex(6)}"
    data = hostile.tgz([hostile.fine()])
    path = hostile.plant(prefix, stem, data)
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)
    sid = None
    try:
        before = metric("scopebox_archives_quarantined_total")
        r = create(stem, st)
        assert r.status == 503, r
        assert r.json["detail"].startswith("failed to restore the workspace from its archive: "), r.json
        assert pathlib.Path(path).read_bytes() == data and quarantined(prefix, stem) == []
        assert metric("scopebox_archives_quarantined_total") == before
        r = in_system("chown", "scopebox-storage:scopebox-storage", path)
        assert r.returncode == 0, r.stderr
        r = create(stem, st)
        assert r.status == 200 and r.json == {"session_id": r.json["session_id"]}, r
        sid = r.json["session_id"]
        assert run(sid, "print(open('/workspace/fine.txt').read())")["stdout"] == "fine\n\n"
    finally:
        if sid:
            delete_session(sid, discard=True, archive_key=stem, storage=st)
        if os.path.exists(path):
            os.unlink(path)


# ---- S3: damaged on every download, and a quarantine that fails ----

@pytest.fixture(scope="module")
def s3():
    data = tempfile.mkdtemp(prefix="scopebox-s3-quarantine-")
    out = subprocess.run([str(SERVER), "start", "0", data], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    endpoint = out.stdout.strip().splitlines()[-1]
    with storage_agent_setting("test-loopback-storage", LOOPBACK_STORAGE):
        yield endpoint
    subprocess.run([str(SERVER), "stop", data], capture_output=True, timeout=60)
    shutil.rmtree(data, ignore_errors=True)


def s3_storage(endpoint):
    return {"provider": "s3", "prefix": f"quarantine-{secrets.token_hex(4)}/", "s3_bucket": "scopebox-test",
            "s3_region": "us-east-1", "s3_endpoint": endpoint, "s3_access_key": "AKIDSCOPEBOXTEST",
            "s3_secret_key": S3_SECRET}


def hook(endpoint, path, method="POST"):
    import urllib.request
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/__test__/{path}", method=method, data=b""),
                                timeout=30) as r:
        return json.load(r)


def stored_session(stem, st, text):
    r = create(stem, st)
    assert r.status == 200, r
    sid = r.json["session_id"]
    assert run(sid, f"open('/workspace/v.txt', 'w').write({text!r})")["exit_code"] == 0
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}


def test_s3_an_archive_damaged_on_every_download(s3):
    """Both downloads of the agent fail their checksum (ArchiveDamaged): moved aside on the server,
    the session starts empty and its release stores anew."""
    st = s3_storage(s3)
    stem = f"rotten_{secrets.token_hex(6)}"
    stored_session(stem, st, "v1")
    hook(s3, "corrupt?count=2")
    r = create(stem, st)
    hook(s3, "corrupt", method="DELETE")
    assert r.status == 200 and r.json == {"session_id": r.json["session_id"], "restored": False}, r
    sid = r.json["session_id"]
    try:
        keys = listed(st)
        assert len(keys) == 1 and DAMAGED.search(next(iter(keys))), keys
        assert workspace(sid) == empty_workspace()
        assert run(sid, "open('/workspace/v.txt', 'w').write('v2')")["exit_code"] == 0
        assert delete_session(sid).json == {"ok": True, "archive": "stored"}
        sid = None
        r = create(stem, st)
        assert r.status == 200 and "restored" not in r.json, r
        sid = r.json["session_id"]
        assert run(sid, "print(open('/workspace/v.txt').read())")["stdout"] == "v2\n"
    finally:
        if sid:
            delete_session(sid, discard=True, archive_key=stem, storage=st)


def test_s3_a_quarantine_that_fails_is_a_503_and_moves_nothing(s3):
    """The server refuses the copy: the damaged archive stays where it is, the create answers 503
    (never an empty session over an archive still at the key), and a later create moves it."""
    st = s3_storage(s3)
    stem = f"stuck_{secrets.token_hex(6)}"
    stored_session(stem, st, "v1")
    hook(s3, "corrupt?count=2")
    hook(s3, "fail?count=9&status=500&method=PUT")
    try:
        r = create(stem, st)
    finally:
        hook(s3, "fail", method="DELETE")
        hook(s3, "corrupt", method="DELETE")
    assert r.status == 503, r
    # It says why the archive counts as damaged (the agent's reason), and that it stays.
    assert ("the archive is damaged (stored archive is damaged: checksum mismatch) and could not be moved "
            "aside; the stored archive is kept" in r.json["detail"]), r.json
    assert listed(st) == {}
    # The archive is whole at its key: an undamaged download restores it.
    r = create(stem, st)
    assert r.status == 200 and "restored" not in r.json, r
    sid = r.json["session_id"]
    try:
        assert run(sid, "print(open('/workspace/v.txt').read())")["stdout"] == "v1\n"
    finally:
        delete_session(sid, discard=True, archive_key=stem, storage=st)
