# SPDX-License-Identifier: LGPL-2.1-or-later
"""What Dify 1.13 sends, against the default configuration: its code executor's request (the body
with "enable_network": true, X-Api-Key, JSON), its runner scripts for Python 3, Node.js and Jinja2
with their preloads (a node's inputs as base64 inside the code), and how it reads the answer (the
status, "code", "data.error", then the JSON between the first and the last <<RESULT>> of stdout).

The scripts are rebuilt here from what Dify's templates do (api/core/helper/code_executor/...), in
our own words; only their shape matters: where the code, the inputs and the result tag go."""
import base64
import json
import re
import textwrap
import urllib.error
import urllib.request

import pytest

from conftest import api_key
from test_dify_runs import DIFY_URL

RESULT_TAG = "<<RESULT>>"


class CodeExecutionError(Exception):
    pass


def execute_code(language, preload, code):
    """Dify's CodeExecutor.execute_code(): one POST, then its reading of the answer."""
    body = json.dumps({"language": language, "code": code, "preload": preload,
                       "enable_network": True}).encode()
    req = urllib.request.Request(DIFY_URL + "/v1/sandbox/run", data=body, method="POST",
                                 headers={"X-Api-Key": api_key(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, answer = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, answer = e.code, e.read()
    if status == 503:
        raise CodeExecutionError("Code execution service is unavailable")
    if status != 200:
        raise CodeExecutionError(f"Failed to execute code, got status code {status}, likely a network issue")
    answer = json.loads(answer)
    if answer["code"] != 0:
        raise CodeExecutionError(f"Got error code: {answer['code']}. Got error msg: {answer['message']}")
    if answer["data"].get("error"):
        raise CodeExecutionError(answer["data"]["error"])
    return answer["data"]["stdout"] or ""


def extract_result(stdout):
    """From the first to the last tag, as Dify's greedy, DOTALL search takes it."""
    m = re.search(rf"{RESULT_TAG}(.*){RESULT_TAG}", stdout, re.DOTALL)
    if not m:
        raise ValueError("Failed to parse result: no result tag found in response.")
    return m.group(1)


def b64(text):
    return base64.b64encode(text.encode()).decode()


def inputs_b64(inputs):
    return b64(json.dumps(inputs, ensure_ascii=False))


# Python 3: print() flushes, the user's main() is called with the inputs as keywords, its dict
# comes back as indented JSON between the tags.
PYTHON3_RUNNER = textwrap.dedent("""
    # print() flushes at once, for live logs
    import builtins
    _print = builtins.print
    def print(*args, **kwargs):
        kwargs.setdefault('flush', True)
        return _print(*args, **kwargs)
    builtins.print = print

    # the code node's code
    {code}

    import json
    import sys
    from base64 import b64decode

    inputs_obj = json.loads(b64decode('{inputs}').decode('utf-8'))
    output_obj = main(**inputs_obj)
    output_json = json.dumps(output_obj, indent=4)
    print(f'''<<RESULT>>{output_json}<<RESULT>>''')
    """)

# Node.js: main() gets the inputs object; JSON.stringify of its result between the tags.
NODEJS_RUNNER = textwrap.dedent("""
    // the code node's code
    {code}

    var inputs_obj = JSON.parse(Buffer.from('{inputs}', 'base64').toString('utf-8'))
    var output_obj = main(inputs_obj)
    var output_json = JSON.stringify(output_obj)
    console.log(`<<RESULT>>${output_json}<<RESULT>>`)
    """)

# Jinja2: the template itself travels as base64 too (Dify #26818), and is rendered in Python.
JINJA2_RUNNER = textwrap.dedent("""
    import jinja2
    import json
    from base64 import b64decode

    def main(**inputs):
        source = b64decode('{template}').decode('utf-8')
        return jinja2.Template(source).render(**inputs)

    inputs_obj = json.loads(b64decode('{inputs}').decode('utf-8'))
    output = main(**inputs_obj)
    print(f'''<<RESULT>>{output}<<RESULT>>''')

    """)

# Dify sends a preload with Jinja2 runs (rendering once before its sandbox's filter was up);
# ENABLE_PRELOAD is off by default, so it is dropped.
JINJA2_PRELOAD = textwrap.dedent("""
    import jinja2

    def _warm_jinja2():
        jinja2.Template('{{s}}').render(s='a')

    if __name__ == '__main__':
        _warm_jinja2()
    """)


def run_python3(code, inputs):
    runner = PYTHON3_RUNNER.replace("{code}", code).replace("{inputs}", inputs_b64(inputs))
    return json.loads(extract_result(execute_code("python3", "", runner)))


def run_nodejs(code, inputs):
    runner = NODEJS_RUNNER.replace("{code}", code).replace("{inputs}", inputs_b64(inputs))
    return json.loads(extract_result(execute_code("nodejs", "", runner)))


def run_jinja2(template, inputs):
    runner = JINJA2_RUNNER.replace("{template}", b64(template)).replace("{inputs}", inputs_b64(inputs))
    return {"result": extract_result(execute_code("python3", JINJA2_PRELOAD, runner))}


PYTHON_NODE = textwrap.dedent("""
    import logging, hashlib

    def main(arg1: str, arg2: list) -> dict:
        logging.warning("seen %d items", len(arg2))
        print("progress: halfway")
        return {
            "result": arg1 + "!",
            "count": len(arg2),
            "digest": hashlib.sha256("".join(arg2).encode()).hexdigest(),
        }
    """)


def test_python3_code_node():
    arg2 = ["销售", "café", "😀"] * 3
    out = run_python3(PYTHON_NODE, {"arg1": "你好", "arg2": arg2})
    assert out == {"result": "你好!", "count": 9,
                   "digest": __import__("hashlib").sha256("".join(arg2).encode()).hexdigest()}, out


def test_python3_code_node_with_many_mib_of_inputs():
    # A node fed a large document: Dify puts it into the code, base64 of JSON (8 MiB here).
    doc = "段落 paragraph\n" * (8 * 1024 * 1024 // 20)
    out = run_python3("def main(doc: str) -> dict:\n    return {'lines': doc.count('\\n'), 'head': doc[:8]}\n",
                      {"doc": doc})
    assert out == {"lines": doc.count("\n"), "head": doc[:8]}, {k: str(v)[:80] for k, v in out.items()}


def test_python3_code_node_that_raises_shows_upstreams_error():
    with pytest.raises(CodeExecutionError) as e:
        run_python3("def main(x: int) -> dict:\n    return {'r': 1 / x}\n", {"x": 0})
    text = str(e.value)
    assert text.startswith("process exited with code 255\nTraceback (most recent call last):\n"), text
    assert text.endswith("ZeroDivisionError: division by zero\n"), text


def test_python3_code_node_may_use_the_network_settings():
    # enable_network is always true: the run has a network, and the operator's proxies if any.
    out = run_python3("import socket, os\ndef main() -> dict:\n"
                      "    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()\n"
                      "    return {'resolver': open('/etc/resolv.conf').read().split()[-1]}\n", {})
    assert out == {"resolver": "10.0.2.3"}, out


def test_nodejs_code_node():
    code = textwrap.dedent("""
        function main({arg1, arg2}) {
            console.error("note on stderr");
            return {result: arg1 + arg2.length, keys: Object.keys({a: 1, b: 2})};
        }
        """)
    assert run_nodejs(code, {"arg1": "n=", "arg2": ["x", "y"]}) == {"result": "n=2", "keys": ["a", "b"]}


def test_nodejs_code_node_that_throws_is_an_error():
    with pytest.raises(CodeExecutionError) as e:
        run_nodejs("function main() { throw new Error('boom') }", {})
    assert str(e.value).startswith("process exited with code 1\n") and "Error: boom" in str(e.value), e.value


def test_jinja2_template_node():
    template = "{% for u in users %}{{ loop.index }}. {{ u.name }} \"{{ u['note'] }}\"\n{% endfor %}'''end"
    users = [{"name": "张三", "note": "a'b"}, {"name": "Zoë", "note": "<<x>>"}]
    out = run_jinja2(template, {"users": users})
    assert out == {"result": "1. 张三 \"a'b\"\n2. Zoë \"<<x>>\"\n'''end"}, out


def test_result_is_taken_between_the_first_and_the_last_tag():
    # Dify's search is greedy: a tag printed by the code itself widens what is taken.
    stdout = execute_code("python3", "", "print('log <<RESULT>>{\"a\": 1}<<RESULT>> more')\nprint('<<RESULT>>')")
    assert extract_result(stdout) == '{"a": 1}<<RESULT>> more\n', stdout
