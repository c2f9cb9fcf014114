# SPDX-License-Identifier: LGPL-2.1-or-later
"""Object key and storage block injection on /storage/put, /storage/delete, /storage/gc and the
workspace archives (archive_key, storage of POST/DELETE /sessions), beyond
tests/integration/test_storage_api.py: "..", "." and empty segments, leading and doubled
slashes, backslashes, percent-encoding, NUL and control characters, Unicode, the 1024-byte
bound counted in bytes, keys that try to leave or re-enter the prefix, hostile prefixes, members
that try to choose the local directory, and endpoints outside the operator's allowlist
(SANDBOX_STORAGE_ALLOWED_ENDPOINTS). Every refusal has the documented status and text, and
sentinel objects beside the prefix, in another prefix and outside the storage directory are
never touched."""
import os
import pwd
import secrets
import shutil
import socket
import threading
import time

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import create_session, delete_session, in_system, request, run, storage_put

ROOT = "/var/lib/scopebox-storage"
DAY = 86400
ZEROS = {"deleted": 0, "scanned": 0, "freed_bytes": 0}
INVALID_KEY = {"detail": "invalid storage key"}
INVALID_PREFIX = {"detail": "invalid storage prefix"}
NO_PRESIGN = {"detail": "presigned URLs are unsupported for local storage"}
NOT_ALLOWED = {"detail": "storage endpoint not allowed"}
INVALID_ENDPOINT = {"detail": "storage endpoint must be an http(s) URL"}
AGENT = "scopebox-storage-agent.service"
DROPIN = f"/run/systemd/system/{AGENT}.d/secsuite-allowlist.conf"


def put(key, storage, data=b"x"):
    return storage_put(storage, key, data)


def delete(key, storage):
    return request("POST", "/storage/delete", {"key": key, "storage": storage})


def gc(storage, max_age_seconds=DAY):
    return request("POST", "/storage/gc", {"max_age_seconds": max_age_seconds, "storage": storage})


def check(r, status, body):
    assert (r.status, r.json) == (status, body), r


def plant(path, data=b"keep", age=None):
    """A file as the local provider keeps objects; below ROOT, directories and file belong to the
    agent's user like the ones it makes."""
    user = pwd.getpwnam("scopebox-storage")
    owned = path.startswith(ROOT + "/")
    parent = os.path.dirname(path)
    missing = []
    while not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(missing):
        os.mkdir(d, 0o700)
        if owned:
            os.chown(d, user.pw_uid, user.pw_gid)
    with open(path, "wb") as f:
        f.write(data)
    if owned:
        os.chown(path, user.pw_uid, user.pw_gid)
    if age is not None:
        t = time.time() - age
        os.utime(path, (t, t))
    return path


def files_below(top):
    out = set()
    for d, _, names in os.walk(top):
        out.update(os.path.join(d, n) for n in names)
    return out


class Area:
    """A prefix of our own, with sentinel objects all around it."""

    def __init__(self):
        self.name = f"secsuite-keys-{secrets.token_hex(4)}"
        self.storage = {"provider": "local", "prefix": self.name + "/"}
        self.outside = f"/var/lib/{self.name}-outside"
        self.victim = f"{ROOT}/{self.name}-victim"
        self.sentinels = {
            f"{ROOT}/{self.name}-beside.pdf": None,
            f"{ROOT}/{self.name}x/mineru/x.pdf": None,
            f"{ROOT}/{self.name}x/workspaces/old.tgz": 30 * DAY,
            f"{self.victim}/mineru/x.pdf": None,
            f"{self.victim}/mineru/old.pdf": 30 * DAY,
            f"{self.victim}/workspaces/old.tgz": 30 * DAY,
            f"{self.outside}/{self.name}/mineru/x.pdf": None,
            f"{self.outside}/{self.name}/mineru/old.pdf": 30 * DAY,
            f"{self.outside}/{self.name}/workspaces/old.tgz": 30 * DAY,
            f"{ROOT}/{self.name}/victim.tgz": 30 * DAY,
        }
        self.tops = [f"{ROOT}/{self.name}", f"{ROOT}/{self.name}x", self.victim, self.outside,
                     f"{ROOT}/{self.name}-beside.pdf"]

    def plant_sentinels(self):
        for path, age in self.sentinels.items():
            plant(path, b"sentinel " + path.encode(), age)

    def intact(self):
        for path in self.sentinels:
            with open(path, "rb") as f:
                assert f.read() == b"sentinel " + path.encode(), path

    def key_path(self, key):
        return f"{ROOT}/{self.name}/{key}"

    def remove(self):
        for top in self.tops:
            if os.path.isdir(top):
                shutil.rmtree(top, ignore_errors=True)
            elif os.path.lexists(top):
                os.unlink(top)


@pytest.fixture(scope="module")
def area():
    a = Area()
    a.plant_sentinels()
    yield a
    a.remove()


@pytest.fixture(autouse=True)
def sentinels_intact(area):
    yield
    area.intact()


# Keys.

INVALID_KEYS = {
    "dotdot": "..", "dotdot-first": "../x", "dotdot-last": "x/..", "dotdot-middle": "a/../b",
    "dotdot-twice": "mineru/../../x", "dot-first": "./x", "dot-last": "x/.", "dot-middle": "a/./b", "dot": ".",
    "absolute": "/x", "double-slash-first": "//x", "double-slash": "a//b", "trailing-slash": "x/", "slash": "/",
    "empty": "", "nul": "\x00", "nul-middle": "a\x00b", "nul-then-dotdot": "x\x00/../../y", "soh": "\x01x",
    "newline": "a\nb", "cr": "a\rb", "tab": "a\tb", "del": "x\x7f", "esc": "x\x1b[2J",
    "backslash-dotdot": "..\\x", "backslash-dotdot-middle": "a\\..\\b", "three-dots": ".../x",
    "dotdot-encoded-mixed": "..%2fx", "too-long": "k" * 1025,
}


@pytest.mark.parametrize("case", list(INVALID_KEYS))
def test_invalid_keys_are_refused(area, case):
    key = INVALID_KEYS[case]
    check(delete(key, area.storage), 400, INVALID_KEY)
    # put checks the key before it refuses local storage: nothing is written either way.
    check(put(key, area.storage), 400, INVALID_KEY)


LITERAL_KEYS = {
    "backslash": "a\\b", "encoded-dots": "%2e%2e/x", "encoded-slash": "%2e%2e%2fx",
    "double-encoded": "%252e%252e/x", "two-dot-leader": "\u2025/x", "fullwidth-dots": "\uff0e\uff0e/x",
    "cjk": "数据/文件.pdf", "hidden": ".hidden", "space": "a b", "tilde": "~/x", "dollar": "$HOME/x",
    "glob": "*", "query-fragment": "?x#y", "shell": "x;rm -rf", "bidi": "\u202efdp.exe", "line-sep": "a\u2028b",
    "overlong-text": "%c0%ae%c0%ae/x",
}


@pytest.mark.parametrize("case", list(LITERAL_KEYS))
def test_odd_keys_are_plain_names_inside_the_prefix(area, case):
    key = LITERAL_KEYS[case]
    path = plant(area.key_path(key))
    check(delete(key, area.storage), 200, {"ok": True, "key": f"{area.name}/{key}"})
    assert not os.path.lexists(path)
    check(put(key, area.storage), 400, NO_PRESIGN)


def key_of_bytes(n, unit="k"):
    """A key of exactly n UTF-8 bytes, in names of at most 200 bytes."""
    names, size = [], 0
    while size < n:
        room = n - size - (1 if names else 0)
        count = min(200, room) // len(unit.encode())
        name = unit * count + "a" * (min(200, room) - count * len(unit.encode()))
        names.append(name)
        size += len(name.encode()) + (1 if len(names) > 1 else 0)
    key = "/".join(names)
    assert len(key.encode()) == n
    return key


@pytest.mark.parametrize("unit", ["k", "é", "数", "😀"])
def test_key_length_is_counted_in_bytes_with_the_prefix(area, unit):
    room = 1024 - len(area.name) - 1
    key = key_of_bytes(room, unit)
    check(delete(key, area.storage), 200, {"ok": True, "key": f"{area.name}/{key}"})
    check(delete(key_of_bytes(room + 1, unit), area.storage), 400, INVALID_KEY)
    check(delete(key_of_bytes(1024, unit), area.storage), 400, INVALID_KEY)
    check(delete(key_of_bytes(1025, unit), area.storage), 400, INVALID_KEY)


def test_keys_cannot_leave_or_double_the_prefix(area):
    p = area.name
    inside = plant(area.key_path("mineru/x.pdf"))
    # The full form names the same object, once.
    check(delete(f"{p}/mineru/x.pdf", area.storage), 200, {"ok": True, "key": f"{p}/mineru/x.pdf"})
    assert not os.path.lexists(inside)
    # Look-alikes of the prefix are relative keys below it.
    check(delete(p, area.storage), 200, {"ok": True, "key": f"{p}/{p}"})
    check(delete(f"{p}x/mineru/x.pdf", area.storage), 200, {"ok": True, "key": f"{p}/{p}x/mineru/x.pdf"})
    check(delete(f"{p}-beside.pdf", area.storage), 200, {"ok": True, "key": f"{p}/{p}-beside.pdf"})
    for key in (f"{p}/", f"{p}//mineru/x.pdf", f"{p}/../{p}x/mineru/x.pdf", f"{p}/./mineru/x.pdf",
                f"/{p}/mineru/x.pdf", f"../{p}-victim/mineru/x.pdf"):
        check(delete(key, area.storage), 400, INVALID_KEY)


def test_a_directory_is_not_an_object(area):
    kept = plant(area.key_path("dirs/mineru/keep.pdf"))
    for key in ("dirs/mineru", "dirs"):
        check(delete(key, area.storage), 502, {"detail": "failed to delete from storage"})
    assert os.path.exists(kept)


def test_json_that_is_not_utf8_is_refused_before_the_key_is_looked_at(area):
    for raw in (b'{"key":"\\ud800/x","storage":{"provider":"local","prefix":"p/"}}',
                b'{"key":"\xc0\xae\xc0\xae/x","storage":{"provider":"local","prefix":"p/"}}',
                b'{"key":"\xff","storage":{"provider":"local","prefix":"p/"}}'):
        r = request("POST", "/storage/delete", raw=raw, headers={"Content-Type": "application/json"})
        check(r, 422, {"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}]})


# Prefixes.

BAD_PREFIXES = {
    "dotdot": "../", "dotdot-deep": "../../etc/", "absolute": "/abs/", "absolute-etc": "/etc",
    "dotdot-inside": "a/../../", "dotdot-bare": "..", "dot": "./", "dot-middle": "a/./b/", "double-slash": "a//b/",
    "backslash-dotdot": "..\\", "newline": "a\nb/", "del": "\x7f/", "tab": "a\tb", "three-dots": ".../",
    "back-in": "x/../secsuite", "too-long": "p" * 1025,
}


@pytest.mark.parametrize("case", list(BAD_PREFIXES))
def test_prefixes_that_break_the_key_rules(area, case):
    st = {"provider": "local", "prefix": BAD_PREFIXES[case]}
    check(delete("mineru/x.pdf", st), 400, INVALID_PREFIX)
    check(put("mineru/x.pdf", st), 400, INVALID_PREFIX)
    check(gc(st), 200, ZEROS)


def test_a_nul_in_the_prefix_is_refused(area):
    """A prefix with a NUL breaks the key rules like a key with one: it is refused, not cut at
    the NUL (which would act on another prefix than the one the client named)."""
    st = {"provider": "local", "prefix": f"{area.name}\x00/../../elsewhere/"}
    kept = plant(area.key_path("mineru/nul.pdf"))
    try:
        check(delete("mineru/nul.pdf", st), 400, INVALID_PREFIX)
        assert os.path.exists(kept)
        check(put("mineru/nul.pdf", st), 400, INVALID_PREFIX)
        check(gc(st), 200, ZEROS)
    finally:
        if os.path.lexists(kept):
            os.unlink(kept)


def test_the_body_cannot_choose_the_local_directory(area):
    """Members naming a directory are ignored: local objects live in the operator's directory."""
    st = dict(area.storage)
    for member in ("local_dir", "dir", "root", "path", "base_dir", "directory", "local_storage_dir",
                   "SANDBOX_LOCAL_STORAGE_DIR", "storage_dir"):
        st[member] = area.outside
    inside = plant(area.key_path("mineru/x.pdf"))
    check(delete("mineru/x.pdf", st), 200, {"ok": True, "key": f"{area.name}/mineru/x.pdf"})
    assert not os.path.lexists(inside)
    old = plant(area.key_path("mineru/old.pdf"), b"old", age=30 * DAY)
    check(gc(st), 200, {"deleted": 1, "scanned": 1, "freed_bytes": 3})
    assert not os.path.lexists(old)
    # An archive made with that block lands in the operator's directory too.
    sid = create_session(archive_key="dir_choice", storage=st)
    run(sid, "open('/workspace/a.txt', 'w').write('a')")
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    archive = area.key_path("workspaces/dir_choice.tgz")
    assert os.path.exists(archive)
    assert not os.path.lexists(f"{area.outside}/{area.name}/workspaces/dir_choice.tgz")
    os.unlink(archive)


def test_gc_sweeps_nothing_outside_the_prefix(area):
    doomed = [plant(area.key_path("mineru/old-a.pdf"), b"a" * 10, age=30 * DAY),
              plant(area.key_path("workspaces/old-b.tgz"), b"b" * 20, age=30 * DAY)]
    check(gc(area.storage), 200, {"deleted": 2, "scanned": 2, "freed_bytes": 30})
    assert not any(os.path.lexists(p) for p in doomed)
    # Every sentinel is older than a day, beside, around and outside the prefix: all intact
    # (checked after each case), and so is the old archive at the top of the prefix.


# Archive keys.

HOSTILE_STEMS = {
    "dotdot": "../../etc/passwd", "dotdot-short": "../x", "absolute": "/abs", "slash": "a/b", "bare-dotdot": "..",
    "dot": ".", "backslash": "a\\b", "too-long": "x" * 129, "encoded": "%2e%2e", "nul": "conv\x00../../x",
    "unicode": "ü", "space": "a b", "newline": "conv_ok\n", "victim-with-suffix": "../victim",
}


@pytest.mark.parametrize("case", list(HOSTILE_STEMS))
def test_hostile_archive_key_falls_back_to_the_session_id(area, case):
    before = files_below(ROOT)
    sid = create_session(archive_key=HOSTILE_STEMS[case], storage=area.storage)
    run(sid, "open('/workspace/a.txt', 'w').write('a')")
    # Nothing was restored from anywhere (a planted ROOT/<prefix>/victim.tgz included).
    assert run(sid, "import os\nprint(sorted(os.listdir('/workspace')))")["stdout"] == \
        "['a.txt', 'outputs', 'skills', 'uploads']\n"
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    archive = area.key_path(f"workspaces/{sid}.tgz")
    try:
        assert files_below(ROOT) - before == {archive}
    finally:
        os.unlink(archive)


def test_discard_with_a_hostile_archive_key_deletes_only_the_sessions_archive(area):
    stem = f"conv_{secrets.token_hex(4)}"
    sid = create_session(archive_key=stem, storage=area.storage)
    run(sid, "open('/workspace/a.txt', 'w').write('a')")
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    archive = area.key_path(f"workspaces/{stem}.tgz")
    assert os.path.exists(archive)
    before = files_below(ROOT)
    sid = create_session(archive_key=stem, storage=area.storage)
    r = delete_session(sid, discard=True, archive_key="../victim", storage=area.storage)
    check(r, 200, {"ok": True, "archive": "discarded"})
    assert files_below(ROOT) == before - {archive}


# The operator's endpoint allowlist.

class Listener:
    """A TCP port on the loopback that counts the connections made to it and closes each at once."""

    def __init__(self, family=socket.AF_INET, host="127.0.0.1"):
        self.sock = socket.socket(family)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.handle(conn)

    def handle(self, conn):
        self.count += 1
        conn.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def restart_agent():
    in_system("systemctl", "daemon-reload", check=True)
    in_system("systemctl", "restart", AGENT, check=True)


@pytest.fixture(scope="module")
def allowlist():
    """The agent restarted with only listener A allowed; B is where blocks try to go instead."""
    a, b = Listener(), Listener()
    in_system("sh", "-c", f"mkdir -p {os.path.dirname(DROPIN)} && printf '[Service]\\n"
                          f"Environment=SANDBOX_STORAGE_ALLOWED_ENDPOINTS=http://127.0.0.1:{a.port}\\n' > {DROPIN}",
              check=True)
    restart_agent()
    try:
        yield a, b
    finally:
        in_system("rm", "-f", DROPIN)
        restart_agent()
        a.close()
        b.close()


SECRET = f"SECSUITE-SECRET-{secrets.token_hex(8)}"


def s3_block(endpoint, **extra):
    block = {"provider": "s3", "prefix": "secsuite/", "s3_bucket": "secsuite-bucket", "s3_region": "us-east-1",
             "s3_access_key": "AKIDSECSUITE", "s3_secret_key": SECRET, **extra}
    if endpoint is not None:
        block["s3_endpoint"] = endpoint
    return block


def oss_block(endpoint):
    return {"provider": "aliyun_oss", "prefix": "secsuite/", "oss_bucket": "secsuite-bucket",
            "oss_endpoint": endpoint, "oss_access_key_id": "LTAISECSUITE", "oss_access_key_secret": SECRET}


def test_the_allowed_endpoint_is_reached(allowlist):
    """The control case: the listed endpoint is connected to (and fails: the listener hangs up)."""
    a, b = allowlist
    r = put("mineru/x.pdf", s3_block(f"http://127.0.0.1:{a.port}"))
    assert r.status == 502, r
    assert a.count >= 1 and b.count == 0


DISALLOWED = {
    "other-port": "http://127.0.0.1:{B}",
    "https": "https://127.0.0.1:{B}",
    "localhost": "http://localhost:{B}",
    "path-allowed": "http://127.0.0.1:{B}/127.0.0.1:{A}",
    "decimal-ip": "http://2130706433:{B}",
    "short-ip": "http://127.1:{B}",
    "allowed-port-zero-padded": "http://127.0.0.1:0{A}",
    "allowed-host-suffix": "http://127.0.0.1.nip.io:{A}",
}


@pytest.mark.parametrize("case", list(DISALLOWED))
def test_endpoints_outside_the_allowlist_are_never_contacted(allowlist, case):
    a, b = allowlist
    before = a.count
    endpoint = DISALLOWED[case].format(A=a.port, B=b.port)
    for block in (s3_block(endpoint), oss_block(endpoint)):
        # OSS has no base path: such an endpoint is no OSS endpoint at all, refused before the
        # allowlist is asked (docs/api.md).
        refusal = INVALID_ENDPOINT if case == "path-allowed" and "oss_endpoint" in block else NOT_ALLOWED
        check(put("mineru/x.pdf", block), 400, refusal)
        check(delete("mineru/x.pdf", block), 400, refusal)
        check(gc(block), 200, ZEROS)
    assert (b.count, a.count) == (0, before)


HIDING = {
    "userinfo": "http://127.0.0.1:{A}@127.0.0.1:{B}",
    "query": "http://127.0.0.1:{B}/?u=http://127.0.0.1:{A}",
    "fragment": "http://127.0.0.1:{B}#http://127.0.0.1:{A}",
    "backslash-userinfo": "http://127.0.0.1:{A}\\@127.0.0.1:{B}",
    "allowed-fragment-userinfo": "http://127.0.0.1:{A}#@127.0.0.1:{B}",
    "allowed-query-userinfo": "http://127.0.0.1:{A}?@127.0.0.1:{B}",
    "allowed-path-fragment-userinfo": "http://127.0.0.1:{A}/#@127.0.0.1:{B}",
}


@pytest.mark.parametrize("case", list(HIDING))
def test_endpoints_hiding_another_host_are_refused(allowlist, case):
    """Endpoints that put a second host behind '@', '?', '#' or a backslash (some of them with
    the allowed origin in front) are refused as not allowed or as not an endpoint URL, the same
    way by every call, and no connection is made to either host."""
    a, b = allowlist
    before = a.count
    endpoint = HIDING[case].format(A=a.port, B=b.port)
    refusals = (NOT_ALLOWED, {"detail": "storage endpoint must be an http(s) URL"})
    for block in (s3_block(endpoint), oss_block(endpoint)):
        for r in (put("mineru/x.pdf", block), delete("mineru/x.pdf", block)):
            assert r.status == 400 and r.json in refusals, r
        check(gc(block), 200, ZEROS)
    assert (b.count, a.count) == (0, before)


def test_aws_is_not_allowed_unless_listed(allowlist):
    a, b = allowlist
    check(put("mineru/x.pdf", s3_block(None)), 400, NOT_ALLOWED)
    check(delete("mineru/x.pdf", s3_block(None, s3_region="eu-west-1")), 400, NOT_ALLOWED)


def test_sessions_with_a_disallowed_storage_never_contact_it(allowlist):
    a, b = allowlist
    block = s3_block(f"http://127.0.0.1:{b.port}")
    r = request("POST", "/sessions", {"archive_key": "secsuite_disallowed", "storage": block})
    check(r, 400, NOT_ALLOWED)
    sid = create_session(archive_key="secsuite_disallowed")
    assert run(sid, "open('/workspace/a.txt', 'w').write('a'); print(1)")["stdout"] == "1\n"
    assert delete_session(sid, storage=block).json == {"ok": True, "archive": "pending"}
    assert create_session(archive_key="secsuite_disallowed", storage=block) == sid
    assert delete_session(sid, discard=True).json == {"ok": True, "archive": "discarded"}
    assert b.count == 0


def test_local_storage_is_not_affected_by_the_allowlist(allowlist, area):
    path = plant(area.key_path("mineru/allow.pdf"))
    check(delete("mineru/allow.pdf", area.storage), 200, {"ok": True, "key": f"{area.name}/mineru/allow.pdf"})
    assert not os.path.lexists(path)


def test_secrets_of_refused_blocks_are_not_logged(allowlist):
    a, b = allowlist
    r = put("mineru/x.pdf", s3_block(f"http://127.0.0.1:{b.port}"))
    check(r, 400, NOT_ALLOWED)
    assert SECRET.encode() not in r.body
    log = in_system("journalctl", "-o", "verbose", "--no-pager", "-n", "3000").stdout
    assert "storage endpoint" in log or "not allowed" in log, log[-2000:]
    assert SECRET not in log
