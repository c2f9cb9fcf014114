# SPDX-License-Identifier: LGPL-2.1-or-later
"""The suite's own checks: a leak of the canary would be noticed."""
import base64

from secsuite import canary, encodings, leaked, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import session  # noqa: F401 (fixture)


def test_leak_detector_sees_raw_and_base64_forms(canary):
    for pad in (b"", b"x", b"xy"):
        blob = base64.b64encode(pad + canary.secret.encode() + b"tail")
        assert leaked(b'{"content_base64":"' + blob + b'"}', [canary.secret]) == canary.secret
    assert leaked(b"CANARY-", [canary.secret]) is None
    assert len(encodings(canary.secret)) == 4


def test_canaries_are_planted_and_unreadable_from_the_sandbox(canary, session):
    from conftest import run
    code = "import sys\nfor p in %r:\n    try:\n        print(open(p).read())\n    except OSError as e:\n        print(type(e).__name__)\n" % (canary.paths,)
    res = run(session, code)
    assert res["exit_code"] == 0
    assert res["stdout"].split() == ["FileNotFoundError"] * len(canary.paths)
