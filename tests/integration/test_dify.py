# SPDX-License-Identifier: LGPL-2.1-or-later
"""The dify-sandbox API as Dify and dify-sandbox's own integration tests see it, black-box over HTTP
on 127.0.0.1:8194: routes, X-Api-Key, the envelope and its error codes, upstream's error
composition, MAX_REQUESTS, WORKER_TIMEOUT, preload, the dependency resources, the trace context in
the gateway's journal, and every scenario of dify-sandbox's tests/integration_tests (Python and
Node.js features, malicious code, the large-output template)."""
import base64
import concurrent.futures
import json
import re
import secrets
import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import BASE_URL, Response, api_key, in_system
from test_dify_runs import DIFY_URL, dify_environment

ERROR_401 = b""


def call(method, path, body=None, key=..., headers=None, raw=None, base=DIFY_URL, timeout=120):
    """One request to the dify-sandbox API. body is sent as JSON (Content-Type: application/json,
    like Dify's httpx client) unless raw bytes are given; key=... is the configured key in
    X-Api-Key, None none."""
    hdrs = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    if key is ...:
        key = api_key()
    if key is not None:
        hdrs.setdefault("X-Api-Key", key)
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, r.read(), r.headers)
    except urllib.error.HTTPError as e:
        return Response(e.code, e.read(), e.headers)


def run(code, language="python3", **extra):
    """A run that the service accepted: its data ({stdout, stderr, error, exit_code})."""
    r = call("POST", "/v1/sandbox/run", {"language": language, "code": code, **extra})
    assert r.status == 200 and r.json["code"] == 0 and r.json["message"] == "success", r
    data = r.json["data"]
    assert set(data) == {"stdout", "stderr", "error", "exit_code"}, data
    return data


def refused(r, status, code, message):
    return r.status == status and r.json == {"code": code, "message": message, "data": None}


def clean(data, stdout):
    """Upstream's checks of a good run: the output, nothing on stderr, no error."""
    return data["stdout"] == stdout and data["stderr"] == "" and data["error"] == "" and data["exit_code"] == 0


# ---- the HTTP surface ----

def test_health_is_the_json_string_ok_without_a_key():
    for base in (DIFY_URL, BASE_URL):
        r = call("GET", "/health", key=None, base=base)
        assert (r.status, r.body) == (200, b'"ok"'), r
        assert r.headers["Content-Type"].startswith("application/json")
    assert call("GET", "/health", key="wrong").status == 200


def test_both_apis_answer_on_both_ports():
    # The sidecar's health on Dify's port, a dify run on the sidecar's.
    r = call("GET", "/healthz", key=None)
    assert r.status == 200 and r.json["ok"] is True, r
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(6 * 7)"}, base=BASE_URL)
    assert r.status == 200 and r.json["data"]["stdout"] == "42\n", r


DIFY_ROUTES = [
    ("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)"}),
    ("GET", "/v1/sandbox/dependencies?language=python3", None),
    ("POST", "/v1/sandbox/dependencies/update", {"language": "python3"}),
    ("GET", "/v1/sandbox/dependencies/refresh?language=python3", None),
]


@pytest.mark.parametrize("method,path,body", DIFY_ROUTES, ids=[p.split("?")[0] for _, p, _ in DIFY_ROUTES])
def test_wrong_or_missing_key_is_401_with_an_empty_body(method, path, body):
    key = api_key()
    for name, hdrs in {
        "missing": {},
        "wrong": {"X-Api-Key": "wrong"},
        "prefix": {"X-Api-Key": key[:-1]},
        "longer": {"X-Api-Key": key + "x"},
        "bearer-form": {"X-Api-Key": f"Bearer {key}"},
        # The sidecar's credential is no key for this API.
        "authorization": {"Authorization": f"Bearer {key}"},
    }.items():
        r = call(method, path, body, key=None, headers=hdrs)
        assert (r.status, r.body) == (401, ERROR_401), (name, r)
        assert "Content-Type" not in r.headers, (name, r.headers)
    r = call(method, path, body)
    assert r.status == 200, r


def test_the_sidecar_api_does_not_take_x_api_key():
    r = call("POST", "/sessions", {}, base=BASE_URL)
    assert r.status == 401 and r.json == {"error": "unauthorized"}, r


def test_unsupported_language_is_http_400():
    for language in ("python", "python2", "Python3", "go", "javascript"):
        r = call("POST", "/v1/sandbox/run", {"language": language, "code": "print(1)"})
        assert refused(r, 400, -400, "unsupported language"), (language, r)
    # Even when it also asks for the network: the language is checked first.
    r = call("POST", "/v1/sandbox/run", {"language": "ruby", "code": "1", "enable_network": True})
    assert refused(r, 400, -400, "unsupported language"), r


@pytest.mark.parametrize("raw,message", [
    (b'{"language"', "invalid JSON body"),
    (b"", "request body is empty"),
    (b"[1]", "the JSON body must be an object"),
    (b"{}", "language is required"),
    (b'{"language":"python3"}', "code is required"),
    (b'{"language":"python3","code":""}', "code is required"),
    (b'{"language":"python3","code":7}', "code must be a string"),
    (b'{"language":"python3","code":"1","enable_network":"yes"}', "enable_network must be a boolean"),
], ids=["syntax", "empty", "array", "no-language", "no-code", "empty-code", "code-type", "flag-type"])
def test_bind_errors_under_application_json_are_400(raw, message):
    r = call("POST", "/v1/sandbox/run", raw=raw, headers={"Content-Type": "application/json"})
    assert refused(r, 400, -400, message), r


def test_bind_errors_under_other_content_types_keep_http_200():
    # gin's other binders: the error only in the body, like upstream.
    r = call("POST", "/v1/sandbox/run", raw=b'{"language":"python3","code":7}',
             headers={"Content-Type": "application/json; charset=utf-8"})
    assert refused(r, 200, -400, "code must be a string"), r
    r = call("POST", "/v1/sandbox/run", raw=b'{"language":"python3","code":"print(1)"}',
             headers={"Content-Type": "text/plain"})
    assert refused(r, 200, -400, "language is required"), r


def test_json_with_a_charset_and_forms_bind_too():
    r = call("POST", "/v1/sandbox/run", raw=b'{"Language":"python3","CODE":"print(\\"a\\")"}',
             headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 200 and r.json["data"]["stdout"] == "a\n", r
    r = call("POST", "/v1/sandbox/run", raw=b"language=python3&code=print%28%22a+b%22%29",
             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 200 and r.json["data"]["stdout"] == "a b\n", r


def test_network_is_refused_while_the_operator_forbids_it():
    with dify_environment(ENABLE_NETWORK=0):
        r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)", "enable_network": True})
        assert refused(r, 200, -400, "network is disabled, please enable it in the configuration"), r
        r = call("POST", "/v1/sandbox/run", {"language": "nodejs", "code": "1", "enable_network": True})
        assert refused(r, 200, -400, "network is disabled, please enable it in the configuration"), r
    # Not asking is fine, and gets no network.
    data = run("import socket\ntry:\n    socket.socket()\nexcept OSError as e:\n    print(e.errno)\n",
               enable_network=False)
    assert data["stdout"] == "97\n", data


def test_code_is_bounded_by_sandbox_dify_max_code_bytes():
    # Dify puts a node's inputs into the code (base64): up to 16 MiB of it by default, as one run.
    limit = 16 * 1024 * 1024
    size = (limit - 1024) // 4 * 3
    code = f"import base64\nprint(len(base64.b64decode('{base64.b64encode(bytes(size)).decode()}')))\n"
    assert limit - 1024 < len(code) <= limit
    data = run(code)
    assert clean(data, f"{size}\n"), data["error"][:200]
    # Over it: 200 and a message naming the limit (Dify shows messages, not statuses), whatever the
    # media type; the sidecar's smaller SANDBOX_MAX_CODE_BYTES is not this API's.
    message = f"code too large: more than {limit} bytes (SANDBOX_DIFY_MAX_CODE_BYTES)"
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "#" * (limit + 1)})
    assert refused(r, 200, -400, message), r
    # The body limit follows the code's: 6 bytes per byte of code (\u001f), and some room; refused
    # from the header alone, in the envelope too.
    body_limit = 6 * limit + 64 * 1024
    assert header_only_status("/v1/sandbox/run", body_limit) == (100, None)
    status, body = header_only_status("/v1/sandbox/run", body_limit + 1)
    assert status == 200 and json.loads(body) == {
        "code": -400, "data": None,
        "message": f"request body exceeds {body_limit} bytes (6 per byte of SANDBOX_DIFY_MAX_CODE_BYTES, "
                   "plus 64 KiB)"}, body


def test_code_limit_is_configurable():
    with dify_environment(SANDBOX_DIFY_MAX_CODE_BYTES="2K"):
        assert run("#" * 2038 + "\nprint(1)")["stdout"] == "1\n"
        r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "#" * 2049})
        assert refused(r, 200, -400, "code too large: more than 2048 bytes (SANDBOX_DIFY_MAX_CODE_BYTES)"), r
        # A chunked body over the limit is cut off while it streams in, with the same envelope.
        status, body = chunked_status("/v1/sandbox/run", 8192, 64)
        assert status == 200 and json.loads(body) == {
            "code": -400, "data": None,
            "message": f"request body exceeds {6 * 2048 + 65536} bytes (6 per byte of "
                       "SANDBOX_DIFY_MAX_CODE_BYTES, plus 64 KiB)"}, body


def test_output_cut_at_the_limit_says_so_in_error():
    cut = "error: %s exceeded SANDBOX_DIFY_MAX_OUTPUT_BYTES (1024 bytes) and was cut off\n"
    with dify_environment(SANDBOX_DIFY_MAX_OUTPUT_BYTES="1K"):
        # Dify would find no closing <<RESULT>> tag; it raises "error" instead, which says why. The
        # exit code stays the interpreter's, stdout is what fit.
        data = run("print('<<RESULT>>' + 'x' * 5000 + '<<RESULT>>')")
        assert data["stdout"] == "<<RESULT>>" + "x" * 1014, data
        assert (data["exit_code"], data["error"]) == (0, cut % "stdout"), data
        data = run("import sys\nsys.stderr.write('e' * 3000)\nraise SystemExit(3)")
        assert data["exit_code"] == 3 and data["stderr"] == "e" * 1024, data
        assert data["error"] == "process exited with code 3\n" + cut % "stderr" + "e" * 1024, data
        # Within the limit, nothing is said.
        assert clean(run("print('y' * 1000)"), "y" * 1000 + "\n")


def read_answer(s):
    """The status and body of the first final answer on socket s."""
    return read_answer_from(s, b"")


def read_answer_from(s, answer):
    while True:
        while b"\r\n\r\n" not in answer:
            more = s.recv(4096)
            assert more, answer
            answer += more
        head, _, rest = answer.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        if status != 100:
            break
        answer = rest
    size = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(rest) < size:
        more = s.recv(4096)
        assert more, rest
        rest += more
    return status, rest[:size]


def chunked_status(path, chunk_size, n):
    """Sends n chunks of chunk_size bytes, as long as the service reads them; its answer."""
    host, port = DIFY_URL.split("//")[1].split(":")
    frame = b"%x\r\n" % chunk_size + b"x" * chunk_size + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: {api_key()}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        try:
            for _ in range(n):
                s.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_answer(s)


def header_only_status(path, length):
    """Sends only the header of a body of 'length' bytes (Expect: 100-continue); the status of
    the first answer, and its body when it is a final one."""
    host, port = DIFY_URL.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: {api_key()}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
                  "Expect: 100-continue\r\n\r\n".encode())
        s.settimeout(10)
        answer = s.recv(4096)
        if answer.startswith(b"HTTP/1.1 100"):
            return 100, None
        return read_answer_from(s, answer)


def test_dependencies_list_the_sandbox_python():
    r = call("GET", "/v1/sandbox/dependencies?language=python3")
    assert r.status == 200 and r.json["code"] == 0 and r.json["message"] == "success", r
    deps = r.json["data"]["dependencies"]
    names = {d["name"].lower(): d["version"] for d in deps}
    assert all(set(d) == {"name", "version"} for d in deps), deps
    for name in ("numpy", "pandas", "requests"):
        assert names.get(name), (name, sorted(names))
    # What the sandbox really imports.
    assert run("import numpy; print(numpy.__version__)")["stdout"] == names["numpy"] + "\n"
    # Nothing to install at run time: update and refresh answer the same list.
    for method, path, body in (("POST", "/v1/sandbox/dependencies/update", {"language": "python3"}),
                               ("GET", "/v1/sandbox/dependencies/refresh?language=python3", None)):
        r2 = call(method, path, body)
        assert r2.status == 200 and r2.json["data"]["dependencies"] == deps, r2


def test_dependencies_as_dify_lists_them():
    # Dify's client: httpx.get(url, params={"language": "python3"}, headers={"X-Api-Key": ...}), so
    # no body and no Content-Type; older clients and proxies say HTTP/1.0, an empty
    # Content-Length or an empty chunked body.
    host, port = DIFY_URL.split("//")[1].split(":")
    for version, extra, body in (("1.1", "", b""), ("1.0", "", b""), ("1.1", "Content-Length: 0\r\n", b""),
                                 ("1.1", "Transfer-Encoding: chunked\r\n", b"0\r\n\r\n")):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"GET /v1/sandbox/dependencies?language=python3 HTTP/{version}\r\nHost: {host}\r\n"
                      "Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
                      f"User-Agent: python-httpx/0.27.2\r\nX-Api-Key: {api_key()}\r\n{extra}\r\n".encode() + body)
            status, answer = read_answer(s)
        answer = json.loads(answer)
        assert status == 200 and answer["code"] == 0 and answer["data"]["dependencies"], (version, extra, answer)


def test_dependencies_of_other_languages_are_unsupported():
    for path in ("/v1/sandbox/dependencies?language=nodejs", "/v1/sandbox/dependencies/refresh?language=go"):
        assert refused(call("GET", path), 400, -400, "unsupported language"), path
    r = call("POST", "/v1/sandbox/dependencies/update", {"language": "nodejs"})
    assert refused(r, 400, -400, "unsupported language"), r
    r = call("GET", "/v1/sandbox/dependencies")
    assert refused(r, 200, -400, "language is required"), r


# ---- dify-sandbox's integration tests: Python ----

def test_python_base64_repeated():
    for _ in range(5):
        data = run('import base64\nprint(base64.b64decode(base64.b64encode(b"hello world")).decode())\n')
        assert clean(data, "hello world\n"), data


def test_python_json_repeated():
    for _ in range(5):
        data = run('import json\nprint(json.dumps({"hello": "world"}))\n')
        assert clean(data, '{"hello": "world"}\n'), data


def test_python_base64_and_json_concurrently():
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run(f'import json\nprint(json.dumps({{"n": {i}}}))\n'), range(8)))
    assert [r["stdout"] for r in results] == [f'{{"n": {i}}}\n' for i in range(8)], results


def test_python_time_zone():
    data = run('from datetime import datetime\nfrom zoneinfo import ZoneInfo\n\n'
               'print(datetime.now(ZoneInfo("Asia/Shanghai")).isoformat())\n')
    assert data["stderr"] == "" and data["exit_code"] == 0, data
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+08:00\n", data["stdout"]), data


def test_python_logging_stays_in_stderr():
    data = run('import logging\n\nlogging.basicConfig(level=logging.INFO)\nlogging.info("Starting task...")\n'
               'print("ok")\n')
    assert data["stdout"] == "ok\n" and "INFO:root:Starting task..." in data["stderr"], data
    assert data["error"] == "" and data["exit_code"] == 0, data


def test_python_exception_fills_error_with_the_whole_stderr():
    # Upstream's excepthook prints the traceback and calls sys.exit(-1): exit status 255.
    data = run('def f():\n    raise ValueError("bad input")\n\nf()\n')
    assert data["exit_code"] == 255, data
    assert data["stderr"] == ('Traceback (most recent call last):\n'
                              '  File "/exec/cell.py", line 4, in <module>\n    f()\n'
                              '  File "/exec/cell.py", line 2, in f\n    raise ValueError("bad input")\n'
                              'ValueError: bad input\n'), data
    assert data["error"] == "process exited with code 255\n" + data["stderr"], data
    # A syntax error goes the same way; the code's own exit status stays its own.
    data = run('x = (\n')
    assert data["exit_code"] == 255 and data["stderr"].endswith("SyntaxError: '(' was never closed\n"), data
    assert data["error"] == "process exited with code 255\n" + data["stderr"], data
    for code, status in (("import sys\nsys.exit(3)", 3), ("raise SystemExit('bye')", 1), ("print(1)", 0)):
        assert run(code)["exit_code"] == status, code
    # What the cell sees is the cold interpreter's view of /exec/cell.py.
    data = run("import sys\nprint(__name__, __file__, sys.argv, sys.path[0])")
    assert data["stdout"] == "__main__ /exec/cell.py ['/exec/cell.py'] /exec\n", data


def test_library_probes_are_no_refusal():
    # urllib3 probes IPv6 with a socket at import (EAFNOSUPPORT without a network): a later,
    # unrelated failure must not be reported as "operation not permitted".
    data = run("import requests, numpy, pandas\nraise ValueError('bad input')\n")
    assert data["exit_code"] == 255 and "ValueError: bad input" in data["stderr"], data
    assert data["error"] == "process exited with code 255\n" + data["stderr"], data


def test_python_temporary_directories():
    # Upstream also has a /var/tmp; our sandbox has /tmp only (tempfile's first choice).
    data = run("import os, stat, tempfile\n"
               "for d in ('/tmp',):\n"
               "    m = os.stat(d).st_mode\n"
               "    assert stat.S_ISDIR(m) and m & stat.S_IWOTH and m & stat.S_ISVTX, d\n"
               "with tempfile.NamedTemporaryFile('w+', delete=False) as f:\n"
               "    f.write('ok')\n"
               "print(open(f.name).read(), os.path.dirname(f.name))\n")
    assert clean(data, "ok /tmp\n"), data


LONGCHARS = '''# declare main function here
def main() -> dict:
    original_strings_with_empty = ["apple", "", "cherry", "date", "", "fig", "grape", "honeydew", "kiwi", "", \
"mango", "nectarine", "orange", "papaya", "quince", "raspberry", "strawberry", "tangerine", "ugli fruit", \
"vanilla bean", "watermelon", "xigua", "yellow passionfruit", "zucchini"] * 5

    extended_strings = []

    for s in original_strings_with_empty:
        if s:
            repeat_times = 600
            extended_s = (s * repeat_times)[:3000]
            extended_strings.append(extended_s)
        else:
            extended_strings.append(s)

    return {
        "result": extended_strings,
    }

from json import loads, dumps
from base64 import b64decode

# execute main function, and return the result
# inputs is a dict, and it
inputs = b64decode('e30=').decode('utf-8')
output = main(**loads(inputs))

# convert output to json and print
output = dumps(output, indent=4)

result = f\'\'\'<<RESULT>>
{output}
<<RESULT>>\'\'\'

print(result)
'''


def test_python_large_output_template_arrives_intact():
    for _ in range(2):
        data = run(LONGCHARS)
        assert data["stderr"] == "" and data["error"] == "", data["stderr"][:2000]
        assert len(data["stdout"]) == 304487
        out = data["stdout"]
        assert out.startswith("<<RESULT>>\n") and out.endswith("\n<<RESULT>>\n")
        result = json.loads(out[len("<<RESULT>>\n"):-len("\n<<RESULT>>\n")])["result"]
        assert len(result) == 120 and result[0] == ("apple" * 600)[:3000]


# ---- dify-sandbox's malicious-code tests: Python ----

def not_permitted(data):
    return data["exit_code"] != 0 and "error: operation not permitted\n" in data["error"] and \
        data["error"].startswith(f"process exited with code {data['exit_code']}\n")


def test_python_fork_is_refused():
    data = run("import os\nprint(os.fork())\nprint(123)\n")
    assert not_permitted(data), data
    assert "123" not in data["stdout"] and "Operation not permitted" in data["stderr"], data


def test_python_exec_is_refused():
    data = run('import os\nos.execl("/bin/ls", "ls")\n')
    assert not_permitted(data), data


def test_python_subprocess_is_refused():
    data = run('import subprocess\nsubprocess.run(["ls", "-l"])\n')
    assert not_permitted(data), data
    data = run('import os\nprint(os.system("id"))\n')
    assert data["stdout"] != "0\n" and "uid=" not in data["stdout"], data


def test_python_etc_passwd_is_not_readable():
    # As in upstream's chroot: no user database in a run's sandbox at all.
    data = run('print(open("/etc/passwd").read())\n')
    assert data["exit_code"] == 255, data
    assert "No such file or directory: '/etc/passwd'" in data["error"], data
    # The files that matter on the host are not there either.
    data = run('import os\nprint([os.path.exists(p) for p in ("/etc/shadow", "/etc/scopebox", "/root")])\n')
    assert data["stdout"] == "[False, False, False]\n", data


# ---- Node.js ----

NODE_TEMPLATE = """// declare main function
function main({a}) {
\treturn {b: a}
}

// decode and prepare input object
var inputs_obj = JSON.parse(Buffer.from('eyJhIjoiYSJ9', 'base64').toString('utf-8'))

// execute main function
var output_obj = main(inputs_obj)

// convert output to json and print
var output_json = JSON.stringify(output_obj)
var result = `<<RESULT>>${output_json}<<RESULT>>`
console.log(result)"""


def test_nodejs_result_template_repeated():
    for _ in range(3):
        data = run(NODE_TEMPLATE, "nodejs")
        assert clean(data, '<<RESULT>>{"b":"a"}<<RESULT>>\n'), data


def test_nodejs_base64_and_json():
    data = run('const base64 = Buffer.from("hello world").toString("base64");\n'
               'console.log(Buffer.from(base64, "base64").toString());\n', "nodejs")
    assert clean(data, "hello world\n"), data
    data = run('console.log(JSON.stringify({"hello": "world"}));\n', "nodejs")
    assert clean(data, '{"hello":"world"}\n'), data


def test_nodejs_console_error_stays_in_stderr():
    data = run('console.error("warning: careful");\nconsole.log("ok");\n', "nodejs")
    assert data["stdout"] == "ok\n" and data["stderr"] == "warning: careful\n", data
    assert data["error"] == "" and data["exit_code"] == 0, data


def test_nodejs_thrown_error():
    data = run('function main() { throw new Error("boom"); }\nmain();\n', "nodejs")
    assert data["exit_code"] == 1 and "Error: boom" in data["stderr"], data
    assert data["error"] == "process exited with code 1\n" + data["stderr"], data


def test_nodejs_child_process_spawn_is_refused():
    data = run("""
const { spawn } = require( 'child_process' );
const ls = spawn( 'ls', [ '-lh', '/usr' ] );

ls.stdout.on( 'data', ( data ) => {
    console.log(data);
} );

ls.stderr.on( 'data', ( data ) => {
    console.log(data);
} );

ls.on( 'close', ( code ) => {
    console.log(code);
} );
""", "nodejs")
    assert not_permitted(data), data
    assert "EPERM" in data["stderr"], data
    data = run("const { execSync } = require('child_process');\n"
               "console.log(execSync('id', {encoding: 'utf8'}));\n", "nodejs")
    assert not_permitted(data) and "uid=" not in data["stdout"], data


def test_nodejs_user_defined_parseint_runs_nothing_before_the_sandbox():
    # CVE-2025-3466: upstream's prelude, in the same script, called parseInt before its filter
    # was in force; a hoisted user function of that name ran unconfined. Nothing but the user's
    # own code may call it here, and even then it is inside the sandbox.
    marker = "/tmp/parseint-" + secrets.token_hex(8)
    data = run("""
var data;
function main()
{
   return {result: data};
}
function parseInt()
{
   require('fs').writeFileSync('%s', 'ran');
   const {execSync} = require('child_process');
   data = execSync("ls -la /", {encoding: "utf8"});
   return 0;
}
console.log(main());
""" % marker, "nodejs")
    assert data["exit_code"] == 0 and data["error"] == "", data
    assert "result: undefined" in data["stdout"], data
    # Called by the user's code, it is confined like the rest.
    data = run("""
function parseInt() {
   const {execSync} = require('child_process');
   return execSync("id", {encoding: "utf8"});
}
console.log(parseInt("1"));
""", "nodejs")
    assert not_permitted(data) and "uid=" not in data["stdout"], data


# ---- limits and configuration ----

def test_max_requests_answers_503_under_load():
    slow = "import time\ntime.sleep(2)\nprint('done')\n"
    with dify_environment(MAX_REQUESTS=2, MAX_WORKERS=1):
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(call, "POST", "/v1/sandbox/run", {"language": "python3", "code": slow})]
            time.sleep(0.5)
            futures += [pool.submit(call, "POST", "/v1/sandbox/run", {"language": "python3", "code": slow})
                        for _ in range(5)]
            replies = [f.result(timeout=120) for f in futures]
        busy = [r for r in replies if r.status == 503]
        done = [r for r in replies if r.status == 200]
        assert len(busy) >= 1 and len(done) >= 2 and len(busy) + len(done) == 6, replies
        assert all(r.json == {"code": -503, "message": "Too many requests", "data": None} for r in busy), busy
        assert all(r.json["data"]["stdout"] == "done\n" for r in done), done
        # Nothing stays counted.
        assert run("print(1)")["stdout"] == "1\n"


def test_worker_timeout_text():
    with dify_environment(WORKER_TIMEOUT=1):
        data = run("import time\ntime.sleep(30)\n")
        assert data["exit_code"] == -1 and data["stdout"] == "", data
        assert data["error"] == "process exited with code -1\nerror: timeout\n", data
        data = run("import sys, time\nprint('started', flush=True)\nsys.stderr.write('tick\\n')\n"
                   "sys.stderr.flush()\nwhile True: pass\n")
        assert data["exit_code"] == -1 and data["stdout"] == "started\n", data
        assert data["error"] == "process exited with code -1\nerror: timeout\ntick\n", data
        data = run("setTimeout(() => {}, 60000);\n", "nodejs")
        assert data["exit_code"] == -1 and data["error"] == "process exited with code -1\nerror: timeout\n", data


def test_preload_is_ignored_unless_enabled():
    data = run("print('code')", preload="print('preload')")
    assert data["stdout"] == "code\n", data
    with dify_environment(ENABLE_PRELOAD=1):
        # It runs first, as untrusted code in the same sandbox, never as root.
        data = run("print('code', x)", preload="import os\nx = os.getuid()\nprint('preload')")
        assert data["stdout"] == "preload\ncode 1000\n", data
        data = run("print('code')", preload="import os\nos.fork()")
        assert not_permitted(data) and "code" not in data["stdout"], data


def gateway_entries(field, value):
    out = in_system("journalctl", "-u", "scopebox-gateway.service", "-o", "json", f"{field}={value}").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_access_log_carries_the_trace_context():
    user = "user-" + secrets.token_hex(6)
    trace, span = secrets.token_hex(16), secrets.token_hex(8)
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)"},
             headers={"traceparent": f"00-{trace}-{span}-01", "X-User-ID": user, "X-User-Type": "account"})
    assert r.status == 200, r
    entries = []
    for _ in range(20):
        entries = gateway_entries("SCOPEBOX_USER_ID", user)
        if entries:
            break
        time.sleep(0.2)
    assert len(entries) == 1, entries
    e = entries[0]
    assert (e["SCOPEBOX_TRACE_ID"], e["SCOPEBOX_SPAN_ID"], e["SCOPEBOX_USER_TYPE"]) == (trace, span, "account")
    assert (e["SCOPEBOX_HTTP_PATH"], e["SCOPEBOX_HTTP_STATUS"]) == ("/v1/sandbox/run", "200")

    # Without one (or with an invalid one), a new trace.
    user = "user-" + secrets.token_hex(6)
    r = call("POST", "/v1/sandbox/run", {"language": "python3", "code": "print(1)"},
             headers={"traceparent": f"00-{'0' * 32}-{span}-01", "X-User-ID": user + "\u00fc"})
    assert r.status == 200, r
    for _ in range(20):
        entries = gateway_entries("SCOPEBOX_USER_ID", user + "\\xfc")
        if entries:
            break
        time.sleep(0.2)
    assert len(entries) == 1, entries
    assert re.fullmatch(r"[0-9a-f]{32}", entries[0]["SCOPEBOX_TRACE_ID"]) and \
        entries[0]["SCOPEBOX_TRACE_ID"] != "0" * 32, entries
