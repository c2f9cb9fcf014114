# SPDX-License-Identifier: LGPL-2.1-or-later
"""The workspace file endpoints over HTTP: /files, /files/get, /files/list, /files/reset-inputs.
Round trips, path confinement (lexical and through symlinks planted by sandboxed code), strict
base64, the upload limit, listing limits and hostile names, reset-inputs, and every error status."""
import base64
import concurrent.futures
import json
import os
import secrets
import time

import pytest

from conftest import create_session, delete_session, request, run

UNKNOWN = "0123456789abcdef0123456789abcdef"  # well-formed, never created
MAX_UPLOAD = 40 * 1024 * 1024
MAX_BODY = 56 * 1024 * 1024

OUTSIDE = {"detail": "path must be under /workspace"}
RESOLVES_OUTSIDE = {"detail": "path resolves outside /workspace"}
NOT_FOUND = {"detail": "file not found"}
INVALID_BASE64 = {"detail": "invalid base64"}
TOO_LARGE = {"detail": "file too large"}
GONE = {"detail": "session not found or not running"}
INVALID_SID = {"detail": "invalid session_id"}
UNAUTHORIZED = {"error": "unauthorized"}


def b64(data):
    return base64.b64encode(data).decode()


def write(sid, path, data=b"", data_base64=None):
    return request("POST", "/files", {"session_id": sid, "path": path,
                                      "data_base64": b64(data) if data_base64 is None else data_base64})


def read(sid, path):
    return request("POST", "/files/get", {"session_id": sid, "path": path})


def listing(sid):
    return request("POST", "/files/list", {"session_id": sid})


def reset_inputs(sid):
    return request("POST", "/files/reset-inputs", {"session_id": sid})


def check(r, status, body):
    assert (r.status, r.json) == (status, body), r


def write_ok(sid, path, data=b""):
    check(write(sid, path, data), 200, {"ok": True})


def read_ok(sid, path):
    r = read(sid, path)
    assert r.status == 200, r
    assert list(r.json) == ["data_base64"], r
    return base64.b64decode(r.json["data_base64"], validate=True)


def listed(sid):
    r = listing(sid)
    assert r.status == 200, r
    assert list(r.json) == ["files"], r
    for f in r.json["files"]:
        assert sorted(f) == ["path", "size"], f
        assert isinstance(f["path"], str) and isinstance(f["size"], int), f
    return r.json["files"]


def paths(sid):
    return [f["path"] for f in listed(sid)]


def sandbox_json(sid, code):
    """Runs code that prints one JSON document; returns it."""
    res = run(sid, code)
    assert res["exit_code"] == 0, res
    return json.loads(res["stdout"])


@pytest.fixture(scope="module")
def shared_session():
    """One session for the many parametrized refusals, which change nothing in it."""
    sid = create_session()
    yield sid
    delete_session(sid)


def host_file_state(path):
    """What a write through an escape would change on the system that runs the manager."""
    st = os.lstat(path)
    with open(path, "rb") as f:
        return (st.st_ino, st.st_mtime_ns, st.st_uid, st.st_mode, f.read())


# Round trips

def test_write_then_read_back_all_byte_values(session):
    data = bytes(range(256)) * 3 + b"\x00"
    r = write(session, "uploads/bin/all.bin", data)
    assert r.status == 200 and r.body == b'{"ok":true}', r
    assert read_ok(session, "uploads/bin/all.bin") == data
    assert read_ok(session, "/workspace/uploads/bin/all.bin") == data
    # The exact response shape of a read.
    r = read(session, "uploads/bin/all.bin")
    assert r.body == b'{"data_base64":"' + base64.b64encode(data) + b'"}', r


def test_relative_and_absolute_paths_name_the_same_file(session):
    write_ok(session, "/workspace/uploads/data.csv", b"name,value\na,1\n")
    assert read_ok(session, "uploads/data.csv") == b"name,value\na,1\n"
    # Normalised lexically, staying inside.
    assert read_ok(session, "./uploads/../uploads//data.csv") == b"name,value\na,1\n"
    assert read_ok(session, "/workspace/./outputs/../uploads/data.csv") == b"name,value\na,1\n"
    write_ok(session, "top.txt", b"top")
    assert read_ok(session, "/workspace/top.txt") == b"top"


def test_empty_file_and_overwrite(session):
    write_ok(session, "uploads/e.txt", b"")
    assert read_ok(session, "uploads/e.txt") == b""
    write_ok(session, "uploads/e.txt", b"a much longer content")
    write_ok(session, "uploads/e.txt", b"short")
    assert read_ok(session, "uploads/e.txt") == b"short"
    assert {"path": "uploads/e.txt", "size": 5} in listed(session)


def test_parents_created_and_everything_owned_by_the_sandbox_user(session):
    write_ok(session, "uploads/deep/er/still/file.txt", "你好\n".encode())
    got = sandbox_json(session, (
        "import json, os\n"
        "p = '/workspace/uploads/deep/er/still/file.txt'\n"
        "out = {'content': open(p, encoding='utf-8').read(), 'uids': [], 'dirs': []}\n"
        "for q in (p, '/workspace/uploads/deep/er/still', '/workspace/uploads/deep/er',\n"
        "          '/workspace/uploads/deep'):\n"
        "    st = os.stat(q)\n"
        "    out['uids'].append(st.st_uid)\n"
        "out['dirs'] = [os.path.isdir('/workspace/uploads/deep/er')]\n"
        "with open(p, 'a') as f: f.write('appended')\n"
        "print(json.dumps(out))\n"))
    assert got == {"content": "你好\n", "uids": [1000, 1000, 1000, 1000], "dirs": [True]}
    # The sandbox could change it, so it is its own file.
    assert read_ok(session, "uploads/deep/er/still/file.txt") == "你好\nappended".encode()


def test_files_made_by_code_are_readable(session):
    run(session, "open('/workspace/outputs/result.txt', 'w').write('hello')")
    assert read_ok(session, "outputs/result.txt") == b"hello"
    assert read_ok(session, "/workspace/outputs/result.txt") == b"hello"


def test_write_waits_for_a_running_exec(session):
    """A call on a busy session queues behind the exec instead of failing."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(run, session,
                           "import time, os\ntime.sleep(3)\n"
                           "print(os.path.exists('/workspace/uploads/late.txt'))")
        time.sleep(1)
        t = time.monotonic()
        r = write(session, "uploads/late.txt", b"late")
        waited = time.monotonic() - t
        res = slow.result(timeout=60)
    check(r, 200, {"ok": True})
    assert res["stdout"] == "False\n", res  # not written under the running code's feet
    assert waited > 1, waited
    assert read_ok(session, "uploads/late.txt") == b"late"


# Confinement

@pytest.mark.parametrize("path", [
    "../etc/passwd",
    "uploads/../../etc/passwd",
    "/etc/passwd",
    "/workspace/../etc/passwd",
    "/workspacex/y",
    "/",
    "..",
    "/tmp/x",
])
def test_paths_outside_the_workspace_are_refused(shared_session, path):
    check(write(shared_session, path, b"pwned"), 400, OUTSIDE)
    check(read(shared_session, path), 400, OUTSIDE)


def test_escape_attempts_write_nothing(session):
    probe = f"scopebox-escape-{secrets.token_hex(6)}"
    for path in (f"../etc/{probe}", f"/etc/{probe}", f"/workspace/../../etc/{probe}"):
        check(write(session, path, b"pwned"), 400, OUTSIDE)
    assert not os.path.exists(f"/etc/{probe}")
    got = sandbox_json(session, f"import json, os\nprint(json.dumps(os.path.exists('/etc/{probe}')))")
    assert got is False


def test_a_nul_in_the_path_is_refused(shared_session):
    check(write(shared_session, "uploads/a\x00/../../../etc/passwd", b"x"), 400, OUTSIDE)
    check(read(shared_session, "uploads/a\x00b"), 400, OUTSIDE)


def test_symlinked_directory_pointing_outside(session):
    run(session, "import os\nos.symlink('/etc', '/workspace/evil')\n"
                 "os.symlink('/etc', '/workspace/uploads/evil2')")
    # Reading through it never returns the host's (or the sandbox's) /etc/passwd.
    for path in ("evil/passwd", "/workspace/evil/passwd", "uploads/evil2/passwd", "evil/no-such-file"):
        r = read(session, path)
        check(r, 400, RESOLVES_OUTSIDE)
        assert b"root:" not in r.body

    # Writing a new file through it creates nothing outside.
    probe = f"scopebox-escape-{secrets.token_hex(6)}"
    check(write(session, f"evil/{probe}", b"pwned"), 400, RESOLVES_OUTSIDE)
    check(write(session, f"evil/sub/{probe}", b"pwned"), 400, RESOLVES_OUTSIDE)
    assert not os.path.exists(f"/etc/{probe}")
    assert not os.path.exists(f"/etc/sub/{probe}")

    # Overwriting through it (with identical bytes: harmless even if it got through) changes nothing.
    before = host_file_state("/etc/passwd")
    check(write(session, "evil/passwd", before[-1]), 400, RESOLVES_OUTSIDE)
    assert host_file_state("/etc/passwd") == before


def test_symlinked_file_pointing_outside(session):
    run(session, "import os\nos.symlink('/etc/hostname', '/workspace/x')")
    r = read(session, "x")
    check(r, 400, RESOLVES_OUTSIDE)
    before = host_file_state("/etc/hostname")
    check(write(session, "x", before[-1]), 400, RESOLVES_OUTSIDE)
    check(write(session, "/workspace/x", before[-1]), 400, RESOLVES_OUTSIDE)
    assert host_file_state("/etc/hostname") == before
    # The link itself is left alone.
    got = sandbox_json(session, "import json, os\nprint(json.dumps(os.readlink('/workspace/x')))")
    assert got == "/etc/hostname"


def test_dangling_symlink_pointing_outside(session):
    probe = f"/etc/scopebox-escape-{secrets.token_hex(6)}"
    run(session, f"import os\nos.symlink({probe!r}, '/workspace/uploads/dangling')")
    check(write(session, "uploads/dangling", b"pwned"), 400, RESOLVES_OUTSIDE)
    check(read(session, "uploads/dangling"), 400, RESOLVES_OUTSIDE)
    assert not os.path.exists(probe)


def test_symlink_staying_inside_is_followed(session):
    run(session, "import os\nos.makedirs('/workspace/outputs/real', exist_ok=True)\n"
                 "os.symlink('outputs/real', '/workspace/rel')")
    write_ok(session, "rel/f.txt", b"via relative link")
    assert read_ok(session, "outputs/real/f.txt") == b"via relative link"
    assert read_ok(session, "rel/f.txt") == b"via relative link"


def test_absolute_symlink_staying_inside_is_followed(session):
    """The sandbox sees its workspace at /workspace, so that is where absolute links point."""
    run(session, "import os\nos.makedirs('/workspace/outputs/real', exist_ok=True)\n"
                 "open('/workspace/outputs/real/g.txt', 'w').write('abs')\n"
                 "os.symlink('/workspace/outputs/real', '/workspace/abs')")
    assert read_ok(session, "abs/g.txt") == b"abs"
    write_ok(session, "abs/h.txt", b"written via absolute link")
    assert read_ok(session, "outputs/real/h.txt") == b"written via absolute link"


def test_directories_and_missing_files_are_not_found(session):
    run(session, "import os\nos.makedirs('/workspace/outputs/dir/sub')")
    for path in ("outputs/dir", "outputs/dir/", "/workspace/outputs", "uploads", "/workspace", ".",
                 "uploads/nope.txt", "nope/deeper/x.txt", "/workspace/missing"):
        check(read(session, path), 404, NOT_FOUND)


def test_special_files_are_not_found(session):
    run(session, "import os\nos.mkfifo('/workspace/fifo')\nos.symlink('/dev/zero', '/workspace/zero')")
    t = time.monotonic()
    check(read(session, "fifo"), 404, NOT_FOUND)
    assert time.monotonic() - t < 10  # never opened for reading (it would block)
    r = read(session, "zero")
    assert r.status in (400, 404), r
    assert r.json in (RESOLVES_OUTSIDE, NOT_FOUND), r


# Base64 and size

@pytest.mark.parametrize("text", [
    "aGVs bG8=",                          # whitespace
    "aGVsbG8=\n",                         # a trailing newline
    base64.encodebytes(b"x" * 100).decode(),  # MIME lines
    "\taGVsbG8=",
    "data:text/plain;base64,aGVsbG8=",    # a data: URL
    "data:application/octet-stream;base64,AAEC",
    "aGVsbG8",                            # padding missing
    "aGVsbA",
    "aGVsbA=",                            # padding short
    "aGVsbG8==",                          # padding too long
    "QQ=A",                               # padding in the middle
    "=",
    "-_-_",                               # URL-safe alphabet
    "aGVs\u00e4bG8=",                     # not ASCII
    "aGVsbG8\u0000",                      # NUL
])
def test_invalid_base64_is_refused(shared_session, text):
    with pytest.raises(ValueError):  # binascii.Error is one
        base64.b64decode(text, validate=True)
    check(write(shared_session, "uploads/b.bin", data_base64=text), 400, INVALID_BASE64)
    check(read(shared_session, "uploads/b.bin"), 404, NOT_FOUND)


@pytest.mark.parametrize("text", [
    "QR==",                               # non-zero bits after the last byte
    "QUJ=",
    "QUJD=",                              # '=' after a complete quantum
    "QUJD====",
    "",
])
def test_python_base64_is_accepted(shared_session, text):
    # What the sidecar's b64decode(validate=True) accepts is written, with the bytes it decodes to.
    data = base64.b64decode(text, validate=True)
    check(write(shared_session, "uploads/p.bin", data_base64=text), 200, {"ok": True})
    assert read_ok(shared_session, "uploads/p.bin") == data


def test_upload_limit(session):
    # Exactly SANDBOX_MAX_UPLOAD_BYTES passes.
    data = secrets.token_bytes(1024) * (MAX_UPLOAD // 1024)
    assert len(data) == MAX_UPLOAD
    write_ok(session, "uploads/max.bin", data)
    assert {"path": "uploads/max.bin", "size": MAX_UPLOAD} in listed(session)
    assert read_ok(session, "uploads/max.bin") == data

    # 4 bytes more does not, and the body itself stays below the 56 MiB cap.
    text = b64(data + b"1234")
    assert len(text) + 200 < MAX_BODY
    check(write(session, "uploads/over.bin", data_base64=text), 413, TOO_LARGE)
    check(write(session, "uploads/over.bin", data + b"1"), 413, TOO_LARGE)
    check(read(session, "uploads/over.bin"), 404, NOT_FOUND)

    # A body over the cap is refused from its Content-Length, before reading it.
    r = request("POST", "/files", raw=b"{}", headers={"Content-Type": "application/json",
                                                      "Content-Length": str(MAX_BODY + 1)})
    check(r, 413, {"error": f"request body exceeds {MAX_BODY} bytes"})


def test_reading_a_file_larger_than_the_limit(session):
    run(session, f"open('/workspace/outputs/huge.bin', 'wb').truncate({MAX_UPLOAD + 1})")
    check(read(session, "outputs/huge.bin"), 413, TOO_LARGE)


# Listing

def test_list_of_a_new_session_is_empty(session):
    check(listing(session), 200, {"files": []})


def test_list_is_sorted_relative_with_sizes(session):
    files = {"b.txt": b"bb", "a.txt": b"a", "a-b.txt": b"abc", "a/z.txt": b"zzzz", "A.txt": b"",
             "uploads/data.csv": b"name,value\na,1\n"}
    for p, d in files.items():
        write_ok(session, p, d)
    run(session, "open('/workspace/outputs/result.txt', 'w').write('hello')")
    files["outputs/result.txt"] = b"hello"
    got = listed(session)
    assert got == [{"path": p, "size": len(files[p])} for p in sorted(files)]
    assert [f["path"] for f in got] == ["A.txt", "a-b.txt", "a.txt", "a/z.txt", "b.txt",
                                        "outputs/result.txt", "uploads/data.csv"]


def test_list_depth_is_at_most_six(session):
    write_ok(session, "1/2/3/4/5/six.txt", b"6")
    write_ok(session, "1/2/3/4/5/6/seven.txt", b"7")
    assert paths(session) == ["1/2/3/4/5/six.txt"]
    # Readable all the same.
    assert read_ok(session, "1/2/3/4/5/6/seven.txt") == b"7"


def test_list_returns_at_most_500(session):
    run(session, "import os\nos.makedirs('/workspace/many')\n"
                 "for i in range(600):\n"
                 "    open(f'/workspace/many/f{i:03}', 'w').write('x' * (i % 7))")
    got = listed(session)
    assert len(got) == 500
    names = [f["path"] for f in got]
    assert names == sorted(names)
    assert len(set(names)) == 500
    for f in got:
        assert f["path"].startswith("many/f")
        assert f["size"] == int(f["path"][len("many/f"):]) % 7


def test_list_with_hostile_names(session):
    names = [
        "uploads/new\nline.txt",
        'uploads/q"uote.txt',
        "uploads/back\\slash",
        "uploads/cr\rreturn",
        "uploads/tab\tsep",
        "uploads/ctl\x01\x1f\x7f",
        'uploads/x","size":1},{"path":"forged',
        "uploads/row\t99\nforged\t1",
        "uploads/数据 表.csv",
        "uploads/emoji😀",
        "uploads/sep\u2028line",
    ]
    code = ("import json\n"
            f"for i, n in enumerate({names!r}):\n"
            "    open('/workspace/' + n, 'w').write('x' * i)\n")
    run(session, code)
    r = listing(session)
    assert r.status == 200, r
    # Valid strict JSON, one row per file, every name exact.
    doc = json.loads(r.body, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))
    assert doc == {"files": [{"path": n, "size": names.index(n)} for n in sorted(names)]}
    assert b"\n" not in r.body and b"\r" not in r.body
    # The files named that way can be read back by the same names.
    assert read_ok(session, "uploads/new\nline.txt") == b"x" * 0
    assert read_ok(session, 'uploads/q"uote.txt') == b"x"


def test_list_skips_names_that_are_not_utf8(session):
    run(session, "import os\nos.close(os.open(b'/workspace/uploads/bad\\xff', os.O_CREAT | os.O_WRONLY))\n"
                 "open('/workspace/uploads/good.txt', 'w').write('ok')")
    assert paths(session) == ["uploads/good.txt"]


def test_list_does_not_follow_symlinks(session):
    run(session, "import os\nos.symlink('/', '/workspace/root')\n"
                 "os.symlink('/etc/passwd', '/workspace/passwd')\n"
                 "open('/workspace/outputs/r.txt', 'w').write('r')\n"
                 "os.symlink('outputs', '/workspace/loop')")
    assert paths(session) == ["outputs/r.txt"]


# reset-inputs

def test_reset_inputs_clears_only_uploads_and_skills(session):
    for p in ("uploads/a.txt", "uploads/sub/b.txt", "skills/s/SKILL.md", "outputs/o.txt", "keep.txt",
              "downloads/d.txt", "uploads-not/x.txt", "skills.txt"):
        write_ok(session, p, b"x")
    r = reset_inputs(session)
    check(r, 200, {"ok": True, "session_gone": False})
    assert r.body == b'{"ok":true,"session_gone":false}'
    assert paths(session) == ["downloads/d.txt", "keep.txt", "outputs/o.txt", "skills.txt",
                              "uploads-not/x.txt"]
    got = sandbox_json(session, (
        "import json, os\n"
        "out = {}\n"
        "for d in ('uploads', 'skills', 'outputs'):\n"
        "    p = '/workspace/' + d\n"
        "    out[d] = [os.path.isdir(p) and not os.path.islink(p), os.listdir(p), os.stat(p).st_uid]\n"
        "print(json.dumps(out))\n"))
    assert got == {"uploads": [True, [], 1000], "skills": [True, [], 1000],
                   "outputs": [True, ["o.txt"], 1000]}
    # The directories work as before.
    write_ok(session, "uploads/again.txt", b"again")
    assert read_ok(session, "uploads/again.txt") == b"again"
    # Idempotent.
    check(reset_inputs(session), 200, {"ok": True, "session_gone": False})


def test_reset_inputs_does_not_follow_planted_symlinks(session):
    run(session, "import os, shutil\n"
                 "os.makedirs('/workspace/outputs/keep')\n"
                 "open('/workspace/outputs/keep/k.txt', 'w').write('k')\n"
                 "shutil.rmtree('/workspace/uploads')\n"
                 "os.symlink('/workspace/outputs', '/workspace/uploads')\n"
                 "os.makedirs('/workspace/skills', exist_ok=True)\n"
                 "os.symlink('../outputs/keep', '/workspace/skills/link')")
    check(reset_inputs(session), 200, {"ok": True, "session_gone": False})
    assert paths(session) == ["outputs/keep/k.txt"]
    got = sandbox_json(session, "import json, os\n"
                                "print(json.dumps([os.path.islink('/workspace/uploads'),\n"
                                "                  os.path.isdir('/workspace/uploads')]))")
    assert got == [False, True]


def test_reset_inputs_of_a_gone_session():
    sid = create_session()
    check(delete_session(sid), 200, {"ok": True})
    r = reset_inputs(sid)
    check(r, 200, {"ok": False, "session_gone": True})
    assert r.body == b'{"ok":false,"session_gone":true}'
    check(reset_inputs(UNKNOWN), 200, {"ok": False, "session_gone": True})


# Errors common to every endpoint

ENDPOINTS = {
    "/files": {"path": "uploads/x.txt", "data_base64": "eA=="},
    "/files/get": {"path": "uploads/x.txt"},
    "/files/list": {},
    "/files/reset-inputs": {},
}


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_unknown_or_deleted_session(endpoint):
    body = {"session_id": UNKNOWN, **ENDPOINTS[endpoint]}
    r = request("POST", endpoint, body)
    if endpoint == "/files/reset-inputs":
        check(r, 200, {"ok": False, "session_gone": True})
    else:
        check(r, 404, GONE)

    sid = create_session()
    delete_session(sid)
    r = request("POST", endpoint, {**body, "session_id": sid})
    if endpoint == "/files/reset-inputs":
        check(r, 200, {"ok": False, "session_gone": True})
    else:
        check(r, 404, GONE)


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
@pytest.mark.parametrize("sid", ["nope", "", UNKNOWN.upper(), UNKNOWN[:-1], UNKNOWN + "0",
                                 "../" + UNKNOWN[3:], UNKNOWN + "\x00",
                                 "0123456789abcdef-0123-456789abcdef"])
def test_invalid_session_id(endpoint, sid):
    check(request("POST", endpoint, {"session_id": sid, **ENDPOINTS[endpoint]}), 400, INVALID_SID)


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_invalid_session_id_comes_before_the_rest(endpoint):
    body = {"session_id": "nope", "path": "../../etc/passwd", "data_base64": "not base64!"}
    check(request("POST", endpoint, body), 400, INVALID_SID)


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_schema_errors(endpoint):
    fields = ["session_id", *ENDPOINTS[endpoint]]
    full = {"session_id": UNKNOWN, **ENDPOINTS[endpoint]}
    for missing in fields:
        body = {k: v for k, v in full.items() if k != missing}
        r = request("POST", endpoint, body)
        assert r.status == 422, r
        assert r.json == {"detail": [{"type": "missing", "loc": ["body", missing], "msg": "Field required"}]}
        r = request("POST", endpoint, {**full, missing: 5})
        assert r.status == 422, r
        assert r.json == {"detail": [{"type": "string_type", "loc": ["body", missing],
                                      "msg": "Input should be a valid string"}]}
    # The schema comes before the session id.
    if len(fields) > 1:
        r = request("POST", endpoint, {"session_id": "nope"})
        assert r.status == 422 and r.json["detail"][0]["loc"] == ["body", fields[1]], r
    r = request("POST", endpoint, raw=b'{"session_id":', headers={"Content-Type": "application/json"})
    check(r, 422, {"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error"}]})
    r = request("POST", endpoint, raw=b"", headers={"Content-Type": "application/json"})
    check(r, 422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required"}]})


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_authorization_is_required(endpoint):
    body = {"session_id": UNKNOWN, **ENDPOINTS[endpoint]}
    for key in (None, "wrong", ""):
        check(request("POST", endpoint, body, key=key), 401, UNAUTHORIZED)


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_other_methods_are_not_allowed(endpoint):
    r = request("GET", endpoint)
    check(r, 405, {"detail": "Method Not Allowed"})
    assert r.headers.get("Allow") == "POST", r.headers
