# SPDX-License-Identifier: LGPL-2.1-or-later
"""POST /exec as server-sent events (docs/api.md "Streaming"): chunks as the code produces them, in
order, each with its stream's name, then a "result" event holding exactly the non-streamed body;
the client hanging up cancels the exec; scopeboxctl exec --stream; the example client of docs/."""
import http.client
import importlib.util
import json
import socket
import time
import urllib.parse

import pytest

from conftest import BASE_URL, REPO, api_key, create_session, delete_session, in_system, request, run

spec = importlib.util.spec_from_file_location("scopebox_client", REPO / "docs/examples/client.py")
client_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(client_module)

URL = urllib.parse.urlsplit(BASE_URL)


def client():
    return client_module.Client(BASE_URL, api_key())


def open_stream(body, accept="text/event-stream", key=...):
    """The raw response of a POST /exec with that Accept header; the caller reads and closes it."""
    conn = http.client.HTTPConnection(URL.hostname, URL.port, timeout=120)
    headers = {"Content-Type": "application/json"}
    if accept:
        headers["Accept"] = accept
    if key is ...:
        key = api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", "/exec", json.dumps(body), headers)
    return conn, conn.getresponse()


def events(resp):
    """(event, data) of an event stream until its end."""
    out, event, data = [], None, []
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line == "":
            if data:
                out.append((event, json.loads("\n".join(data))))
            event, data = None, []
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        else:
            raise AssertionError(f"unexpected line {line!r}")
    return out


def streamed(sid, code, **extra):
    conn, resp = open_stream({"session_id": sid, "code": code, "timeout_ms": 30000, **extra})
    try:
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream"
        assert resp.getheader("Cache-Control") == "no-cache"
        evs = events(resp)
    finally:
        conn.close()
    assert evs and evs[-1][0] == "result", evs
    assert all(e in ("stdout", "stderr") for e, _ in evs[:-1]), evs
    return evs


def texts(evs, name):
    return "".join(d["text"] for e, d in evs if e == name)


def merged(evs):
    """[(stream, text)] with consecutive chunks of one stream joined: where a chunk ends depends on
    when the runner read, not on the code's writes."""
    out = []
    for e, d in evs:
        if e not in ("stdout", "stderr"):
            continue
        if out and out[-1][0] == e:
            out[-1] = (e, out[-1][1] + d["text"])
        else:
            out.append((e, d["text"]))
    return out


def read_event(resp):
    """The next (event, data) of an open stream."""
    event, data = None, []
    while True:
        raw = resp.readline()
        assert raw, "the stream ended early"
        line = raw.decode().rstrip("\n")
        if line == "" and data:
            return event, json.loads("\n".join(data))
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])


INTERLEAVED = """import sys, time
for i in range(5):
    print(f"out {i}", flush=True)
    time.sleep(0.05)
    print(f"err {i}", file=sys.stderr, flush=True)
    time.sleep(0.05)
open('/workspace/outputs/s.txt', 'w').write('artifact')
sys.exit(3)
"""


def test_chunks_in_order_and_result_equals_the_plain_result(session):
    evs = streamed(session, INTERLEAVED)
    # Order: the streams alternate as the code wrote them (each write is read before the next).
    assert merged(evs) == [(f"std{s}", f"{s} {i}\n") for i in range(5) for s in ("out", "err")], evs
    result = evs[-1][1]
    plain = run(session, INTERLEAVED)
    assert result == plain
    assert result["exit_code"] == 3 and result["files"][0]["name"] == "s.txt"
    assert texts(evs, "stdout") == result["stdout"] and texts(evs, "stderr") == result["stderr"]


def test_result_event_is_the_plain_body_byte_for_byte(session):
    code = "print('a\\u00e9\\U0001F600\"\\\\')"
    conn, resp = open_stream({"session_id": session, "code": code})
    raw = resp.read()
    conn.close()
    plain = request("POST", "/exec", {"session_id": session, "code": code})
    assert raw.endswith(b"event: result\ndata: " + plain.body + b"\n\n"), raw


def test_selection_accept_and_member(session):
    # Accept alone; "stream": true alone; "stream": false overrides Accept.
    conn, resp = open_stream({"session_id": session, "code": "print(1)"})
    assert resp.getheader("Content-Type") == "text/event-stream"
    conn.close()
    conn, resp = open_stream({"session_id": session, "code": "print(1)", "stream": True}, accept=None)
    assert resp.getheader("Content-Type") == "text/event-stream"
    conn.close()
    conn, resp = open_stream({"session_id": session, "code": "print(1)", "stream": False})
    assert resp.getheader("Content-Type") == "application/json"
    assert resp.read() == b'{"stdout":"1\\n","stderr":"","exit_code":0,"files":[]}'
    conn.close()
    # Accept: */* and q=0 are no request for events.
    for accept in ("*/*", "text/event-stream;q=0"):
        conn, resp = open_stream({"session_id": session, "code": "print(1)"}, accept=accept)
        assert resp.getheader("Content-Type") == "application/json", accept
        conn.close()


@pytest.mark.parametrize("value", ["yes", 1, [], {}])
def test_stream_must_be_a_boolean(session, value):
    r = request("POST", "/exec", {"session_id": session, "code": "print(1)", "stream": value})
    assert r.status == 422, r
    assert r.json["detail"][0]["loc"] == ["body", "stream"]


def test_refusals_before_the_stream_are_plain_json():
    conn, resp = open_stream({"session_id": "0" * 32, "code": "print(1)"})
    assert resp.status == 404 and resp.getheader("Content-Type") == "application/json"
    plain = request("POST", "/exec", {"session_id": "0" * 32, "code": "print(1)"})
    assert resp.read() == plain.body and plain.status == 404
    conn.close()
    conn, resp = open_stream({"session_id": "0" * 32, "code": "print(1)"}, key=None)
    assert resp.status == 401 and resp.getheader("Content-Type") == "application/json"
    conn.close()


def test_chunks_arrive_while_the_code_runs(session):
    # The code prints, then waits for ever: the chunk can only be here because it was streamed.
    conn, resp = open_stream({"session_id": session, "code": "import time\nprint('ready', flush=True)\n"
                                                             "while True: time.sleep(1)", "timeout_ms": 60000})
    assert resp.status == 200
    got = ""
    while got != "ready\n":
        event, data = read_event(resp)
        assert event == "stdout"
        got += data["text"]
    assert request("POST", "/exec/cancel", {"session_id": session}).status == 200
    evs = events(resp)
    conn.close()
    assert [e for e, _ in evs] == ["result"]
    assert evs[0][1]["exit_code"] != 0
    assert evs[0][1]["exit_reason"] == "cancelled" and evs[0][1]["stdout"] == "ready\n"


def test_hanging_up_cancels_the_exec(session):
    conn, resp = open_stream({"session_id": session, "code": "import time\nwhile True:\n print('tick', flush=True)\n"
                                                             " time.sleep(0.1)", "timeout_ms": 120000})
    assert resp.readline() == b"event: stdout\n"
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    # The exec ends soon (long before its timeout): nothing runs, the session takes the next one.
    deadline = time.monotonic() + 20
    while request("POST", "/exec/cancel", {"session_id": session}).status != 409:
        assert time.monotonic() < deadline, "the exec still runs after its client hung up"
        time.sleep(0.2)
    assert run(session, "print('next')")["stdout"] == "next\n"


def test_utf8_cut_between_writes_is_one_character(session):
    code = ("import sys, time\nb = sys.stdout.buffer\n"
            "for part in (b'\\xe2', b'\\x82', b'\\xac!', b'\\xff', b'\\n'):\n"
            "    b.write(part); b.flush(); time.sleep(0.05)\n")
    evs = streamed(session, code)
    assert texts(evs, "stdout") == "\u20ac!\ufffd\n" == evs[-1][1]["stdout"]


def test_frame_lookalike_output_is_text(session):
    # Bytes shaped like a frame header are the code's output, never a frame.
    code = "import sys\nsys.stdout.buffer.write(b'\\x02\\x00\\x00\\x00\\xff\\xff\\x00\\x00zz\\x01')"
    evs = streamed(session, code)
    assert texts(evs, "stdout") == "\x02\x00\x00\x00\ufffd\ufffd\x00\x00zz\x01" == evs[-1][1]["stdout"]
    assert texts(evs, "stderr") == ""


def test_the_code_has_no_descriptor_of_the_stream(session):
    code = ("import os\nfor fd in sorted(os.listdir('/proc/self/fd'), key=int):\n"
            "    try: print(fd, os.readlink(f'/proc/self/fd/{fd}').split(':')[0])\n"
            "    except OSError: pass\n")
    plain = run(session, code)["stdout"]
    evs = streamed(session, code)
    assert evs[-1][1]["stdout"] == plain, (plain, evs[-1][1]["stdout"])
    assert [line.split()[0] for line in plain.splitlines()][:3] == ["0", "1", "2"]


def test_output_beyond_the_cap_is_not_streamed(session):
    # SANDBOX_MAX_OUTPUT_BYTES (32 KiB by default) of each stream are kept, and only they are streamed.
    evs = streamed(session, "import sys\nsys.stdout.write('x' * 200000)\nsys.stderr.write('y' * 50)")
    result = evs[-1][1]
    assert "[truncated, stdout exceeded" in result["stdout"]
    out = texts(evs, "stdout")
    assert out == "x" * 32768 and result["stdout"].startswith(out)
    assert texts(evs, "stderr") == "y" * 50 == result["stderr"]


def test_slow_reader_gets_everything(session):
    # Many small alternating writes while the client does not read: the service holds a bounded
    # amount, the code waits; once the client reads, every kept byte and the result come.
    code = ("import sys\nfor i in range(3000):\n"
            "    sys.stdout.write(f'{i:05d}\\n'); sys.stdout.flush()\n"
            "    sys.stderr.write('e'); sys.stderr.flush()\n")
    conn, resp = open_stream({"session_id": session, "code": code, "timeout_ms": 60000})
    conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    time.sleep(3)
    evs = events(resp)
    conn.close()
    result = evs[-1][1]
    assert evs[-1][0] == "result" and result["exit_code"] == 0
    assert texts(evs, "stdout") == result["stdout"] == "".join(f"{i:05d}\n" for i in range(3000))
    assert texts(evs, "stderr") == result["stderr"] == "e" * 3000


def test_report_and_timeout_in_the_result_event(session):
    evs = streamed(session, "import time\nprint('before', flush=True)\ntime.sleep(30)", timeout_ms=1500, report=True)
    result = evs[-1][1]
    assert result["exit_code"] == 124 and result["exit_reason"] == "timeout"
    assert set(result["resources"]) == {"cpu_ms", "wall_ms", "max_rss_bytes", "written_bytes", "processes"}
    assert texts(evs, "stdout") == "before\n"
    assert "[sandbox] execution exceeded 1.500s and was killed" in result["stderr"]


def test_session_gone_during_the_stream_is_an_error_event():
    sid = create_session()
    conn, resp = open_stream({"session_id": sid, "code": "import time\nprint('x', flush=True)\ntime.sleep(60)",
                              "timeout_ms": 90000})
    assert resp.readline() == b"event: stdout\n"
    assert delete_session(sid, discard=True).status == 200
    evs = events(resp)
    conn.close()
    assert evs[-1][0] == "error", evs
    assert evs[-1][1]["status"] == 404 and "detail" in evs[-1][1], evs


def test_example_client(session):
    c = client()
    assert c.exec(session, "print(6 * 7)")["stdout"] == "42\n"
    assert c.exec(session, "print(1)", report=True)["exit_reason"] == "exited"
    evs = list(c.exec_stream(session, "import sys, time\nprint('a', flush=True)\ntime.sleep(0.1)\n"
                                      "print('b', file=sys.stderr)"))
    assert merged(evs) == [("stdout", "a\n"), ("stderr", "b\n")]
    assert evs[-1][0] == "result" and evs[-1][1]["stdout"] == "a\n"
    assert c.cancel(session) is False
    with pytest.raises(client_module.Error) as e:
        list(c.exec_stream("0" * 32, "print(1)"))
    assert e.value.status == 404
    sid = c.create_session()
    assert c.exec(sid, "print('own')")["stdout"] == "own\n"
    c.delete_session(sid)


def test_scopeboxctl_exec_stream(session):
    code = 'import sys\\nprint("one", flush=True)\\nprint("two", file=sys.stderr)\\nsys.exit(4)\\n'
    r = in_system("sh", "-c", f"printf '{code}' | scopeboxctl exec --stream {session} -")
    assert r.returncode == 4, r
    assert r.stdout == "one\n" and r.stderr == "two\n", r
    r = in_system("sh", "-c", f"printf 'print(1)' | scopeboxctl exec --stream --json {session} -")
    assert r.returncode == 2 or r.returncode == 1, r
    assert "--stream and --json cannot be combined" in r.stderr
