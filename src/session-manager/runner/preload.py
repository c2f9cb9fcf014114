# SPDX-License-Identifier: LGPL-2.1-or-later
"""The warm interpreter of a session's next exec (docs/benchmarks.md, docs/security.md).

The runner starts this in a complete sandbox (namespaces, uid, no capabilities, no_new_privs,
seccomp) before any exec asks for it, as `python3 -s -P` without PYTHONPATH, so that nothing
of the session's (its /workspace, its home) is imported before the code arrives: it imports
the modules the runner names on fd 4, then
waits there for the exec's code (a memfd), and runs it as `python3 /exec/cell.py` would: as
__main__, with that file name in tracebacks, sys.argv and __file__. Each exec gets a new one of
these, so nothing of one exec reaches the next. Nothing here handles secrets: it is the
sandbox's own code, run under the sandbox's rules."""
import os
import socket
import sys

CELL = "/exec/cell.py"


def _preload(ctl):
    names = ctl.recv(65536).decode("ascii", "replace").split()
    # Whatever the imports print is not the exec's output.
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    try:
        for name in names:
            try:
                __import__(name)
            except Exception:
                pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    # Ready: an exec that comes before this starts cold rather than wait for the imports.
    ctl.send(b"R")


def _receive_code(ctl):
    _, fds, _, _ = socket.recv_fds(ctl, 1, 1)
    ctl.close()
    if not fds:
        os._exit(0)  # the session went away before using us
    # The memfd's file position is wherever its writer left it: read from the start.
    size = os.fstat(fds[0]).st_size
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fds[0], size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    os.close(fds[0])
    return b"".join(chunks)


def _join_session_paths(cell_dir):
    """Until the code arrives, nothing the session can write is on sys.path (python3 -s -P, no
    PYTHONPATH): no sitecustomize.py, shadowing module or .pth file of the session's runs
    before its exec. Now give the cell the paths a cold `python3 /exec/cell.py` has: its
    directory, PYTHONPATH=/workspace, then the user site (its .pth files run now, inside the
    exec) ahead of the system's site-packages."""
    import site
    sys.path.insert(0, cell_dir)
    sys.path.insert(1, "/workspace")
    os.environ["PYTHONPATH"] = "/workspace"  # what the cell's child interpreters get too
    site.ENABLE_USER_SITE = True
    before = list(sys.path)
    user_site = site.getusersitepackages()
    if os.path.isdir(user_site):
        site.addsitedir(user_site)
    added = [p for p in sys.path if p not in before]
    for p in added:
        sys.path.remove(p)
    where = next((i for i, p in enumerate(sys.path) if p.endswith(("-packages",))), len(sys.path))
    sys.path[where:where] = added


def _run():
    # Everything below the emptying of __main__ must be a local: this function's globals are
    # that dict.
    _sys, _os, cell = sys, os, CELL
    ctl = socket.socket(fileno=4)
    _preload(ctl)
    source = _receive_code(ctl)

    import builtins
    import io
    import linecache
    import tokenize
    import traceback

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        text = source.decode(encoding, "replace")
    except (SyntaxError, LookupError):
        text = source.decode("utf-8", "replace")
    linecache.cache[cell] = (len(source), None, text.splitlines(True), cell)
    _sys.argv[:] = [cell]
    _join_session_paths(_os.path.dirname(cell))

    def report(value, tb):
        # The interpreter's own printer reads source lines from disk, where the cell isn't;
        # traceback's reads linecache, where it is. A hook the code installed is called as such.
        value = value.with_traceback(tb)
        if _sys.excepthook is _sys.__excepthook__:
            traceback.print_exception(type(value), value, tb)
        else:
            _sys.excepthook(type(value), value, tb)

    # The cell runs in the real __main__ (pickle and multiprocessing look functions up there),
    # emptied of this file's names first.
    main = _sys.modules["__main__"].__dict__
    main.clear()
    main.update({"__name__": "__main__", "__file__": cell, "__doc__": None, "__package__": None,
                 "__spec__": None, "__loader__": None, "__cached__": None, "__builtins__": builtins})
    def finish(status):
        # What the interpreter does at exit, minus tearing down every module (pandas and
        # matplotlib take ~100 ms to finalize): join the threads, run atexit, drop the cell's
        # names so that its open files are flushed and closed, flush stdio.
        for step in (lambda: threading._shutdown(), atexit._run_exitfuncs, main.clear):
            try:
                step()
            except BaseException:
                pass
        for stream in (_sys.stdout, _sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        _os._exit(status)

    def exit_status(e):
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code & 0xff
        try:
            print(e.code, file=_sys.stderr)
        except BaseException:
            pass
        return 1

    import atexit
    import threading
    try:
        code = compile(source, cell, "exec", dont_inherit=True)
    except SyntaxError:
        report(_sys.exc_info()[1], None)
        finish(1)
    try:
        exec(code, main)
    except SystemExit as e:
        finish(exit_status(e))
    except BaseException:
        _, value, tb = _sys.exc_info()
        report(value, tb.tb_next)  # without this frame, as the interpreter shows it
        finish(1)
    finish(0)

_run()
