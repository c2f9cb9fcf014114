# SPDX-License-Identifier: LGPL-2.1-or-later
"""The security suite's invariants, checked around every case.

Before each case: host canary files hold a random secret. After each case:
  - the service still answers /healthz;
  - a sibling session (created once per module, untouched by the case) still runs print(1);
  - the canary files are unchanged;
  - neither the canary secret nor the API key appears in any response body the case received
    (raw, or base64-encoded at any alignment).
Test modules import the fixtures (`from secsuite import canary, sibling, security_invariants`).
Cases use the `canary` fixture to aim at the host files, and conftest.request (or the helpers
built on it) for every HTTP call, so the bodies are recorded."""
import base64
import hashlib
import os
import secrets

import pytest

import conftest
from conftest import api_key, create_session, delete_session, request, run

CANARY_PATHS = [
    "/etc/scopebox/canary",
    "/root/.scopebox-canary",
    "/var/lib/scopebox/canary",
    "/srv/scopebox-canary",
]


class Canary:
    def __init__(self):
        self.secret = "CANARY-" + secrets.token_hex(16)
        self.paths = list(CANARY_PATHS)

    def plant(self):
        for p in self.paths:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(self.secret + "\n")
            os.chmod(p, 0o644)

    def digests(self):
        out = {}
        for p in self.paths:
            try:
                with open(p, "rb") as f:
                    out[p] = hashlib.sha256(f.read()).hexdigest()
            except FileNotFoundError:
                out[p] = None
        return out

    def remove(self):
        for p in self.paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def encodings(secret):
    """The secret as raw bytes and as the stable middle of its base64 form at each alignment."""
    raw = secret.encode()
    forms = [raw]
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw)
        # Drop the characters that mix padding bytes or the following data in.
        forms.append(enc[4:-4])
    return forms


def leaked(body, secret_list):
    for s in secret_list:
        for form in encodings(s):
            if form and form in body:
                return s
    return None


@pytest.fixture(scope="session")
def canary():
    c = Canary()
    c.plant()
    yield c
    c.remove()


@pytest.fixture(scope="module")
def sibling():
    sid = create_session()
    yield sid
    delete_session(sid)


@pytest.fixture(autouse=True)
def security_invariants(canary, sibling):
    before = canary.digests()
    conftest.record_responses(True)
    yield
    bodies = conftest.RECORDED or []
    conftest.record_responses(False)

    health = request("GET", "/healthz", key=None, timeout=30)
    assert health.status == 200, f"service does not answer after the case: {health}"
    res = run(sibling, "print(1)", timeout_ms=30000)
    assert res["exit_code"] == 0 and res["stdout"] == "1\n", f"sibling session broken: {res}"
    assert canary.digests() == before, "a host canary file changed"
    secret_list = [canary.secret, api_key()]
    for body in bodies:
        s = leaked(body, secret_list)
        assert s is None, "a host secret appeared in a response body"
