# SPDX-License-Identifier: LGPL-2.1-or-later
"""The template's generations (issue 31, finding 8; docs/security.md "The template"): every child
of one template shares its stack canary, pointer guard, AT_RANDOM bytes and address layout (the
zygote trade-off, documented here as it is), and SANDBOX_TEMPLATE_MAX_CHILDREN bounds how many
execs one generation serves: after it the template is replaced by a new interpreter, whose
children read other secrets, and the execs in between start cold and succeed.

Read as an attacker in a sandbox would: with ctypes, the canary at %fs:0x28 and the pointer
guard at %fs:0x30 of its own thread (x86-64 glibc's tcbhead_t), AT_RANDOM through getauxval()."""
import json
import platform
import time

from conftest import create_session, delete_session, exec_start, in_system, run, unit_environment
from test_engine import TEMPLATE_UNIT, template_pid, template_restarts

MAX_CHILDREN = 4

PROBE = """\
import ctypes, json
libc = ctypes.CDLL(None)
libc.getauxval.restype = ctypes.c_ulong
libc.getauxval.argtypes = [ctypes.c_ulong]
libc.pthread_self.restype = ctypes.c_void_p
tcb = libc.pthread_self()
out = {"at_random": ctypes.string_at(libc.getauxval(25), 16).hex(),
       "libc_system": ctypes.cast(libc.system, ctypes.c_void_p).value}
if X86_64:
    out["canary"] = ctypes.c_uint64.from_address(tcb + 0x28).value
    out["pointer_guard"] = ctypes.c_uint64.from_address(tcb + 0x30).value
print(json.dumps(out))
""".replace("X86_64", repr(platform.machine() == "x86_64"))


class Session:
    def __init__(self):
        self.sid = create_session()
        self.execs = 0

    def exec(self, code):
        """stdout of an exec that must succeed, and how it started."""
        self.execs += 1
        res = run(self.sid, code)
        assert res["exit_code"] == 0, res
        return res["stdout"], exec_start(self.sid, count=self.execs)

    def probe(self):
        out, start = self.exec(PROBE)
        secrets = json.loads(out)
        if "canary" in secrets:
            # What was read is glibc's canary: AT_RANDOM's first 8 bytes, the lowest zeroed.
            assert secrets["canary"] == int.from_bytes(bytes.fromhex(secrets["at_random"])[:8], "little") & ~0xff
        return secrets, start


def test_a_generation_shares_its_secrets_and_ends_after_max_children():
    with unit_environment(TEMPLATE_UNIT, "max-children", [f"SANDBOX_TEMPLATE_MAX_CHILDREN={MAX_CHILDREN}"]):
        s = Session()
        try:
            # Type=notify: the restart returned once the new template listens.
            first, restarts = template_pid(), template_restarts()
            assert first > 0, f"{TEMPLATE_UNIT} is not running"
            one, start_one = s.probe()
            two, start_two = s.probe()
            assert (start_one, start_two) == ("template", "template")
            # The trade-off, as it is: two children of one template, in one session or two, read
            # the same canary, pointer guard, AT_RANDOM bytes and library addresses.
            assert one == two, (one, two)
            other = Session()
            try:
                three, start_three = other.probe()
                assert start_three == "template"
                assert three == one, (one, three)
            finally:
                delete_session(other.sid)

            # The bound: the generation serves MAX_CHILDREN children (the three above and one
            # more), then the template is replaced; every exec meanwhile succeeds (cold).
            starts = []
            deadline = time.monotonic() + 60
            while template_pid() in (0, first):
                assert time.monotonic() < deadline, \
                    f"the template outlived SANDBOX_TEMPLATE_MAX_CHILDREN={MAX_CHILDREN}: {starts}"
                out, start = s.exec("print(3)\n")
                assert out == "3\n"
                starts.append(start)
                time.sleep(0.2)
            from_first = 3 + starts.count("template")
            # Execs after the last child that find the old template exiting start cold. The
            # sessions' prepared sandboxes are children too, forked before their exec: those the
            # template's end finds waiting are dropped, so fewer execs than children ran from it.
            assert 3 <= from_first <= MAX_CHILDREN, (starts, from_first)
            assert starts[-1] == "cold", starts
            assert template_restarts() > restarts
            journal = in_system("journalctl", "-o", "cat", "-u", TEMPLATE_UNIT, "-n", "60").stdout
            assert f"max children reached after {MAX_CHILDREN} children" in journal, journal
            assert "status=75" in journal, journal

            # The next generation: other secrets, which one leaked before does not predict.
            for _ in range(40):
                four, start_four = s.probe()
                if start_four == "template":
                    break
                time.sleep(0.3)
            assert start_four == "template", "no exec started from the new template"
            assert template_pid() not in (0, first)
            assert four["at_random"] != one["at_random"]
            if "canary" in one:
                assert four["canary"] != one["canary"]
                assert four["pointer_guard"] != one["pointer_guard"]
            aslr = in_system("cat", "/proc/sys/kernel/randomize_va_space").stdout.strip()
            if aslr != "0":
                assert four["libc_system"] != one["libc_system"]
        finally:
            delete_session(s.sid)
