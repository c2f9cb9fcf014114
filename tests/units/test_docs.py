# SPDX-License-Identifier: LGPL-2.1-or-later
"""Every program has a man page, the units' Documentation= resolves (systemd-analyze --man=yes
and the file:// documents exist), the pages render without groff warnings, scopebox.conf(5)
lists every setting of docs/configuration.md, and the daemons answer --help and --version."""
import configparser
import pathlib
import re
import subprocess

import pytest

UNITDIR = pathlib.Path("/lib/systemd/system")
UNITS = ["scopebox-gateway.socket", "scopebox-gateway-agent.socket", "scopebox-gateway-e2b.socket", "scopebox-gateway.service", "scopebox-session-manager.service",
         "scopebox-storage-agent.service", "scopebox.slice"]
LIBEXEC = pathlib.Path("/usr/libexec/scopebox")
MANDIR = pathlib.Path("/usr/share/man")
DAEMONS = ["scopebox-gateway", "scopebox-session-manager", "scopebox-storage-agent"]
REPO = pathlib.Path(__file__).resolve().parents[2]


def documentation(unit):
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.read(UNITDIR / unit)
    return cp["Unit"]["Documentation"].split()


def programs():
    """The programs an operator meets: the units' ExecStart=, the runner in every session scope,
    and the commands in bindir (helper scripts the package runs at install time are not)."""
    progs = {"scopebox-runner"}
    for unit in UNITS:
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.read(UNITDIR / unit)
        if cp.has_option("Service", "ExecStart"):
            progs.add(pathlib.Path(cp["Service"]["ExecStart"].split()[0].lstrip("@-:+!")).name)
    progs |= {p.name for p in pathlib.Path("/usr/bin").glob("scopebox*")}
    assert {"scopebox-gateway", "scopebox-session-manager", "scopebox-storage-agent"} <= progs, progs
    for p in progs - {p.name for p in pathlib.Path("/usr/bin").glob("scopebox*")}:
        assert (LIBEXEC / p).is_file(), p
    return sorted(progs)


def man_page(name, section):
    for suffix in ("", ".gz"):
        path = MANDIR / f"man{section}" / f"{name}.{section}{suffix}"
        if path.exists():
            return path
    return None


@pytest.mark.parametrize("unit", UNITS)
def test_unit_documentation_resolves(unit):
    refs = documentation(unit)
    assert any(r.startswith("man:") for r in refs), refs
    # --man=yes makes systemd-analyze run man(1) on every man: reference.
    r = subprocess.run(["systemd-analyze", "verify", "--man=yes", str(UNITDIR / unit)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "Command 'man" not in r.stderr, r.stderr
    for ref in refs:
        if ref.startswith("file://"):
            assert pathlib.Path(ref[len("file://"):]).is_file(), ref
        else:
            m = re.fullmatch(r"man:([\w.-]+)\((\d)\)", ref)
            assert m, ref
            assert man_page(m.group(1), m.group(2)), ref


def test_every_program_has_a_man_page():
    missing = [p for p in programs() if not (man_page(p, 8) or man_page(p, 1))]
    assert not missing, missing


def installed_pages():
    pages = sorted(MANDIR.glob("man*/scopebox*"))
    assert len(pages) >= 5, pages
    return pages


@pytest.mark.parametrize("page", installed_pages(), ids=lambda p: p.name)
def test_man_page_renders_cleanly(page):
    text = subprocess.run(["zcat", "-f", str(page)], capture_output=True, text=True, check=True).stdout
    assert "@" not in re.sub(r"\S+@\S+\.\w+", "", text), "unsubstituted @VARIABLE@"
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr
    r = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True,
                       env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "MAN_KEEP_STDERR": "1"})
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    assert "SEE ALSO" in r.stdout and "NAME" in r.stdout


def test_conf_page_lists_every_setting():
    reference = (REPO / "docs/configuration.md").read_text()
    settings = re.findall(r"^\| `([A-Z_]+)` \|", reference, re.M)
    assert "SANDBOX_MAX_SESSIONS" in settings
    r = subprocess.run(["man", "-l", str(man_page("scopebox.conf", 5))], capture_output=True, text=True,
                       env={"MANWIDTH": "200", "PATH": "/usr/bin:/bin"}, check=True)
    text = re.sub(r".\x08", "", r.stdout)
    missing = [s for s in settings if f"{s}=" not in text]
    assert not missing, missing


@pytest.mark.parametrize("daemon", DAEMONS)
def test_daemon_help_and_version(daemon):
    r = subprocess.run([str(LIBEXEC / daemon), "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and re.fullmatch(rf"{daemon} \d+\.\d+\.\d+\n", r.stdout), r
    r = subprocess.run([str(LIBEXEC / daemon), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and f"man:{daemon}(8)" in r.stdout, r
    r = subprocess.run([str(LIBEXEC / daemon), "--frobnicate"], capture_output=True, text=True)
    assert r.returncode == 1 and "unexpected argument '--frobnicate'" in r.stderr, r
