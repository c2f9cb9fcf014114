# SPDX-License-Identifier: LGPL-2.1-or-later
"""The E2B control plane (the gateway's third listener, docs/e2b.md) driven by the real SDKs from
npm, unmodified: e2b 2.51.0 (POST /v2/sandboxes, POST /v2/sandboxes/{id}/connect), e2b 2.50.0
(POST /sandboxes, POST /sandboxes/{id}/connect) and @e2b/code-interpreter 2.8.0, as a user's
program runs them with E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL set. Then, with plain HTTP,
what the SDKs hide: the statuses and {"code","message"} bodies their error classes are made from,
the key check, the 502 of traffic to a sandbox that is not running, and the E2B API kept apart
from the sidecar's on their two ports. Every sandbox a test makes is killed by the fixture."""
import hashlib
import hmac
import secrets

import pytest

from conftest import BASE_URL, api_key
from e2b_sdk import (CURRENT, ENVD_PORT, JUPYTER_PORT, V1, e2b_key, e2b_request, sandbox_request,
                     sandboxes, timestamp)  # noqa: F401 (sandboxes: a fixture)

# Seconds a deadline may be off: the server's clock between two of its own instants, or the
# client's around the call that set it (one host, one clock).
MARGIN = 2.0
DEFAULT_TIMEOUT = 300
ENVD_VERSION = "0.5.7"

BOTH = [pytest.param(CURRENT, id=f"e2b-{CURRENT}"), pytest.param(V1, id=f"e2b-{V1}")]

# The keys the Python SDK's response models require (a KeyError in the SDK without them): Sandbox
# (create, connect); SandboxDetail (getInfo) and ListedSandbox (list) require the rest too.
SANDBOX_KEYS = {"sandboxID", "templateID", "clientID", "envdVersion"}
DETAIL_KEYS = SANDBOX_KEYS | {"startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state"}


def unknown_id():
    return secrets.token_hex(16)


def deadline(out):
    """endAt of the getInfo a script printed, in seconds since the epoch."""
    return timestamp(out["info"]["endAt"])


def assert_deadline_from_call(out, seconds):
    """endAt is seconds after the call the script timed (before/after, client ms)."""
    end = deadline(out)
    assert out["before"] / 1000 + seconds - MARGIN <= end <= out["after"] / 1000 + seconds + MARGIN, \
        (seconds, out)


def error_name(result):
    """The SDK error class a script's attempt reported (None: it returned)."""
    return (result.get("error") or {}).get("name")


def ids(items):
    return [i["sandboxId"] for i in items]


# ---- through the SDKs


@pytest.mark.parametrize("version", BOTH)
def test_create_then_get_info(sandboxes, version):
    tag = secrets.token_hex(8)
    out = sandboxes.create(version=version, metadata={"scopebox-test": tag, "purpose": "a b&c=d"})
    info = out["info"]
    assert info["sandboxId"] == out["sandboxId"] and len(out["sandboxId"]) >= 8, out
    assert info["templateId"] == "base", info
    assert info["metadata"] == {"scopebox-test": tag, "purpose": "a b&c=d"}, info
    assert info["state"] == "running" and info["envdVersion"] == ENVD_VERSION, info
    started = timestamp(info["startedAt"])
    assert out["before"] / 1000 - MARGIN <= started <= out["after"] / 1000 + MARGIN, out
    # e2b 2.51 sends no timeout when the user gives none (the server's default), 2.50 sends 300.
    assert abs(timestamp(info["endAt"]) - started - DEFAULT_TIMEOUT) <= MARGIN, info


@pytest.mark.parametrize("version", BOTH)
def test_create_with_a_timeout_sets_end_at(sandboxes, version):
    info = sandboxes.create(version=version, timeoutMs=120_000)["info"]
    assert abs(timestamp(info["endAt"]) - timestamp(info["startedAt"]) - 120) <= MARGIN, info


def test_code_interpreter_sandbox_has_its_template(sandboxes):
    out = sandboxes.run("create.mjs", {"package": "@e2b/code-interpreter", "opts": {"timeoutMs": 60_000}})
    assert "error" not in out, out
    assert out["info"]["templateId"] == "code-interpreter-v1" and out["info"]["state"] == "running", out


def test_set_timeout_shortens_and_extends_end_at(sandboxes):
    sid = sandboxes.create()["sandboxId"]
    shorter = sandboxes.run("timeout.mjs", {"id": sid, "timeoutMs": 30_000})
    assert_deadline_from_call(shorter, 30)
    longer = sandboxes.run("timeout.mjs", {"id": sid, "timeoutMs": 600_000})
    assert_deadline_from_call(longer, 600)
    # Milliseconds are rounded up to whole seconds by the SDK: 1500 ms is 2 s.
    rounded = sandboxes.run("timeout.mjs", {"id": sid, "timeoutMs": 1_500})
    assert_deadline_from_call(rounded, 2)
    assert error_name(sandboxes.run("timeout.mjs", {"id": unknown_id(), "timeoutMs": 30_000})) == \
        "SandboxNotFoundError"


@pytest.mark.parametrize("version", BOTH)
def test_connect_only_extends_end_at(sandboxes, version):
    sid = sandboxes.create(timeoutMs=120_000)["sandboxId"]
    before = sandboxes.run("info.mjs", {"id": sid})
    # A timeout that ends before the deadline leaves the deadline alone.
    same = sandboxes.run("connect.mjs", {"id": sid, "timeoutMs": 60_000}, version=version)
    assert same["sandboxId"] == sid and same["running"] is True, same
    assert abs(deadline(same) - deadline(before)) <= 1.0, (before, same)
    # A longer one moves it to now + timeout.
    later = sandboxes.run("connect.mjs", {"id": sid, "timeoutMs": 600_000}, version=version)
    assert_deadline_from_call(later, 600)
    assert later["info"]["startedAt"] == before["info"]["startedAt"], (before, later)


@pytest.mark.parametrize("version", BOTH)
def test_connect_without_a_timeout_gives_the_default(sandboxes, version):
    # 2.50 sends {"timeout": 300}, 2.51 an empty body: the same code gets the same deadline.
    sid = sandboxes.create(timeoutMs=60_000)["sandboxId"]
    out = sandboxes.run("connect.mjs", {"id": sid}, version=version)
    assert_deadline_from_call(out, DEFAULT_TIMEOUT)


@pytest.mark.parametrize("version", BOTH)
def test_connect_to_an_unknown_sandbox_is_not_found(sandboxes, version):
    out = sandboxes.run("connect.mjs", {"id": unknown_id(), "timeoutMs": 60_000}, version=version)
    assert error_name(out) == "SandboxNotFoundError", out


def test_list_filters_by_metadata_and_pages(sandboxes):
    tag = secrets.token_hex(8)
    # The group's value needs the SDK's double encoding to survive (a space, & and =).
    group = {"scopebox-test": tag, "group": "a b&c=d"}
    made = [sandboxes.create(metadata={**group, "n": str(n)}, timeoutMs=120_000)["sandboxId"]
            for n in range(3)]
    other = sandboxes.create(metadata={"scopebox-test": tag, "group": "other"},
                             timeoutMs=120_000)["sandboxId"]

    whole = sandboxes.run("list.mjs", {"query": {"metadata": group}})
    assert "error" not in whole and len(whole["pages"]) == 1 and whole["hasNext"] is False, whole
    assert sorted(ids(whole["pages"][0])) == sorted(made), (made, whole)
    for item in whole["pages"][0]:
        assert item["templateId"] == "base" and item["state"] == "running", item
        assert item["metadata"] == {**group, "n": str(made.index(item["sandboxId"]))}, item

    paged = sandboxes.run("list.mjs", {"query": {"metadata": group}, "limit": 1})
    assert "error" not in paged, paged
    assert [len(p) for p in paged["pages"]] == [1, 1, 1] and paged["hasNext"] is False, paged
    items = [p[0] for p in paged["pages"]]
    assert sorted(ids(items)) == sorted(made), (made, paged)
    # By start time, newest first unless the SDK asks for order "asc" (E2B's OpenAPI).
    started = [timestamp(i["startedAt"]) for i in items]
    assert started == sorted(started, reverse=True), items
    ascending = sandboxes.run("list.mjs", {"query": {"metadata": group}, "limit": 2, "order": "asc"})
    assert [len(p) for p in ascending["pages"]] == [2, 1] and ascending["hasNext"] is False, ascending
    items = [i for p in ascending["pages"] for i in p]
    assert sorted(ids(items)) == sorted(made), (made, ascending)
    started = [timestamp(i["startedAt"]) for i in items]
    assert started == sorted(started), items

    # Pairs are ANDed: n=1 of the tag is one sandbox, and "other" has no n.
    one = sandboxes.run("list.mjs", {"query": {"metadata": {"scopebox-test": tag, "n": "1"}}})
    assert [ids(p) for p in one["pages"]] == [[made[1]]], one
    tagged = {"scopebox-test": tag}
    running = sandboxes.run("list.mjs", {"query": {"metadata": tagged, "state": ["running"]}})
    assert sorted(i for p in running["pages"] for i in ids(p)) == sorted(made + [other]), running
    paused = sandboxes.run("list.mjs", {"query": {"metadata": tagged, "state": ["paused"]}})
    assert [i for p in paused["pages"] for i in ids(p)] == [], paused


def test_kill_ends_the_sandbox(sandboxes):
    tag = secrets.token_hex(8)
    out = sandboxes.run("kill.mjs", {"opts": {"metadata": {"scopebox-test": tag}}})
    assert out["runningBefore"] == {"value": True}, out
    assert out["kill"] == {"value": True} and out["killAgain"] == {"value": False}, out
    assert out["runningAfter"] == {"value": False}, out
    assert error_name(out["infoAfter"]) == "SandboxNotFoundError", out
    listed = sandboxes.run("list.mjs", {"query": {"metadata": {"scopebox-test": tag}}})
    assert listed["pages"] in ([], [[]]), listed


def test_wrong_key_is_an_authentication_error(sandboxes):
    wrong = "e2b_" + secrets.token_hex(20)
    assert error_name(sandboxes.run("create.mjs", {"opts": {"timeoutMs": 60_000}}, key=wrong)) == \
        "AuthenticationError"
    sid = sandboxes.create(timeoutMs=60_000)["sandboxId"]
    assert error_name(sandboxes.run("info.mjs", {"id": sid}, key=wrong)) == "AuthenticationError"
    assert error_name(sandboxes.run("timeout.mjs", {"id": sid, "timeoutMs": 1_000}, key=wrong)) == \
        "AuthenticationError"
    assert error_name(sandboxes.run("list.mjs", {}, key=wrong)) == "AuthenticationError"
    # Nothing of that reached the sandbox: still running, deadline untouched.
    info = sandboxes.run("info.mjs", {"id": sid})["info"]
    assert info["state"] == "running", info
    assert abs(timestamp(info["endAt"]) - timestamp(info["startedAt"]) - 60) <= MARGIN, info


@pytest.mark.parametrize("version", BOTH)
def test_unknown_template_is_a_404(sandboxes, version):
    out = sandboxes.run("create.mjs", {"template": "no-such-template", "opts": {"timeoutMs": 60_000}},
                        version=version)
    # The SDK has no not-found class for create: a SandboxError carrying the status.
    assert out.get("error", {}).get("name") == "SandboxError" and out["error"]["statusCode"] == 404, out
    assert out["created"] == [], out


@pytest.mark.parametrize("how", [
    pytest.param({"opts": {"timeoutMs": 3_000}}, id="create-timeout"),
    pytest.param({"setTimeoutMs": 3_000}, id="set-timeout"),
])
def test_sandbox_ends_at_its_deadline(sandboxes, how):
    out = sandboxes.run("expire.mjs", {**how, "withinMs": 20_000}, timeout=90)
    assert out["first"].get("value", {}).get("state") == "running", out
    assert out["goneAfterMs"] is not None, out
    assert error_name(out["last"]) == "SandboxNotFoundError", out
    assert out["runningAfter"] == {"value": False}, out


# ---- plain HTTP


def assert_error(r, status):
    assert r.status == status, r
    body = r.json
    assert body["code"] == status and isinstance(body["message"], str) and body["message"], r


def test_response_bodies_carry_what_the_sdks_read(sandboxes):
    tag = secrets.token_hex(8)
    made = sandboxes.create_raw({"templateID": "base", "metadata": {"scopebox-test": tag}, "timeout": 60})
    assert SANDBOX_KEYS <= set(made) and made["templateID"] == "base", made
    assert made["envdVersion"] == ENVD_VERSION and made["envdAccessToken"], made
    sid = made["sandboxID"]

    r = e2b_request("GET", f"/sandboxes/{sid}")
    assert r.status == 200 and DETAIL_KEYS <= set(r.json), r
    assert r.json["sandboxID"] == sid and r.json["state"] == "running", r
    assert r.json["metadata"] == {"scopebox-test": tag}, r

    r = e2b_request("GET", "/v2/sandboxes?metadata=" + f"scopebox-test%3D{tag}")
    assert r.status == 200 and [i["sandboxID"] for i in r.json] == [sid], r
    assert DETAIL_KEYS <= set(r.json[0]), r

    # The older dialect: create with "secure" (the SDK's default), answered 201 too.
    v1 = e2b_request("POST", "/sandboxes", {"templateID": "base", "timeout": 60, "secure": True})
    assert v1.status == 201 and SANDBOX_KEYS <= set(v1.json), v1
    sandboxes.created.append(v1.json["sandboxID"])

    # A running sandbox's connect is 200 (201 is for a resumed one), in both dialects.
    for path in (f"/v2/sandboxes/{sid}/connect", f"/sandboxes/{sid}/connect"):
        r = e2b_request("POST", path, {"timeout": 60})
        assert r.status == 200 and r.json["sandboxID"] == sid and SANDBOX_KEYS <= set(r.json), (path, r)

    r = e2b_request("POST", f"/sandboxes/{sid}/timeout", {"timeout": 30})
    assert r.status == 204 and r.body == b"", r


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/sandboxes/{unknown}", None),
    ("DELETE", "/sandboxes/{unknown}", None),
    ("POST", "/sandboxes/{unknown}/timeout", {"timeout": 30}),
    ("POST", "/sandboxes/{unknown}/connect", {"timeout": 30}),
    ("POST", "/v2/sandboxes/{unknown}/connect", {"timeout": 30}),
    ("POST", "/v2/sandboxes", {"templateID": "no-such-template"}),
    ("POST", "/sandboxes", {"templateID": "no-such-template", "timeout": 30, "secure": True}),
])
def test_not_found_is_code_and_message(method, path, body):
    assert_error(e2b_request(method, path.format(unknown=unknown_id()), body), 404)


def wrong_keys():
    raw = api_key()
    return {
        "missing": None,
        "empty": "",
        "other-e2b-key": "e2b_" + secrets.token_hex(len(raw)),
        "e2b-key-truncated": e2b_key()[:-2],
        "e2b-key-longer": e2b_key() + "00",
        "raw-key-flipped": raw[:-1] + ("A" if raw[-1] != "A" else "B"),
        "raw-key-with-e2b-prefix": "e2b_" + raw,
        # The hex is compared as a whole string, like the raw key: its upper case is another key.
        "e2b-key-upper-hex": "e2b_" + raw.encode().hex().upper(),
    }


@pytest.mark.parametrize("which", list(wrong_keys()))
def test_control_plane_refuses_other_keys(sandboxes, which):
    key = wrong_keys()[which]
    sid = sandboxes.create_raw({"templateID": "base", "timeout": 60})["sandboxID"]
    for method, path, body in [("GET", "/v2/sandboxes", None),
                               ("POST", "/v2/sandboxes", {"templateID": "base"}),
                               ("POST", "/sandboxes", {"templateID": "base", "timeout": 30}),
                               ("GET", f"/sandboxes/{sid}", None), ("DELETE", f"/sandboxes/{sid}", None),
                               ("POST", f"/sandboxes/{sid}/timeout", {"timeout": 1})]:
        r = e2b_request(method, path, body, key=key)
        if r.status == 201:
            sandboxes.created.append(r.json["sandboxID"])  # made nonetheless: killed at the end
        assert_error(r, 401)
    # The sandbox was not touched.
    r = e2b_request("GET", f"/sandboxes/{sid}")
    assert r.status == 200 and r.json["state"] == "running", r


def test_control_plane_takes_both_forms_of_the_key():
    for key in (e2b_key(), api_key()):
        r = e2b_request("GET", "/v2/sandboxes", key=key)
        assert r.status == 200 and isinstance(r.json, list), r


# A request of each kind the SDKs send to a sandbox: envd's REST and RPC, the code interpreter's.
SANDBOX_ROUTES = [
    pytest.param(ENVD_PORT, "GET", "/health", None, id="envd-health"),
    pytest.param(ENVD_PORT, "GET", "/files?path=a.txt", None, id="envd-files"),
    pytest.param(ENVD_PORT, "POST", "/filesystem.Filesystem/Stat", {"path": "a.txt"}, id="envd-rpc"),
    pytest.param(JUPYTER_PORT, "POST", "/execute", {"code": "1"}, id="jupyter-execute"),
    pytest.param(JUPYTER_PORT, "GET", "/contexts", None, id="jupyter-contexts"),
]


def envd_token(sandbox_id):
    """What docs/security.md says a sandbox's envdAccessToken is: HMAC-SHA256 of its id under the
    API key. A client without the key can't make one."""
    return hmac.new(api_key().encode(), b"scopebox e2b envd token\n" + sandbox_id.encode(),
                    hashlib.sha256).hexdigest()


@pytest.mark.parametrize("token", [None, "wrong"])
@pytest.mark.parametrize("port, method, path, body", SANDBOX_ROUTES)
def test_traffic_without_the_sandbox_token_is_401(port, method, path, body, token):
    # The token is checked before anything is said about the sandbox, as for the API key.
    token = secrets.token_hex(32) if token else None
    r = sandbox_request(unknown_id(), method, path, port=port, token=token, body=body)
    assert_error(r, 401)


@pytest.mark.parametrize("port, method, path, body", SANDBOX_ROUTES)
def test_traffic_to_an_unknown_sandbox_is_502(port, method, path, body):
    sid = unknown_id()
    r = sandbox_request(sid, method, path, port=port, token=envd_token(sid), body=body)
    assert r.status == 502, r


def test_the_token_is_the_documented_hmac(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    assert made["envdAccessToken"] == envd_token(made["sandboxID"])
    assert made["trafficAccessToken"] != made["envdAccessToken"]


@pytest.mark.parametrize("port, method, path, body", SANDBOX_ROUTES)
def test_traffic_to_a_killed_sandbox_is_502(sandboxes, port, method, path, body):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    assert e2b_request("DELETE", f"/sandboxes/{made['sandboxID']}").status == 204
    for header in ("X-Access-Token", "E2B-Traffic-Access-Token"):
        token = made["envdAccessToken"] if header == "X-Access-Token" else made.get("trafficAccessToken")
        if token is None:
            continue
        r = e2b_request(method, path, body, key=None, headers={
            "E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": str(port), header: token})
        assert r.status == 502, (header, r)


def test_health_answers_while_the_sandbox_runs(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    sid, token = made["sandboxID"], made["envdAccessToken"]
    r = sandbox_request(sid, "GET", "/health", token=token)
    assert r.status == 204, r
    assert e2b_request("DELETE", f"/sandboxes/{sid}").status == 204
    r = sandbox_request(sid, "GET", "/health", token=token)
    assert r.status == 502, r
    assert_error(e2b_request("GET", f"/sandboxes/{sid}"), 404)
    assert_error(e2b_request("DELETE", f"/sandboxes/{sid}"), 404)


def both_keys():
    """Both APIs' credentials at once, so that what answers is the path, not the key."""
    return {"X-API-Key": e2b_key(), "Authorization": f"Bearer {api_key()}"}


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/healthz", None),
    ("POST", "/sessions", {}),
    ("POST", "/exec", {"session_id": "0123456789abcdef0123456789abcdef", "code": "print(1)"}),
    ("POST", "/files/list", {"session_id": "0123456789abcdef0123456789abcdef"}),
    ("GET", "/metrics", None),
])
def test_e2b_port_has_no_sidecar_paths(method, path, body):
    assert_error(e2b_request(method, path, body, key=None, headers=both_keys()), 404)


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v2/sandboxes", {"templateID": "base"}),
    ("POST", "/sandboxes", {"templateID": "base", "timeout": 30}),
    ("GET", "/v2/sandboxes", None),
    ("GET", "/sandboxes/0123456789abcdef0123456789abcdef", None),
])
def test_sidecar_port_has_no_e2b_paths(method, path, body):
    r = e2b_request(method, path, body, key=None, headers=both_keys(), base=BASE_URL)
    assert r.status == 404, r


def test_sidecar_port_takes_no_sandbox_traffic(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    headers = {**both_keys(), "E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": str(ENVD_PORT),
               "X-Access-Token": made["envdAccessToken"]}
    # A path of envd's that the sidecar does not have (/health is the dify API's there).
    r = e2b_request("POST", "/filesystem.Filesystem/Stat", {"path": "a.txt"}, key=None, base=BASE_URL,
                    headers=headers)
    assert r.status == 404, r
