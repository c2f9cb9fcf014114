# SPDX-License-Identifier: LGPL-2.1-or-later
"""The object storage endpoints over HTTP: /storage/put, /storage/delete, /storage/gc against the
storage agent's local provider (objects planted in and checked on its directory), storage blocks
that are missing, not effective, unreachable or invalid, hostile keys, the schema, and the
300 MiB body limit that applies to /storage/put alone."""
import base64
import os
import pwd
import secrets
import shutil
import socket
import time
import urllib.parse

import pytest

from conftest import BASE_URL, api_key, in_system, request

ROOT = "/var/lib/scopebox-storage"
LOCAL = {"provider": "local", "prefix": "aivory/"}
MAX_BODY = 56 * 1024 * 1024
MAX_STORAGE_BODY = 300 * 1024 * 1024
DAY = 86400
ZEROS = {"deleted": 0, "scanned": 0, "freed_bytes": 0}

NOT_CONFIGURED = {"detail": "storage backend not configured"}
INVALID_KEY = {"detail": "invalid storage key"}
NO_PRESIGN = {"detail": "presigned URLs are unsupported for local storage"}
INVALID_BASE64 = {"detail": "invalid base64"}
TOO_LARGE = {"detail": "storage is too large"}
UNAUTHORIZED = {"error": "unauthorized"}


def b64(data):
    return base64.b64encode(data).decode()


def put(key, data=b"", storage=LOCAL, **extra):
    body = {"key": key, "data_base64": b64(data), **extra}
    if storage is not None:
        body["storage"] = storage
    return request("POST", "/storage/put", body)


def delete(key, storage=LOCAL):
    body = {"key": key}
    if storage is not None:
        body["storage"] = storage
    return request("POST", "/storage/delete", body)


def gc(max_age_seconds, storage=LOCAL):
    body = {"max_age_seconds": max_age_seconds}
    if storage is not None:
        body["storage"] = storage
    return request("POST", "/storage/gc", body)


def check(r, status, body):
    assert (r.status, r.json) == (status, body), r


def make_dirs(*rel):
    """Directories below the storage root, owned by the agent's user as it would make them."""
    paths = []
    for d in rel:
        parts = d.strip("/").split("/")
        paths += [os.path.join(ROOT, *parts[:i]) for i in range(1, len(parts) + 1)]
    r = in_system("install", "-d", "-o", "scopebox-storage", "-g", "scopebox-storage", "-m", "0700",
                  *dict.fromkeys(paths))
    assert r.returncode == 0, r.stderr


def plant(rel, data=b"x", age=None):
    """An object as the local provider keeps it: a file at <root>/<full key>."""
    make_dirs(os.path.dirname(rel))
    path = os.path.join(ROOT, rel)
    with open(path, "wb") as f:
        f.write(data)
    user = pwd.getpwnam("scopebox-storage")
    os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, 0o600)
    if age is not None:
        t = time.time() - age
        os.utime(path, (t, t))
    return path


@pytest.fixture
def prefix():
    """A prefix of its own below the storage root, removed afterwards."""
    name = f"aivory-test-{secrets.token_hex(6)}"
    yield name + "/"
    shutil.rmtree(os.path.join(ROOT, name), ignore_errors=True)


@pytest.fixture
def aivory():
    """Objects planted under aivory/ by a test, removed afterwards."""
    planted = []
    yield planted
    for p in planted:
        if os.path.lexists(p):
            os.unlink(p)


def raw_request(path, headers, body=b"", read_max=4096):
    """Sends a request line and headers (and maybe the start of a body) on a socket of its own and
    returns what the server answers first, before a body it announced is complete."""
    url = urllib.parse.urlsplit(BASE_URL)
    with socket.create_connection((url.hostname, url.port or 80), timeout=30) as s:
        head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n" + \
            "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        s.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(read_max)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1]) if head else 0
        if status >= 200:
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(rest) < length:
                chunk = s.recv(read_max)
                if not chunk:
                    break
                rest += chunk
        return status, rest


def announce(path, length):
    """Headers of a JSON request announcing 'length' body bytes, asking for 100 Continue."""
    return raw_request(path, {"Authorization": f"Bearer {api_key()}", "Content-Type": "application/json",
                              "Content-Length": str(length), "Expect": "100-continue"})


# /storage/put


def test_put_local_has_no_presigned_urls():
    check(put("mineru/document.pdf", b"%PDF-1.4\n", content_type="application/pdf"), 400, NO_PRESIGN)
    check(put("mineru/document.pdf", b"", expires_in=3600), 400, NO_PRESIGN)
    # Nothing was stored on the way.
    assert not os.path.exists(f"{ROOT}/aivory/mineru/document.pdf")


def test_put_body_limit_is_the_storage_one():
    # 100 KiB, then a body larger than the general 56 MiB limit: both reach the agent.
    check(put("mineru/small.bin", os.urandom(100 * 1024)), 400, NO_PRESIGN)
    data = os.urandom(43 * 1024 * 1024)
    body_size = len(b64(data)) + 200
    assert body_size > MAX_BODY
    check(put("mineru/big.bin", data), 400, NO_PRESIGN)


def test_body_limits_per_route():
    # Announced sizes are refused, or continued, before a byte of the body is sent.
    status, body = announce("/storage/put", 57 * 1024 * 1024)
    assert status == 100, (status, body)
    status, body = announce("/storage/put", MAX_STORAGE_BODY)
    assert status == 100, (status, body)
    status, body = announce("/storage/put", MAX_STORAGE_BODY + 1)
    assert (status, body) == (413, f'{{"error":"request body exceeds {MAX_STORAGE_BODY} bytes"}}'.encode())
    # Everything else keeps the general limit, /storage/delete and /storage/gc included.
    for path in ("/exec", "/files", "/sessions", "/storage/delete", "/storage/gc"):
        status, body = announce(path, 57 * 1024 * 1024)
        assert (status, body) == (413, f'{{"error":"request body exceeds {MAX_BODY} bytes"}}'.encode()), path
        status, body = announce(path, MAX_BODY)
        assert status == 100, (path, status, body)


def test_put_invalid_base64():
    for text in ("QQ=", "QUJD\n", "QU JD", "data:application/pdf;base64,QUJD", "-_-_", "QQ==QQ==", "QUJD=QUJD", "QUI=="):
        r = request("POST", "/storage/put", {"key": "mineru/a.pdf", "data_base64": text, "storage": LOCAL})
        check(r, 400, INVALID_BASE64)


def test_put_content_type():
    # Fine ones reach the agent, ones that could split a header do not.
    check(put("mineru/a.pdf", b"x", content_type="application/pdf; charset=binary"), 400, NO_PRESIGN)
    check(put("mineru/a.pdf", b"x", content_type=None), 400, NO_PRESIGN)
    for bad in ("text/plain\r\nx-amz-acl: public-read", "a\x00b", "t" * 256):
        check(put("mineru/a.pdf", b"x", content_type=bad), 400, {"detail": "invalid content_type"})


def test_put_not_configured():
    check(put("mineru/a.pdf", b"x", storage=None), 400, NOT_CONFIGURED)
    check(request("POST", "/storage/put", {"key": "a", "data_base64": "", "storage": None}), 400,
          NOT_CONFIGURED)
    check(put("mineru/a.pdf", b"x", storage={"provider": "s3"}), 400, NOT_CONFIGURED)
    check(put("mineru/a.pdf", b"x", storage={"provider": "aliyun_oss", "oss_bucket": "b"}), 400,
          NOT_CONFIGURED)


def test_put_provider_failures_are_502():
    # S3 without credentials can't presign; an OSS endpoint that doesn't resolve fails.
    r = put("mineru/a.pdf", b"x", storage={"provider": "s3", "s3_bucket": "b", "prefix": "aivory/"})
    assert r.status == 502, r
    assert isinstance(r.json["detail"], str) and r.json["detail"], r
    r = put("mineru/a.pdf", b"x", storage={"provider": "aliyun_oss", "oss_bucket": "b",
                                           "oss_endpoint": "https://oss.example", "oss_access_key_id": "i",
                                           "oss_access_key_secret": "s"})
    assert r.status == 502 and r.json["detail"], r


def test_put_invalid_keys():
    for key in ("../x", "/abs", "", "a\x00b", "mineru/../../x", "a/../b", "k" * 1025):
        check(put(key, b"x"), 400, INVALID_KEY)
        check(put(key, b"x", storage={"provider": "s3", "s3_bucket": "b"}), 400, INVALID_KEY)


# /storage/delete


def test_delete_with_and_without_prefix(aivory):
    path = plant("aivory/mineru/x.pdf", b"%PDF")
    aivory.append(path)
    check(delete("mineru/x.pdf"), 200, {"ok": True, "key": "aivory/mineru/x.pdf"})
    assert not os.path.lexists(path)

    plant("aivory/mineru/x.pdf", b"%PDF")
    check(delete("aivory/mineru/x.pdf"), 200, {"ok": True, "key": "aivory/mineru/x.pdf"})
    assert not os.path.lexists(path)

    # Already gone: still a success.
    check(delete("mineru/x.pdf"), 200, {"ok": True, "key": "aivory/mineru/x.pdf"})
    check(delete("mineru/never/was.pdf"), 200, {"ok": True, "key": "aivory/mineru/never/was.pdf"})


def test_delete_stays_in_the_prefix(aivory, prefix):
    # A file right beside the prefix and one at the top of the storage directory.
    outside = plant(f"{prefix}outside.pdf", b"keep")
    top = plant(f"{prefix.rstrip('/')}-top.pdf", b"keep")
    aivory.append(top)
    name = prefix.rstrip("/")
    for key in (f"../{name}/outside.pdf", f"aivory/../{name}/outside.pdf", f"../{name}-top.pdf",
                f"mineru/../../{name}-top.pdf", "/etc/passwd", f"/{name}/outside.pdf"):
        check(delete(key), 400, INVALID_KEY)
    # Without '..' a key can only name something inside: a relative key that looks like another
    # prefix is below this one.
    check(delete(f"{name}/outside.pdf"), 200, {"ok": True, "key": f"aivory/{name}/outside.pdf"})
    assert os.path.exists(outside) and os.path.exists(top)


def test_delete_through_planted_links(prefix):
    # Directories under the prefix replaced by links, to elsewhere in the storage directory and
    # outside it: nothing is deleted through them.
    name = prefix.rstrip("/")
    inside = plant(f"{prefix}victim/x.pdf", b"keep")
    outside_dir = f"/var/lib/{name}-victim"
    os.mkdir(outside_dir, 0o755)
    try:
        outside = os.path.join(outside_dir, "x.pdf")
        with open(outside, "wb") as f:
            f.write(b"keep")
        make_dirs(f"{prefix}a", f"{prefix}b")
        os.symlink(os.path.dirname(inside), os.path.join(ROOT, prefix, "a", "mineru"))
        os.symlink(outside_dir, os.path.join(ROOT, prefix, "b", "mineru"))
        for sub in ("a", "b"):
            r = delete("mineru/x.pdf", storage={"provider": "local", "prefix": f"{prefix}{sub}/"})
            assert r.status in (200, 400, 502), r
            assert "detail" in r.json or r.json == {"ok": True, "key": f"{prefix}{sub}/mineru/x.pdf"}, r
        assert os.path.exists(inside) and os.path.exists(outside)
    finally:
        shutil.rmtree(outside_dir)


def test_delete_invalid_keys():
    for key in ("../x", "/abs", "", "a\x00b", "a/../../b", "k" * 1025):
        check(delete(key), 400, INVALID_KEY)


def test_delete_not_configured_and_unreachable():
    # bucket "b" on AWS: no route out of this machine, so the provider fails (502).
    check(delete("mineru/x.pdf", storage=None), 400, NOT_CONFIGURED)
    check(delete("mineru/x.pdf", storage={"provider": "s3"}), 400, NOT_CONFIGURED)
    r = delete("mineru/x.pdf", storage={"provider": "s3", "s3_bucket": "b"})
    assert r.status == 502 and isinstance(r.json["detail"], str) and r.json["detail"], r


def test_invalid_storage_blocks():
    check(put("mineru/a.pdf", b"x", storage={"provider": "ftp"}), 400,
          {"detail": "unsupported storage provider"})
    check(delete("mineru/a.pdf", storage={"provider": "ftp"}), 400,
          {"detail": "unsupported storage provider"})
    check(delete("mineru/a.pdf", storage={"provider": "local", "prefix": "../up/"}), 400,
          {"detail": "invalid storage prefix"})
    check(delete("mineru/a.pdf", storage={"provider": 5}), 400, {"detail": "invalid storage config"})
    # A region the request could not be signed with, nor name a host: refused before any transfer.
    for region in ("us east-1", "us-east-1/x", "eu\r\nX-Evil: 1", "r" * 65):
        check(delete("mineru/a.pdf", storage={"provider": "s3", "s3_bucket": "b", "s3_region": region}), 400,
              {"detail": "invalid storage config"})
        check(put("mineru/a.pdf", b"x", storage={"provider": "s3", "s3_bucket": "b", "s3_region": region}), 400,
              {"detail": "invalid storage config"})
        check(gc(DAY, storage={"provider": "s3", "s3_bucket": "b", "s3_region": region}), 200, ZEROS)
    check(delete("mineru/a.pdf", storage={"provider": "s3", "s3_bucket": "b", "s3_endpoint": "file:///etc"}),
          400, {"detail": "storage endpoint must be an http(s) URL"})
    # A sweep of storage that is not in effect finds nothing.
    check(gc(DAY, storage={"provider": "ftp"}), 200, ZEROS)
    # Blocks larger than 64 KiB are not forwarded.
    big = {"provider": "local", "prefix": "aivory/", "pad": "p" * (64 * 1024)}
    check(put("mineru/a.pdf", b"x", storage=big), 400, TOO_LARGE)
    check(delete("mineru/a.pdf", storage=big), 400, TOO_LARGE)
    check(gc(DAY, storage=big), 400, TOO_LARGE)


def test_endpoints_the_agent_cannot_use_are_400():
    # http(s) URLs all, but none that libcurl's parser takes (a port out of range, an IPv6 zone, a
    # host of other characters) or, for OSS, with a base path: the client's mistake, not the
    # storage server's failure (502).
    s3 = ("http://h:65536", "http://h:0", "https://[fe80::1%25eth0]", "https://[zzz]", "http://:80",
          "https://h~x", "https://h+x", "https://ex\u00e4mple.com")
    for endpoint in s3:
        storage = {"provider": "s3", "s3_bucket": "b", "s3_endpoint": endpoint}
        check(delete("mineru/a.pdf", storage=storage), 400,
              {"detail": "storage endpoint must be an http(s) URL"})
    for endpoint in s3 + ("https://oss.example/base",):
        storage = {"provider": "aliyun_oss", "oss_bucket": "b", "oss_endpoint": endpoint,
                   "oss_access_key_id": "i", "oss_access_key_secret": "s"}
        check(put("mineru/a.pdf", b"x", storage=storage), 400,
              {"detail": "storage endpoint must be an http(s) URL"})


# /storage/gc


def test_gc(prefix):
    storage = {"provider": "local", "prefix": prefix}
    old = 10 * DAY
    doomed = [
        plant(f"{prefix}workspaces/old-a.tgz", b"a" * 100, age=old),
        plant(f"{prefix}workspaces/old-b.tgz", b"b" * 1000, age=old),
        plant(f"{prefix}mineru/old.pdf", b"c" * 300, age=old),
        plant(f"{prefix}mineru/job-1/old.bin", b"d" * 20, age=old),
    ]
    kept = [
        plant(f"{prefix}workspaces/new.tgz", b"e" * 10),
        plant(f"{prefix}workspaces/old.txt", b"f" * 7, age=old),       # not an archive
        plant(f"{prefix}workspaces/young.tgz", b"g" * 3, age=6 * DAY),  # younger than the limit
        plant(f"{prefix}mineru/new.pdf", b"h" * 5),
        plant(f"{prefix}other/old.tgz", b"i" * 11, age=old),           # not a known prefix
        plant(f"{prefix}old-top.pdf", b"j" * 13, age=old),
    ]

    # No age: nothing happens.
    check(gc(0, storage), 200, ZEROS)
    check(gc(-5, storage), 200, ZEROS)
    assert all(os.path.exists(p) for p in doomed + kept)

    check(gc(7 * DAY, storage), 200, {"deleted": 4, "scanned": 8, "freed_bytes": 1420})
    assert not any(os.path.exists(p) for p in doomed)
    assert all(os.path.exists(p) for p in kept)

    # Again: only what was kept is looked at.
    check(gc(7 * DAY, storage), 200, {"deleted": 0, "scanned": 4, "freed_bytes": 0})
    # A shorter age takes the 6-day-old archive too.
    check(gc(5 * DAY, storage), 200, {"deleted": 1, "scanned": 4, "freed_bytes": 3})
    assert all(os.path.exists(p) for p in kept if "young" not in p)


def test_gc_without_storage_or_directories(prefix):
    check(gc(DAY, storage=None), 200, ZEROS)
    check(request("POST", "/storage/gc", {"max_age_seconds": DAY, "storage": None}), 200, ZEROS)
    check(gc(DAY, storage={"provider": "s3"}), 200, ZEROS)
    check(gc(0, storage={"provider": "s3", "s3_bucket": "b"}), 200, ZEROS)
    # A prefix with nothing under it yet.
    check(gc(DAY, storage={"provider": "local", "prefix": prefix}), 200, ZEROS)


def test_gc_unreachable_provider_is_502():
    r = gc(DAY, storage={"provider": "s3", "s3_bucket": "b"})
    assert r.status == 502 and isinstance(r.json["detail"], str) and r.json["detail"], r


# Common rules


def test_schema_errors():
    cases = [
        ("/storage/put", {"data_base64": "", "storage": LOCAL}, "missing", ["body", "key"]),
        ("/storage/put", {"key": "a", "storage": LOCAL}, "missing", ["body", "data_base64"]),
        ("/storage/put", {"key": 1, "data_base64": "", "storage": LOCAL}, "string_type", ["body", "key"]),
        ("/storage/put", {"key": "a", "data_base64": "", "expires_in": "x"}, "int_type",
         ["body", "expires_in"]),
        ("/storage/put", {"key": "a", "data_base64": "", "storage": "local"}, "dict_type", ["body", "storage"]),
        ("/storage/delete", {"storage": LOCAL}, "missing", ["body", "key"]),
        ("/storage/delete", {"key": None, "storage": LOCAL}, "string_type", ["body", "key"]),
        ("/storage/delete", {"key": "a", "storage": []}, "dict_type", ["body", "storage"]),
        ("/storage/gc", {"storage": LOCAL}, "missing", ["body", "max_age_seconds"]),
        ("/storage/gc", {"max_age_seconds": 1.5, "storage": LOCAL}, "int_from_float",
         ["body", "max_age_seconds"]),
        ("/storage/gc", {"max_age_seconds": "1", "storage": LOCAL}, "int_type", ["body", "max_age_seconds"]),
    ]
    for path, body, kind, loc in cases:
        r = request("POST", path, body)
        assert r.status == 422, (path, body, r)
        assert r.json["detail"][0]["type"] == kind and r.json["detail"][0]["loc"] == loc, (path, body, r)
    for path in ("/storage/put", "/storage/delete", "/storage/gc"):
        r = request("POST", path, raw=b"{", headers={"Content-Type": "application/json"})
        assert r.status == 422 and r.json["detail"][0]["type"] == "json_invalid", r
        r = request("POST", path)
        assert r.status == 422 and r.json["detail"][0]["type"] == "missing", r


def test_auth_and_methods():
    for path in ("/storage/put", "/storage/delete", "/storage/gc"):
        check(request("POST", path, {}, key=None), 401, UNAUTHORIZED)
        check(request("POST", path, {}, key="wrong"), 401, UNAUTHORIZED)
        r = request("GET", path)
        assert (r.status, r.json, r.headers.get("Allow")) == (405, {"detail": "Method Not Allowed"}, "POST"), r
    check(request("POST", "/storage/list", {}), 404, {"detail": "Not Found"})
