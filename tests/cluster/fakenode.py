# SPDX-License-Identifier: LGPL-2.1-or-later
"""A stand-in for a scopebox node, for testing the balancer's rules without sandboxes: it mints
session ids that start with its tag, answers every request with X-Scopebox-Node, refuses ids it
did not mint as a node does (404, or 200 session_gone for /files/reset-inputs), keeps every request
it receives with its body (to show what the balancer passed on), serves /healthz
(200, or 503 once made unhealthy) and an HAProxy agent-check port ("ready up 100%", "drain", "down")."""
import http.server
import json
import secrets
import socket
import socketserver
import threading

GONE = {"detail": "session not found or not running"}


class FakeNode:
    def __init__(self, tag):
        self.tag = tag
        self.sessions = set()
        self.healthy = True
        self.agent = "ready up 100%"
        self.draining = False
        self.requests = []          # (method, path, body bytes) as received
        self.lock = threading.Lock()
        self.http = _Server(("127.0.0.1", 0), _handler(self))
        self.agent_sock = socket.socket()
        self.agent_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.agent_sock.bind(("127.0.0.1", 0))
        self.agent_sock.listen(16)
        self.port = self.http.server_address[1]
        self.agent_port = self.agent_sock.getsockname()[1]
        self.threads = [threading.Thread(target=self.http.serve_forever, daemon=True),
                        threading.Thread(target=self._agent_loop, daemon=True)]
        for t in self.threads:
            t.start()

    def spec(self):
        return f"{self.tag}=127.0.0.1:{self.port}:{self.agent_port}"

    def _agent_loop(self):
        while True:
            try:
                c, _ = self.agent_sock.accept()
            except OSError:
                return
            with c:
                try:
                    c.sendall((self.agent + "\n").encode())
                except OSError:
                    pass

    def close(self):
        self.http.shutdown()
        self.http.server_close()
        self.agent_sock.close()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass            # health checks hang up without reading: not worth a traceback


def _handler(node):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Scopebox-Node", node.tag)
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n) if n else b""
            with node.lock:
                node.requests.append((self.command, self.path, data))
            return data

        def do_GET(self):
            self.body()
            if self.path == "/healthz":
                if node.healthy:
                    self.reply(200, {"ok": True, "node": node.tag, "sessions": len(node.sessions),
                                     "capacity": 16, "draining": node.draining})
                else:
                    self.reply(503, {"ok": False, "node": node.tag})
            elif self.path == "/health":
                self.reply(200, "ok")
            else:
                self.reply(404, {"detail": "Not Found"})

        def do_DELETE(self):
            self.body()
            sid = self.path.rsplit("/", 1)[-1]
            if len(sid) != 32 or any(c not in "0123456789abcdef" for c in sid):
                return self.reply(400, {"detail": "invalid session_id"})
            with node.lock:
                node.sessions.discard(sid)
            self.reply(200, {"ok": True})

        def do_POST(self):
            data = self.body()
            if self.path == "/sessions":
                if node.draining:
                    return self.reply(503, {"detail": "node is draining"})
                sid = node.tag + secrets.token_hex(16)[len(node.tag):]
                with node.lock:
                    node.sessions.add(sid)
                return self.reply(200, {"session_id": sid})
            if self.path.startswith("/v1/sandbox/"):
                return self.reply(200, {"code": 0, "message": "success", "data": {"node": node.tag}})
            if self.path.startswith("/storage/"):
                return self.reply(200, {"ok": True})
            if self.path.startswith("/sessions/") and self.path.endswith("/reset"):
                sid = self.path[len("/sessions/"):-len("/reset")]
                if len(sid) != 32 or any(c not in "0123456789abcdef" for c in sid):
                    return self.reply(400, {"detail": "invalid session_id"})
                if sid not in node.sessions:
                    return self.reply(404, GONE)
                return self.reply(200, {"ok": True, "node": node.tag, "path": self.path})
            try:
                doc = json.loads(data)
            except ValueError:
                return self.reply(422, {"detail": "not json"})
            sid = doc.get("session_id") if isinstance(doc, dict) else None
            if not isinstance(sid, str):
                return self.reply(422, {"detail": "session_id missing"})
            if len(sid) != 32 or any(c not in "0123456789abcdef" for c in sid):
                return self.reply(400, {"detail": "invalid session_id"})
            if sid not in node.sessions:
                if self.path == "/files/reset-inputs":
                    return self.reply(200, {"ok": False, "session_gone": True})
                return self.reply(404, GONE)
            self.reply(200, {"ok": True, "node": node.tag, "path": self.path, "bytes": len(data)})

    return Handler
