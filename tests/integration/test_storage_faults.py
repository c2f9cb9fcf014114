# SPDX-License-Identifier: LGPL-2.1-or-later
"""The storage agent under faults, driven directly over D-Bus (BeginArchive/CommitArchive/OpenArchive)
and judged by outcome: the stored archive's bytes. A commit whose size is not what was staged, an
upload the server refuses (wrong digest) or that is cut mid-body, a full storage directory: the
previous archive stays, byte for byte. A restore that is cut short, corrupted at rest or finds the
server down is an error, never a smaller archive or "not found". Staging files a killed agent left
are removed when it starts again. The S3/OSS test server is tests/storage/s3server."""
import base64
import hashlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import LOOPBACK_STORAGE, REPO, STORAGE_AGENT, in_system, storage_agent_setting

SERVER = REPO / "tests/storage/s3server/run"
ROOT = "/var/lib/scopebox-storage"
STAGING = f"{ROOT}/.staging"
S3_KEY, S3_SECRET = "AKIDSCOPEBOXTEST", "ScopeboxTestSecretKey/0123456789+abcdefgh"
OSS_KEY, OSS_SECRET = "LTAIscopeboxTEST", "ScopeboxOssTestSecret0123456789"
STORAGE_FAILED = "io.scopebox.Error.StorageFailed"

# Runs inside the system that runs scopebox (its system bus): a list of operations on stdin, one
# JSON result per operation on stdout. Archive data is given as base64 or generated from a seed.
CLIENT = r'''
import base64, errno, json, os, random, sys
import dbus

bus = dbus.SystemBus()
agent = dbus.Interface(bus.get_object("io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1"),
                       "io.scopebox.StorageAgent1")

def data_of(op):
    if "data" in op:
        return base64.b64decode(op["data"])
    return random.Random(op["seed"]).randbytes(op["length"])

def begin(op):
    token, sink = agent.BeginArchive(json.dumps(op["storage"]), op["stem"])
    fd, data, written, error = sink.take(), data_of(op), 0, None
    try:
        while written < len(data):
            written += os.write(fd, data[written:written + 65536])
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)
    return str(token), {"written": written, "write_error": error}

def commit(token, size):
    if size is None:  # the session manager of before the size check
        return int(agent.CommitArchive(token, signature="s", timeout=120))
    return int(agent.CommitArchive(token, dbus.UInt64(size), signature="st", timeout=120))

out = []
for op in json.load(sys.stdin):
    res = {}
    try:
        if op["op"] == "archive":
            token, res = begin(op)
            size = op.get("size", res["written"])
            res["size"] = commit(token, size)
        elif op["op"] == "commit":
            res["size"] = commit(op["token"], op["size"])
        elif op["op"] == "begin":
            res["token"], more = begin(op)
            res.update(more)
        elif op["op"] == "open":
            found, source = agent.OpenArchive(json.dumps(op["storage"]), op["stem"], timeout=120)
            with os.fdopen(source.take(), "rb") as f:
                res["found"], res["data"] = bool(found), base64.b64encode(f.read()).decode()
        elif op["op"] == "delete":
            agent.DeleteArchive(json.dumps(op["storage"]), op["stem"], timeout=120)
    except dbus.exceptions.DBusException as e:
        res.update(error=e.get_dbus_name(), message=e.get_dbus_message())
    out.append(res)
print(json.dumps(out))
'''


def agent(*ops):
    """Runs the operations against the storage agent; returns their results."""
    host_systemd = os.path.isdir("/run/systemd/system") and open("/proc/1/comm").read().strip() == "systemd"
    argv = ["/usr/bin/python3", "-c", CLIENT]
    if not host_systemd:
        argv = [str(REPO / "tools/sysbox"), "exec", *argv]
    r = subprocess.run(argv, input=json.dumps(list(ops)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def archive(storage, stem, data=None, size=..., **gen):
    op = {"op": "archive", "storage": storage, "stem": stem, **gen}
    if data is not None:
        op["data"] = base64.b64encode(data).decode()
    if size is not ...:
        op["size"] = size
    return agent(op)[0]


def restore(storage, stem):
    r = agent({"op": "open", "storage": storage, "stem": stem})[0]
    if "data" in r:
        r["data"] = base64.b64decode(r["data"])
    return r


def stored(storage, stem, data):
    r = restore(storage, stem)
    assert r.get("found") is True and r["data"] == data, {k: v for k, v in r.items() if k != "data"}


def failed(r, message):
    assert (r.get("error"), r.get("message")) == (STORAGE_FAILED, message), r


def staging_files():
    r = in_system("ls", "-A", STAGING)
    return r.stdout.split() if r.returncode == 0 else []


# ---- servers ----

def start_server(kind, data, port=0):
    out = subprocess.run([str(SERVER), "start-oss" if kind == "oss" else "start", str(port), data],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def stop_server(data):
    subprocess.run([str(SERVER), "stop", data], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def servers():
    dirs = {kind: tempfile.mkdtemp(prefix=f"scopebox-faults-{kind}-") for kind in ("s3", "oss")}
    endpoints = {kind: start_server(kind, d) for kind, d in dirs.items()}
    with storage_agent_setting("test-loopback-storage", LOOPBACK_STORAGE):
        yield {kind: {"endpoint": endpoints[kind], "data": dirs[kind], "kind": kind} for kind in dirs}
    for d in dirs.values():
        stop_server(d)
        shutil.rmtree(d, ignore_errors=True)


def remote(server, prefix=None):
    prefix = prefix or f"faults-{secrets.token_hex(4)}/"
    if server["kind"] == "oss":
        return {"provider": "aliyun_oss", "prefix": prefix, "oss_bucket": "scopebox-test",
                "oss_endpoint": server["endpoint"], "oss_access_key_id": OSS_KEY, "oss_access_key_secret": OSS_SECRET}
    return {"provider": "s3", "prefix": prefix, "s3_bucket": "scopebox-test", "s3_region": "us-east-1",
            "s3_endpoint": server["endpoint"], "s3_access_key": S3_KEY, "s3_secret_key": S3_SECRET}


def s3_archived(servers, stem, length):
    """An archive of 'length' random bytes stored through the agent in the S3 server: (server, block, data)."""
    server = servers["s3"]
    st = remote(server)
    data = os.urandom(length)
    assert archive(st, stem, data)["size"] == length
    return server, st, data


def hook(server, path, method="POST"):
    req = urllib.request.Request(f"{server['endpoint']}/__test__/{path}", method=method, data=b"")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def object_meta(server, key):
    """What the test server keeps of an object: size, etag, userMeta, and the file holding its bytes."""
    path = os.path.join(server["data"], "buckets", "scopebox-test", hashlib.sha256(key.encode()).hexdigest() + ".json")
    with open(path) as f:
        return json.load(f)


@pytest.fixture
def local():
    prefix = f"faults-{secrets.token_hex(4)}"
    yield {"provider": "local", "prefix": prefix + "/"}
    shutil.rmtree(f"{ROOT}/{prefix}", ignore_errors=True)


@pytest.fixture(params=["local", "s3", "oss"])
def any_storage(request, servers):
    if request.param == "local":
        return request.getfixturevalue("local")
    return remote(servers[request.param])


# ---- (a) the size committed ----

def test_commit_with_the_wrong_size_is_refused_and_the_old_archive_kept(any_storage):
    old, new = os.urandom(5000), os.urandom(7000)
    assert archive(any_storage, "sized", old, size=len(old)) == {"written": 5000, "write_error": None, "size": 5000}
    failed(archive(any_storage, "sized", new, size=len(new) + 1), "archive incomplete: 7000 of 7001 bytes")
    failed(archive(any_storage, "sized", new, size=len(new) - 1), "archive incomplete: 7000 of 6999 bytes")
    stored(any_storage, "sized", old)
    # The session manager of before the size check (CommitArchive(s)): still served, unchecked.
    assert archive(any_storage, "sized", new, size=None)["size"] == 7000
    stored(any_storage, "sized", new)
    assert staging_files() == []


def test_uploads_carry_their_checksums(servers):
    for kind in ("s3", "oss"):
        server = servers[kind]
        st = remote(server)
        data = os.urandom(300 * 1024)  # more than one hashing slice
        assert archive(st, "summed", data)["size"] == len(data)
        meta = object_meta(server, st["prefix"] + "workspaces/summed.tgz")
        prefix = "x-oss-meta-" if kind == "oss" else "x-amz-meta-"
        assert meta["userMeta"] == {prefix + "scopebox-sha256": hashlib.sha256(data).hexdigest()}, meta
        assert (meta["size"], meta["etag"]) == (len(data), hashlib.md5(data).hexdigest()), meta
        stored(st, "summed", data)


# ---- (b) refused uploads ----

def curl_put(server, key, body, *headers):
    """A PUT signed by curl itself, past the agent: what the test server makes of the headers."""
    out = subprocess.run(["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{S3_KEY}:{S3_SECRET}",
                          "-X", "PUT", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                          *[a for h in headers for a in ("-H", h)], "--data-binary", "@-", "-w", "\n%{http_code}",
                          f"{server['endpoint']}/scopebox-test/{key}"],
                         input=body, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    return int(text.rsplit("\n", 1)[1]), text


def test_the_test_server_refuses_a_wrong_digest(servers):
    server = servers["s3"]
    body = b"the archive"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    sha = base64.b64encode(hashlib.sha256(body).digest()).decode()
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    wrong_sha = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    assert curl_put(server, "digest.tgz", body, f"Content-MD5: {md5}", f"x-amz-checksum-sha256: {sha}")[0] == 200
    for header in (f"Content-MD5: {wrong}", f"x-amz-checksum-sha256: {wrong_sha}"):
        status, text = curl_put(server, "digest.tgz", b"changed", header)
        assert status == 400 and "<Code>BadDigest</Code>" in text, text
    assert object_meta(server, "digest.tgz")["size"] == len(body)


def test_an_upload_refused_for_its_digest_keeps_the_old_archive(servers):
    server, st, old = s3_archived(servers, "refused", 4000)
    # What a server answers when the bytes changed on the way (the agent's own digests are right).
    hook(server, "fail?count=1&status=400&code=BadDigest&method=PUT")
    failed(archive(st, "refused", os.urandom(4000)), "archive upload failed: checksum mismatch")
    stored(st, "refused", old)


def test_an_upload_cut_mid_body_keeps_the_old_archive(servers):
    server, st, old = s3_archived(servers, "cut", 4000)
    # Every attempt (the agent makes three) loses its connection after 64 KiB.
    hook(server, "cut?count=3&after=65536")
    failed(archive(st, "cut", seed=1, length=1 << 20),
           "archive upload failed: storage server unreachable (Connection reset by peer)")
    stored(st, "cut", old)
    hook(server, "cut", method="DELETE")
    # Once the network is back, the new version is stored.
    assert archive(st, "cut", seed=1, length=1 << 20)["size"] == 1 << 20


# ---- (c) restores verified ----

def test_a_restore_cut_short_is_an_error(servers):
    server, st, data = s3_archived(servers, "short", 200000)
    hook(server, "cut?count=3&after=1000&method=GET")
    failed(restore(st, "short"), "archive download failed: short body (1000 of 200000 bytes)")
    hook(server, "cut", method="DELETE")
    stored(st, "short", data)


def test_a_corrupted_archive_fails_its_checksum(servers):
    for kind in ("s3", "oss"):
        server = servers[kind]
        st = remote(server)
        data = os.urandom(600 * 1024)
        assert archive(st, "rotten", data)["size"] == len(data)
        meta = object_meta(server, st["prefix"] + "workspaces/rotten.tgz")
        path = os.path.join(server["data"], "buckets", "scopebox-test", meta["file"])
        with open(path, "r+b") as f:  # one byte flipped at rest: same length, same metadata
            f.seek(400 * 1024)
            byte = f.read(1)
            f.seek(400 * 1024)
            f.write(bytes([byte[0] ^ 0xff]))
        # Downloaded twice (the second one afresh): the stored object itself is damaged.
        r = restore(st, "rotten")
        assert (r.get("error"), r.get("message")) == ("io.scopebox.Error.ArchiveDamaged",
                                                      "stored archive is damaged: checksum mismatch"), r
        log = in_system("journalctl", "-o", "cat", "--no-pager", "SCOPEBOX_EVENT=archive-checksum-mismatch").stdout
        assert f"Archive '{st['prefix']}workspaces/rotten.tgz' does not match its checksum" in log, log


def test_an_archive_without_our_metadata_is_restored_as_is(servers):
    """Objects the upstream sidecar wrote carry no scopebox-sha256: accepted (the runner's gzip and
    tar checks are the guard for those)."""
    server = servers["s3"]
    st = remote(server)
    body = b"written by someone else"
    key = st["prefix"] + "workspaces/foreign.tgz"
    assert curl_put(server, key, body)[0] == 200
    assert object_meta(server, key)["userMeta"] == {}
    stored(st, "foreign", body)


# ---- (d) the server down ----

def test_a_restore_with_the_server_down_is_an_error_not_a_missing_archive(servers):
    server, st, data = s3_archived(servers, "outage", 3000)
    assert restore(st, "never-archived") == {"found": False, "data": b""}
    port = server["endpoint"].rsplit(":", 1)[1]
    stop_server(server["data"])
    try:
        failed(restore(st, "outage"), "archive download failed: storage server unreachable (Connection refused)")
        failed(restore(st, "never-archived"),
               "archive download failed: storage server unreachable (Connection refused)")
        failed(archive(st, "outage", b"newer"),
               "archive upload failed: storage server unreachable (Connection refused)")
    finally:
        assert start_server("s3", server["data"], port) == server["endpoint"]
    stored(st, "outage", data)
    # A bucket that does not exist is the storage block's mistake, not a missing archive.
    failed(restore(dict(st, s3_bucket="no-such-bucket"), "outage"),
           "archive download failed: storage server answered HTTP 404")


# ---- (e) leftovers of a killed agent ----

def test_staging_files_of_a_killed_agent_are_removed_at_start(local):
    assert archive(local, "killed", b"committed before")["size"] == 16
    r = agent({"op": "begin", "storage": local, "stem": "killed", "data": base64.b64encode(b"half").decode()})[0]
    assert r["written"] == 4, r
    # Also one as an agent killed mid-write by an older version would have left none of here: planted.
    in_system("sh", "-c", f"printf x > {STAGING}/0123abcd && chown scopebox-storage: {STAGING}/0123abcd", check=True)
    assert sorted(staging_files()) == sorted([r["token"], "0123abcd"])
    t0 = time.monotonic()
    in_system("systemctl", "kill", "--signal=KILL", STORAGE_AGENT, check=True)
    # Restart=on-failure brings it back (or the next call activates it); it sweeps before taking the name.
    in_system("busctl", "call", "io.scopebox.StorageAgent1", "/io/scopebox/StorageAgent1",
              "io.scopebox.StorageAgent1", "GetVersion", check=True)
    deadline = time.monotonic() + 30
    while staging_files() and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"staging swept {time.monotonic() - t0:.2f} s after the SIGKILL")
    assert staging_files() == []
    log = in_system("journalctl", "-o", "cat", "--no-pager", "SCOPEBOX_EVENT=staging-swept").stdout
    assert f"Removed 2 leftover staging files of an earlier agent from '{ROOT}/.staging'." in log, log
    stored(local, "killed", b"committed before")
    # The staging died with the agent that made it: its token is unknown now.
    r = agent({"op": "commit", "token": r["token"], "size": 4})[0]
    assert r == {"error": "io.scopebox.Error.UnknownToken", "message": "unknown archive token"}, r


def test_a_key_directory_on_another_mount_stages_in_place(local):
    """rename() can't cross mounts: below a mount point the staging file is made in the key's own
    directory (as .staging-<token>), renamed just as atomically."""
    user = pwd.getpwnam("scopebox-storage")
    workspaces = f"{ROOT}/{local['prefix']}workspaces"
    os.makedirs(workspaces)
    os.chown(os.path.dirname(workspaces), user.pw_uid, user.pw_gid)
    in_system("mount", "-t", "tmpfs", "-o", f"size=1m,mode=0700,uid={user.pw_uid},gid={user.pw_gid}", "tmpfs",
              workspaces, check=True)
    try:
        in_system("systemctl", "restart", STORAGE_AGENT, check=True)  # its mount namespace sees the new mount
        r = agent({"op": "begin", "storage": local, "stem": "mounted", "data": base64.b64encode(b"abc").decode()})[0]
        assert in_system("ls", "-A", workspaces).stdout.split() == [f".staging-{r['token']}"]
        assert staging_files() == []
        assert agent({"op": "commit", "token": r["token"], "size": 3})[0] == {"size": 3}
        assert in_system("ls", "-A", workspaces).stdout.split() == ["mounted.tgz"]
        stored(local, "mounted", b"abc")
    finally:
        in_system("umount", workspaces)


def test_the_staging_directory_is_not_a_storage_prefix():
    for prefix in (".staging/", ".staging"):
        r = archive({"provider": "local", "prefix": prefix}, "x", b"x")
        assert r == {"error": "org.freedesktop.DBus.Error.InvalidArgs", "message": "invalid storage prefix"}, r


# ---- (f) the storage directory full ----

FULL = "/var/lib/scopebox-test-full"


@pytest.fixture
def full_storage():
    """The agent's local storage on a 256 KiB tmpfs (mounted in the system that runs it)."""
    user = pwd.getpwnam("scopebox-storage")
    os.makedirs(FULL, exist_ok=True)
    in_system("mount", "-t", "tmpfs", "-o", f"size=256k,mode=0700,uid={user.pw_uid},gid={user.pw_gid}", "tmpfs", FULL,
              check=True)
    dropin = f"/run/systemd/system/{STORAGE_AGENT}.d/test-full-storage.conf"
    in_system("sh", "-c", f"mkdir -p {os.path.dirname(dropin)} && printf '[Service]\\nEnvironment="
                          f"SANDBOX_LOCAL_STORAGE_DIR={FULL}\\nReadWritePaths={FULL}\\n' > {dropin}", check=True)
    in_system("systemctl", "daemon-reload", check=True)
    in_system("systemctl", "restart", STORAGE_AGENT, check=True)
    try:
        yield {"provider": "local", "prefix": "full/"}
    finally:
        in_system("rm", "-f", dropin)
        in_system("systemctl", "daemon-reload")
        in_system("systemctl", "restart", STORAGE_AGENT)
        in_system("umount", FULL)
        os.rmdir(FULL)


def test_a_full_storage_directory_keeps_the_old_archive(full_storage):
    old = os.urandom(20000)
    assert archive(full_storage, "full", old)["size"] == 20000
    r = archive(full_storage, "full", seed=2, size=400000, length=400000)
    assert r.get("write_error") == "ENOSPC" and r["written"] < 400000, r
    failed(r, f"storage full (archive incomplete: {r['written']} of 400000 bytes)")
    stored(full_storage, "full", old)
    assert in_system("ls", "-A", f"{FULL}/.staging").stdout.split() == []
    # Room again: the next archive is stored.
    assert archive(full_storage, "full", seed=3, length=100000)["size"] == 100000
