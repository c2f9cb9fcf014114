# SPDX-License-Identifier: LGPL-2.1-or-later
"""The kernel of a stateful session (docs/api.md "Stateful sessions"): one interpreter that runs
every python cell of the session in the same namespace, like a notebook kernel. PID 1 of the
sandbox (sandbox-kernel.c) starts it as the sandbox's payload, under the sandbox's rules, and
hands it each cell on fd 4: a message with the cell's number (4 bytes) and the code, the cell's
stdout and its stderr as fds. The cell runs as __main__ code; an exception prints its traceback
and gives exit code 1, SystemExit(n) gives n (as `python3 /exec/cell.py` would) and the kernel
goes on. It says the cell's number (4 bytes) when the cell begins, and the number and its exit
code (4 bytes each) when it is over; PID 1 then stops this process until the next cell. Everything here is the sandbox's own code: PID 1 trusts nothing it
says beyond that answer, and drops one whose number is not the cell's."""


def _kernel():
    # This function's globals are __main__'s, which the cells get emptied: locals only below.
    import linecache
    import os
    import socket
    import struct
    import sys
    import traceback

    ns = sys.modules["__main__"].__dict__
    for name in [n for n in ns if n not in ("__name__", "__builtins__", "__spec__", "__loader__")]:
        del ns[name]
    ns["__doc__"] = None
    sys.argv[:] = ["/exec/cell.py"]
    sys.path[0] = "/exec"
    sock = socket.socket(fileno=4)
    null = os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
    count = 0

    def exit_code(e):
        # What the interpreter's own exit makes of a SystemExit.
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
        return 1

    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if len(msg) != 4 or len(fds) != 3:
            os._exit(70)
        (seq,) = struct.unpack("=I", msg)
        code_fd, out_fd, err_fd = fds
        # Processes the last cell started were killed at its end; reap what is ours.
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.close(out_fd)
        os.close(err_fd)
        chunks = []
        offset = 0
        while True:
            b = os.pread(code_fd, 1 << 20, offset)
            if not b:
                break
            chunks.append(b)
            offset += len(b)
        os.close(code_fd)
        count += 1
        status = 0
        # The cell begins: from now on, whatever ends this process ended it.
        try:
            sock.send(struct.pack("=I", seq))
        except OSError:
            os._exit(70)
        try:
            source = b"".join(chunks)
            filename = "<cell %d>" % count
            try:
                text = source.decode("utf-8")
                linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
            except UnicodeDecodeError:
                pass
            exec(compile(source, filename, "exec"), ns)
        except SystemExit as e:
            status = exit_code(e)
        except BaseException as e:
            status = 1
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            try:
                sys.stderr.write("".join(traceback.format_exception(type(e), e, tb)))
            except Exception:
                pass
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        # The cell's pipes end with the cell: the runner sees them close.
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            sock.send(struct.pack("=Ii", seq, status))
        except OSError:
            os._exit(70)


_kernel()
