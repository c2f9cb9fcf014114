# SPDX-License-Identifier: LGPL-2.1-or-later
"""@e2b/code-interpreter's runCode against the default install (docs/e2b.md): cells run in the
sandbox's stateful kernel; values, displays, figures and errors come back as E2B's results, stdout
and stderr through the callbacks, in order. Driven by the real SDK from npm (tools/install-e2b-sdk),
unmodified. Ran on whichever cgroup layout the service runs on (tools/sysbox: the VM's hybrid one)."""
import base64
import json

from e2b_sdk import JUPYTER_PORT, e2b_request, sandbox_request, sandboxes  # noqa: F401 (fixture)

CI = "@e2b/code-interpreter"


def run_cells(sandboxes, cells, **extra):
    out = sandboxes.run("runcode.mjs", {"package": CI, "cells": cells, **extra}, timeout=120)
    assert "fatal" not in out, out
    return out


def test_cells_share_their_state_and_give_values(sandboxes):
    out = run_cells(sandboxes, [
        "x = 41",
        "print('hello')\nx + 1",
        "{'a': [1, 2], 'b': None}",
        "'some text'",
        "import sys\nprint('warn', file=sys.stderr)",
        "None",
    ])
    first, second, dct, text, err, none = out["cells"]
    assert first["results"] == [] and first["error"] is None and first["count"] == 1, first
    assert second["text"] == "42" and second["stdout"] == "hello\n" and second["count"] == 2, second
    # print() is one line of output, as a notebook gives it.
    assert ["stdout", "hello\n"] in second["callbacks"], second["callbacks"]
    # The callbacks came as the cell ran: its print before its value.
    kinds = [c[0] for c in second["callbacks"]]
    assert kinds[0] == "stdout" and kinds[-1] == "result", second["callbacks"]
    (r,) = dct["results"]
    assert r["isMainResult"] and r["json"] == {"a": [1, 2], "b": None}, r
    # A string's text without its quotes, as E2B gives it.
    assert text["text"] == "some text", text
    assert err["stderr"] == "warn\n" and err["results"] == [], err
    assert none["results"] == [] and none.get("text") is None, none


def test_an_exception_is_the_cells_error_and_the_kernel_goes_on(sandboxes):
    out = run_cells(sandboxes, ["y = 2", "def f():\n    return 1/0\nf()", "y * 21"])
    _, failed, after = out["cells"]
    e = failed["error"]
    assert e["name"] == "ZeroDivisionError" and e["value"] == "division by zero", failed
    # The cell's own frames, as text: no terminal colours, none of the kernel's frames.
    assert "return 1/0" in e["traceback"] and "\x1b[" not in e["traceback"], e
    assert "kernel.py" not in e["traceback"] and failed["stderr"] == "", failed
    assert ["error", "ZeroDivisionError"] in failed["callbacks"], failed
    assert after["text"] == "42", after


def test_a_cell_over_the_memory_limit_ends_the_interpreter(sandboxes):
    # SANDBOX_MEMORY_LIMIT is 2G by default: the cgroup's OOM kill ends the kernel, the cell's
    # error says so, and the next cell starts a fresh interpreter.
    out = run_cells(sandboxes, ["keep = 1", "b = bytearray(3 << 30)\nb[::4096] = b'x' * len(b[::4096])",
                                "'keep' in globals()"])
    _, hog, after = out["cells"]
    assert hog["error"]["name"] == "KernelDied" and "memory" in hog["error"]["value"], hog
    assert after["text"] == "False" and after["count"] == 1, after


def test_a_client_that_gives_up_interrupts_the_cell(sandboxes):
    # The SDK's timeoutMs: it aborts the request; the cell gets a KeyboardInterrupt, as E2B
    # interrupts it, and the interpreter keeps its state for the next (docs/e2b.md).
    out = run_cells(sandboxes, ["v = 5", {"code": "import time\ntime.sleep(60)\nv = 0", "timeoutMs": 2000},
                                "v + 1"])
    _, slow, after = out["cells"]
    assert slow["error"]["name"] == "TimeoutError", slow
    assert after["text"] == "6" and after["count"] == 3, after


def test_a_cell_that_ignores_its_interrupt_ends_the_interpreter(sandboxes):
    # Past the grace (2 s) the cell is ended as any exec, with its interpreter.
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass"
    out = run_cells(sandboxes, ["v = 5", {"code": stubborn, "timeoutMs": 1500}, "'v' in globals()"])
    _, slow, after = out["cells"]
    assert slow["error"]["name"] == "TimeoutError", slow
    assert after["text"] == "False" and after["count"] == 1, after


def test_figures_and_tables_are_rich_results(sandboxes):
    out = run_cells(sandboxes, [
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
        "plt.figure()\nplt.bar([1, 2], [3, 4])\nNone",
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
    ])
    shown, left_open, table = out["cells"]
    # plt.show(): one PNG, not the main result; a figure left open at the end: one PNG too.
    pngs = [r for r in shown["results"] if r["png"]]
    assert len(pngs) == 1 and not pngs[0]["isMainResult"], shown
    assert len([r for r in left_open["results"] if r["png"]]) == 1, left_open
    (r,) = table["results"]
    assert r["isMainResult"] and r["html"] > 0 and "html" in r["formats"], r


def test_the_png_is_a_png(sandboxes):
    made = sandboxes.create_raw({"templateID": "code-interpreter-v1", "timeout": 60})
    r = sandbox_request(made["sandboxID"], "POST", "/execute", port=JUPYTER_PORT, token=made["envdAccessToken"],
                        body={"code": "import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()"})
    assert r.status == 200, r
    lines = [json.loads(line) for line in r.body.decode().splitlines()]
    assert lines[0] == {"type": "number_of_executions", "execution_count": 1}, lines
    assert lines[-1] == {"type": "end_of_execution"}, lines
    (png,) = [line["png"] for line in lines if line["type"] == "result"]
    assert base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n")


def test_large_results_pass_and_too_large_ones_are_said(sandboxes):
    made = sandboxes.create_raw({"templateID": "code-interpreter-v1", "timeout": 60})
    sid, token = made["sandboxID"], made["envdAccessToken"]

    def execute(code):
        r = sandbox_request(sid, "POST", "/execute", port=JUPYTER_PORT, token=token, body={"code": code})
        assert r.status == 200, r
        return [json.loads(line) for line in r.body.decode().splitlines()]

    # A noisy picture is hundreds of KiB: checked and passed on whole, still a PNG.
    lines = execute("import numpy as np, matplotlib.pyplot as plt\n"
                    "plt.figure(figsize=(12, 12))\nplt.imshow(np.random.rand(400, 400))\nplt.show()")
    (png,) = [x["png"] for x in lines if x["type"] == "result"]
    assert len(png) > 64 * 1024 and base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n"), len(png)
    # Past the gateway's 4 MiB a result is left out, and the cell's stderr says so.
    lines = execute("class Big:\n    def _repr_html_(self):\n        return 'x' * (5 << 20)\n"
                    "display(Big())\nprint('after')")
    assert not [x for x in lines if x["type"] == "result"], lines
    assert {"type": "stdout", "text": "after\n"} == {k: v for k, v in lines[1].items() if k != "timestamp"}, lines
    note = [x["text"] for x in lines if x["type"] == "stderr"]
    assert note == ["[sandbox] 1 result(s) over 4 MiB or past the cell's bound were left out\n"], lines


def test_a_code_written_record_is_output_not_a_result(sandboxes):
    # What the cell prints that looks like a record stays stdout: records have their own pipe.
    forged = json.dumps({"type": "result", "is_main_result": True, "text": "forged"})
    out = run_cells(sandboxes, [f"print({forged!r})"])
    (cell,) = out["cells"]
    assert cell["results"] == [] and cell.get("text") is None and forged in cell["stdout"], cell


def test_contexts_and_restart(sandboxes):
    out = run_cells(sandboxes, ["z = 1"], restart="z")
    assert out["contexts"]["value"] == ["default"], out
    # One interpreter per sandbox: a second context is refused with the reason.
    assert out["newContext"]["error"], out
    # After a restart the state is gone: the next cell is the first of a fresh interpreter.
    assert out["afterRestart"]["value"]["error"] == "NameError", out
    assert out["afterRestart"]["value"]["count"] == 1, out


def test_a_cells_environment_is_its_own(sandboxes):
    show = "import os; print(os.environ.get('A'), os.environ.get('HOME'))"
    out = run_cells(sandboxes, [
        {"code": show, "envs": {"A": "x y", "HOME": "/elsewhere"}},
        show,
        # The cell's variables are set while it runs, and only then, whatever it did to them.
        {"code": "import os; os.environ['A'] = 'changed'; " + show[len("import os; "):], "envs": {"A": "1"}},
        show,
    ])
    cells = out["cells"]
    home = cells[1]["stdout"].split()[1]
    assert cells[0]["stdout"] == "x y /elsewhere\n", out
    assert cells[1]["stdout"] == f"None {home}\n", out
    assert cells[2]["stdout"] == f"changed {home}\n", out
    assert cells[3]["stdout"] == f"None {home}\n", out


def test_the_sandboxs_envs_are_every_cells(sandboxes):
    show = "import os; print(os.environ.get('WIDE'), os.environ.get('B'))"
    out = run_cells(sandboxes, [show, {"code": show, "envs": {"B": "cell"}}, show],
                    opts={"envs": {"WIDE": "sandbox", "B": "sandbox"}})
    assert [c["stdout"] for c in out["cells"]] == ["sandbox sandbox\n", "sandbox cell\n", "sandbox sandbox\n"], out


def test_envs_at_create_are_checked(sandboxes):
    for envs in [{"A=B": "1"}, {"": "1"}, {"A": 1}, {"A": "a\x00b"}, {f"V{i}": "x" for i in range(65)}]:
        r = e2b_request("POST", "/v2/sandboxes", {"templateID": "base", "envVars": envs})
        assert r.status == 400 and r.json["code"] == 400, (envs, r)


def test_a_killed_sandbox_runs_nothing(sandboxes):
    out = run_cells(sandboxes, ["1"])
    assert out["afterKill"]["error"], out


def test_base_sandboxes_have_no_code_interpreter(sandboxes):
    made = sandboxes.create_raw({"templateID": "base", "timeout": 60})
    r = sandbox_request(made["sandboxID"], "POST", "/execute", port=JUPYTER_PORT, token=made["envdAccessToken"],
                        body={"code": "1"})
    assert r.status == 502, r


def test_execute_refuses_what_it_does_not_serve(sandboxes):
    made = sandboxes.create_raw({"templateID": "code-interpreter-v1", "timeout": 60})
    sid, token = made["sandboxID"], made["envdAccessToken"]
    for body, status in [({"code": "1", "language": "javascript"}, 400), ({"code": "1", "context_id": "nope"}, 404),
                         ({"code": 1}, 400), ({"code": "1", "env_vars": {"A=B": "1"}}, 400),
                         ({"code": "1", "env_vars": {"A": 1}}, 400), ({"code": "1", "env_vars": ["A"]}, 400),
                         ({"code": "1", "env_vars": {"A": "a\x00b"}}, 400)]:
        r = sandbox_request(sid, "POST", "/execute", port=JUPYTER_PORT, token=token, body=body)
        assert r.status == status, (body, r)
