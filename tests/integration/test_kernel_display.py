# SPDX-License-Identifier: LGPL-2.1-or-later
"""Display cells (docs/api.md "Display records", issue 35): a stateful cell run with the manager's
Exec option "display" gives its values, displays, figures and error as JSON records on stream 3 of
its output stream, while stdout and stderr stay on streams 1 and 2. Called on the manager's D-Bus
API (the gateway's E2B endpoint is its one client), from inside the system that runs it."""
import base64
import json

from conftest import create_session, delete_session, run, system_python
from test_stateful import kernel  # noqa: F401 (the fixture: a stateful session)

# Runs each cell of argv[2] (a JSON list of [code, options]) with Exec on session argv[1], reading
# the stream pipe while it runs; prints, per cell, its frames (stream, base64 data) and its answer
# or its D-Bus error name.
EXEC = r"""
import base64, json, os, select, sys, threading
import dbus

bus = dbus.SystemBus()
manager = dbus.Interface(bus.get_object("io.scopebox.SessionManager1", "/io/scopebox/SessionManager1"),
                         "io.scopebox.SessionManager1")
sid, cells = sys.argv[1], json.loads(sys.argv[2])
out = []
for code, opts in cells:
    fd = os.memfd_create("code", os.MFD_ALLOW_SEALING)
    os.write(fd, code.encode())
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    r, w = os.pipe()
    options = {"timeout_ms": dbus.UInt64(60000)}
    if opts.get("stream", True):
        options["stream"] = dbus.types.UnixFd(w)
    if "display" in opts:
        options["display"] = dbus.Boolean(opts["display"])
    os.close(w)
    data = bytearray()
    done = threading.Event()

    def reader():
        os.set_blocking(r, False)
        while True:
            ready, _, _ = select.select([r], [], [], 0.05)
            if ready:
                try:
                    k = os.read(r, 1 << 16)
                except BlockingIOError:
                    continue
                if not k:
                    return
                data.extend(k)
            elif done.is_set():
                return

    t = threading.Thread(target=reader)
    t.start()
    res = {}
    try:
        reply = manager.Exec(sid, dbus.types.UnixFd(fd), dbus.Dictionary(options, signature="sv"), timeout=120)
        exit_code, out_size, err_size = int(reply[0]), int(reply[1]), int(reply[2])
        dfd = reply[5].take()
        body = os.pread(dfd, out_size + err_size, 0)
        res = {"exit_code": exit_code, "stdout": body[:out_size].decode(), "stderr": body[out_size:].decode()}
    except dbus.exceptions.DBusException as e:
        res = {"error": e.get_dbus_name()}
    done.set()
    t.join()
    os.close(r)
    os.close(fd)
    frames, i = [], 0
    while i < len(data):
        stream, size = data[i], int.from_bytes(data[i + 4:i + 8], sys.byteorder)
        assert data[i + 1:i + 4] == b"\0\0\0" and 0 < size <= 65536, data[i:i + 8]
        frames.append([stream, base64.b64encode(bytes(data[i + 8:i + 8 + size])).decode()])
        i += 8 + size
    assert i == len(data)
    res["frames"] = frames
    out.append(res)
print(json.dumps(out))
"""


def execs(sid, *cells):
    """Each cell (code, or (code, options)) run in turn: its answer and its frames, put together
    per stream (1, 2, 3) and as the order of (stream, bytes) runs."""
    cells = [c if isinstance(c, tuple) else (c, {"display": True}) for c in cells]
    results = json.loads(system_python(EXEC, sid, json.dumps(cells), timeout=300))
    for res in results:
        streams, order = {1: b"", 2: b"", 3: b""}, []
        for stream, data in res.pop("frames"):
            data = base64.b64decode(data)
            assert stream in (1, 2, 3), stream
            streams[stream] += data
            if order and order[-1][0] == stream:
                order[-1] = (stream, order[-1][1] + data)
            else:
                order.append((stream, data))
        res["streams"], res["order"] = streams, order
        # Records are whole lines, each one JSON object.
        raw = streams[3]
        assert raw == b"" or raw.endswith(b"\n"), raw[-200:]
        res["records"] = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    return results


def results(res):
    return [r for r in res["records"] if r["type"] == "result"]


def test_values_and_the_execution_count(kernel):
    a, b, c, d = execs(kernel, "x = 41", "print('hi')\nx + 1", "{'a': [1, 2], 'b': None}", "'text'")
    assert a["records"] == [{"type": "number_of_executions", "execution_count": 1}], a
    assert a["exit_code"] == 0 and a["streams"][1] == b"" and a["stderr"] == ""
    assert b["records"] == [{"type": "number_of_executions", "execution_count": 2},
                            {"type": "result", "is_main_result": True, "text": "42"}], b
    # print() output stays on stdout, after the count and before the value.
    assert b["streams"][1] == b"hi\n" and b["stdout"] == "hi\n"
    assert [s for s, _ in b["order"]] == [3, 1, 3], b["order"]
    assert results(c) == [{"type": "result", "is_main_result": True, "json": {"a": [1, 2], "b": None},
                           "text": "{'a': [1, 2], 'b': None}"}], c
    # IPython's repr, quotes and all: the SDK takes them off.
    # A string's text without its quotes, as E2B's server gives it.
    assert results(d) == [{"type": "result", "is_main_result": True, "text": "text"}], d
    assert d["records"][0]["execution_count"] == 4


def test_display_calls_and_order(kernel):
    (res,) = execs(kernel, "print('a')\ndisplay(1)\nprint('b')\ndisplay({'k': 2}, 'c')\nNone")
    assert res["exit_code"] == 0, res
    assert results(res) == [
        {"type": "result", "is_main_result": False, "text": "1"},
        {"type": "result", "is_main_result": False, "text": "{'k': 2}", "json": {"k": 2}},
        {"type": "result", "is_main_result": False, "text": "c"},
    ], res
    # Each in its turn with what the cell printed around it.
    assert [s for s, _ in res["order"]] == [3, 1, 3, 1, 3], res["order"]
    assert res["order"][1][1] == b"a\n" and res["order"][3][1] == b"b\n"
    assert res["stdout"] == "a\nb\n"


def test_an_exception_is_an_error_record(kernel):
    a, b = execs(kernel, "y = 5\ndef f():\n    return 1/0\nf()", "print(y)")
    assert a["exit_code"] == 1, a
    # In display mode the traceback is not also on stderr.
    assert a["stderr"] == "" and a["streams"][2] == b""
    (err,) = [r for r in a["records"] if r["type"] == "error"]
    assert err["name"] == "ZeroDivisionError" and err["value"] == "division by zero", err
    tb = err["traceback"]
    assert tb.startswith("Traceback (most recent call last):\n") and tb.endswith("ZeroDivisionError: division by zero\n")
    assert 'File "<cell 1>", line 4' in tb and 'line 3, in f' in tb
    assert "kernel.py" not in tb and "\x1b[" not in tb
    # The kernel goes on, with what the cell had defined.
    assert b["stdout"] == "5\n" and b["exit_code"] == 0


def test_syntax_error_and_system_exit(kernel):
    a, b = execs(kernel, "x = (", "import sys\nsys.exit(3)")
    assert a["exit_code"] == 1 and a["stderr"] == ""
    (err,) = [r for r in a["records"] if r["type"] == "error"]
    assert err["name"] == "SyntaxError" and "kernel.py" not in err["traceback"], err
    # SystemExit is what it always was: its code, no error record.
    assert b["exit_code"] == 3 and [r["type"] for r in b["records"]] == ["number_of_executions"], b


def test_pandas_dataframe_is_html(kernel):
    (res,) = execs(kernel, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert res["exit_code"] == 0, res
    (r,) = results(res)
    assert r["is_main_result"] is True
    assert r["html"].lstrip().startswith("<div>") and "<table" in r["html"] and "dataframe" in r["html"]
    assert r["text"].split() == ["a", "b", "0", "1", "x", "1", "2", "y"]


def png(record):
    data = base64.b64decode(record["png"], validate=True)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and "\n" not in record["png"]
    return data


def test_matplotlib_figures_once_each(kernel):
    shown, left_open, then = execs(
        kernel,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\nprint('after')",
        "fig = plt.figure()\nplt.plot([3, 2, 1])\nNone",
        "print(plt.get_fignums())")
    # plt.show(): one PNG, then the figure is closed, not shown again at the end.
    (r,) = results(shown)
    assert r["is_main_result"] is False and r["text"].startswith("<Figure size") and png(r)
    assert shown["stdout"] == "after\n" and [s for s, _ in shown["order"]] == [3, 1], shown["order"]
    # A figure left open: one PNG at the end of the cell.
    (r,) = results(left_open)
    assert r["is_main_result"] is False and png(r)
    # And closed: the next cell has none open.
    assert then["stdout"] == "[]\n", then


def test_a_figure_as_the_value_is_shown_once(kernel):
    (res,) = execs(kernel, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1])\nfig")
    (r,) = results(res)
    assert r["is_main_result"] is True and png(r) and r["text"].startswith("<Figure size"), res


def test_invalid_uses(kernel):
    session = create_session()
    try:
        # Display on a stateless session, and without a stream.
        (a,) = execs(session, ("print(1)", {"display": True}))
        (b,) = execs(kernel, ("print(1)", {"display": True, "stream": False}))
    finally:
        delete_session(session)
    assert a["error"] == b["error"] == "org.freedesktop.DBus.Error.InvalidArgs", (a, b)
    # The kernel did not run it.
    (c,) = execs(kernel, ("print(2)", {"display": False}))
    assert c["stdout"] == "2\n" and c["exit_code"] == 0


def test_without_display_nothing_changes(kernel):
    a, b, c = execs(kernel, ("x = 1\nx", {}), ("1/0", {"display": False}), ("display(1)", {}))
    assert a["exit_code"] == 0 and a["streams"] == {1: b"", 2: b"", 3: b""}, a
    assert b["exit_code"] == 1 and b["streams"][3] == b""
    assert b["stderr"].startswith("Traceback (most recent call last):\n") and b["stderr"].endswith(
        "ZeroDivisionError: division by zero\n")
    assert b["streams"][2].decode() == b["stderr"]
    # No display() outside a display cell, as before.
    assert c["exit_code"] == 1 and "NameError: name 'display' is not defined" in c["stderr"], c
    # And the same through the HTTP API.
    res = run(kernel, "x + 1")
    assert res["stdout"] == "" and res["exit_code"] == 0 and res["kernel"] == "running"


def test_records_over_the_bound_are_left_out_whole(kernel):
    # 17 MiB of text: over the 16 MiB a record may have.
    (res,) = execs(kernel, "'x' * (17 << 20)\n", "print(1)")[:1]
    assert res["exit_code"] == 0
    assert [r["type"] for r in res["records"]] == ["number_of_executions"], res["records"][:2]
    assert "[sandbox] a result record over 16 MiB was left out\n" in res["stderr"]
    assert res["streams"][2].decode() == res["stderr"]
    # Past 32 MiB in all, every record that follows is left out, whole.
    (res,) = execs(kernel, "for i in range(40):\n    display('x' * (1 << 20))\nprint('done')")
    assert res["exit_code"] == 0 and res["stdout"] == "done\n", res["stderr"]
    kept = results(res)
    assert 25 <= len(kept) < 32 and all(r["text"] == "x" * (1 << 20) for r in kept)
    assert len(res["streams"][3]) <= 32 << 20
    assert res["stderr"] == "[sandbox] result records past 32 MiB in all were left out\n", res["stderr"]


# The cell's own code can write to its records pipe: the gateway reads what comes as hostile, and
# still only whole lines come.
FORGE = """
import fcntl, os, stat
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    if fd > 2 and stat.S_ISFIFO(st.st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
        os.write(fd, b'{"type": "result", "text": "forged"}\\n{"unfinished')
"""


def test_an_unfinished_record_is_left_out(kernel):
    (res,) = execs(kernel, FORGE)
    assert res["exit_code"] == 0, res
    assert res["records"][1:] == [{"type": "result", "text": "forged"}], res["records"]
    assert res["stderr"] == "[sandbox] an unfinished result record was left out\n", res
