"""The pool of run sessions (SANDBOX_DIFY_POOL_SIZE, docs/dify.md): sessions started in advance for
dify runs, each used by exactly one run. Runs stay stateless, a pooled session serves runs with and
without a network alike, and the pool refills after a run takes one of it."""
import json
import secrets
import time

from conftest import in_system, manager_run_sandboxes, manager_sessions
import test_dify_runs as runs

POOL_SIZE = 2  # the default, at most MAX_WORKERS (4)


def pooled():
    """The ready pooled sessions: ephemeral, never used."""
    return {sid for sid, p in manager_run_sandboxes().items()
            if p.get("pooled") and p["state"] == "running" and p["ephemeral"] and p["execs"] == 0}


def wait_for_pool(n=POOL_SIZE, timeout=30):
    deadline = time.monotonic() + timeout
    ready = pooled()
    while len(ready) < n and time.monotonic() < deadline:
        time.sleep(0.1)
        ready = pooled()
    assert len(ready) >= n, (ready, manager_run_sandboxes())
    return ready


def run_traced(code, **extra):
    """A run, and whether the journal says it took a pooled session."""
    trace = secrets.token_hex(16)
    data = runs.ok_data(*runs.dify_run(code, headers={"traceparent": f"00-{trace}-{secrets.token_hex(8)}-01"},
                                       **extra))
    entries = []
    for _ in range(30):
        out = in_system("journalctl", "-o", "json", f"SCOPEBOX_TRACE_ID={trace}").stdout
        entries = [json.loads(line) for line in out.splitlines() if line.strip()]
        finished = [e["MESSAGE"] for e in entries if "finished" in e.get("MESSAGE", "")]
        if finished:
            return data, "in pooled session" in finished[0]
        time.sleep(0.2)
    raise AssertionError(entries)


def test_the_pool_refills_after_a_run_takes_one():
    runs.ok_data(*runs.dify_run("print(1)"))  # the first run fills the pool, if it was cold
    before = wait_for_pool()
    assert len(before) <= POOL_SIZE, before
    data, from_pool = run_traced("print(1)")
    assert data["stdout"] == "1\n" and from_pool
    after = wait_for_pool()
    taken = before - after
    assert len(taken) == 1 and len(after - before) == 1, (before, after)
    # The run's session is released after its one run, as any run's, and never listed as a session.
    deadline = time.monotonic() + 10
    while taken & set(manager_run_sandboxes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not taken & set(manager_run_sandboxes())
    assert all(p["ephemeral"] for sid, p in manager_run_sandboxes().items() if sid in after)
    assert not (before | after) & set(manager_sessions())


STATE_LEFT = """\
import os, json, sys
open('/tmp/left-by-a-run', 'w').write('x')
os.environ['LEFT_BY_A_RUN'] = '1'
json.left_by_a_run = True
sys.modules['left_by_a_run'] = json
print(os.getpid())
"""

STATE_SEEN = """\
import os, json, sys
print(os.path.exists('/tmp/left-by-a-run'), os.environ.get('LEFT_BY_A_RUN'),
      getattr(json, 'left_by_a_run', None), 'left_by_a_run' in sys.modules)
"""


def test_consecutive_runs_share_no_state():
    runs.ok_data(*runs.dify_run("print(1)"))
    wait_for_pool()
    served = []
    for _ in range(3):
        _, a = run_traced(STATE_LEFT)
        data, b = run_traced(STATE_SEEN)
        assert data["stdout"] == "False None None False\n", data
        served += [a, b]
        wait_for_pool()
    print("runs served by the pool:", served.count(True), "of", len(served))
    assert all(served), served


INET = """\
import os, socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    print('inet', open('/etc/resolv.conf').read().split()[:2])
except OSError as e:
    print(e.errno)
"""


def test_a_pooled_session_serves_runs_with_and_without_a_network():
    # ENABLE_NETWORK is on by default: the request decides, per run, also for a pooled session.
    runs.ok_data(*runs.dify_run("print(1)"))
    for network, expected in ((True, "inet ['nameserver', '10.0.2.3']\n"), (False, "97\n"),
                              (True, "inet ['nameserver', '10.0.2.3']\n"), (False, "97\n")):
        wait_for_pool()
        data, from_pool = run_traced(INET, enable_network=network)
        assert (data["stdout"], from_pool) == (expected, True), (network, data)


def test_no_pool_when_it_is_off():
    with runs.dify_environment(SANDBOX_DIFY_POOL_SIZE=0):
        for _ in range(2):
            data, from_pool = run_traced("print(1)")
            assert data["stdout"] == "1\n" and not from_pool
        time.sleep(0.5)
        assert not {sid for sid, p in manager_run_sandboxes().items() if p.get("pooled")}
