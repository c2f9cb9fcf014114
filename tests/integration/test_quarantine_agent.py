# SPDX-License-Identifier: LGPL-2.1-or-later
"""The storage agent's side of damaged archives, driven directly over D-Bus: OpenArchive downloads a
mismatching archive once more, afresh, and answers ArchiveDamaged only when the second one does not
match either (or for an archive over SANDBOX_MAX_ARCHIVE_BYTES); QuarantineArchive moves an archive
aside to <key>.damaged-<UTC time> next to it (local: renamed; S3 and OSS: copied, the copy verified,
then the original deleted), keeps the original on any failure, answers NotFound when there is
nothing; quarantined archives are never restored, never collected, and listed
(ListQuarantinedArchives, scopeboxctl archives list). The S3/OSS test server is tests/storage/s3server,
on the loopback, allowed for these tests as test_storage_faults.py does (the endpoint policy itself
is test_endpoint_policy.py's)."""
import base64
import calendar
import json
import os
import re
import shutil
import tempfile
import time

import pytest

from conftest import LOOPBACK_STORAGE, in_system, storage_agent_setting
from test_endpoint_policy import agent_call
from test_storage_faults import ROOT, archive, hook, object_meta, remote, restore, start_server, stop_server, stored

DAMAGED = "io.scopebox.Error.ArchiveDamaged"
NOT_FOUND = "io.scopebox.Error.NotFound"
FAILED = "io.scopebox.Error.StorageFailed"
QUARANTINED = re.compile(r"(?P<key>.+\.tgz)\.damaged-(?P<t>\d{8}T\d{6}Z)")


@pytest.fixture(scope="module")
def servers():
    dirs = {kind: tempfile.mkdtemp(prefix=f"scopebox-quarantine-{kind}-") for kind in ("s3", "oss")}
    endpoints = {kind: start_server(kind, d) for kind, d in dirs.items()}
    with storage_agent_setting("test-loopback-storage", LOOPBACK_STORAGE):
        yield {kind: {"endpoint": endpoints[kind], "data": dirs[kind], "kind": kind} for kind in dirs}
    for d in dirs.values():
        stop_server(d)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def local():
    prefix = f"quarantine-{os.urandom(4).hex()}"
    yield {"provider": "local", "prefix": prefix + "/"}
    shutil.rmtree(f"{ROOT}/{prefix}", ignore_errors=True)


@pytest.fixture(params=["local", "s3", "oss"])
def any_storage(request, servers):
    if request.param == "local":
        return request.getfixturevalue("local")
    return remote(servers[request.param])


def quarantine(st, stem):
    return agent_call("QuarantineArchive", json.dumps(st), stem)


def listed(st):
    r = agent_call("ListQuarantinedArchives", json.dumps(st))
    assert "result" in r, r
    archives, truncated = r["result"]
    assert truncated is False
    return {a[0]: {"stem": a[1], "size": int(a[2]), "usec": int(a[3])} for a in archives}


def utc_seconds(stamp):
    return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))


def server_has(server, key):
    try:
        return object_meta(server, key)
    except FileNotFoundError:
        return None


def log_of(server):
    return hook(server, "log", method="GET")


# ---- checksum mismatch: once more, afresh; the second time it is damaged ----

def test_a_download_changed_on_the_way_is_fetched_again(servers):
    for kind in ("s3", "oss"):
        server = servers[kind]
        st = remote(server)
        data = os.urandom(300 * 1024)
        assert archive(st, "onway", data)["size"] == len(data)
        key = st["prefix"] + "workspaces/onway.tgz"
        hook(server, "log", method="DELETE")
        hook(server, "corrupt?count=1")
        stored(st, "onway", data)  # the second download is the stored archive, handed out whole
        gets = [e for e in log_of(server) if e["method"] == "GET" and e["key"] == key]
        assert len(gets) == 2, gets
        log = in_system("journalctl", "-o", "cat", "--no-pager", "SCOPEBOX_EVENT=archive-checksum-mismatch").stdout
        assert f"Archive '{key}' does not match its checksum" in log and "download 1 of 2" in log, log[-2000:]


def test_two_mismatching_downloads_are_a_damaged_archive(servers):
    server = servers["s3"]
    st = remote(server)
    data = os.urandom(200 * 1024)
    assert archive(st, "twice", data)["size"] == len(data)
    key = st["prefix"] + "workspaces/twice.tgz"
    hook(server, "log", method="DELETE")
    hook(server, "corrupt?count=2")
    r = restore(st, "twice")
    assert (r.get("error"), r.get("message")) == (DAMAGED, "stored archive is damaged: checksum mismatch"), r
    assert len([e for e in log_of(server) if e["method"] == "GET" and e["key"] == key]) == 2
    # Judged, not touched: the object at rest is as it was.
    stored(st, "twice", data)


def test_transient_failures_stay_storage_failed(servers):
    server = servers["s3"]
    st = remote(server)
    assert archive(st, "flaky", b"x" * 5000)["size"] == 5000
    hook(server, "fail?count=3&status=503&method=GET")
    r = restore(st, "flaky")
    assert (r.get("error"), r.get("message")) == (FAILED, "archive download failed: storage server answered HTTP 503"), r
    stored(st, "flaky", b"x" * 5000)


def test_an_archive_over_the_size_bound_is_damaged(servers, local):
    blocks = [local, remote(servers["s3"])]
    for st in blocks:
        assert archive(st, "big", os.urandom(64 * 1024))["size"] == 64 * 1024
    with storage_agent_setting("test-small-archives", "SANDBOX_MAX_ARCHIVE_BYTES=16K"):
        for st in blocks:
            r = restore(st, "big")
            assert (r.get("error"), r.get("message")) == (
                DAMAGED, "stored archive is damaged: larger than SANDBOX_MAX_ARCHIVE_BYTES"), (st["provider"], r)


# ---- QuarantineArchive ----

def test_quarantine_moves_the_archive_aside_and_keeps_it(any_storage):
    st = any_storage
    data = os.urandom(40 * 1024)
    assert archive(st, "bad", data)["size"] == len(data)
    key = st["prefix"] + "workspaces/bad.tgz"
    before = int(time.time())
    r = quarantine(st, "bad")
    after = int(time.time())
    assert "result" in r, r
    target = r["result"]
    m = QUARANTINED.fullmatch(target)
    assert m and m["key"] == key, target
    assert before <= utc_seconds(m["t"]) <= after, target
    # Not restored any more: the stem names no archive now.
    assert restore(st, "bad") == {"found": False, "data": b""}
    # Kept, byte for byte, and listed.
    assert listed(st) == {target: {"stem": "bad", "size": len(data), "usec": utc_seconds(m["t"]) * 10**6}}
    if st["provider"] == "local":
        got = in_system("sh", "-c", f"base64 -w0 '{ROOT}/{target}'", check=True).stdout
        assert base64.b64decode(got) == data
        assert in_system("test", "-e", f"{ROOT}/{key}").returncode != 0
    # Nothing left to quarantine.
    assert quarantine(st, "bad") == {"error": NOT_FOUND, "message": "no stored archive to quarantine"}
    # A new archive under the stem is an ordinary one again, next to the quarantined one.
    assert archive(st, "bad", b"fresh")["size"] == 5
    stored(st, "bad", b"fresh")
    assert target in listed(st)
    log = in_system("journalctl", "-o", "verbose", "--no-pager", "SCOPEBOX_EVENT=archive-quarantined").stdout
    assert "MESSAGE_ID=1a05b9d2a68c4a52be9a3346fbabef21" in log and f"SCOPEBOX_QUARANTINE_KEY={target}" in log, log[-3000:]


def test_quarantine_of_nothing_is_not_found(any_storage):
    assert quarantine(any_storage, "never") == {"error": NOT_FOUND, "message": "no stored archive to quarantine"}


def test_quarantine_copies_on_the_server_and_verifies_before_deleting(servers):
    for kind in ("s3", "oss"):
        server = servers[kind]
        st = remote(server)
        data = os.urandom(10 * 1024)
        assert archive(st, "copied", data)["size"] == len(data)
        key = st["prefix"] + "workspaces/copied.tgz"
        original = object_meta(server, key)
        hook(server, "log", method="DELETE")
        target = quarantine(st, "copied")["result"]
        copy = object_meta(server, target)
        assert (copy["size"], copy["etag"], copy["userMeta"]) == (original["size"], original["etag"],
                                                                  original["userMeta"]), kind
        assert server_has(server, key) is None
        # The order: copy (conditional on the ETag), the copy looked at, and only then the delete.
        steps = [(e["method"], e["key"]) for e in log_of(server)]
        assert steps == [("HEAD", key), ("HEAD", target), ("PUT", target), ("HEAD", target), ("HEAD", key),
                         ("DELETE", key)], steps


def test_a_copy_that_does_not_verify_keeps_the_original(servers):
    server = servers["s3"]
    st = remote(server)
    data = os.urandom(10 * 1024)
    assert archive(st, "unverified", data)["size"] == len(data)
    hook(server, "log", method="DELETE")
    hook(server, "quirks?copy_short=1")
    try:
        r = quarantine(st, "unverified")
    finally:
        hook(server, "quirks?copy_short=0")
    assert r == {"error": FAILED, "message": "quarantine failed: the copy could not be verified"}, r
    assert not [e for e in log_of(server) if e["method"] == "DELETE"], log_of(server)
    stored(st, "unverified", data)


def test_a_failed_delete_keeps_the_original(servers):
    server = servers["s3"]
    st = remote(server)
    assert archive(st, "undeleted", b"u" * 3000)["size"] == 3000
    hook(server, "fail?count=3&status=503&method=DELETE")
    r = quarantine(st, "undeleted")
    assert r.get("error") == FAILED and "deleting the original" in r["message"], r
    stored(st, "undeleted", b"u" * 3000)
    # The verified copy stays quarantined; a later attempt moves the original aside too.
    time.sleep(1.1)  # the quarantine key has a one-second resolution: a second attempt needs a new one
    assert "result" in quarantine(st, "undeleted")
    assert len(listed(st)) == 2


# ---- never collected ----

def test_garbage_collection_keeps_quarantined_archives(servers, local):
    """Archives whose prefix ends in mineru/: a sweep of the parent prefix takes anything under its
    mineru/ (not only *.tgz), the quarantined archives excepted."""
    s3_parent = f"gc{os.urandom(3).hex()}/"
    for st, parent in ((dict(local, prefix=local["prefix"] + "mineru/"), local["prefix"]),
                       (remote(servers["s3"], prefix=s3_parent + "mineru/"), s3_parent)):
        assert archive(st, "old", b"o" * 100)["size"] == 100
        target = quarantine(st, "old")["result"]
        assert archive(st, "other", b"x" * 10)["size"] == 10  # an ordinary old archive: collected
        other = st["prefix"] + "workspaces/other.tgz"
        if st["provider"] == "local":
            for k in (target, other):
                in_system("touch", "-d", "10 days ago", f"{ROOT}/{k}", check=True)
        else:
            for k in (target, other):
                hook(servers["s3"], f"age?bucket=scopebox-test&key={k}&seconds={10 * 86400}")
        r = agent_call("CollectGarbage", json.dumps(dict(st, prefix=parent)), 7 * 86400)
        assert "result" in r and r["result"][0] == 1, (st["provider"], r)
        assert target in listed(st)
        assert restore(st, "other") == {"found": False, "data": b""}


# ---- scopeboxctl ----

def test_scopeboxctl_lists_quarantined_archives():
    st = {"provider": "local", "prefix": "workspaces/"}
    stem = f"ctl_quarantine_{os.urandom(4).hex()}"
    assert archive(st, stem, b"q" * 123)["size"] == 123
    target = quarantine(st, stem)["result"]
    try:
        rows = json.loads(in_system("scopeboxctl", "archives", "list", "--json", check=True).stdout)
        mine = [r for r in rows if r.get("state") == "quarantined" and r.get("archive") == stem]
        assert len(mine) == 1 and mine[0]["key"] == target and mine[0]["size"] == 123 and mine[0]["id"] is None, rows
        assert all(r["state"] in ("pending", "quarantined") for r in rows), rows
        table = in_system("scopeboxctl", "archives", "list", check=True).stdout
        line = next(l for l in table.splitlines() if stem in l)
        assert line.split()[0] == "quarantined" and target in line, table
    finally:
        in_system("rm", "-f", f"{ROOT}/{target}")
