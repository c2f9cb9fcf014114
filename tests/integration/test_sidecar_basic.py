# SPDX-License-Identifier: LGPL-2.1-or-later
"""The walking skeleton over HTTP: health, auth, the API document's smoke flow, timeouts,
isolation basics, and the error statuses of /sessions and /exec."""
import base64
import concurrent.futures
import mimetypes
import time

from conftest import create_session, delete_session, in_system, request, run


def test_healthz_needs_no_auth_and_reports_backend():
    r = request("GET", "/healthz", key=None)
    assert r.status == 200, r
    body = r.json
    assert body["ok"] is True
    assert body["image_ready"] is True
    assert "systemd" in r.body.decode()


def test_wrong_or_missing_key_is_401():
    for key in ("wrong", "", None):
        r = request("POST", "/sessions", {}, key=key)
        assert r.status == 401, r
        assert r.json == {"error": "unauthorized"}
    # The scheme is part of the compared value.
    r = request("POST", "/sessions", {}, key=None, headers={"Authorization": "Basic x"})
    assert r.status == 401


def test_smoke_flow_from_the_api_document():
    sid = create_session(archive_key="api-smoke-test")
    try:
        code = ('from pathlib import Path\n'
                'Path("/workspace/outputs/hello.txt").write_text("hello", encoding="utf-8")\n'
                'print("ok")')
        res = run(sid, code)
        assert res["stdout"] == "ok\n"
        assert res["stderr"] == ""
        assert res["exit_code"] == 0
        assert len(res["files"]) == 1
        f = res["files"][0]
        assert f["name"] == "hello.txt"
        assert f["mime_type"] == "text/plain"
        assert base64.b64decode(f["data_base64"]) == b"hello"
        # Unchanged outputs are not returned again.
        res = run(sid, "print(1)")
        assert res["files"] == []
    finally:
        r = delete_session(sid)
    assert r.status == 200 and r.json == {"ok": True}


def test_timeout_gives_124_and_session_survives(session):
    t = time.monotonic()
    res = run(session, "import time\nprint('start', flush=True)\ntime.sleep(30)", timeout_ms=1000)
    assert time.monotonic() - t < 20
    assert res["exit_code"] == 124
    assert res["stdout"] == "start\n"
    assert res["stderr"].endswith("\n[sandbox] execution exceeded 1.000s and was killed")
    res = run(session, "print('alive')")
    assert res["stdout"] == "alive\n" and res["exit_code"] == 0


def test_exit_codes_and_stderr(session):
    res = run(session, "import sys\nprint('to err', file=sys.stderr)\nsys.exit(3)")
    assert res["exit_code"] == 3
    assert res["stderr"] == "to err\n"
    res = run(session, "1/0")
    assert res["exit_code"] == 1
    assert "ZeroDivisionError" in res["stderr"]


def test_sandbox_identity_and_isolation(session):
    code = (
        "import os, socket, pathlib\n"
        "print(os.getuid(), os.getgid(), os.getcwd(), socket.gethostname())\n"
        "print(sorted(os.listdir('/')))\n"
        "print(pathlib.Path('/etc/passwd').read_text().count('\\n'))\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 48217), timeout=2); print('net open')\n"
        "except OSError as e: print('net closed')\n"
        "print(os.environ.get('PYTHONUNBUFFERED'), os.environ.get('MPLBACKEND'), os.environ.get('HOME'))\n"
        "print(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'SECRET' in k))\n"
    )
    res = run(session, code)
    lines = res["stdout"].splitlines()
    assert lines[0] == "1000 1000 /workspace sandbox"
    top = eval(lines[1])
    assert "workspace" in top and "tmp" in top
    for hidden in ("root", "var", "run", "sys", "srv", "opt", "boot", "mnt", "media"):
        assert hidden not in top
    assert lines[2] == "3"  # curated /etc/passwd: root, sandbox, nobody
    assert lines[3] == "net closed"  # the gateway port on the host's loopback is unreachable
    assert lines[4] == "1 Agg /home/sandbox"
    assert lines[5] == "[]"


def test_workspace_tmp_and_home_persist_across_execs_but_processes_do_not(session):
    res = run(session, (
        "import subprocess, pathlib\n"
        "pathlib.Path('/workspace/state.txt').write_text('w')\n"
        "pathlib.Path('/tmp/t.txt').write_text('t')\n"
        "pathlib.Path('/home/sandbox/h.txt').write_text('h')\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print('spawned')\n"))
    assert res["stdout"] == "spawned\n"
    res = run(session, (
        "import os\n"
        "print(open('/workspace/state.txt').read(), open('/tmp/t.txt').read(), open('/home/sandbox/h.txt').read())\n"
        "procs = [open(f'/proc/{p}/cmdline','rb').read() for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(any(b'sleep' in c for c in procs))\n"))
    assert res["stdout"] == "w t h\nFalse\n"


def test_output_is_capped_with_marker(session):
    res = run(session, "import sys\nsys.stdout.write('x' * 100000)\nsys.stderr.write('y' * 40000)")
    assert res["stdout"] == "x" * 32768 + "\n... [truncated, stdout exceeded 32KB]"
    assert res["stderr"] == "y" * 32768 + "\n... [truncated, stderr exceeded 32KB]"
    assert res["exit_code"] == 0


def test_exec_errors():
    unknown = "0123456789abcdef0123456789abcdef"
    r = request("POST", "/exec", {"session_id": unknown, "code": "print(1)"})
    assert r.status == 404 and r.json == {"detail": "session not found or not running"}, r
    r = request("POST", "/exec", {"session_id": "not-a-session", "code": "print(1)"})
    assert r.status == 400 and r.json == {"detail": "invalid session_id"}, r
    r = request("POST", "/exec", {"session_id": unknown})
    assert r.status == 422, r
    assert r.json["detail"][0]["loc"] == ["body", "code"]
    r = request("POST", "/exec", {"session_id": unknown, "code": 5})
    assert r.status == 422, r
    r = request("POST", "/exec", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 422, r
    r = request("POST", "/exec", {"session_id": unknown, "code": "#" * (1024 * 1024 + 1)})
    assert r.status == 413 and r.json == {"detail": "code too large"}, r


def test_session_errors():
    r = request("DELETE", "/sessions/0123456789abcdef0123456789abcdef", {})
    assert r.status == 200 and r.json == {"ok": True}, r
    r = request("DELETE", "/sessions/NOT-VALID", {})
    assert r.status == 400 and r.json == {"detail": "invalid session_id"}, r
    r = request("POST", "/sessions", {"idle_ttl_sec": "soon"})
    assert r.status == 422, r
    r = request("GET", "/no-such-endpoint")
    assert r.status == 404, r


def test_body_limit_checked_before_reading():
    r = request("POST", "/exec", raw=b"{}", headers={"Content-Length": str(57 * 1024 * 1024)})
    assert r.status == 413, r
    assert r.json == {"error": "request body exceeds 58720256 bytes"}


def test_scope_exists_while_session_lives_and_is_gone_after_delete():
    sid = create_session()
    unit = f"scopebox-runner-{sid}.scope"
    try:
        st = in_system("systemctl", "is-active", unit)
        assert st.stdout.strip() == "active", st
        props = in_system("systemctl", "show", unit, "-p", "Slice", "-p", "MemoryMax", "-p", "TasksMax",
                          "-p", "CPUQuotaPerSecUSec").stdout
        assert "Slice=scopebox.slice" in props
        assert f"MemoryMax={2 * 1024 ** 3}" in props
        assert "TasksMax=256" in props
        assert "CPUQuotaPerSecUSec=1s" in props
    finally:
        r = delete_session(sid)
    assert r.status == 200
    st = in_system("systemctl", "is-active", unit)
    assert st.stdout.strip() in ("inactive", "unknown"), st
    # The session is gone for good.
    r = request("POST", "/exec", {"session_id": sid, "code": "print(1)"})
    assert r.status == 404


def test_memory_bomb_is_killed_by_its_scope_while_another_session_works():
    bomb, other = create_session(), create_session()
    try:
        def explode():
            return run(bomb, "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))",
                       timeout_ms=120000)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            fut = pool.submit(explode)
            time.sleep(0.5)
            for _ in range(3):
                assert run(other, "print(sum(range(10)))")["stdout"] == "45\n"
            res = fut.result(timeout=180)
        # Killed by the kernel's OOM killer inside the scope (SIGKILL), or MemoryError.
        assert res["exit_code"] in (137, 1), res
        if res["exit_code"] == 1:
            assert "MemoryError" in res["stderr"]
        # The bomb's session itself survives its exec.
        assert run(bomb, "print('still here')")["stdout"] == "still here\n"
    finally:
        delete_session(bomb)
        delete_session(other)


def test_gateway_status_and_structured_access_log():
    st = in_system("systemctl", "is-active", "scopebox-gateway.service")
    assert st.stdout.strip() == "active", st
    marker = f"/no-such-path-{time.time_ns()}"
    request("GET", marker)
    for _ in range(50):
        log = in_system("journalctl", "-u", "scopebox-gateway.service", "-o", "verbose", "--no-pager",
                        f"SCOPEBOX_HTTP_PATH={marker}").stdout
        if "SCOPEBOX_HTTP_STATUS=404" in log:
            break
        time.sleep(0.1)
    assert "SCOPEBOX_HTTP_METHOD=GET" in log
    assert "SCOPEBOX_HTTP_STATUS=404" in log
    assert "SCOPEBOX_DURATION_USEC=" in log
    # Where the entry was logged, exactly once (not the logger's own location).
    assert log.count("CODE_FILE=") == 1 and "http-router.c" in log, log


def test_artifact_limits_skip_what_does_not_fit(session):
    res = run(session, (
        "import os\n"
        "for i in range(22):\n"
        "    open(f'/workspace/outputs/f{i:02d}.txt', 'w').write(str(i))\n"
        "with open('/workspace/outputs/big.bin', 'wb') as f:\n"
        "    f.truncate(21 * 1024 * 1024)\n"), timeout_ms=60000)
    names = [f["name"] for f in res["files"]]
    # Path order: big.bin (too large) is skipped, then f00..f19 fit, f20 and f21 don't.
    assert names == [f"f{i:02d}.txt" for i in range(20)], names
    assert res["stderr"] == ("[sandbox] skipped 3 output file(s) because artifact limits are 20 files, "
                             "20971520 bytes per file, 52428800 bytes total")
    assert {f["mime_type"] for f in res["files"]} == {"text/plain"}


# The ~25 extensions issue #15 found as application/octet-stream, compression suffixes (encodings:
# the inner type counts), case, no extension, dotfiles, CJK.
ARTIFACT_NAMES = [
    "report.odt", "sheet.ods", "doc.rtf", "fig.eps", "a.ogg", "a.flac", "v.webm", "v.mov", "i.avif",
    "i.heic", "a.7z", "a.rar", "a.zst", "db.sqlite", "d.h5", "m.wasm", "p.tex", "s.sh", "c.c",
    "Main.java", "data.csv.gz", "data.json.bz2", "t.tar.xz", "t.tgz", "t.tar.gz", "x.gz",
    "\u9500\u552e\u56fe\u8868.png", "UPPER.PNG", "Data.CSV", "noext", ".hidden", "book.xlsx",
    "slides.pptx", "x.parquet", "page.html", "a.md", "a.js", "a.svg", "a.ico", "a.wav",
]


def test_artifact_mime_types_are_pythons(session):
    # What the sidecar's mimetypes.guess_type(name)[0] answers on this host (its /etc/mime.types).
    got = {}
    for i in range(0, len(ARTIFACT_NAMES), 20):
        names = ARTIFACT_NAMES[i:i + 20]
        res = run(session, f"import os\nfor n in {names!r}:\n    open('/workspace/outputs/' + n, 'w').write(n)\n")
        assert res["exit_code"] == 0, res
        got.update({f["name"]: f["mime_type"] for f in res["files"]})
    want = {n: mimetypes.guess_type(n)[0] or "application/octet-stream" for n in ARTIFACT_NAMES}
    assert got == want
    assert got["data.csv.gz"] == "text/csv"
    assert got["report.odt"] == "application/vnd.oasis.opendocument.text"


def test_tmp_and_home_are_size_bounded(session):
    res = run(session, (
        "import os, errno\n"
        "for path in ('/tmp/big', '/home/sandbox/big'):\n"
        "    fd = os.open(path, os.O_CREAT | os.O_WRONLY)\n"
        "    try:\n"
        "        os.posix_fallocate(fd, 0, 300 * 1024 * 1024)\n"
        "        print('no limit')\n"
        "    except OSError as e:\n"
        "        print(errno.errorcode[e.errno])\n"
        "    os.unlink(path)\n"))
    assert res["stdout"] == "ENOSPC\nENOSPC\n", res


def test_exec_environment_of_the_contract(session):
    res = run(session, "import os, sys\n"
                       "for k in ('PYTHONUNBUFFERED', 'PYTHONDONTWRITEBYTECODE', 'MPLBACKEND', 'HOME'):\n"
                       "    print(k, os.environ.get(k))\n"
                       "d = os.environ['MPLCONFIGDIR']\n"
                       "print(os.access(d, os.W_OK), sys.dont_write_bytecode)\n")
    assert res["stdout"] == ("PYTHONUNBUFFERED 1\nPYTHONDONTWRITEBYTECODE 1\nMPLBACKEND Agg\n"
                             "HOME /home/sandbox\nTrue True\n"), res
