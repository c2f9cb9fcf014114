# SPDX-License-Identifier: LGPL-2.1-or-later
"""Storage blocks of requests against the host itself (issue 14, findings 7 and 8).

With the installed default (SANDBOX_STORAGE_ALLOWED_ENDPOINTS and SANDBOX_STORAGE_ALLOWED_NETWORKS
empty) a block naming the loopback, by address or by a name that resolves there, makes the agent
connect nowhere: a plain TCP listener on 127.0.0.1 sees no connection at all while create with
archive_key, release, /storage/put, /storage/delete and /storage/gc run, and the client gets 400
"storage endpoint not allowed" (gc: zeros, as for any block that may not be used).

Archive downloads are bounded by SANDBOX_MAX_ARCHIVE_BYTES: a Content-Length over it is refused
before the body, a body without one is cut at the bound, neither is retried, and the session
starts empty with the agent's spool file gone."""
import io
import socket
import tarfile
import threading

import pytest

from conftest import LOOPBACK_STORAGE, create_session, delete_session, in_system, request, run
from conftest import storage_agent_setting, storage_put
from test_storage_keys import Listener

NOT_ALLOWED = {"detail": "storage endpoint not allowed"}
ZEROS = {"deleted": 0, "scanned": 0, "freed_bytes": 0}
SECRET = "SsrfSuiteSecret0123456789"


def s3_block(endpoint):
    return {"provider": "s3", "prefix": "ssrf/", "s3_bucket": "ssrf-bucket", "s3_region": "us-east-1",
            "s3_endpoint": endpoint, "s3_access_key": "AKIDSSRF", "s3_secret_key": SECRET}


def oss_block(endpoint):
    return {"provider": "aliyun_oss", "prefix": "ssrf/", "oss_bucket": "ssrf-bucket", "oss_endpoint": endpoint,
            "oss_access_key_id": "LTAISSRF", "oss_access_key_secret": SECRET}


@pytest.fixture(scope="module")
def listeners():
    v4 = Listener()
    try:
        v6 = Listener(socket.AF_INET6, "::1")
    except OSError:
        v6 = None
    yield v4, v6
    v4.close()
    if v6:
        v6.close()


# Addresses and names that all end at the listener on 127.0.0.1 (or ::1).
LOOPBACK = {
    "ipv4": "http://127.0.0.1:{P}",
    "localhost": "http://localhost:{P}",
    "localhost-dot": "http://localhost.:{P}",
    "decimal": "http://2130706433:{P}",
    "short": "http://127.1:{P}",
    "unspecified": "http://0.0.0.0:{P}",
    "other-loopback": "http://127.0.0.2:{P}",
    "https": "https://127.0.0.1:{P}",
    "ipv6": "http://[::1]:{P6}",
    "ipv4-mapped": "http://[::ffff:127.0.0.1]:{P}",
}


# Spellings the agent's resolver may not take for addresses: then the name does not resolve (502,
# "unreachable"), which is as good, as long as nothing is connected to.
UNRESOLVED = {"localhost-dot", "decimal", "short"}
REFUSED = (NOT_ALLOWED, {"detail": "storage endpoint must be an http(s) URL"})


def refused(r, case):
    if r.status == 502 and case in UNRESOLVED:
        return "unreachable" in r.json["detail"]
    return r.status == 400 and r.json in REFUSED


@pytest.mark.parametrize("case", list(LOOPBACK))
def test_loopback_endpoints_are_never_contacted(listeners, case):
    v4, v6 = listeners
    if "{P6}" in LOOPBACK[case] and not v6:
        pytest.skip("no IPv6 loopback")
    endpoint = LOOPBACK[case].format(P=v4.port, P6=v6.port if v6 else 0)
    before = (v4.count, v6.count if v6 else 0)
    for block in (s3_block(endpoint), oss_block(endpoint)):
        r = storage_put(block, "mineru/x.pdf", b"x")
        assert refused(r, case), r
        r = request("POST", "/storage/delete", {"key": "mineru/x.pdf", "storage": block})
        assert refused(r, case), r
        r = request("POST", "/storage/gc", {"max_age_seconds": 60, "storage": block})
        assert (r.status, r.json) == (200, ZEROS) or (case in UNRESOLVED and r.status == 502), r
    assert (v4.count, v6.count if v6 else 0) == before


def test_sessions_with_a_loopback_storage_never_contact_it(listeners):
    v4, _ = listeners
    for block in (s3_block(f"http://127.0.0.1:{v4.port}"), oss_block(f"http://localhost:{v4.port}")):
        # A create naming the block fails: it never starts empty as if there were nothing stored.
        r = request("POST", "/sessions", {"archive_key": "ssrf_probe", "storage": block})
        assert (r.status, r.json) == (400, {"detail": "storage endpoint not allowed"}), r
        # A release naming it: the upload is refused (logged), the workspace kept, the client told.
        sid = create_session(archive_key="ssrf_probe")
        assert run(sid, "open('/workspace/a.txt', 'w').write('a'); print(1)")["stdout"] == "1\n"
        assert delete_session(sid, storage=block).json == {"ok": True, "archive": "pending"}
        # ... and a create of its key with that block takes that workspace over, never the storage.
        assert create_session(archive_key="ssrf_probe", storage=block) == sid
        assert run(sid, "print(open('/workspace/a.txt').read())")["stdout"] == "a\n"
        assert delete_session(sid, discard=True).json == {"ok": True, "archive": "discarded"}
    assert v4.count == 0


def test_refusals_name_the_setting_in_the_journal_without_secrets(listeners):
    v4, _ = listeners
    assert storage_put(s3_block(f"http://127.0.0.1:{v4.port}"), "mineru/x.pdf", b"x").status == 400
    log = in_system("journalctl", "-o", "verbose", "--no-pager", "-n", "2000", "-u",
                    "scopebox-storage-agent.service").stdout
    assert "SANDBOX_STORAGE_ALLOWED_NETWORKS" in log, log[-2000:]
    assert SECRET not in log


# ---- the download bound ----

LIMIT = 8 * 1024 * 1024


class FakeS3(Listener):
    """Answers GETs with an archive: a small real one ("fits"), a Content-Length far over the
    limit then a pause ("length"), or an endless body without a length ("stream"). Counts GETs
    and the body bytes it managed to send."""

    def __init__(self):
        self.mode = "fits"
        self.gets = 0
        self.sent = 0
        self.closed_before_body = False
        super().__init__()

    @staticmethod
    def small_archive():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            data = b"restored\n"
            info = tarfile.TarInfo("./fits.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def handle(self, conn):
        threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        with conn:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            method = head.split(b" ", 1)[0]
            if method != b"GET":
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                rest = len(head.split(b"\r\n\r\n", 1)[1])
                while rest < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += len(chunk)
                conn.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                return
            self.gets += 1
            if self.mode == "fits":
                body = self.small_archive()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
                return
            chunk = b"\0" * (1 << 20)
            if self.mode == "length":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (1 << 30))
                conn.settimeout(5)
                try:
                    self.closed_before_body = conn.recv(1) == b""
                except (socket.timeout, OSError):
                    pass
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            try:
                while self.sent < 1 << 30:
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                pass



@pytest.fixture(scope="module")
def fake_s3():
    server = FakeS3()
    with storage_agent_setting("ssrf-loopback", LOOPBACK_STORAGE), \
            storage_agent_setting("ssrf-archive-limit", f"SANDBOX_MAX_ARCHIVE_BYTES={LIMIT}"):
        yield server
    server.close()


def agent_spool_files():
    pid = in_system("systemctl", "show", "-p", "MainPID", "--value", "scopebox-storage-agent.service").stdout.strip()
    if pid in ("", "0"):
        return []
    out = in_system("sh", "-c", f"ls -l /proc/{pid}/fd 2>/dev/null").stdout
    return [line for line in out.splitlines() if "/var/tmp/" in line]


def restore(fake_s3, mode):
    fake_s3.mode, fake_s3.gets, fake_s3.sent, fake_s3.closed_before_body = mode, 0, 0, False
    block = s3_block(f"http://127.0.0.1:{fake_s3.port}")
    r = request("POST", "/sessions", {"archive_key": f"ssrf_{mode}", "storage": block})
    if r.status != 200:
        # Never restored: the create fails and says why.
        assert r.status == 503, r
        return r.json["detail"]
    sid = r.json["session_id"]
    try:
        return run(sid, "import os\nprint(sorted(os.listdir('/workspace')))")["stdout"]
    finally:
        delete_session(sid, discard=True, archive_key=f"ssrf_{mode}", storage=block)


def test_an_archive_within_the_limit_restores(fake_s3):
    """The control case: the fake server is reachable once loopback is allowed, and restores work."""
    assert "fits.txt" in restore(fake_s3, "fits")
    assert fake_s3.gets == 1


def test_a_content_length_over_the_limit_is_refused_before_the_body(fake_s3):
    detail = restore(fake_s3, "length")
    assert "larger than SANDBOX_MAX_ARCHIVE_BYTES" in detail, detail
    assert fake_s3.gets == 1, "refused downloads are not retried"
    assert fake_s3.closed_before_body
    assert agent_spool_files() == []
    print(f"# Content-Length of 1 GiB over a limit of {LIMIT}: {fake_s3.sent} body bytes sent before the hang-up")


def test_a_body_without_length_is_cut_at_the_limit(fake_s3):
    detail = restore(fake_s3, "stream")
    assert "larger than SANDBOX_MAX_ARCHIVE_BYTES" in detail, detail
    assert fake_s3.gets == 1, "cut downloads are not retried"
    # What the server got into the socket: the limit plus the kernel's socket buffers at most.
    assert fake_s3.sent < LIMIT + (32 << 20), fake_s3.sent
    assert agent_spool_files() == []
    print(f"# endless body over a limit of {LIMIT}: {fake_s3.sent} bytes sent before the cut")
    log = in_system("journalctl", "--no-pager", "-n", "300", "-u", "scopebox-storage-agent.service").stdout
    assert "larger than SANDBOX_MAX_ARCHIVE_BYTES" in log, log[-2000:]
