# SPDX-License-Identifier: LGPL-2.1-or-later
"""Path attacks on the workspace file API (/files, /files/get, /files/list, /files/reset-inputs)
and on the artifacts of /exec, beyond tests/integration/test_files.py: ".." in every position,
host and /proc paths, encoded and look-alike dots, backslashes, NULs, the length limits, links
planted by sandboxed code (to host files, /proc magic links, "/" and another session's
workspace), hard links, special files, a file swapped for a link while the API reads it, and
hostile outputs/ and uploads/ trees. The file API must never follow a link out of /workspace,
never block on a special file, and answer each attack with the contract's status and text."""
import base64
import json
import os
import secrets
import subprocess
import time

import pytest

from secsuite import canary, leaked, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import REPO, create_session, delete_session, in_system, request, run, session, session_info  # noqa: F401

OUTSIDE = {"detail": "path must be under /workspace"}
RESOLVES_OUTSIDE = {"detail": "path resolves outside /workspace"}
TOO_LONG = {"detail": "path too long"}
NOT_FOUND = {"detail": "file not found"}
IS_DIR = {"detail": "path is a directory"}
OK = {"ok": True}
RESET_OK = {"ok": True, "session_gone": False}
CONTENT = b"inside the workspace\n"


def write(sid, path, data=CONTENT, timeout=60):
    return request("POST", "/files", {"session_id": sid, "path": path,
                                      "data_base64": base64.b64encode(data).decode()}, timeout=timeout)


def read(sid, path, timeout=60):
    return request("POST", "/files/get", {"session_id": sid, "path": path}, timeout=timeout)


def listing(sid, **extra):
    r = request("POST", "/files/list", {"session_id": sid, **extra}, timeout=60)
    assert r.status == 200, r
    return r.json["files"]


def reset_inputs(sid, **extra):
    return request("POST", "/files/reset-inputs", {"session_id": sid, **extra}, timeout=60)


def check(r, status, body):
    assert (r.status, r.json) == (status, body), r


def content_of(r):
    assert r.status == 200 and list(r.json) == ["data_base64"], r
    return base64.b64decode(r.json["data_base64"], validate=True)


def sandbox_json(sid, code):
    """Runs code in the session that prints one JSON document; returns it."""
    res = run(sid, "import json, os, socket, stat\n" + code)
    assert res["exit_code"] == 0, res
    return json.loads(res["stdout"])


def probe_name():
    return f"scopebox-probe-{secrets.token_hex(6)}"


def exists_anywhere(path):
    """Whether a path exists on the host or in the system that runs scopebox (private /tmp, /run)."""
    return os.path.lexists(path) or in_system("test", "-e", path).returncode == 0


@pytest.fixture(scope="module")
def shared():
    """One session for the refusals, which change nothing in it."""
    sid = create_session()
    yield sid
    delete_session(sid)


# Lexical confinement: ".." in every position, host paths, NULs, empty, lengths.

ESCAPES = [
    "..//..//etc/passwd",
    "./../etc/passwd",
    "uploads/./../../etc/passwd",
    "a/b/c/../../../../etc/passwd",
    "uploads/x/../../../",
    "/workspace/..",
    "/workspace/../workspace/../etc/passwd",
    "/workspace/uploads/../../etc/shadow",
    "/workspace/./../proc/self/environ",
    "//etc/passwd",
    "/./etc/passwd",
    "/proc/self/environ",
    "/proc/1/root/etc/passwd",
    "/proc/self/cwd/x",
    "/etc/scopebox/canary",
    "/root/.scopebox-canary",
    "/var/lib/scopebox/canary",
    "/run/scopebox/sessions",
    "/dev/zero",
    "/workspace-other/x",
    "/Workspace/x",
    "workspace/../../x",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_lexical_escapes_are_refused(shared, path):
    check(write(shared, path), 400, OUTSIDE)
    check(read(shared, path), 400, OUTSIDE)


# ".." that stays inside is resolved like os.path.normpath, "/.." at the root stays at the root.
INSIDE = [
    ("../workspace/uploads/in1.txt", "uploads/in1.txt"),
    ("/../workspace/uploads/in2.txt", "uploads/in2.txt"),
    ("/workspace/../../../workspace/uploads/in3.txt", "uploads/in3.txt"),
    ("uploads/a/b/../../in4.txt", "uploads/in4.txt"),
    ("///workspace///uploads//./in5.txt", "uploads/in5.txt"),
]


@pytest.mark.parametrize("path,where", INSIDE)
def test_dotdot_that_stays_inside_lands_inside(shared, path, where):
    data = path.encode()
    check(write(shared, path, data), 200, OK)
    assert content_of(read(shared, where)) == data
    assert content_of(read(shared, path)) == data


@pytest.mark.parametrize("path", ["uploads/..", "uploads/../.", "/workspace/.", "."])
def test_paths_naming_the_workspace_root(shared, path):
    check(write(shared, path), 400, IS_DIR)
    check(read(shared, path), 404, NOT_FOUND)


@pytest.mark.parametrize("path", ["\x00", "\x00/../../etc/passwd", "uploads/\x00", "uploads/a\x00.txt",
                                  "/workspace\x00/../etc/passwd", "../\x00"])
def test_nul_anywhere_is_refused(shared, path):
    check(write(shared, path), 400, OUTSIDE)
    check(read(shared, path), 400, OUTSIDE)


def test_empty_path_is_refused(shared):
    check(write(shared, ""), 400, OUTSIDE)
    check(read(shared, ""), 400, OUTSIDE)


def test_length_limits(shared):
    # 4097 bytes in all, or one name of 256 bytes: refused before anything is touched.
    for path in ("a" * 4097, "uploads/" + "n" * 256, "/workspace/" + "/".join(["d" * 200] * 21),
                 "../" * 1365 + "xy", "uploads/" + "n" * 256 + "/../x"):
        check(write(shared, path), 400, TOO_LONG)
        check(read(shared, path), 400, TOO_LONG)
    # A 4096-byte path of dots and slashes normalises to a short one inside; 4096 bytes of ".."
    # normalise to "/" (outside).
    dots = "./" * 2040 + "uploads/dots.txt"
    assert len(dots) == 4096
    check(write(shared, dots), 200, OK)
    assert content_of(read(shared, "uploads/dots.txt")) == CONTENT
    check(write(shared, "/.." * 1365 + "/"), 400, OUTSIDE)
    # A 255-byte name is fine.
    name = "uploads/" + "n" * 255
    check(write(shared, name), 200, OK)
    assert content_of(read(shared, name)) == CONTENT


def test_longest_path_can_be_read_back(session):
    """The longest path the contract accepts (4096 bytes) can be written and read back."""
    path = "/".join(["d" * 200] * 20) + "/" + "e" * 75 + "f"
    assert len(path.encode()) == 4096
    check(write(session, path), 200, OK)
    assert content_of(read(session, path)) == CONTENT


# Names that only look like traversal are plain names inside the workspace.

ENCODED = [
    "%2e%2e/%2e%2e/etc/{p}",
    "%2e%2e%2f%2e%2e%2fetc%2f{p}",
    "%252e%252e/%252e%252e/etc/{p}",
    "%c0%ae%c0%ae/%c0%ae%c0%ae/etc/{p}",
    "\u2025/\u2025/etc/{p}",
    "\uff0e\uff0e/\uff0e\uff0e/etc/{p}",
    "\u2024\u2024/etc/{p}",
    "uploads/\\etc\\{p}",
    "~/{p}",
    "$HOME/{p}",
]


@pytest.mark.parametrize("pattern", ENCODED)
def test_encoded_and_lookalike_dots_are_plain_names(shared, pattern):
    probe = probe_name()
    path = pattern.format(p=probe)
    data = probe.encode()
    check(write(shared, path), 200, OK)
    check(write(shared, path, data), 200, OK)
    assert content_of(read(shared, path)) == data
    assert {"path": path, "size": len(data)} in listing(shared)
    assert not exists_anywhere(f"/etc/{probe}")


def test_names_containing_dots_and_backslashes_are_plain_names(session):
    """"..\\..\\etc\\x", "...", "a..b" and ".. " are names, not "..": they stay in the workspace
    and can be written and read back like any other name."""
    probe = probe_name()
    names = [f"..\\..\\etc\\{probe}", "...", f"..../{probe}", "uploads/report..final.txt",
             f".. /{probe}", f"uploads/..{probe}", f"uploads/{probe}..", f"..%2f..%2fetc%2f{probe}"]
    got = {}
    for name in names:
        r = write(session, name, name.encode())
        got[name] = (r.status, r.json)
    assert got == {name: (200, OK) for name in names}
    for name in names:
        assert content_of(read(session, name)) == name.encode()
    listed = {f["path"] for f in listing(session)}
    assert set(names) <= listed
    assert not exists_anywhere(f"/etc/{probe}")


# Links planted by sandboxed code.

def plant_link(sid, target, name):
    got = sandbox_json(sid, f"os.symlink({target!r}, {'/workspace/' + name!r})\n"
                            f"print(json.dumps(os.readlink({'/workspace/' + name!r})))")
    assert got == target


LINKS = {
    "etc-passwd": ("/etc/passwd", ""),
    "canary": ("/etc/scopebox/canary", ""),
    "proc-self-environ": ("/proc/self/environ", ""),
    "proc-1-environ": ("/proc/1/environ", ""),
    "proc-1-root": ("/proc/1/root", "/etc/scopebox/canary"),
    "proc-self-root": ("/proc/self/root", "/etc/passwd"),
    "proc-self-cwd": ("/proc/self/cwd", "outputs/x"),
    "proc-self-fd": ("/proc/self/fd/0", ""),
    "root-dir": ("/", "etc/scopebox/canary"),
    "workspace-dotdot": ("/workspace/../etc/passwd", ""),
    "workspace-outputs-dotdot": ("/workspace/outputs/../../etc/scopebox/canary", ""),
    "relative-up": ("../../../../../../../../etc", "passwd"),
    "run-sessions": ("/run/scopebox/sessions", ""),
    "dev-urandom": ("/dev/urandom", ""),
    "dev-tty": ("/dev/tty", ""),
    "loop": ("link-loop", ""),
}


@pytest.mark.parametrize("case", list(LINKS))
def test_planted_links_out_of_the_workspace(shared, case):
    target, below = LINKS[case]
    name = f"outputs/link-{case}"
    plant_link(shared, target, name)
    path = name + ("/" + below if below else "")
    t = time.monotonic()
    check(read(shared, path), 400, RESOLVES_OUTSIDE)
    check(write(shared, path, b"pwned"), 400, RESOLVES_OUTSIDE)
    assert time.monotonic() - t < 30  # nothing opened that could block (a tty, a pipe)
    # The link is still the link: not replaced, not written through.
    assert sandbox_json(shared, f"print(json.dumps(os.readlink('/workspace/{name}')))") == target
    assert name not in {f["path"] for f in listing(shared)}


def test_link_to_another_sessions_workspace(session):
    victim = create_session()
    try:
        secret = f"VICTIM-{secrets.token_hex(12)}"
        check(write(victim, "outputs/secret.txt", secret.encode()), 200, OK)
        host_path = f"/run/scopebox/sessions/{victim}/root/workspace/outputs/secret.txt"
        plant_link(session, host_path, "outputs/abs")
        plant_link(session, f"../../../../{victim}/root/workspace/outputs/secret.txt", "outputs/rel")
        plant_link(session, f"/run/scopebox/sessions/{victim}", "outputs/dir")
        bodies = []
        for path in ("outputs/abs", "outputs/rel", "outputs/dir/root/workspace/outputs/secret.txt"):
            r = read(session, path)
            bodies.append(r.body)
            check(r, 400, RESOLVES_OUTSIDE)
            check(write(session, path, b"pwned"), 400, RESOLVES_OUTSIDE)
        # Nor can the sandboxed code see it, and the victim's file is unchanged.
        got = sandbox_json(session, f"print(json.dumps([os.path.exists(p) for p in "
                                    f"({host_path!r}, '/run/scopebox', '/workspace/outputs/rel')]))")
        assert got == [False, False, False]
        assert content_of(read(victim, "outputs/secret.txt")) == secret.encode()
        assert not any(leaked(b, [secret]) for b in bodies)
    finally:
        delete_session(victim)


def test_writing_through_a_link_to_root_creates_nothing_outside(session):
    plant_link(session, "/", "outputs/root")
    probe = probe_name()
    for path in (f"outputs/root/var/lib/{probe}", f"outputs/root/tmp/{probe}", f"outputs/root/{probe}/x/y",
                 f"outputs/root/etc/scopebox/{probe}"):
        check(write(session, path, b"pwned"), 400, RESOLVES_OUTSIDE)
    for path in (f"/var/lib/{probe}", f"/tmp/{probe}", f"/{probe}", f"/etc/scopebox/{probe}"):
        assert not exists_anywhere(path), path
    assert [f["path"] for f in listing(session)] == []


def test_hard_links_to_host_files_are_impossible(session):
    """Code can't hard-link files from outside the workspace into it (other mounts: EXDEV, or
    EPERM), so nothing of the host can be handed to the file API as a regular workspace file."""
    got = sandbox_json(session, (
        "out = {}\n"
        "fd = os.open('/etc/passwd', os.O_RDONLY)\n"
        "for i, src in enumerate(['/etc/passwd', '/usr/bin/python3', '/proc/self/exe', '/proc/self/environ',\n"
        "                         f'/proc/self/fd/{fd}', '/dev/null', '/tmp']):\n"
        "    try:\n"
        "        os.link(src, f'/workspace/outputs/hl{i}', follow_symlinks=True)\n"
        "        out[src] = 'linked'\n"
        "    except OSError as e:\n"
        "        out[src] = __import__('errno').errorcode[e.errno]\n"
        "print(json.dumps(out))\n"))
    assert sorted(got) == sorted(["/etc/passwd", "/usr/bin/python3", "/proc/self/exe", "/proc/self/environ",
                                  "/dev/null", "/tmp"] + [k for k in got if k.startswith("/proc/self/fd/")]), got
    assert set(got.values()) <= {"EXDEV", "EPERM"}, got
    for i in range(7):
        check(read(session, f"outputs/hl{i}"), 404, NOT_FOUND)
    assert listing(session) == []


# Special files: never opened in a way that blocks, never reported as files.

def test_special_files_give_a_prompt_clear_error(session):
    got = sandbox_json(session, (
        "os.mkfifo('/workspace/outputs/fifo')\n"
        "os.makedirs('/workspace/outputs/d/e')\n"
        "os.mkfifo('/workspace/outputs/d/e/deep-fifo')\n"
        "os.symlink('fifo', '/workspace/outputs/to-fifo')\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.bind('/workspace/outputs/sock')\n"
        "out = {}\n"
        "for kind, dev in (('chr', stat.S_IFCHR | 0o666), ('blk', stat.S_IFBLK | 0o666)):\n"
        "    try:\n"
        "        os.mknod('/workspace/outputs/' + kind, dev, os.makedev(1, 3))\n"
        "        out[kind] = 'created'\n"
        "    except OSError as e:\n"
        "        out[kind] = __import__('errno').errorcode[e.errno]\n"
        "print(json.dumps(out))\n"))
    assert got == {"chr": "EPERM", "blk": "EPERM"}
    for path in ("outputs/fifo", "outputs/d/e/deep-fifo", "outputs/to-fifo", "outputs/sock", "outputs/chr"):
        t = time.monotonic()
        check(read(session, path, timeout=30), 404, NOT_FOUND)
        assert time.monotonic() - t < 10, path
    assert listing(session) == []
    # Uploading over a FIFO or a socket replaces it (a rename), never opens it.
    for path in ("outputs/fifo", "outputs/sock"):
        check(write(session, path, b"regular now", timeout=30), 200, OK)
        assert content_of(read(session, path)) == b"regular now"


# A file swapped for a link while the API reads it.

def runner_pid(sid):
    # The manager's record: the runner itself, not a sandbox's PID 1 (a clone of it, with its
    # command line).
    pid = session_info(sid).get("runner_pid")
    assert pid, session_info(sid)
    return str(pid)


SWAPPER = r"""
import os, sys, time
ws, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
os.chdir(ws)
os.makedirs('real', exist_ok=True)
with open('real/canary', 'wb') as f:
    f.write(b'regular\n')
deadline = time.monotonic() + seconds
n = 0
while time.monotonic() < deadline:
    # The file and a directory on its path, each swapped for a link and back, atomically.
    with open('.f.tmp', 'wb') as f:
        f.write(b'regular\n')
    os.rename('.f.tmp', 'swap')
    os.symlink(target, '.l.tmp')
    os.rename('.l.tmp', 'swap')
    os.symlink('real', '.d.tmp')
    os.rename('.d.tmp', 'dir')
    os.symlink(os.path.dirname(target), '.d.tmp')
    os.rename('.d.tmp', 'dir')
    n += 1
print(n)
"""


def test_file_swapped_for_a_link_while_the_api_reads_it(session, canary):
    """Something outside the API's control (here a process in the runner's mount namespace)
    swaps workspace/swap between a regular file and a link to a host canary, and
    workspace/dir between a directory and a link to the canary's directory, thousands of times
    a second. Reads and writes through the API see the regular file or refuse the link; the
    canary never comes back and never changes."""
    pid = runner_pid(session)
    ws = f"/run/scopebox/sessions/{session}/root/workspace"
    target = canary.paths[0]
    swapper = subprocess.Popen([str(REPO / "tools/sysbox"), "exec", "nsenter", "-t", pid, "-m",
                                "/usr/bin/python3", "-c", SWAPPER, ws, target, "6"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = {}
    try:
        time.sleep(0.5)
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            for path in ("swap", "dir/canary"):
                r = read(session, path)
                key = (r.status, r.body if r.status != 200 else content_of(r))
                seen[key] = seen.get(key, 0) + 1
            r = write(session, "swap", b"uploaded\n")
            seen[(r.status, r.body)] = seen.get((r.status, r.body), 0) + 1
    finally:
        out, err = swapper.communicate(timeout=60)
    assert swapper.returncode == 0 and int(out.split()[-1]) > 100, (out, err)
    allowed = {(200, b"regular\n"), (200, b"uploaded\n"), (200, b'{"ok":true}'),
               (400, b'{"detail":"path resolves outside /workspace"}'), (404, b'{"detail":"file not found"}')}
    assert set(seen) <= allowed, seen
    # The race was live: both the file and the link were met.
    assert (200, b"regular\n") in seen and (400, b'{"detail":"path resolves outside /workspace"}') in seen, seen


# Artifacts: outputs/ holding links, special files, a huge sparse file, odd names.

def test_artifacts_never_follow_links_or_open_special_files(session, canary):
    targets = [canary.paths[0], "/proc/self/environ", "/etc/passwd", "/", "/proc/1/root/etc/shadow",
               "../uploads/u.txt"]
    res = run(session, (
        "import os, socket\n"
        f"for i, t in enumerate({targets!r}):\n"
        "    os.symlink(t, f'/workspace/outputs/link{i}')\n"
        "open('/workspace/uploads/u.txt', 'w').write('upload')\n"
        "os.mkfifo('/workspace/outputs/fifo')\n"
        "socket.socket(socket.AF_UNIX).bind('/workspace/outputs/sock')\n"
        "os.makedirs('/workspace/outputs/sub')\n"
        "os.symlink('/etc', '/workspace/outputs/sub/etc')\n"
        "open('/workspace/outputs/real.txt', 'w').write('real')\n"), timeout_ms=30000)
    assert res["exit_code"] == 0, res
    assert res["files"] == [{"name": "real.txt", "mime_type": "text/plain",
                             "data_base64": base64.b64encode(b"real").decode()}], res
    assert res["stderr"] == ""


def test_artifact_huge_sparse_file_is_skipped(session):
    res = run(session, "import os\n"
                       "fd = os.open('/workspace/outputs/sparse.bin', os.O_CREAT | os.O_WRONLY)\n"
                       "os.truncate(fd, 700 << 20)\n"
                       "open('/workspace/outputs/small.txt', 'w').write('small')\n")
    assert res["exit_code"] == 0, res
    assert [f["name"] for f in res["files"]] == ["small.txt"], res
    assert res["stderr"] == ("[sandbox] skipped 1 output file(s) because artifact limits are 20 files, "
                             "20971520 bytes per file, 52428800 bytes total"), res
    check(read(session, "outputs/sparse.bin"), 413, {"detail": "file too large"})
    assert {"path": "outputs/sparse.bin", "size": 700 << 20} in listing(session)


def test_artifact_names_with_newlines_and_quotes(session):
    names = ['new\nline.txt', 'q"uote.txt', 'x","name":"forged.txt', 'back\\slash.txt', 'tab\tcr\r.txt']
    res = run(session, f"for n in {names!r}:\n    open('/workspace/outputs/' + n, 'w').write(n)\n")
    assert res["exit_code"] == 0, res
    assert sorted(f["name"] for f in res["files"]) == sorted(names), res
    for f in res["files"]:
        assert base64.b64decode(f["data_base64"]).decode() == f["name"]


def test_artifact_name_that_is_not_utf8_does_not_break_the_session(session):
    """Code can name an output file with bytes that are not UTF-8. The exec still answers 200
    (such a name can't be a JSON string: the file is left out), and the session lives on."""
    res = request("POST", "/exec", {"session_id": session, "timeout_ms": 30000, "code": (
        "open(b'/workspace/outputs/bad\\xff\\xfe.txt', 'wb').write(b'bad')\n"
        "open('/workspace/outputs/good.txt', 'w').write('good')\n"
        "print('done')\n")})
    assert res.status == 200, res
    doc = json.loads(res.body.decode("utf-8"))
    assert doc["stdout"] == "done\n" and doc["exit_code"] == 0, doc
    assert [f["name"] for f in doc["files"]] == ["good.txt"], doc
    assert run(session, "print(1)")["stdout"] == "1\n"
    assert [f["path"] for f in listing(session)] == ["outputs/good.txt"]


def test_outputs_replaced_by_a_link(session):
    """outputs/ itself turned into a link to "/" (or to the inputs): nothing is reported
    through it, in this exec or the next."""
    res = run(session, "import os\nos.rmdir('/workspace/outputs')\nos.symlink('/', '/workspace/outputs')\n")
    assert (res["exit_code"], res["files"]) == (0, []), res
    # Through the link the code writes to its own /tmp: not an artifact.
    res = run(session, "open('/workspace/outputs/tmp/x.txt', 'w').write('x')\n")
    assert (res["exit_code"], res["files"]) == (0, []), res
    check(read(session, "outputs/tmp/x.txt"), 400, RESOLVES_OUTSIDE)
    res = run(session, "import os\nos.unlink('/workspace/outputs')\nos.symlink('uploads', '/workspace/outputs')\n"
                       "open('/workspace/uploads/in.txt', 'w').write('in')\n")
    assert (res["exit_code"], res["files"]) == (0, []), res
    assert [f["path"] for f in listing(session)] == ["uploads/in.txt"]


# Listing and reset-inputs over hostile trees.

def test_list_of_a_hostile_tree(session):
    res = run(session, (
        "import os, socket\n"
        "os.mkfifo('/workspace/fifo')\n"
        "socket.socket(socket.AF_UNIX).bind('/workspace/sock')\n"
        "for n, t in (('root', '/'), ('proc', '/proc/1/root'), ('env', '/proc/self/environ'),\n"
        "             ('fd', '/proc/self/fd'), ('loop', 'loop'), ('up', '..')):\n"
        "    os.symlink(t, '/workspace/' + n)\n"
        "os.truncate(os.open('/workspace/outputs/big.bin', os.O_CREAT | os.O_WRONLY), 600 << 20)\n"
        "open('/workspace/outputs/r.txt', 'w').write('r')\n"))
    assert res["exit_code"] == 0, res
    t = time.monotonic()
    assert listing(session) == [{"path": "outputs/big.bin", "size": 600 << 20}, {"path": "outputs/r.txt", "size": 1}]
    assert time.monotonic() - t < 10
    # A "path" member can't point the listing elsewhere: it is ignored.
    assert [f["path"] for f in listing(session, path="/etc")] == ["outputs/big.bin", "outputs/r.txt"]


def test_reset_inputs_removes_hostile_entries_without_following_them(session, canary):
    res = run(session, (
        "import os, socket\n"
        f"os.symlink({canary.paths[0]!r}, '/workspace/uploads/canary')\n"
        "os.symlink('/', '/workspace/uploads/root')\n"
        "os.symlink('../outputs', '/workspace/uploads/outputs')\n"
        "os.mkfifo('/workspace/uploads/fifo')\n"
        "socket.socket(socket.AF_UNIX).bind('/workspace/uploads/sock')\n"
        "os.makedirs('/workspace/uploads/locked/inner')\n"
        "open('/workspace/uploads/locked/inner/f', 'w').write('f')\n"
        "os.chmod('/workspace/uploads/locked/inner', 0)\n"
        "os.chmod('/workspace/uploads/locked', 0)\n"
        "open('/workspace/outputs/keep.txt', 'w').write('keep')\n"
        "import shutil\n"
        "shutil.rmtree('/workspace/skills')\n"
        "os.mkfifo('/workspace/skills')\n"))
    assert res["exit_code"] == 0, res
    check(reset_inputs(session, path="/workspace/outputs"), 200, RESET_OK)
    got = sandbox_json(session, "print(json.dumps({d: [os.path.isdir('/workspace/' + d), os.path.islink('/workspace/' + d),\n"
                                "                      sorted(os.listdir('/workspace/' + d))] for d in ('uploads', 'skills', 'outputs')}))")
    assert got == {"uploads": [True, False, []], "skills": [True, False, []], "outputs": [True, False, ["keep.txt"]]}
    assert os.path.exists(canary.paths[0])


def test_reset_inputs_empties_a_deep_tree(session):
    """uploads/ nested deeper than the remover's own recursion bound is still emptied."""
    res = run(session, "import os\nos.chdir('/workspace/uploads')\n"
                       "for i in range(400):\n    os.mkdir('d')\n    os.chdir('d')\n"
                       "open('leaf.txt', 'w').write('leaf')\n")
    assert res["exit_code"] == 0, res
    check(reset_inputs(session), 200, RESET_OK)
    assert sandbox_json(session, "print(json.dumps(os.listdir('/workspace/uploads')))") == []
