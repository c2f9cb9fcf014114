#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# base64_decode() against the host's Python: base64.b64decode(text, validate=True), which the
# sidecar applies to data_base64, must accept exactly the same texts and give the same bytes.
# usage: test-base64-python.py BASE64-DECODE-BINARY
import base64
import binascii
import itertools
import random
import subprocess
import sys

ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def corpus():
    fixed = [
        b"", b"=", b"==", b"===", b"Zg==", b"Zm8=", b"Zm9v", b"QR==", b"Zh==", b"Zm9=", b"QUJ=",
        b"Zm9v=", b"Zm9v==", b"Zm9v===", b"Zm9v====", b"Zm9v=====", b"Zm9v=Zg==", b"Zg===", b"Zm8==",
        b"Z===", b"Z", b"Zg=", b"Zg", b"Zm8", b"=Zm9v", b"Zm=v", b"Zm9v\n", b"\nZm9v", b" Zm9v",
        b"Zm 9v", b"Zm9v\r\n", b"Zm9v\t", b"Zm9v=\n", b"Zg==Zg==", b"Zm9vZg==", b"Zm-_", b"Zm9\x80",
        b"Zm9\xff", b"Zm9v\x00", b"\x00", b"data:text/plain;base64,Zm9v", b"QUJD=", b"QUJDRA",
        b"QUJDRA=", b"QUJDRA==", b"QUJDRA===", b"QUJDR", b"QUJDR=", b"QUJDR==", b"QUJDR===", b"////",
        b"++++", b"+/+/", b"Zm9v\x0b", b"Zm9v\x0c", b"Zm9v.", b"Zm9v*", b"Zg==\x00",
        base64.b64encode(bytes(range(256))),
    ]
    # Every text of up to 5 characters over a few letters, padding and a stranger.
    small = [c for c in itertools.chain.from_iterable(
        itertools.product(b"AQ/=\n", repeat=k) for k in range(6))]
    rng = random.Random(4711)
    rnd = []
    for _ in range(5000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
        text = bytearray(base64.b64encode(data))
        for _ in range(rng.randrange(3)):
            op = rng.randrange(4)
            pos = rng.randrange(len(text) + 1)
            if op == 0:
                text[pos:pos] = b"="
            elif op == 1 and text:
                del text[min(pos, len(text) - 1)]
            elif op == 2 and text:
                text[min(pos, len(text) - 1)] = rng.choice(ALPHABET + b"=")
            else:
                text[pos:pos] = bytes([rng.choice(b" \n\r\t-_.\x00\xff")])
        rnd.append(bytes(text))
    return fixed + [bytes(s) for s in small] + rnd


def python_says(text):
    try:
        return "ok " + base64.b64decode(text, validate=True).hex()
    except (binascii.Error, ValueError):
        return "invalid"


def main():
    cases = corpus()
    out = subprocess.run([sys.argv[1]], input="".join(t.hex() + "\n" for t in cases).encode(),
                         stdout=subprocess.PIPE, check=True).stdout.decode().splitlines()
    if len(out) != len(cases):
        print(f"{len(out)} answers for {len(cases)} texts")
        return 1
    wrong = [(t, got, python_says(t)) for t, got in zip(cases, out) if got != python_says(t)]
    for t, got, want in wrong[:20]:
        print(f"{t!r}: base64_decode {got}, Python {want}")
    print(f"{len(cases) - len(wrong)} of {len(cases)} texts decode as Python's "
          f"b64decode(validate=True) on {sys.version.split()[0]}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
