#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A minimal scopebox client using only Python's standard library (docs/api.md).

    client = Client("http://127.0.0.1:48217", "API-KEY")
    sid = client.create_session()
    print(client.exec(sid, "print(6 * 7)")["stdout"])
    for event, data in client.exec_stream(sid, "import time\\nfor i in range(3): print(i, flush=True); time.sleep(1)"):
        print(event, data)          # ("stdout", {"text": "0\\n"}) ... ("result", {...})
    client.delete_session(sid)

    kernel = client.create_session(stateful=True)   # variables persist between cells
    client.exec(kernel, "x = 41")
    print(client.exec(kernel, "print(x + 1)")["stdout"])   # 42
    client.reset(kernel)                            # the next cell starts a fresh interpreter

Run it as a script to try a server: client.py URL KEY CODE (streams the code's output).
"""
import http.client
import json
import sys
import urllib.parse


class Error(Exception):
    """An HTTP status other than 200, with the body's JSON (or text)."""

    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Client:
    def __init__(self, url, key, timeout=300):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
        self.https = u.scheme == "https"
        self.key = key
        self.timeout = timeout

    def _connection(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def _headers(self, accept="application/json"):
        return {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json", "Accept": accept}

    def call(self, method, path, body=None):
        """One request; the decoded JSON answer, or Error."""
        conn = self._connection()
        try:
            conn.request(method, path, None if body is None else json.dumps(body), self._headers())
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = data.decode(errors="replace")
        if r.status != 200:
            raise Error(r.status, decoded)
        return decoded

    def create_session(self, **options):
        return self.call("POST", "/sessions", options)["session_id"]

    def delete_session(self, session_id):
        return self.call("DELETE", f"/sessions/{session_id}")

    def reset(self, session_id):
        """POST /sessions/{id}/reset: a stateful session's next cell starts a fresh interpreter."""
        return self.call("POST", f"/sessions/{session_id}/reset")

    def exec(self, session_id, code, timeout_ms=None, report=False):
        """POST /exec: {"stdout", "stderr", "exit_code", "files", ...}."""
        body = {"session_id": session_id, "code": code}
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if report:
            body["report"] = True
        return self.call("POST", "/exec", body)

    def cancel(self, session_id):
        """POST /exec/cancel: True if an exec was running, False if none was (409)."""
        try:
            self.call("POST", "/exec/cancel", {"session_id": session_id})
            return True
        except Error as e:
            if e.status == 409:
                return False
            raise

    def exec_stream(self, session_id, code, timeout_ms=None, report=False):
        """POST /exec as server-sent events: yields (event, data) as they come, "stdout" and "stderr"
        with {"text": ...}, then "result" with the exec's result (what exec() returns), or "error"
        with {"status", "detail"}. Closing the generator early hangs up, which cancels the exec.
        A refusal before the stream began (404, 409, 422...) raises Error."""
        body = {"session_id": session_id, "code": code}
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if report:
            body["report"] = True
        conn = self._connection()
        try:
            conn.request("POST", "/exec", json.dumps(body), self._headers("text/event-stream"))
            r = conn.getresponse()
            if r.status != 200 or not r.getheader("Content-Type", "").startswith("text/event-stream"):
                data = r.read()
                try:
                    raise Error(r.status, json.loads(data))
                except ValueError:
                    raise Error(r.status, data.decode(errors="replace")) from None
            event, lines = "message", []
            while True:
                line = r.readline()
                if not line:
                    return  # the server closed the stream
                line = line.decode().rstrip("\r\n")
                if line == "":
                    if lines:
                        yield event, json.loads("\n".join(lines))
                        if event in ("result", "error"):
                            return
                    event, lines = "message", []
                elif line.startswith(":"):
                    continue  # a comment
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    lines.append(line[6:] if line[5:6] == " " else line[5:])
        finally:
            conn.close()


def main(argv):
    if len(argv) != 4:
        print(f"usage: {argv[0]} URL KEY CODE", file=sys.stderr)
        return 2
    client = Client(argv[1], argv[2])
    sid = client.create_session()
    try:
        exit_code = 1
        for event, data in client.exec_stream(sid, argv[3]):
            if event in ("stdout", "stderr"):
                (sys.stdout if event == "stdout" else sys.stderr).write(data["text"])
            elif event == "result":
                exit_code = data["exit_code"]
            elif event == "error":
                print(f"error: {data}", file=sys.stderr)
        return exit_code
    finally:
        client.delete_session(sid)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
