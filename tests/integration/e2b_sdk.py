# SPDX-License-Identifier: LGPL-2.1-or-later
"""The real E2B SDKs from npm, unmodified, against the gateway's E2B listener: the prefixes that
tools/install-e2b-sdk fills, the key the SDKs are given, the scripts of tests/e2b run with the
environment a user sets (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL and nothing else of E2B's),
and plain HTTP to the listener for what the SDKs hide (statuses, bodies, headers)."""
import datetime
import json
import os
import pathlib
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import REPO, Response, api_key

E2B_URL = os.environ.get("SCOPEBOX_E2B_URL", "http://127.0.0.1:48219")
SDK_ROOT = pathlib.Path(os.environ.get("SCOPEBOX_E2B_SDK_ROOT", "/opt/scopebox-test"))
SCRIPTS = REPO / "tests/e2b"

# The e2b versions tools/install-e2b-sdk pins: CURRENT speaks POST /v2/sandboxes (and carries
# @e2b/code-interpreter 2.8.0), V1 the older POST /sandboxes and POST /sandboxes/{id}/connect.
CURRENT = "2.51.0"
V1 = "2.50.0"

# Where sandbox traffic goes (E2b-Sandbox-Port): envd's port.
ENVD_PORT = 49983
JUPYTER_PORT = 49999


def e2b_key():
    """The E2B API key: "e2b_" and the hex of the sidecar key's bytes (the form the Python SDK
    checks on the client)."""
    return "e2b_" + api_key().encode().hex()


def sdk_prefix(version):
    """The prefix holding e2b@version; fails, naming the installer, when it is missing."""
    prefix = SDK_ROOT / f"e2b-{version}"
    try:
        installed = json.loads((prefix / "node_modules/e2b/package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        installed = None
    if installed != version:
        pytest.fail(f"e2b@{version} is not installed in {prefix} (found {installed!r}): "
                    f"run tools/install-e2b-sdk")
    return prefix


def run_script(script, args=None, version=CURRENT, key=..., timeout=60, created=None, domain=None):
    """Run tests/e2b/<script> with e2b@version and return the JSON object it printed. key=...
    means the E2B key; another string is given to the SDK instead. The ids of the sandboxes the
    script created are added to the list created, also when it failed. A script that fails
    (status, no JSON line, time out) fails the test with what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update(E2B_API_KEY=e2b_key() if key is ... else key, E2B_API_URL=E2B_URL, E2B_SANDBOX_URL=E2B_URL,
               SCOPEBOX_E2B_PREFIX=str(sdk_prefix(version)))
    if domain:
        # Addressed by host (<port>-<id>.<domain>), as without E2B_SANDBOX_URL.
        del env["E2B_SANDBOX_URL"]
        env["E2B_DOMAIN"] = domain
    argv = ["node", str(SCRIPTS / script), json.dumps(args or {})]
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{script} {argv[2]} (e2b@{version}) did not end within {timeout} s; "
                    f"stdout {e.stdout!r}, stderr {e.stderr!r}")
    lines = r.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        out = None
    if isinstance(out, dict) and created is not None:
        created += out.get("created", [])
    if r.returncode != 0 or not isinstance(out, dict):
        pytest.fail(f"{script} {argv[2]} (e2b@{version}) exited {r.returncode}: "
                    f"stdout {r.stdout!r}, stderr {r.stderr[-2000:]!r}")
    assert out["version"] == version, out
    return out


def e2b_request(method, path, body=None, key=..., headers=None, base=E2B_URL, timeout=60):
    """One plain HTTP request to the E2B listener (base): body JSON-encoded, X-API-Key the E2B
    key (key=...), the given string, or absent (None)."""
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    if key is ...:
        key = e2b_key()
    if key is not None:
        hdrs["X-API-Key"] = key
    hdrs.update(headers or {})
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, r.read(), dict(r.headers))
    except urllib.error.HTTPError as e:
        return Response(e.code, e.read(), dict(e.headers))


def sandbox_request(sandbox_id, method, path, port=ENVD_PORT, token=None, body=None):
    """Sandbox traffic as the SDKs address it through E2B_SANDBOX_URL: E2b-Sandbox-Id and
    E2b-Sandbox-Port headers, X-Access-Token when a token is given, no API key."""
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port)}
    if token is not None:
        headers["X-Access-Token"] = token
    return e2b_request(method, path, body, key=None, headers=headers)


def timestamp(text):
    """An RFC 3339 time as the SDK serialised it (a Date's toISOString) or the API sent it, in
    seconds since the epoch."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Sandboxes:
    """Runs the scripts and remembers every sandbox they report created, so that the fixture's
    finaliser kills each of them (whatever the test left running)."""

    def __init__(self):
        self.created = []

    def run(self, script, args=None, **kwargs):
        return run_script(script, args, created=self.created, **kwargs)

    def create(self, template=None, version=CURRENT, **opts):
        """A sandbox made by the SDK (create.mjs; template None: the package's default): its
        output; fails the test if create threw."""
        args = {"opts": opts} if template is None else {"template": template, "opts": opts}
        out = self.run("create.mjs", args, version=version)
        assert "error" not in out, out
        return out

    def create_raw(self, body=None):
        """A sandbox made by POST /v2/sandboxes with plain HTTP: the response's JSON."""
        r = e2b_request("POST", "/v2/sandboxes", body if body is not None else {"templateID": "base"})
        assert r.status == 201, r
        self.created.append(r.json["sandboxID"])
        return r.json

    def kill_all(self):
        for sandbox_id in self.created:
            r = e2b_request("DELETE", f"/sandboxes/{sandbox_id}")
            assert r.status in (204, 404), (sandbox_id, r)
        self.created = []


@pytest.fixture
def sandboxes():
    s = Sandboxes()
    yield s
    s.kill_all()
