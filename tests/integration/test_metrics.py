# SPDX-License-Identifier: LGPL-2.1-or-later
"""GET /metrics: OpenMetrics text behind the API key, parsed with prometheus_client's OpenMetrics
parser; the counters move with what happens: sessions, exec outcomes and durations, kills by reason
(timeout, memory, tasks, blocked syscall), archive bytes. Other tests ran before: only deltas."""
import json
import os
import pathlib
import secrets
import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import create_session, delete_session, in_system, request, run, session  # noqa: F401 (fixture)

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
STORAGE = {"provider": "local", "prefix": "workspaces/"}
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
SIGKILL, SIGSYS = 9, 31


@pytest.fixture(scope="module", autouse=True)
def manager_stays_up():
    """A session held through the module: the manager exits a minute after its last session, and a
    restart between two scrapes would reset its counters under a test's deltas."""
    sid = create_session()
    yield
    delete_session(sid)


def scrape():
    """{(sample name, frozenset of labels): value} and the families, of one valid exposition."""
    r = request("GET", "/metrics")
    assert r.status == 200, r
    assert r.headers["Content-Type"] == CONTENT_TYPE
    text = r.body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, frozenset(s.labels.items())): s.value for f in families.values() for s in f.samples}
    return samples, families


def value(samples, name, **labels):
    """A sample's value; 0 when absent (the manager may have started since, counters with it)."""
    return samples.get((name, frozenset(labels.items())), 0)


def delta(before, after, name, **labels):
    return value(after, name, **labels) - value(before, name, **labels)


def test_requires_the_key():
    for key in (None, "wrong"):
        r = request("GET", "/metrics", key=key)
        assert r.status == 401, r
        assert r.json == {"error": "unauthorized"}
        assert b"scopebox" not in r.body


def test_families_and_types(session):
    run(session, "print(1)")
    samples, families = scrape()
    expected = {
        "scopebox_http_responses": "counter",
        "process_start_time_seconds": "gauge",
        "scopebox_session_manager_up": "gauge",
        "scopebox_gateway_loop_stall_seconds": "histogram",
        "scopebox_gateway_loop_stall_seconds_max": "gauge",
        "scopebox_sessions": "gauge",
        "scopebox_sessions_started": "counter",
        "scopebox_sessions_ended": "counter",
        "scopebox_sessions_reaped": "counter",
        "scopebox_execs_running": "gauge",
        "scopebox_execs_waiting": "gauge",
        "scopebox_session_creates_running": "gauge",
        "scopebox_session_creates_waiting": "gauge",
        "scopebox_dify_runs_running": "gauge",
        "scopebox_dify_runs_waiting": "gauge",
        "scopebox_dify_runs": "counter",
        "scopebox_execs": "counter",
        "scopebox_exec_kills": "counter",
        "scopebox_exec_duration_seconds": "histogram",
        "scopebox_archive_bytes": "counter",
        "scopebox_session_manager_start_time_seconds": "gauge",
    }
    assert {n: families[n].type for n in expected if n in families} == expected
    assert families["scopebox_exec_duration_seconds"].unit == "seconds"
    assert families["scopebox_archive_bytes"].unit == "bytes"
    assert value(samples, "scopebox_session_manager_up") == 1
    assert value(samples, "scopebox_sessions") >= 1
    outcomes = {dict(k[1])["outcome"] for k in samples if k[0] == "scopebox_execs_total"}
    assert outcomes == {"ok", "error", "timeout", "killed", "failed", "rejected", "cancelled"}
    reasons = {dict(k[1])["reason"] for k in samples if k[0] == "scopebox_exec_kills_total"}
    assert reasons == {"timeout", "memory", "tasks", "blocked_syscall", "signal"}
    # Buckets from 10 ms to the exec timeout cap, then +Inf holding the count.
    bounds = [s.labels["le"] for s in families["scopebox_exec_duration_seconds"].samples
              if s.name.endswith("_bucket")]
    assert bounds[0] == "0.01" and bounds[-2] == "600.0" and bounds[-1] == "+Inf", bounds
    assert value(samples, "scopebox_exec_duration_seconds_bucket", le="+Inf") == \
        value(samples, "scopebox_exec_duration_seconds_count")
    # Our own earlier answers are counted, by class.
    assert value(samples, "scopebox_http_responses_total", **{"class": "2xx"}) >= 1
    assert value(samples, "process_start_time_seconds") <= time.time()


def test_event_loop_stalls_are_measured(session):
    """Every dispatch of the gateway's event loop is timed; no assertion on how long they take."""
    run(session, "print(1)")
    samples, families = scrape()
    assert families["scopebox_gateway_loop_stall_seconds"].unit == "seconds"
    longest = value(samples, "scopebox_gateway_loop_stall_seconds_max")
    count = value(samples, "scopebox_gateway_loop_stall_seconds_count")
    assert isinstance(longest, float) and longest > 0
    assert count > 0 and value(samples, "scopebox_gateway_loop_stall_seconds_sum") > 0
    assert value(samples, "scopebox_gateway_loop_stall_seconds_bucket", le="+Inf") == count
    bounds = [s.labels["le"] for s in families["scopebox_gateway_loop_stall_seconds"].samples
              if s.name.endswith("_bucket")]
    assert bounds[0] == "0.0001" and bounds[-2] == "10.0" and bounds[-1] == "+Inf", bounds
    # The longest dispatch lies in the first bucket that holds them all.
    for b in bounds[:-1]:
        if value(samples, "scopebox_gateway_loop_stall_seconds_bucket", le=b) == count:
            assert longest <= float(b)
            break
    print(f"\nlongest event-loop dispatch since the gateway started: {longest * 1000:.3f} ms "
          f"({count:.0f} dispatches, mean {value(samples, 'scopebox_gateway_loop_stall_seconds_sum') / count * 1e6:.1f} µs)")
    after, _ = scrape()
    assert value(after, "scopebox_gateway_loop_stall_seconds_count") > count


def test_head_has_the_type_and_no_body():
    r = request("HEAD", "/metrics")
    assert r.status == 200 and r.body == b"", r
    assert r.headers["Content-Type"] == CONTENT_TYPE


def test_sessions_gauge_and_counters():
    before, _ = scrape()
    sid = create_session()
    try:
        mid, _ = scrape()
        assert delta(before, mid, "scopebox_sessions") == 1
        assert delta(before, mid, "scopebox_sessions_started_total") == 1
    finally:
        assert delete_session(sid).json == {"ok": True}
    after, _ = scrape()
    assert delta(mid, after, "scopebox_sessions") == -1
    assert delta(mid, after, "scopebox_sessions_ended_total") == 1


def test_ok_and_error_execs_and_the_histogram(session):
    before, _ = scrape()
    assert run(session, "print(1)")["stdout"] == "1\n"
    assert run(session, "raise SystemExit(3)")["exit_code"] == 3
    after, _ = scrape()
    assert delta(before, after, "scopebox_execs_total", outcome="ok") == 1
    assert delta(before, after, "scopebox_execs_total", outcome="error") == 1
    assert delta(before, after, "scopebox_exec_duration_seconds_count") == 2
    assert delta(before, after, "scopebox_exec_duration_seconds_bucket", le="+Inf") == 2
    # print(1) takes less than ten minutes.
    assert delta(before, after, "scopebox_exec_duration_seconds_bucket", le="600.0") == 2
    assert delta(before, after, "scopebox_exec_duration_seconds_sum") > 0
    assert sum(delta(before, after, "scopebox_exec_kills_total", reason=r)
               for r in ("timeout", "memory", "tasks", "blocked_syscall", "signal")) == 0


def kills(before, after):
    return {r: delta(before, after, "scopebox_exec_kills_total", reason=r)
            for r in ("timeout", "memory", "tasks", "blocked_syscall", "signal")}


def test_timeout_is_a_timeout_kill(session):
    before, _ = scrape()
    res = run(session, "import time\ntime.sleep(30)", timeout_ms=1000)
    assert res["exit_code"] == 124, res
    after, _ = scrape()
    assert delta(before, after, "scopebox_execs_total", outcome="timeout") == 1
    assert kills(before, after) == {"timeout": 1, "memory": 0, "tasks": 0, "blocked_syscall": 0, "signal": 0}


# Memory that only the scope's MemoryMax can stop. A chain of large allocations
# (bytearray(...) * (64 << 20)) can fail first, as MemoryError, wherever mmap() refuses a new block
# (overcommit accounting, a data or address-space rlimit) before the pages reach the limit. Here
# one reservation far beyond it is made up front (MAP_NORESERVE: no commit charge under the default
# heuristic overcommit); after it only page faults remain, and those end in the OOM killer alone.
# Should the reservation itself be refused, the exec fails with OSError, and so does the test.
OOM_BOMB = """import mmap
MAP_NORESERVE = 0x4000  # <asm-generic/mman-common.h>, x86-64 and arm64
m = mmap.mmap(-1, 1 << 40, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE)
block = b"\\1" * (1 << 20)
for off in range(0, len(m), len(block)):
    m[off:off + len(block)] = block
"""


def test_oom_kill_is_a_memory_kill(session):
    before, _ = scrape()
    res = run(session, OOM_BOMB, timeout_ms=120000)
    after, _ = scrape()
    assert res["exit_code"] == 128 + SIGKILL, res
    assert delta(before, after, "scopebox_execs_total", outcome="killed") == 1
    assert kills(before, after) == {"timeout": 0, "memory": 1, "tasks": 0, "blocked_syscall": 0, "signal": 0}


def test_tasks_limit_is_a_tasks_kill(session):
    before, _ = scrape()
    # Threads are tasks: the scope's TasksMax refuses one, the code gives up.
    res = run(session, "import threading\nev = threading.Event()\nwhile True:\n"
                       "    threading.Thread(target=ev.wait, daemon=True).start()\n", timeout_ms=60000)
    assert res["exit_code"] == 1 and "can't start new thread" in res["stderr"], res
    after, _ = scrape()
    assert delta(before, after, "scopebox_execs_total", outcome="error") == 1
    assert kills(before, after) == {"timeout": 0, "memory": 0, "tasks": 1, "blocked_syscall": 0, "signal": 0}


def test_kill_list_call_is_a_blocked_syscall_kill(session):
    before, _ = scrape()
    res = run(session, LIBC + "libc.syscall(169, 0, 0, 0, 0)\n")  # reboot
    assert res["exit_code"] == 128 + SIGSYS, res
    after, _ = scrape()
    assert delta(before, after, "scopebox_execs_total", outcome="killed") == 1
    assert kills(before, after) == {"timeout": 0, "memory": 0, "tasks": 0, "blocked_syscall": 1, "signal": 0}


def test_other_signal_is_a_signal_kill(session):
    before, _ = scrape()
    res = run(session, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert res["exit_code"] == 128 + 15, res
    after, _ = scrape()
    assert kills(before, after) == {"timeout": 0, "memory": 0, "tasks": 0, "blocked_syscall": 0, "signal": 1}


def test_archive_bytes_written_and_restored():
    stem = f"metrics_{time.time_ns()}"
    before, _ = scrape()
    sid = create_session(archive_key=stem, storage=STORAGE)
    run(sid, "import os\nopen('/workspace/data.bin', 'wb').write(os.urandom(100000))\n")
    assert delete_session(sid).json == {"ok": True, "archive": "stored"}
    mid, _ = scrape()
    written = delta(before, mid, "scopebox_archive_bytes_total", direction="written")
    # Random bytes don't compress: the archive holds them, and not much more.
    assert 100000 < written < 200000, written
    assert delta(before, mid, "scopebox_archive_bytes_total", direction="restored") == 0

    sid = create_session(archive_key=stem, storage=STORAGE)
    try:
        after, _ = scrape()
        assert delta(mid, after, "scopebox_archive_bytes_total", direction="restored") == written
    finally:
        delete_session(sid, discard=True, archive_key=stem, storage=STORAGE)


def doctor_check(name):
    r = in_system("scopeboxctl", "--json", "doctor")
    check = {c["name"]: c for c in json.loads(r.stdout)["checks"]}[name]
    return check["state"], check["detail"]


def restart_gateway():
    in_system("systemctl", "restart", "scopebox-gateway.service", check=True)
    assert request("GET", "/healthz").status == 200


def test_scrape_key_opens_metrics_and_nothing_else():
    """/etc/credstore/scopebox-metrics-key (LoadCredential=scopebox-metrics-key) gives a scraper a
    key of its own: /metrics takes it, no other endpoint does, and the API key still works."""
    store = pathlib.Path("/etc/credstore")
    created_store = not store.exists()
    path = store / "scopebox-metrics-key"
    assert not path.exists()
    assert doctor_check("metrics-key") == ("ok", "not configured: GET /metrics takes the API key")
    scrape_key = secrets.token_urlsafe(32)
    store.mkdir(mode=0o700, exist_ok=True)
    try:
        # The same as the API key: doctor says the gateway would refuse it.
        path.write_text(pathlib.Path("/etc/scopebox/api-key").read_text())
        path.chmod(0o600)
        state, detail = doctor_check("metrics-key")
        assert state == "fail" and "equals the API key" in detail, detail
        path.unlink()

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(scrape_key + "\n")
        state, detail = doctor_check("metrics-key")
        assert state == "ok" and detail.endswith("opens GET /metrics only"), detail
        restart_gateway()
        r = request("GET", "/metrics", key=scrape_key)
        assert r.status == 200 and r.body.decode().endswith("# EOF\n"), r
        assert request("GET", "/metrics").status == 200
        for method, target, body in (("POST", "/sessions", {}), ("POST", "/exec", {"session_id": "0" * 32, "code": "1"}),
                                     ("POST", "/storage/gc", {})):
            r = request(method, target, body, key=scrape_key)
            assert r.status == 401, (target, r)
        r = request("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)"}, key=None,
                    headers={"X-Api-Key": scrape_key})
        assert r.status == 401, r
    finally:
        path.unlink(missing_ok=True)
        if created_store:
            store.rmdir()
        restart_gateway()
    # Without the credential the scrape key is nothing again.
    assert request("GET", "/metrics", key=scrape_key).status == 401
