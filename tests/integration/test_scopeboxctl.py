# SPDX-License-Identifier: LGPL-2.1-or-later
"""scopeboxctl against the running service: status, sessions, inspect, exec, kill, gc, doctor, as root
inside the system that runs scopebox (the bus is there)."""
import json
import os
import pathlib
import subprocess
import time

from conftest import REPO, create_session, delete_session, in_system, request, run

API_KEY_FILE = "/etc/scopebox/api-key"
STORAGE_DIR = pathlib.Path("/var/lib/scopebox-storage")
DAEMONS = ["scopebox-gateway.socket", "scopebox-gateway.service", "scopebox-session-manager.service",
           "scopebox-storage-agent.service"]
UNKNOWN_SID = "0123456789abcdef0123456789abcdef"


def ctl(*args, stdin=None, timeout=120):
    """scopeboxctl inside the system; stdin (text) is passed through."""
    host_systemd = os.path.isdir("/run/systemd/system") and \
        pathlib.Path("/proc/1/comm").read_text().strip() == "systemd"
    prefix = [] if host_systemd else [str(REPO / "tools/sysbox"), "exec", "--"]
    return subprocess.run([*prefix, "scopeboxctl", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def conf_value(name, default):
    """A setting of /etc/scopebox/scopebox.conf as written there (last assignment wins)."""
    value = default
    for line in pathlib.Path("/etc/scopebox/scopebox.conf").read_text().splitlines():
        key, sep, rest = line.strip().partition("=")
        if sep and key == name:
            value = rest.strip().strip('"')
    return value


def ctl_json(*args):
    r = ctl(*args, "--json")
    assert r.returncode == 0, (r.returncode, r.stderr)
    return json.loads(r.stdout)


def test_help_and_version():
    r = ctl("--help")
    assert r.returncode == 0
    for verb in ("status", "sessions", "runs", "inspect", "exec", "kill", "gc", "doctor"):
        assert f"  {verb}" in r.stdout
    r = ctl("--version")
    assert r.returncode == 0 and r.stdout.startswith("scopeboxctl ")


def test_status_json_reports_daemons_limits_and_sessions():
    request("GET", "/healthz", key=None)  # the gateway and the manager are up
    before = ctl_json("status")
    assert set(before) >= {"version", "daemons", "manager", "config", "limits", "storage"}
    assert [d["unit"] for d in before["daemons"]] == DAEMONS
    for d in before["daemons"]:
        assert set(d) == {"unit", "load_state", "active_state", "sub_state", "main_pid", "status_text",
                          "memory_bytes"}
        assert d["load_state"] == "loaded"
    units = {d["unit"]: d for d in before["daemons"]}
    assert units["scopebox-gateway.socket"]["active_state"] == "active"
    assert units["scopebox-session-manager.service"]["active_state"] == "active"
    assert units["scopebox-session-manager.service"]["main_pid"] > 0
    assert "sessions" in units["scopebox-session-manager.service"]["status_text"]
    assert before["config"] == {"path": "/etc/scopebox/scopebox.conf", "ok": True, "error": None}
    # The file's values, else the built-in defaults (docs/configuration.md).
    assert before["limits"]["max_sessions"] == int(conf_value("SANDBOX_MAX_SESSIONS", "16"))
    assert before["limits"]["tasks"] == int(conf_value("SANDBOX_PIDS_LIMIT", "256"))
    assert before["limits"]["idle_ttl_sec"] == int(conf_value("SANDBOX_IDLE_TTL_SECONDS", "1800"))
    if conf_value("SANDBOX_MEMORY_LIMIT", None) is None:
        assert before["limits"]["memory_bytes"] == 2 << 30
    assert set(before["limits"]) == {
        "max_sessions", "max_concurrent_execs", "max_concurrent_creates", "memory_bytes", "cpu_percent", "tasks",
        "workspace_bytes", "idle_ttl_sec", "idle_ttl_cap_sec", "exec_timeout_cap_ms", "queue_timeout_sec",
        "archive_timeout_sec", "max_code_bytes", "max_output_bytes"}
    assert before["storage"]["local_dir"] == str(STORAGE_DIR)
    assert before["storage"]["local_dir_exists"] is True
    assert before["manager"]["active"] is True

    sid = create_session()
    try:
        after = ctl_json("status")
        assert after["manager"]["sessions"] == before["manager"]["sessions"] + 1
        assert after["manager"]["running_execs"] == 0
    finally:
        delete_session(sid)
    assert ctl_json("status")["manager"]["sessions"] == before["manager"]["sessions"]


def test_status_does_not_start_the_manager():
    # Sessions of other tests may be live: they outlive the manager (their runners keep their
    # scopes) and the next call that activates it finds them again.
    assert in_system("systemctl", "stop", "scopebox-session-manager.service").returncode == 0
    try:
        st = ctl_json("status")
        assert st["manager"] == {"active": False, "version": None, "sessions": None, "running_execs": None}
        units = {d["unit"]: d for d in st["daemons"]}
        assert units["scopebox-session-manager.service"]["active_state"] == "inactive"
        human = ctl("status")
        assert human.returncode == 0
        assert "inactive" in human.stdout
        # Still not started by status.
        assert in_system("systemctl", "is-active", "scopebox-session-manager.service").stdout.strip() == "inactive"
    finally:
        request("GET", "/healthz", key=None)  # activates it again


def test_sessions_lists_a_session_with_its_usage_until_released():
    sid = create_session()
    try:
        assert run(sid, "print(2)")["stdout"] == "2\n"
        listed = {s["id"]: s for s in ctl_json("sessions")}
        assert sid in listed
        s = listed[sid]
        assert s["state"] == "running"
        assert s["unit"] == f"scopebox-runner-{sid}.scope"
        for key in ("age_sec", "idle_sec", "idle_ttl_sec", "expires_in_sec", "execs", "created_usec",
                    "last_active_usec", "uid", "runner_pid"):
            assert isinstance(s[key], int), key
        assert s["idle_ttl_sec"] == int(conf_value("SANDBOX_IDLE_TTL_SECONDS", "1800"))
        assert s["execs"] == 1
        assert s["exec_running"] is False
        assert s["ephemeral"] is False and s["pooled"] is False
        # systemd accounts the scope on this host (null would mean "unknown").
        assert isinstance(s["memory_bytes"], int) and s["memory_bytes"] > 0
        assert isinstance(s["tasks"], int) and s["tasks"] >= 1
        human = ctl("sessions")
        assert human.returncode == 0
        assert human.stdout.splitlines()[0].split() == ["ID", "AGE", "IDLE", "MEMORY", "TASKS", "EXEC", "UNIT"]
        assert sid in human.stdout
        bare = ctl("sessions", "--no-legend")
        assert "ID" not in bare.stdout.split() and "listed" not in bare.stdout
        assert any(line.startswith(sid) for line in bare.stdout.splitlines())
    finally:
        delete_session(sid)
    assert sid not in {s["id"] for s in ctl_json("sessions")}


def test_inspect_shows_the_session_and_its_scope_limits():
    sid = create_session(idle_ttl_sec=600)
    try:
        info = ctl_json("inspect", sid)
        assert info["id"] == sid
        assert info["idle_ttl_sec"] == 600
        assert info["scope"]["active_state"] == "active"
        limits = ctl_json("status")["limits"]
        assert info["scope"]["memory_max_bytes"] == limits["memory_bytes"]
        assert info["scope"]["tasks_max"] == limits["tasks"]
        assert info["scope"]["cpu_quota_per_sec_usec"] == limits["cpu_percent"] * 10000
        human = ctl("inspect", sid)
        assert human.returncode == 0
        assert f"Session:     {sid} (running)" in human.stdout
        assert "Memory:" in human.stdout and "Tasks:" in human.stdout
    finally:
        delete_session(sid)


def test_exec_prints_output_passes_the_exit_code_and_lists_artifacts(session):
    r = ctl("exec", session, "-", stdin="print(1)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1\n"

    r = ctl("exec", session, "-", stdin="import sys\nprint('oops', file=sys.stderr)\nraise SystemExit(3)\n")
    assert r.returncode == 3
    assert r.stdout == ""
    assert "oops\n" in r.stderr

    code = "open('/workspace/outputs/report.txt', 'w').write('hello')\nprint('done')\n"
    r = ctl("exec", session, "-", stdin=code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "done\n"
    assert "artifact /workspace/outputs/report.txt (5 bytes)" in r.stderr

    # The session keeps its state between execs, as over HTTP.
    r = ctl("exec", session, "-", stdin="print(open('/workspace/outputs/report.txt').read())\n")
    assert r.stdout == "hello\n"

    r = ctl("exec", "--json", session, "-", stdin="print(5)\n")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["exit_code"] == 0 and out["stdout"] == "5\n" and out["files"] == []
    assert out["timed_out"] is False and out["signal"] == 0
    assert out["oom_killed"] is False and out["pids_limited"] is False
    assert out["blocked_syscalls"] == []


def test_exec_names_refused_system_calls(session):
    code = "import os\nos.setuid(0)\n"
    r = ctl("exec", session, "-", stdin=code)
    assert r.returncode == 1
    assert "PermissionError" in r.stderr
    assert "scopeboxctl: the sandbox refused setuid (EPERM) 1x" in r.stderr
    out = json.loads(ctl("exec", "--json", session, "-", stdin=code).stdout)
    assert out["exit_code"] == 1
    assert out["blocked_syscalls"] == [{"name": "setuid", "verdict": "EPERM", "count": 1}]


def test_exec_honours_timeout(session):
    r = ctl("exec", "--timeout=1s", session, "-", stdin="import time\ntime.sleep(30)\n")
    assert r.returncode == 124
    assert "timed out after 1000 ms" in r.stderr


def test_exec_reads_code_from_a_file(session):
    r = ctl("exec", session, "/nonexistent/code.py")
    assert r.returncode == 1
    assert "Failed to open '/nonexistent/code.py'" in r.stderr
    # Written where scopeboxctl runs: in the system that runs scopebox (its /tmp may be private).
    path = in_system("mktemp", "/tmp/scopeboxctl-XXXXXX.py", check=True).stdout.strip()
    try:
        in_system("sh", "-c", f"printf 'print(40 + 2)\\n' > {path}", check=True)
        r = ctl("exec", session, path)
    finally:
        in_system("rm", "-f", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "42\n"


def test_kill_ends_the_session():
    sid = create_session()
    r = ctl("kill", sid)
    assert r.returncode == 0, r.stderr
    assert sid in r.stdout
    r = request("POST", "/exec", {"session_id": sid, "code": "print(1)"})
    assert r.status == 404 and r.json == {"detail": "session not found or not running"}, r
    assert sid not in {s["id"] for s in ctl_json("sessions")}
    r = ctl("kill", sid)
    assert r.returncode == 4
    assert "no such session" in r.stderr


def test_unknown_sessions_verbs_and_options():
    for args in (("inspect", UNKNOWN_SID), ("kill", UNKNOWN_SID), ("inspect", "not-an-id")):
        r = ctl(*args)
        assert r.returncode == 4, (args, r.returncode, r.stderr)
        assert "no such session" in r.stderr
    r = ctl("exec", UNKNOWN_SID, "-", stdin="print(1)\n")
    assert r.returncode == 4 and "no such session" in r.stderr
    r = ctl("frobnicate")
    assert r.returncode == 2 and "Unknown command 'frobnicate'" in r.stderr
    r = ctl("inspect")
    assert r.returncode == 2 and "Too few arguments" in r.stderr
    r = ctl("--bogus")
    assert r.returncode == 2
    r = ctl("exec", "--timeout=soon", UNKNOWN_SID, "-")
    assert r.returncode == 2 and "Invalid --timeout" in r.stderr


def test_gc_deletes_old_archives_only():
    base = STORAGE_DIR / "workspaces" / "workspaces"
    created = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    st = STORAGE_DIR.stat()
    for d in (STORAGE_DIR / "workspaces", base):
        os.chown(d, st.st_uid, st.st_gid)
    old, young = base / "scopeboxctl-gc-old.tgz", base / "scopeboxctl-gc-young.tgz"
    try:
        for f in (old, young):
            f.write_bytes(b"x" * 100)
            os.chown(f, st.st_uid, st.st_gid)
        week_ago = time.time() - 8 * 86400
        os.utime(old, (week_ago, week_ago))
        out = ctl_json("gc", "--max-age=86400")
        assert set(out) == {"provider", "local_dir", "prefix", "max_age_sec", "deleted", "scanned", "freed_bytes"}
        assert out["provider"] == "local" and out["max_age_sec"] == 86400
        assert out["deleted"] >= 1 and out["freed_bytes"] >= 100 and out["scanned"] >= 2
        assert not old.exists()
        assert young.exists()
        r = ctl("gc", "--max-age", "1d")  # the same age, with a unit
        assert r.returncode == 0 and r.stdout.startswith("Deleted 0 of ")
    finally:
        for f in (old, young):
            f.unlink(missing_ok=True)
        if created:
            base.rmdir()


DOCTOR_CHECKS = {"config", "sysctl:fs.protected_regular", "cgroup", "swap", "seccomp", "python", "nodejs",
                 "slirp4netns", "font-cache", "fonts", "api-key", "units", "bus-policy", "bus-activation",
                 "runner", "users"}


def doctor():
    r = ctl("doctor", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == (0 if out["ok"] else 1), r
    return out


def test_doctor_json_lists_each_check():
    out = doctor()
    names = {c["name"] for c in out["checks"]}
    assert DOCTOR_CHECKS <= names, DOCTOR_CHECKS - names
    for c in out["checks"]:
        assert set(c) == {"name", "state", "detail"}
        assert c["state"] in ("ok", "warn", "fail")
        assert c["detail"]
    assert out["counts"] == {s: sum(c["state"] == s for c in out["checks"]) for s in ("ok", "warn", "fail")}
    checks = {c["name"]: c for c in out["checks"]}
    # What the installed service needs, on this machine as on a fresh one (tools/install-deps).
    for name in ("config", "seccomp", "python", "api-key", "units", "bus-policy", "bus-activation", "runner",
                 "users"):
        assert checks[name]["state"] == "ok", checks[name]
    human = ctl("doctor")
    for line in human.stdout.splitlines()[:len(out["checks"])]:
        assert line.split()[0] in ("ok", "warn", "fail"), line


def test_doctor_fails_on_a_readable_api_key():
    mode = os.stat(API_KEY_FILE).st_mode & 0o7777
    try:
        os.chmod(API_KEY_FILE, 0o644)
        r = ctl("doctor", "--json")
        assert r.returncode == 1
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        assert checks["api-key"]["state"] == "fail"
        assert "0644" in checks["api-key"]["detail"]
    finally:
        os.chmod(API_KEY_FILE, mode)
    assert {c["name"]: c for c in doctor()["checks"]}["api-key"]["state"] == "ok"


# ---- packages: the operator's read-only site directory ----

SITE_DIR = "/var/lib/scopebox/site-packages"
DEMO = "scopebox_demo_pkg"


def make_wheel(directory, version):
    """A pure-Python wheel of DEMO made here (no index, no build tools), as pip writes them."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{DEMO}/__init__.py": f"VALUE = {version!r}\n".encode(),
        f"{DEMO}-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: scopebox-demo-pkg\nVersion: {version}\n".encode(),
        f"{DEMO}-{version}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: scopebox-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items())
    files[f"{DEMO}-{version}.dist-info/RECORD"] = (record + f"{DEMO}-{version}.dist-info/RECORD,,\n").encode()
    path = pathlib.Path(directory) / f"{DEMO}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return str(path)


def demo_code():
    return (f"import sys, {DEMO}\n"
            f"print({DEMO}.VALUE, {DEMO}.__file__)\n"
            "print(sys.path.index('/usr/lib/python3/dist-packages') < sys.path.index('/opt/scopebox/site-packages'))\n")


def test_packages_install_reaches_new_sandboxes_read_only(session):
    import shutil
    import tempfile

    from test_dify import call as dify_call, run as dify_run

    assert in_system("test", "-e", SITE_DIR).returncode != 0, "the test needs no site directory yet"
    # The wheels live where the system that runs scopebox sees them too: not in /tmp or
    # /var/tmp (private to a sysbox), nor in the work tree (a clean clone may be under /tmp).
    d = tempfile.mkdtemp(dir="/var/lib", prefix="scopebox-test-wheels-")
    try:
        r = ctl("packages", "install", make_wheel(d, "1.0"))
        assert r.returncode == 0, r.stderr
        st = in_system("stat", "-c", "%U %a", SITE_DIR, check=True).stdout.split()
        assert st == ["root", "755"], st

        # Without a restart: the next sandbox has it, after Debian's packages, read-only.
        res = run(session, demo_code())
        assert res["exit_code"] == 0, res
        assert res["stdout"] == f"1.0 /opt/scopebox/site-packages/{DEMO}/__init__.py\nTrue\n", res
        res = run(session, f"open('/opt/scopebox/site-packages/{DEMO}/x.py', 'w')")
        assert res["exit_code"] == 1 and "Read-only file system" in res["stderr"], res
        res = run(session, "import os\nprint(os.statvfs('/opt/scopebox/site-packages').f_flag & 15)")
        assert int(res["stdout"]) & (os.ST_RDONLY | os.ST_NOSUID | os.ST_NODEV) == \
            os.ST_RDONLY | os.ST_NOSUID | os.ST_NODEV, res

        # dify runs too, and the dependencies endpoint lists it.
        data = dify_run(demo_code())
        assert data["stdout"].startswith("1.0 /opt/scopebox/site-packages/"), data
        deps = dify_call("GET", "/v1/sandbox/dependencies?language=python3").json["data"]["dependencies"]
        assert {"name": "scopebox-demo-pkg", "version": "1.0"} in deps, deps

        # An upgrade from a directory of wheels replaces it for the sandboxes that start next.
        os.unlink(pathlib.Path(d) / f"{DEMO}-1.0-py3-none-any.whl")
        make_wheel(d, "2.0")
        r = ctl("packages", "install", d)
        assert r.returncode == 0, r.stderr
        res = run(session, demo_code())
        assert res["stdout"].startswith("2.0 "), res
        assert in_system("sh", "-c", f"ls -d {SITE_DIR}.new.* 2>/dev/null").stdout == ""

        # A site directory others may write is not used at all.
        in_system("chmod", "g+w", SITE_DIR, check=True)
        res = run(session, f"import {DEMO}")
        assert res["exit_code"] == 1 and "ModuleNotFoundError" in res["stderr"], res
        in_system("chmod", "g-w", SITE_DIR, check=True)

        # Failures change nothing.
        r = ctl("packages", "install", "/nonexistent.whl")
        assert r.returncode == 1 and "Cannot use '/nonexistent.whl'" in r.stderr, r
        res = run(session, demo_code())
        assert res["stdout"].startswith("2.0 "), res
    finally:
        shutil.rmtree(d, ignore_errors=True)
        in_system("rm", "-rf", SITE_DIR)
        in_system("/usr/libexec/scopebox/python-dependencies", "/usr/share/scopebox/python-dependencies.json")
