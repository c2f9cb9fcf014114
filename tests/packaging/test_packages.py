# SPDX-License-Identifier: LGPL-2.1-or-later
"""The distro packages (packaging/): the .deb builds and lintian has nothing beyond the justified
overrides; installed into a private systemd it creates the users, the configuration and the API
key, enables and starts the socket and passes the smoke flow (sidecar and dify APIs) and
scopeboxctl's checks; installing it again (the upgrade path) keeps a live session, the
configuration and the key; purging it
stops everything, leaves no runner scope and removes the configuration. The binary RPM builds and
carries the binaries, units and bus files.

The .deb goes into a second, throw-away sysbox (tools/sysbox start --overlay, instance
scopebox-pkgtest): its root is an overlay of the host's, so dpkg and the maintainer scripts change
nothing on the host, where the development install (tools/install) serves every other test. A
drop-in moves its socket to free ports, since both sysboxes share the host's network."""
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
SYSBOX = REPO / "tools/sysbox"
INSTANCE = "scopebox-pkgtest"
HOST_SYSTEMD = os.path.isdir("/run/systemd/system") and \
    pathlib.Path("/proc/1/comm").read_text().strip() == "systemd"

# What every build must carry (meson installs it; the packages must not lose any of it).
SHIPPED = [
    "/usr/libexec/scopebox/scopebox-gateway",
    "/usr/libexec/scopebox/scopebox-session-manager",
    "/usr/libexec/scopebox/scopebox-runner",
    "/usr/libexec/scopebox/scopebox-template-waiter",
    "/usr/libexec/scopebox/scopebox-storage-agent",
    "/usr/bin/scopeboxctl",
    "/lib/systemd/system/scopebox-gateway.socket",
    "/lib/systemd/system/scopebox-gateway-agent.socket",
    "/lib/systemd/system/scopebox-gateway-e2b.socket",
    "/lib/systemd/system/scopebox-gateway.service",
    "/lib/systemd/system/scopebox-session-manager.service",
    "/lib/systemd/system/scopebox-storage-agent.service",
    "/lib/systemd/system/scopebox.slice",
    "/usr/share/dbus-1/system.d/io.scopebox.SessionManager1.conf",
    "/usr/share/dbus-1/system.d/io.scopebox.StorageAgent1.conf",
    "/usr/share/dbus-1/system.d/io.scopebox.Gateway1.conf",
    "/usr/share/dbus-1/system-services/io.scopebox.SessionManager1.service",
    "/usr/share/dbus-1/system-services/io.scopebox.StorageAgent1.service",
    "/usr/lib/sysusers.d/scopebox.conf",
    "/usr/lib/systemd/catalog/scopebox.catalog",
    "/usr/share/scopebox/scopebox.conf.example",
    "/usr/share/doc/scopebox/README.md",
]
# Man pages are compressed by both packagers.
MAN_PAGES = ["man8/scopebox-gateway.8", "man8/scopebox-session-manager.8",
             "man8/scopebox-storage-agent.8", "man8/scopebox-runner.8", "man8/scopebox-template.8",
             "man5/scopebox.conf.5",
             "man1/scopeboxctl.1"]
# What the development install left on the host and a fresh machine does not have: removed in
# the overlay before installing, so that the maintainer scripts really create it.
DEV_INSTALL = ["/etc/scopebox", "/var/lib/scopebox", "/var/lib/scopebox-storage",
               "/var/cache/scopebox", "/usr/share/scopebox", "/usr/libexec/scopebox"]
USERS = ["scopebox-gateway", "scopebox-storage"]


def sh(*argv, timeout=600, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def box(*argv, input=None, timeout=120):
    """A command inside the package test's sysbox."""
    return subprocess.run([str(SYSBOX), "exec", *argv], input=input, capture_output=True,
                          text=isinstance(input, (str, type(None))), timeout=timeout,
                          env={**os.environ, "SYSBOX_INSTANCE": INSTANCE})


def sysbox(*argv):
    return sh(str(SYSBOX), *argv, timeout=180, env={**os.environ, "SYSBOX_INSTANCE": INSTANCE})


def free_ports(n):
    """n distinct ports free right now (all bound at once, so they can't repeat)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def sha256(path):
    try:
        return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def host_state():
    """What the overlay deletes and the purge removes, as the host has it (the binaries may be
    reinstalled meanwhile by tools/install, the key is never replaced)."""
    return {"key": sha256("/etc/scopebox/api-key"),
            "gateway": os.path.exists("/usr/libexec/scopebox/scopebox-gateway"),
            "users": [sh("getent", "passwd", u).returncode for u in USERS]}


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    out = tmp_path_factory.mktemp("deb")
    r = sh(str(REPO / "packaging/build-deb"), str(out),
           env={**os.environ, "DEB_BUILD_OPTIONS": "nocheck"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def test_deb_builds_with_everything_meson_installs(debs):
    deb = debs / "scopebox_0.1.0_amd64.deb"
    assert deb.exists(), list(debs.iterdir())
    listing = sh("dpkg-deb", "-c", str(deb)).stdout
    files = {line.split()[5].lstrip(".") for line in listing.splitlines()}
    assert not set(SHIPPED) - files
    assert not {f"/usr/share/man/{m}.gz" for m in MAN_PAGES} - files
    fields = sh("dpkg-deb", "-f", str(deb), "Depends").stdout
    deps = {d.strip().split()[0] for d in fields.split(",")}
    assert {"systemd", "dbus", "slirp4netns", "nodejs", "python3-numpy", "python3-matplotlib",
            "fonts-noto-cjk"} <= deps
    assert "wrk" not in deps
    # hardening=+all: the daemons are PIE with full RELRO (BIND_NOW).
    tree = debs / "tree"
    assert sh("dpkg-deb", "-x", str(deb), str(tree)).returncode == 0
    for daemon in ("scopebox-gateway", "scopebox-session-manager", "scopebox-runner"):
        elf = str(tree / "usr/libexec/scopebox" / daemon)
        assert "DYN (Position-Independent Executable" in sh("readelf", "-h", elf).stdout, daemon
        assert "BIND_NOW" in sh("readelf", "-d", elf).stdout, daemon


def test_lintian_reports_nothing_beyond_the_overrides(debs):
    changes = debs / "scopebox_0.1.0_amd64.changes"
    r = sh("lintian", "--fail-on", "error,warning", str(changes))
    tags = [l for l in r.stdout.splitlines() if l[:2] in ("E:", "W:")]
    assert r.returncode == 0 and not tags, r.stdout + r.stderr


@pytest.fixture(scope="module")
def installed(debs):
    if HOST_SYSTEMD:
        pytest.skip("tools/sysbox runs only where systemd is not PID 1")
    host_before = host_state()
    sysbox("stop")   # leftovers of an interrupted run
    r = sysbox("start", "--overlay")
    assert r.returncode == 0, r.stderr
    try:
        ports = free_ports(4)
        deb = (debs / "scopebox_0.1.0_amd64.deb").read_bytes()
        listing = sh("dpkg-deb", "-c", str(debs / "scopebox_0.1.0_amd64.deb")).stdout
        shipped = [l.split()[5].lstrip(".") for l in listing.splitlines() if not l.startswith("d")]
        dropin = "[Socket]\nListenStream=\n" + "".join(f"ListenStream=127.0.0.1:{p}\n" for p in ports[:2])
        # The agent check's socket, off the development service's port as well.
        agent_dropin = f"[Socket]\nListenStream=\nListenStream=127.0.0.1:{ports[2]}\n"
        e2b_dropin = f"[Socket]\nListenStream=\nListenStream=127.0.0.1:{ports[3]}\n"
        # A fresh machine: no development install, no users, and no policy-rc.d (this VM's image
        # has Docker's "exit 101" one, which rightly keeps dpkg from starting anything).
        script = (f"rm -rf {' '.join(DEV_INSTALL)} {' '.join(shipped)} /usr/sbin/policy-rc.d "
                  "/etc/systemd/system/*.wants/scopebox* && "
                  + " && ".join(f"{{ ! getent passwd {u} >/dev/null || userdel {u}; }}" for u in USERS)
                  + " && mkdir -p /etc/systemd/system/scopebox-gateway.socket.d && "
                  f"printf '%s' '{dropin}' > /etc/systemd/system/scopebox-gateway.socket.d/test-ports.conf"
                  " && mkdir -p /etc/systemd/system/scopebox-gateway-agent.socket.d && "
                  f"printf '%s' '{agent_dropin}' > "
                  "/etc/systemd/system/scopebox-gateway-agent.socket.d/test-ports.conf"
                  " && mkdir -p /etc/systemd/system/scopebox-gateway-e2b.socket.d && "
                  f"printf '%s' '{e2b_dropin}' > "
                  "/etc/systemd/system/scopebox-gateway-e2b.socket.d/test-ports.conf")
        r = box("sh", "-ec", script)
        assert r.returncode == 0, r.stderr
        r = box("sh", "-c", "cat > /var/tmp/scopebox.deb", input=deb)
        assert r.returncode == 0, r.stderr
        r = box("dpkg", "-i", "/var/tmp/scopebox.deb", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        key = box("cat", "/etc/scopebox/api-key").stdout.strip()
        yield {"port": ports[0], "dify_port": ports[1], "key": key, "host_before": host_before}
    finally:
        journal = box("journalctl", "--no-pager", "-n", "80").stdout
        r = sysbox("stop")
        print(journal)
        assert r.returncode == 0, r.stderr


def call(inst, method, path, body=None, dify=False):
    port = inst["dify_port"] if dify else inst["port"]
    headers = {"Content-Type": "application/json"}
    headers["X-Api-Key" if dify else "Authorization"] = inst["key"] if dify else f"Bearer {inst['key']}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_install_creates_users_configuration_and_key(installed):
    for user in USERS:
        assert box("getent", "passwd", user).returncode == 0, user
    r = box("stat", "-c", "%a %U %s", "/etc/scopebox/api-key")
    mode, owner, size = r.stdout.split()
    assert (mode, owner) == ("600", "root") and int(size) > 40
    conf = box("cat", "/etc/scopebox/scopebox.conf").stdout
    assert "SANDBOX_LOCAL_STORAGE_DIR=/var/lib/scopebox-storage" in conf.splitlines()
    storage = box("stat", "-c", "%a %U", "/var/lib/scopebox-storage").stdout.split()
    assert storage == ["700", "scopebox-storage"]
    deps = json.loads(box("cat", "/usr/share/scopebox/python-dependencies.json").stdout)
    assert "numpy" in {d["name"].lower() for d in deps}
    assert box("sh", "-c", "ls /var/cache/scopebox/matplotlib/fontlist-v*.json").returncode == 0
    # The catalog is in journald's database: journalctl -x can explain scopebox's entries.
    catalog = box("journalctl", "--list-catalog").stdout
    assert "scopebox" in catalog.lower()


def test_socket_is_enabled_and_listening(installed):
    assert box("systemctl", "is-enabled", "scopebox-gateway.socket").stdout.strip() == "enabled"
    assert box("systemctl", "is-active", "scopebox-gateway.socket").stdout.strip() == "active"
    assert box("systemctl", "is-enabled", "scopebox-gateway-agent.socket").stdout.strip() == "enabled"
    assert box("systemctl", "is-active", "scopebox-gateway-agent.socket").stdout.strip() == "active"
    assert box("systemctl", "is-enabled", "scopebox-gateway-e2b.socket").stdout.strip() == "enabled"
    assert box("systemctl", "is-active", "scopebox-gateway-e2b.socket").stdout.strip() == "active"


def test_smoke_flow(installed):
    status, health = call(installed, "GET", "/healthz")
    assert status == 200 and health["ok"] is True, health
    status, created = call(installed, "POST", "/sessions", {})
    assert status == 200, created
    sid = created["session_id"]
    status, result = call(installed, "POST", "/exec", {"session_id": sid, "code": "print(1)"})
    assert status == 200 and result["stdout"] == "1\n" and result["exit_code"] == 0, result
    status, _ = call(installed, "DELETE", f"/sessions/{sid}", {})
    assert status == 200
    status, run = call(installed, "POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)"},
                       dify=True)
    assert status == 200 and run["code"] == 0 and run["data"]["stdout"] == "1\n", run


def test_scopeboxctl_sees_the_packaged_installation(installed):
    r = box("scopeboxctl", "--json", "status")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    units = {d["unit"]: d for d in status["daemons"]}
    assert units["scopebox-gateway.socket"]["active_state"] == "active"
    assert status["config"]["ok"] is True
    assert status["storage"]["local_dir"] == "/var/lib/scopebox-storage"
    r = box("scopeboxctl", "--json", "doctor")
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    for name in ("config", "api-key", "units", "bus-policy", "bus-activation", "runner", "users"):
        assert checks[name]["state"] == "ok", checks[name]


def test_upgrade_keeps_sessions_configuration_and_key(installed):
    """Installing the package over itself runs the upgrade path (prerm upgrade, postinst
    configure with the old version): the socket comes back, the operator's configuration and the
    key stay, and a live session keeps its workspace."""
    status, created = call(installed, "POST", "/sessions", {})
    assert status == 200, created
    sid = created["session_id"]
    status, result = call(installed, "POST", "/exec",
                          {"session_id": sid, "code": "open('/workspace/kept.txt', 'w').write('before')"})
    assert status == 200 and result["exit_code"] == 0, result
    r = box("sh", "-ec", "echo '# operator was here' >> /etc/scopebox/scopebox.conf")
    assert r.returncode == 0, r.stderr

    r = box("dpkg", "-i", "/var/tmp/scopebox.deb", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    assert box("cat", "/etc/scopebox/api-key").stdout.strip() == installed["key"]
    assert "# operator was here" in box("cat", "/etc/scopebox/scopebox.conf").stdout.splitlines()
    assert box("systemctl", "is-active", "scopebox-gateway.socket").stdout.strip() == "active"
    status, result = call(installed, "POST", "/exec",
                          {"session_id": sid, "code": "print(open('/workspace/kept.txt').read())"})
    assert status == 200 and result["stdout"] == "before\n", result
    status, _ = call(installed, "DELETE", f"/sessions/{sid}", {})
    assert status == 200


def test_purge_stops_everything_and_removes_the_configuration(installed):
    # A live session: its runner scope must go with the package.
    status, created = call(installed, "POST", "/sessions", {})
    assert status == 200, created
    scope = f"scopebox-runner-{created['session_id']}.scope"
    assert box("systemctl", "is-active", scope).stdout.strip() == "active"

    r = box("dpkg", "--purge", "scopebox", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    units = box("systemctl", "list-units", "--all", "--no-legend", "--plain", "scopebox*").stdout
    left = [l for l in units.splitlines()
            if not l.startswith("scopebox-sysbox.target") and " active " in f" {l} "]
    assert not left, units
    assert box("systemctl", "is-active", scope).stdout.strip() != "active"
    assert box("pgrep", "-f", "/usr/libexec/scopebox/").returncode == 1
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", installed["port"]), timeout=5).close()
    for path in ("/etc/scopebox", "/var/lib/scopebox", "/var/cache/scopebox", "/usr/share/scopebox"):
        assert box("test", "-e", path).returncode == 1, path


def test_host_files_are_untouched(installed):
    assert host_state() == installed["host_before"]
    assert sh("dpkg-query", "-W", "scopebox").returncode != 0


def test_rpm_builds_with_everything_meson_installs(tmp_path):
    r = sh(str(REPO / "packaging/build-rpm"), str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rpms = list(tmp_path.glob("scopebox-0.1.0-*.x86_64.rpm"))
    assert len(rpms) == 1, list(tmp_path.iterdir())
    files = set(sh("rpm", "-qlp", str(rpms[0])).stdout.split())
    assert not set(SHIPPED) - files
    assert all(any(f.startswith(f"/usr/share/man/{m}") for f in files) for m in MAN_PAGES), files
    assert {"/etc/scopebox/api-key", "/etc/scopebox/scopebox.conf"} <= files
    scripts = sh("rpm", "-qp", "--scripts", str(rpms[0])).stdout
    assert "systemd-sysusers" in scripts and "scopebox-gateway.socket" in scripts
