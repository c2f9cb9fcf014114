# SPDX-License-Identifier: LGPL-2.1-or-later
"""Journal entries an operator searches for carry their MESSAGE_ID, and journalctl -x explains
them from the installed catalog."""
import json
import re
import time

from conftest import REPO, create_session, delete_session, in_system, run

IDS = dict(re.findall(r'#define SCOPEBOX_MESSAGE_(\w+)\s+"MESSAGE_ID=([0-9a-f]{32})"',
                      (REPO / "src/shared/message-ids.h").read_text()))


def entries(**match):
    args = [f"{k}={v}" for k, v in match.items()]
    for _ in range(30):
        out = in_system("journalctl", "-o", "json", *args).stdout
        found = [json.loads(line) for line in out.splitlines() if line.strip()]
        if found:
            return found
        time.sleep(0.2)
    return []


def test_session_lifecycle_and_a_killed_exec_are_findable_by_message_id():
    sid = create_session()
    res = run(sid, "while True: pass", timeout_ms=1000)
    assert res["exit_code"] == 124
    delete_session(sid)

    created = entries(MESSAGE_ID=IDS["SESSION_CREATED"], SCOPEBOX_SESSION_ID=sid)
    assert created and sid in created[0]["MESSAGE"]
    killed = entries(MESSAGE_ID=IDS["EXEC_KILLED"], SCOPEBOX_SESSION_ID=sid)
    assert killed and killed[0]["SCOPEBOX_EXIT_REASON"] == "timeout", killed
    released = entries(MESSAGE_ID=IDS["SESSION_RELEASED"], SCOPEBOX_SESSION_ID=sid)
    assert released, released

    # The catalog is installed: -x adds its explanation, with the fields filled in.
    out = in_system("journalctl", "-x", "--no-pager", f"MESSAGE_ID={IDS['EXEC_KILLED']}",
                    f"SCOPEBOX_SESSION_ID={sid}").stdout
    assert f"killed (timeout)" in out and "ran past its timeout_ms" in out, out
