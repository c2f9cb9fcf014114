# SPDX-License-Identifier: LGPL-2.1-or-later
"""The journal message catalog: well-formed, and in step with the MESSAGE_IDs the code logs."""
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
CATALOG = ROOT / "catalog/scopebox.catalog"
IDS = ROOT / "src/shared/message-ids.h"


def catalog_entries():
    entries, current = {}, None
    for line in CATALOG.read_text().splitlines():
        m = re.fullmatch(r"-- ([0-9a-f]{32})", line)
        if m:
            assert m.group(1) not in entries, f"duplicate id {m.group(1)}"
            current = entries.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return entries


def test_every_entry_has_a_subject_and_a_body():
    entries = catalog_entries()
    assert entries
    for mid, lines in entries.items():
        assert lines[0].startswith("Subject: "), mid
        assert "Defined-By: scopebox" in lines, mid
        assert "" in lines and any(l for l in lines[lines.index(""):]), mid


def test_ids_in_the_code_and_in_the_catalog_match():
    defined = dict(re.findall(r'#define (SCOPEBOX_MESSAGE_\w+)\s+"MESSAGE_ID=([0-9a-f]{32})"', IDS.read_text()))
    assert set(defined.values()) == set(catalog_entries())
    # Each one is logged somewhere.
    sources = "".join(p.read_text() for p in (ROOT / "src").rglob("*.c"))
    for name in defined:
        assert name in sources, f"{name} is never logged"


def test_journalctl_accepts_the_catalog(tmp_path):
    # A root that holds only our catalog: journalctl compiles it and dumps every entry back.
    cat_dir = tmp_path / "usr/lib/systemd/catalog"
    cat_dir.mkdir(parents=True)
    (cat_dir / "scopebox.catalog").write_text(CATALOG.read_text())
    r = subprocess.run(["journalctl", f"--root={tmp_path}", "--update-catalog"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["journalctl", f"--root={tmp_path}", "--dump-catalog"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for mid in catalog_entries():
        assert mid in r.stdout.replace("-", ""), mid
