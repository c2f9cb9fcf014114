# SPDX-License-Identifier: LGPL-2.1-or-later
"""Hostile workspace archives restored at session creation (planted in the local provider's
directory, as an attacker with write access to the bucket would): tar-slip through "..", absolute
names, PAX and GNU long-name overrides, links followed by files written through them, hard links,
device and FIFO entries, set-id bits and owners, decompression bombs (one 4 GiB entry, many
large entries), a million entries, deep nesting, blobs that are not archives and truncated ones.
Each restore writes nothing outside /workspace and ends promptly. Entries real workspaces'
archives hold but a restore refuses (links leading out, hard links, over-long names) are left out
(the journal counts them) and the rest restored. An archive with an entry no workspace's archive
holds (a tar-slip name, a device, an entry written through a symlink) is forged, and one that
can't be unpacked (bombs, blobs, a torn stream) never will be: nothing of either is restored, the
archive is moved aside to <key>.damaged-<UTC time> byte for byte (issue 30), and the session
starts empty and says so ("restored": false). A workspace is never handed out partial."""
import io
import json
import os
import secrets
import shutil
import struct
import tarfile
import time
import zlib

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import delete_session, in_system, request, run

ROOT = "/var/lib/scopebox-storage"
ZERO_MIB = bytes(1 << 20)
STANDARD = {"uploads": ["dir", 0o755, 1000, 1000, None], "outputs": ["dir", 0o755, 1000, 1000, None],
            "skills": ["dir", 0o755, 1000, 1000, None]}


@pytest.fixture(scope="module")
def prefix():
    name = f"secsuite-archives-{secrets.token_hex(4)}"
    r = in_system("install", "-d", "-o", "scopebox-storage", "-g", "scopebox-storage", "-m", "0700",
                  f"{ROOT}/{name}", f"{ROOT}/{name}/workspaces")
    assert r.returncode == 0, r.stderr
    yield name
    shutil.rmtree(f"{ROOT}/{name}", ignore_errors=True)


def storage(prefix):
    return {"provider": "local", "prefix": prefix + "/"}


def probe_name():
    return f"scopebox-probe-{secrets.token_hex(6)}"


# Building archives.

def member(name, data=b"", kind=tarfile.REGTYPE, **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = attrs.pop("mode", 0o755 if kind == tarfile.DIRTYPE else 0o644)
    info.mtime = 1700000000
    for k, v in attrs.items():
        setattr(info, k, v)
    if kind == tarfile.REGTYPE:
        info.size = len(data)
    return info, data


def tgz(members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt, encoding="utf-8", errors="surrogateescape") as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return buf.getvalue()


def zeros_tgz(files, first=()):
    """A .tar.gz of the members 'first', then files holding only zeros, [(name, MiB)], built
    without compressing the zeros one by one: after a full flush deflate forgets its history,
    so every MiB of zeros compresses to the same bytes and can be repeated."""
    def deflate(data, finish=False):
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_FINISH if finish else zlib.Z_FULL_FLUSH)

    piece = deflate(ZERO_MIB)
    parts, crc, size = [], 0, 0
    for info, data in first:
        raw = info.tobuf(tarfile.GNU_FORMAT) + data + bytes(-len(data) % 512)
        parts.append(deflate(raw))
        crc, size = zlib.crc32(raw, crc), size + len(raw)
    for name, mib in files:
        info, _ = member(name)
        info.size = mib << 20
        head = info.tobuf(tarfile.GNU_FORMAT)
        parts += [deflate(head), piece * mib]
        crc = zlib.crc32(head, crc)
        for _ in range(mib):
            crc = zlib.crc32(ZERO_MIB, crc)
        size += len(head) + (mib << 20)
    tail = bytes(1024)
    parts.append(deflate(tail, finish=True))
    crc = zlib.crc32(tail, crc)
    size += len(tail)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"".join(parts) + struct.pack("<II", crc, size & 0xFFFFFFFF)


def many_empty_files_tgz(count):
    """count empty regular files f/0000000 ... in one .tar.gz, headers patched from a template."""
    info, _ = member("f/0000000")
    template = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    template[148:156] = b"        "
    base = sum(template) - sum(b"f/0000000")
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    out, batch = [], []
    for i in range(count):
        name = b"f/%07d" % i
        h = template[:]
        h[0:9] = name
        h[148:156] = b"%06o\x00 " % (base + sum(name))
        batch.append(bytes(h))
        if len(batch) == 4096:
            out.append(c.compress(b"".join(batch)))
            batch = []
    out.append(c.compress(b"".join(batch) + bytes(1024)))
    out.append(c.flush())
    return b"".join(out)


# Restoring them.

def plant(prefix, stem, data):
    path = f"{ROOT}/{prefix}/workspaces/{stem}.tgz"
    with open(path, "wb") as f:
        f.write(data)
    return path


def moved_aside(prefix, stem):
    d = f"{ROOT}/{prefix}/workspaces"
    return [f"{d}/{n}" for n in os.listdir(d) if n.startswith(f"{stem}.tgz.damaged-")]


def restore(prefix, data, damaged=True):
    """Plants data as the archive of a new key and creates a session of it: a damaged one is moved
    aside, byte for byte, and the session starts empty saying so; another is restored."""
    stem = f"hostile_{secrets.token_hex(6)}"
    path = plant(prefix, stem, data)
    r = request("POST", "/sessions", {"archive_key": stem, "storage": storage(prefix)}, timeout=150)
    assert r.status == 200, r
    sid = r.json["session_id"]
    if damaged:
        assert r.json == {"session_id": sid, "restored": False}, r.json
        moved = moved_aside(prefix, stem)
        assert not os.path.exists(path) and len(moved) == 1, moved
        with open(moved[0], "rb") as f:
            assert f.read() == data
    else:
        assert r.json == {"session_id": sid}, r.json
    return sid, stem


def release(sid, stem, prefix):
    r = delete_session(sid, discard=True, archive_key=stem, storage=storage(prefix))
    assert (r.status, r.json) == (200, {"ok": True, "archive": "discarded"}), r
    for p in moved_aside(prefix, stem):
        os.unlink(p)


@pytest.fixture
def restored(prefix):
    """restored(data) → session id; every session is released (and its archive discarded)."""
    made = []

    def make(data, damaged=True):
        sid, stem = restore(prefix, data, damaged)
        made.append((sid, stem))
        return sid
    yield make
    for sid, stem in made:
        release(sid, stem, prefix)


TREE = r"""
import json, os, stat
out = {}
for top, dirs, files in os.walk('/workspace'):
    for n in dirs + files:
        p = os.path.join(top, n)
        st = os.lstat(p)
        kind = ('dir' if stat.S_ISDIR(st.st_mode) else 'file' if stat.S_ISREG(st.st_mode) else
                'link' if stat.S_ISLNK(st.st_mode) else 'other')
        extra = os.readlink(p) if kind == 'link' else st.st_size if kind == 'file' else None
        out[os.path.relpath(p, '/workspace')] = [kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, extra]
print(json.dumps(out))
"""


def tree(sid):
    res = run(sid, TREE)
    assert res["exit_code"] == 0, res
    return json.loads(res["stdout"])


def journal(sid, needle, wait=10):
    """The session's journal entries once one contains needle (or what there is after 'wait')."""
    deadline = time.monotonic() + wait
    while True:
        text = in_system("journalctl", "-o", "cat", "--no-pager", f"SCOPEBOX_SESSION_ID={sid}").stdout
        if needle in text or time.monotonic() > deadline:
            return text
        time.sleep(0.3)


def refused(sid, n):
    msg = f"Restore of session {sid} refused {n} hostile archive entries."
    assert msg in journal(sid, msg), journal(sid, "", 0)


def forged(sid):
    """The restore stopped at a forged entry (before writing it) and the archive was moved aside."""
    msg = "restore failed: Operation not permitted. The archive is damaged; moving it aside."
    assert msg in journal(sid, msg), journal(sid, "", 0)


def restore_fails(prefix, data, why):
    """An archive that can't be unpacked is moved aside (never deleted) and the session starts
    empty, never with part of it; the journal says why."""
    sid, stem = restore(prefix, data)
    try:
        assert tree(sid) == STANDARD
        text = journal(sid, "The archive is damaged")
        assert "The archive is damaged; moving it aside." in text and (why is None or why in text), text
    finally:
        release(sid, stem, prefix)
    return text


def fine(name="fine.txt"):
    return member(name, b"fine\n")


FINE = {"fine.txt": ["file", 0o644, 1000, 1000, 5]}


# Tar-slip.

def test_dotdot_entries_write_nothing(prefix, restored):
    probe = probe_name()
    pax = member("harmless-name")
    pax[0].pax_headers = {"path": f"../{probe}-pax"}
    sid = restored(tgz([
        member(f"../{probe}", b"pwned"),
        member(f"../../../../../var/lib/{probe}", b"pwned"),
        member(f"./sub/../../{probe}", b"pwned"),
        member(f"sub/../{probe}", b"pwned"),
        member("..", kind=tarfile.DIRTYPE),
        member("./..", kind=tarfile.DIRTYPE),
        pax,
        fine(),
    ]))
    assert tree(sid) == STANDARD
    forged(sid)
    for path in (f"/var/lib/{probe}", f"{ROOT}/{prefix}/{probe}", f"{ROOT}/{probe}", f"{ROOT}/{prefix}/{probe}-pax"):
        assert not os.path.lexists(path), path


def test_absolute_entries_write_nothing(prefix, restored, canary):
    probe = probe_name()
    sid = restored(tgz([
        member(f"/{probe}", b"pwned"),
        member(f"/etc/{probe}", b"pwned"),
        member(f"/workspace/{probe}", b"pwned"),
        member(f"//{probe}", b"pwned"),
        member(f"/../{probe}", b"pwned"),
        member(canary.paths[0], b"pwned"),
        fine(),
    ], fmt=tarfile.GNU_FORMAT))
    assert tree(sid) == STANDARD
    forged(sid)
    assert not os.path.lexists(f"/etc/{probe}") and not os.path.lexists(f"/{probe}")


def test_links_then_files_through_them(prefix, restored):
    probe = probe_name()
    sid = restored(tgz([
        member("esc", kind=tarfile.SYMTYPE, linkname="/etc"),
        member(f"esc/{probe}", b"pwned"),
        member("up", kind=tarfile.SYMTYPE, linkname="../.."),
        member(f"up/{probe}", b"pwned"),
        member("chain1", kind=tarfile.SYMTYPE, linkname="chain2"),
        member("chain2", kind=tarfile.SYMTYPE, linkname="/"),
        member(f"chain1/etc/{probe}", b"pwned"),
        member("dotlink", kind=tarfile.SYMTYPE, linkname="."),
        member("absin", kind=tarfile.SYMTYPE, linkname="/workspace/sub"),
        member("sub", kind=tarfile.DIRTYPE),
        member("rel", kind=tarfile.SYMTYPE, linkname="sub"),
        member("rel/through.txt", b"through a link"),
        fine(),
    ]))
    assert tree(sid) == STANDARD
    forged(sid)
    assert not os.path.lexists(f"/etc/{probe}") and not os.path.lexists(f"/{probe}")


def test_hard_links_are_never_restored(prefix, restored, canary):
    sid = restored(tgz([
        fine(),
        member("hl1", kind=tarfile.LNKTYPE, linkname="/etc/passwd"),
        member("hl2", kind=tarfile.LNKTYPE, linkname="../../../etc/scopebox/canary"),
        member("hl3", kind=tarfile.LNKTYPE, linkname="fine.txt"),
        member("hl4", kind=tarfile.LNKTYPE, linkname="./fine.txt"),
        member("hl5", kind=tarfile.LNKTYPE, linkname=canary.paths[2]),
    ], fmt=tarfile.GNU_FORMAT), damaged=False)
    assert tree(sid) == {**STANDARD, **FINE}
    refused(sid, 5)
    res = run(sid, "import os\nprint(os.stat('/workspace/fine.txt').st_nlink)")
    assert res["stdout"] == "1\n", res


def test_devices_and_fifos_are_never_created(prefix, restored):
    sid = restored(tgz([
        member("null", kind=tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666),
        member("mem", kind=tarfile.CHRTYPE, devmajor=1, devminor=1, mode=0o666),
        member("outputs/sda", kind=tarfile.BLKTYPE, devmajor=8, devminor=0, mode=0o666),
        member("fifo", kind=tarfile.FIFOTYPE),
        fine(),
    ], fmt=tarfile.GNU_FORMAT))
    assert tree(sid) == STANDARD
    forged(sid)


def test_setid_bits_and_owners_are_dropped(prefix, restored):
    sid = restored(tgz([
        member("./", kind=tarfile.DIRTYPE, mode=0o7777, uid=0, gid=0),
        member("suid", b"#!/bin/sh\n", mode=0o4755, uid=0, gid=0, uname="root", gname="root"),
        member("all-bits", b"x", mode=0o7777, uid=0, gid=0),
        member("sgid-dir", kind=tarfile.DIRTYPE, mode=0o2775, uid=0, gid=0),
        member("sticky", kind=tarfile.DIRTYPE, mode=0o1777),
        member("outputs", kind=tarfile.DIRTYPE, mode=0o4777, uid=0, gid=0),
        member("nobody", b"n", mode=0o600, uid=65534, gid=65534),
    ]), damaged=False)
    got = tree(sid)
    assert {p: got[p] for p in ("suid", "all-bits", "sgid-dir", "sticky", "outputs", "nobody")} == {
        "suid": ["file", 0o755, 1000, 1000, 10], "all-bits": ["file", 0o777, 1000, 1000, 1],
        "sgid-dir": ["dir", 0o775, 1000, 1000, None], "sticky": ["dir", 0o777, 1000, 1000, None],
        "outputs": ["dir", 0o777, 1000, 1000, None], "nobody": ["file", 0o600, 1000, 1000, 1]}, got
    res = run(sid, "import os\nst = os.stat('/workspace')\nprint(oct(st.st_mode & 0o7777), st.st_uid)")
    assert res["stdout"] == "0o755 1000\n", res


# Bombs and sizes.

def test_decompression_bomb_of_one_huge_entry(prefix):
    """4 GiB of zeros in one entry (4 MiB compressed): refused by its announced size, before a
    byte of it is written (tests/unit/test-archive.c); the create fails."""
    data = zeros_tgz([("bomb.bin", 4096)], first=[fine()])
    assert len(data) < 8 << 20
    restore_fails(prefix, data, "File too large")


def test_decompression_bomb_of_many_entries(prefix):
    """40 entries of 16 MiB of zeros (640 MiB, more than the 512 MiB workspace): the restore
    stops at the workspace size; the create fails."""
    t = time.monotonic()
    restore_fails(prefix, zeros_tgz([(f"z{i:02d}.bin", 16) for i in range(40)]), "File too large")
    print(f"# 640 MiB bomb refused in {time.monotonic() - t:.2f}s")


def test_a_million_entries(prefix):
    """A million empty files (4 MiB compressed): the restore stops after 100,000 entries."""
    t = time.monotonic()
    restore_fails(prefix, many_empty_files_tgz(1_000_000), "File too large")
    print(f"# a million entries refused in {time.monotonic() - t:.2f}s")


def test_deep_nesting(prefix, restored):
    deep = "d/" * 1000 + "leaf.txt"
    deeper = "e/" * 3000 + "leaf.txt"  # over 4096 bytes: refused
    sid = restored(tgz([member(deep, b"leaf"), member(deeper, b"leaf"), fine()]), damaged=False)
    refused(sid, 1)
    res = run(sid, "import os\nos.chdir('/workspace')\nn = 0\nwhile os.path.isdir('d'):\n"
                   "    os.chdir('d')\n    n += 1\nprint(n, open('leaf.txt').read(), os.path.exists('/workspace/e'))")
    assert res["stdout"] == "1000 leaf False\n", res
    r = request("POST", "/files/list", {"session_id": sid})
    assert (r.status, r.json) == (200, {"files": [{"path": "fine.txt", "size": 5}]}), r


def test_release_of_a_deep_tree_archives_promptly(prefix):
    """Releasing a workspace nested 1000 deep archives it (depth-bounded) and returns."""
    stem = f"deep_{secrets.token_hex(6)}"
    r = request("POST", "/sessions", {"archive_key": stem, "storage": storage(prefix)}, timeout=150)
    assert r.status == 200, r
    sid = r.json["session_id"]
    res = run(sid, "import os\nos.chdir('/workspace')\nfor i in range(1000):\n    os.mkdir('d')\n    os.chdir('d')\n"
                   "open('leaf.txt', 'w').write('leaf')\nopen('/workspace/top.txt', 'w').write('top')\n")
    assert res["exit_code"] == 0, res
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    path = f"{ROOT}/{prefix}/workspaces/{stem}.tgz"
    try:
        with tarfile.open(path, "r:gz") as t:
            names = t.getnames()
        assert "./top.txt" in names and max(n.count("/") for n in names) <= 66, max(names, key=len)
    finally:
        os.unlink(path)


# Blobs that are not (whole) archives.

def gzip_of(data):
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


BLOBS = {
    "random": os.urandom(64 * 1024),
    "empty": b"",
    "text": b"not an archive at all\n" * 100,
    "zip": b"PK\x03\x04" + os.urandom(1000),
    "gzip-of-text": gzip_of(b"plain text, not a tar\n" * 100),
    "gzip-of-random": gzip_of(os.urandom(10000)),
    "gzip-header-only": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
}


@pytest.mark.parametrize("kind", list(BLOBS))
def test_blobs_that_are_not_archives(prefix, kind):
    # The storage agent finds some not gzip at all, the runner the rest not a tar.
    restore_fails(prefix, BLOBS[kind], None)


def test_truncated_archive(prefix):
    """Cut in the middle (a torn upload by another tool): not a complete tar stream, refused."""
    data = tgz([member("a.bin", os.urandom(200 * 1024)), member("b.bin", os.urandom(200 * 1024)), fine()])
    restore_fails(prefix, data[: len(data) // 2], "Bad message")


# Names and the standard directories.

def test_hostile_names(prefix, restored):
    sid = restored(tgz([
        member("new\nline.txt", b"n"),
        member("bad\udcff.txt", b"b"),
        member("x" * 300, b"x"),
        member("uploads/planted.txt", b"u"),
        member("skills/evil/SKILL.md", b"s"),
        fine(),
    ], fmt=tarfile.GNU_FORMAT), damaged=False)
    got = tree(sid)
    # A name that is no UTF-8 is still a name (issue 15): kept, as GNU tar keeps it.
    assert got == {**STANDARD, **FINE, "new\nline.txt": ["file", 0o644, 1000, 1000, 1],
                   "bad\udcff.txt": ["file", 0o644, 1000, 1000, 1]}, got
    refused(sid, 1)


def test_standard_directories_replaced_by_links(prefix, restored):
    sid = restored(tgz([
        member("outputs", kind=tarfile.SYMTYPE, linkname="/"),
        member("uploads", kind=tarfile.SYMTYPE, linkname="/etc"),
        member("skills", kind=tarfile.SYMTYPE, linkname="../.."),
        member("outputs2", kind=tarfile.SYMTYPE, linkname="outputs"),
    ]), damaged=False)
    got = tree(sid)
    assert got == {**STANDARD, "outputs2": ["link", 0o777, 1000, 1000, "outputs"]}, got
    refused(sid, 1)
    res = run(sid, "open('/workspace/outputs/x.txt', 'w').write('x')")
    assert [f["name"] for f in res["files"]] == ["x.txt"], res
