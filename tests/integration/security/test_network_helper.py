# SPDX-License-Identifier: LGPL-2.1-or-later
"""The packet parser of a dify run's network is no privileged process (issue 31, finding 1).

slirp4netns parses every packet a dify run with enable_network sends (what Dify asks for in every
request, and on by default). Looked at from the system hosting scopebox while such a run waits:
it runs as the run's own uid (the payload's), with no capability but CAP_NET_BIND_SERVICE and that
only in a user namespace of its own, with no_new_privs and a seccomp filter; in its view of the
file system /etc/scopebox and /run are empty, and with its own credentials it reads neither the API
key nor root's files. The run still reaches a server the host routes to (in a network namespace
behind a veth pair: not an address of the host), resolves names through slirp's resolver when the
host's resolver answers, and still does not reach the host's 127.0.0.1."""
import contextlib
import ctypes
import json
import os
import secrets
import socket
import struct
import subprocess
import threading
import urllib.request

import pytest

from secsuite import canary, security_invariants, sibling  # noqa: F401 (fixtures)
from conftest import SCOPE_PIDS, api_key, manager_run_sandboxes, system_python, wait_until

DIFY_URL = "http://127.0.0.1:8194"
PEER_NETNS = "scopebox-t31"
HOST_END, PEER_END = "sbx31h", "sbx31p"
HOST_ADDRESS, PEER_ADDRESS = "198.51.100.121", "198.51.100.122"  # TEST-NET-2, a /30 of our own
CLONE_NEWNET = 0x40000000
# A name every resolver answers without the internet: .invalid is never delegated (RFC 6761).
DNS_NAME = "invalid"


def dify_run(code):
    body = json.dumps({"language": "python3", "code": code, "enable_network": True}).encode()
    req = urllib.request.Request(DIFY_URL + "/v1/sandbox/run", data=body, method="POST",
                                 headers={"X-Api-Key": api_key(), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def dns_query(server, name, timeout=3):
    """A raw A query; the answer's rcode, or None when nobody answers."""
    qid = int.from_bytes(os.urandom(2), "big")
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".") if p)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack(">HH", 1, 1),
                 (server, 53))
        data = s.recv(512)
    except OSError:
        return None
    finally:
        s.close()
    return data[3] & 0xF if len(data) >= 12 and struct.unpack(">H", data[:2])[0] == qid else None


def host_resolver():
    with open("/etc/resolv.conf") as f:
        for line in f:
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver" and "." in words[1]:
                return words[1]
    return None


def ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@contextlib.contextmanager
def peer_network():
    """A network namespace behind a veth pair: PEER_ADDRESS is routed by the host, no address of
    it. Yields (greeting port, release port, token, release): the first greets with the token,
    the second holds each connection until release() is called."""
    ip("netns", "del", PEER_NETNS)
    ip("link", "del", HOST_END)
    try:
        for args in (("netns", "add", PEER_NETNS),
                     ("link", "add", HOST_END, "type", "veth", "peer", "name", PEER_END, "netns", PEER_NETNS),
                     ("addr", "add", HOST_ADDRESS + "/30", "dev", HOST_END),
                     ("link", "set", HOST_END, "up"),
                     ("-n", PEER_NETNS, "addr", "add", PEER_ADDRESS + "/30", "dev", PEER_END),
                     ("-n", PEER_NETNS, "link", "set", PEER_END, "up")):
            r = ip(*args)
            assert r.returncode == 0, (args, r.stderr)
        # Sockets made by a thread that joined the namespace belong to it, whoever uses them.
        listening = []

        def make():
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{PEER_NETNS}", os.O_RDONLY)
            try:
                assert libc.setns(fd, CLONE_NEWNET) == 0, ctypes.get_errno()
            finally:
                os.close(fd)
            for _ in range(2):
                srv = socket.socket()
                srv.bind((PEER_ADDRESS, 0))
                srv.listen(8)
                srv.settimeout(0.2)
                listening.append(srv)
        t = threading.Thread(target=make)
        t.start()
        t.join()
        assert len(listening) == 2
        token, stop, go = secrets.token_hex(8), threading.Event(), threading.Event()

        def serve(srv, hold):
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                except OSError:
                    continue
                if hold:
                    go.wait(60)
                c.sendall(token.encode())
                c.close()
        threads = [threading.Thread(target=serve, args=(srv, i == 1), daemon=True) for i, srv in enumerate(listening)]
        for t in threads:
            t.start()
        try:
            yield listening[0].getsockname()[1], listening[1].getsockname()[1], token, go.set
        finally:
            go.set()
            stop.set()
            for t in threads:
                t.join()
            for srv in listening:
                srv.close()
    finally:
        ip("netns", "del", PEER_NETNS)
        ip("link", "del", HOST_END)


@contextlib.contextmanager
def loopback_listener():
    """A server on the host's 127.0.0.1; yields (port, set of connections seen)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    seen, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, peer = srv.accept()
            except OSError:
                continue
            seen.append(peer)
            c.sendall(b"loopback")
            c.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1], seen
    finally:
        stop.set()
        t.join()
        srv.close()


RUN = r"""
import json, os, socket, struct
def attempt(host, port, timeout=5):
    try:
        return socket.create_connection((host, port), timeout=timeout).recv(100).decode()
    except OSError as e:
        return 'error:%%s' %% e.errno
def dns(name):
    qid = int.from_bytes(os.urandom(2), 'big')
    q = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0) + b''.join(bytes([len(p)]) + p.encode() for p in name.split('.') if p)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
    try:
        s.sendto(q + b'\0' + struct.pack('>HH', 1, 1), ('10.0.2.3', 53))
        d = s.recv(512)
        return d[3] & 15 if struct.unpack('>H', d[:2])[0] == qid else None
    except OSError:
        return None
# Waits here, its network up, until the test has looked at slirp4netns.
out = {'held': attempt(%(peer)r, %(hold)d, timeout=60)}
out.update(peer=attempt(%(peer)r, %(greet)d), host_loopback=attempt('10.0.2.2', %(loopback)d), dns=dns(%(name)r))
print(json.dumps(out))
"""

# Looks at the slirp4netns of the one dify run with a network, from the system hosting scopebox
# (as root there): its status, its namespaces, the payload's uid, its view of the file system, and
# what its own credentials may open there.
INSPECT = SCOPE_PIDS + r"""
import ctypes, errno, json, os, sys
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
def status(p):
    return dict(l.rstrip('\n').split(':\t', 1) for l in open('/proc/%d/status' % p) if ':\t' in l)
def scope(p):
    return next((c for l in open('/proc/%d/cgroup' % p).read().split('\n') for c in l.split('/')
                 if c.startswith('scopebox-runner-')), None)
# The run's own scope (argv): the pooled run sessions have a network (and a prepared payload) of
# their own waiting, sidecar sessions' prepared sandboxes another uid.
run_scopes = set(sys.argv[1:])
slirps, sandboxed = [], []
for p in scope_pids('*'):
    try:
        st = status(p)
        if st['Name'] == 'slirp4netns' and scope(p) in run_scopes:
            slirps.append(p)
        elif st['Uid'].split()[0] != '0':
            sandboxed.append((scope(p), int(st['Uid'].split()[0])))
    except OSError:
        continue
run_scope = scope(slirps[0]) if len(slirps) == 1 else None
payload_uids = {uid for sc, uid in sandboxed if sc == run_scope}
out = {'slirps': len(slirps), 'payload_uids': sorted(payload_uids)}
if len(slirps) == 1:
    p = slirps[0]
    st = status(p)
    out['status'] = {k: st[k] for k in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',
                                        'NoNewPrivs', 'Seccomp')}
    out['uid_map'] = open('/proc/%d/uid_map' % p).read().split()
    out['own_userns'] = os.readlink('/proc/%d/ns/user' % p) != os.readlink('/proc/self/ns/user')
    root = '/proc/%d/root' % p
    out['root'] = sorted(os.listdir(root))
    out['etc_scopebox'] = sorted(os.listdir(root + '/etc/scopebox'))
    out['run'] = sorted(os.listdir(root + '/run'))
    out['host_has_key'] = os.path.exists('/etc/scopebox/api-key')
    # With slirp4netns's own credentials: its user namespace (uid and gid 0 there, no groups),
    # its mount namespace.
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        res = {}
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ufd, mfd = os.open('/proc/%d/ns/user' % p, os.O_RDONLY), os.open('/proc/%d/ns/mnt' % p, os.O_RDONLY)
            os.setgroups([])
            assert libc.setns(ufd, CLONE_NEWUSER) == 0 and libc.setns(mfd, CLONE_NEWNS) == 0, ctypes.get_errno()
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            for path in ('/etc/scopebox/api-key', '/etc/shadow', '/run/scopebox'):
                try:
                    os.close(os.open(path, os.O_RDONLY))
                    res[path] = 'opened'
                except OSError as e:
                    res[path] = errno.errorcode[e.errno]
        except Exception as e:
            res['error'] = repr(e)
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    out['as_slirp'] = json.loads(os.read(r, 65536))
    os.waitpid(child, 0)
print(json.dumps(out))
"""


def slirp_up():
    """slirp4netns is up before the payload (PID 1 waits for it): both are looked at once the
    payload, which holds until released, is there too."""
    serving = [p["unit"] for p in manager_run_sandboxes().values() if not p.get("pooled")]
    out = json.loads(system_python(INSPECT, *serving))
    return out if out["slirps"] and out["payload_uids"] else None


def test_slirp4netns_runs_as_the_runs_uid_without_privileges():
    resolver = host_resolver()
    host_rcode = dns_query(resolver, DNS_NAME) if resolver else None
    with peer_network() as (greet, hold, token, release), loopback_listener() as (loopback, seen):
        code = RUN % {"peer": PEER_ADDRESS, "greet": greet, "hold": hold, "loopback": loopback, "name": DNS_NAME}
        result = {}
        runner = threading.Thread(target=lambda: result.update(body=dify_run(code)))
        runner.start()
        try:
            seen_slirp = wait_until(slirp_up, 30, "the run's slirp4netns")
        finally:
            release()
            runner.join()

    # The run: the peer behind the veth reached; the host's loopback not; names resolved through
    # slirp's resolver whenever the host's own resolver answers.
    body = result["body"]
    assert body["code"] == 0 and body["data"]["exit_code"] == 0, body
    out = json.loads(body["data"]["stdout"])
    assert out["peer"] == token and out["held"] == token, out
    assert out["host_loopback"].startswith("error:") and not seen, (out, seen)
    if host_rcode is not None:
        assert out["dns"] == host_rcode, (out, host_rcode)

    s = seen_slirp
    assert s["slirps"] == 1, s
    st = s["status"]
    uid = int(st["Uid"].split()[0])
    # The run's own uid, in every slot, the payload's; no root, no groups.
    assert uid != 0 and st["Uid"].split() == [str(uid)] * 4, st
    assert st["Gid"].split()[0] != "0" and len(set(st["Gid"].split())) == 1, st
    assert st["Groups"].strip() == "", st
    assert s["payload_uids"] == [uid], s
    # Capabilities: CAP_NET_BIND_SERVICE (bit 10) alone, and that in its own user namespace, in
    # which uid 0 is the run's uid and nothing else is mapped.
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd"):
        assert int(st[k], 16) == 1 << 10, st
    assert int(st["CapAmb"], 16) == 0, st
    assert s["own_userns"] and s["uid_map"] == ["0", str(uid), "1"], s
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    # What it sees: /etc (without scopebox's) and /run (empty); and its credentials open nothing.
    assert s["host_has_key"], s
    assert set(s["root"]) <= {"etc", "run", "tmp"} and "etc" in s["root"], s
    assert s["etc_scopebox"] == [] and s["run"] == [], s
    assert s["as_slirp"] == {"/etc/scopebox/api-key": "ENOENT", "/etc/shadow": "EACCES",
                             "/run/scopebox": "ENOENT"}, s
