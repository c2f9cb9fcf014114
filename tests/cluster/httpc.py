# SPDX-License-Identifier: LGPL-2.1-or-later
"""One HTTP request of the cluster tests: (status, decoded JSON body or None, headers). Headers
are looked up case-insensitively (HAProxy passes names on in lower case); a refused or reset
connection gives status None."""
import email.message
import json
import time
import urllib.error
import urllib.request


def call(url, method, path, body=None, raw=None, key=None, headers=None, timeout=120):
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        hdrs["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, _json(r.read()), r.headers
    except urllib.error.HTTPError as e:
        return e.code, _json(e.read()), e.headers
    except (urllib.error.URLError, ConnectionError):
        return None, None, email.message.Message()


def _json(data):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return data


def wait(cond, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not met within {timeout} s")
