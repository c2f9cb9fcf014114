# SPDX-License-Identifier: LGPL-2.1-or-later
"""The template (scopebox-template(8), docs/security.md "The template"): one interpreter with the
preload modules imported, from which every python exec's and dify run's payload is forked.

scopebox-template starts this as root in a root of its own built like a sandbox's (the same
/usr, /etc, environment and empty /workspace, /tmp, /home/sandbox; no network), with the
listening socket on fd 3. It imports the modules named in argv, then hands over to
_scopebox_template.serve(), which returns only in a payload: a child that has already become
the exec's sandbox (the session's cgroup and namespaces, the sandbox user, no capabilities,
no_new_privs, the seccomp filter). There the code of /exec/cell.py runs as `python3
/exec/cell.py` (sidecar) or as dify-run.py (dify) would run it. Nothing of the session exists
here before that fork, and no code of any session ever runs in the template itself."""
import gc
import os
import sys


def _preload(names):
    for name in names:
        try:
            __import__(name)
        except Exception as e:  # a broken module only costs its import at exec time
            print(f"scopebox-template: skipping {name}: {e.__class__.__name__}: {e}", file=sys.stderr)
    # matplotlib's font list is built on first use: build it here, once for all.
    if "matplotlib.font_manager" in sys.modules:
        try:
            sys.modules["matplotlib.font_manager"].fontManager
        except Exception:
            pass
    sys.stdout.flush()
    sys.stderr.flush()


def _reseed():
    """What one payload must not share with another: the state seeded at import. random's global
    instance is reseeded by its own at-fork hook; these have none."""
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:
            pass
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is not None:
        try:
            mp_process.current_process().authkey = os.urandom(32)
        except Exception:
            pass
    tf = sys.modules.get("tempfile")
    if tf is not None:
        tf._name_sequence = None


def _join_session_paths(cell_dir):
    """Until the code arrives nothing the session can write is on sys.path (the template has no
    PYTHONPATH, its home and /workspace are empty). Now give the cell the paths a cold
    `python3 /exec/cell.py` has: its directory, PYTHONPATH=/workspace, then the user site (its
    .pth files run now, inside the exec) ahead of the system's site-packages."""
    import site
    sys.path[0] = cell_dir
    sys.path.insert(1, "/workspace")
    before = list(sys.path)
    user_site = site.getusersitepackages()
    if site.ENABLE_USER_SITE and os.path.isdir(user_site):
        site.addsitedir(user_site)
    added = [p for p in sys.path if p not in before]
    for p in added:
        sys.path.remove(p)
    where = next((i for i, p in enumerate(sys.path) if p.endswith("-packages")), len(sys.path))
    sys.path[where:where] = added


def _run_cell(profile, env, prepared):
    # Everything below the emptying of __main__ must be a local: this module's globals are
    # that dict.
    _sys, _os, cell = sys, os, "/exec/cell.py"
    import atexit
    import builtins
    import io
    import linecache
    import threading
    import tokenize
    import traceback

    # The exec's environment: the template's plus PYTHONPATH, the session's thread count and the
    # exec's extras. Only what differs is set (each write copies pages of the template's).
    target = {}
    for entry in env:
        name, _, value = entry.partition(b"=")
        target[_os.fsdecode(name)] = _os.fsdecode(value)
    for name in [n for n in _os.environ if n not in target]:
        del _os.environ[name]
    for name, value in target.items():
        if _os.environ.get(name) != value:
            _os.environ[name] = value
    _reseed()
    wait_for_code = _sys.modules["_scopebox_template"].wait_for_code
    del _sys.modules["_scopebox_template"]
    if prepared:
        # A prepared sandbox: pristine until here, nothing of the session seen. PID 1 releases
        # us once the exec's code is in /exec.
        wait_for_code()
    del wait_for_code

    with open(cell, "rb") as f:
        source = f.read()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        text = source.decode(encoding, "replace")
    except (SyntaxError, LookupError):
        text = source.decode("utf-8", "replace")
    linecache.cache[cell] = (len(source), None, text.splitlines(True), cell)
    _sys.argv[:] = [cell]
    _join_session_paths(_os.path.dirname(cell))
    if profile == 1:
        # dify-sandbox's hook, dify-run.py's own: print the traceback, exit 255.
        _sys.excepthook = _dify_excepthook(cell)

    def report(value, tb):
        # The interpreter's own printer reads source lines from disk; traceback's reads
        # linecache, which has the cell. A hook the code installed is called as such.
        value = value.with_traceback(tb)
        hook = _sys.excepthook
        if hook is _sys.__excepthook__:
            traceback.print_exception(type(value), value, tb)
            return 1
        try:
            hook(type(value), value, tb)
        except SystemExit as e:
            return exit_status(e)
        return 1

    main = _sys.modules["__main__"].__dict__

    def finish(status):
        # What the interpreter does at exit, minus tearing down every module (pandas and
        # matplotlib take ~100 ms to finalize): join the threads, run atexit, drop the cell's
        # names so that its open files are flushed and closed, flush stdio.
        for step in (threading._shutdown, atexit._run_exitfuncs, main.clear):
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

    # The cell runs in the real __main__ (pickle and multiprocessing look functions up there),
    # emptied of this file's names first.
    main.clear()
    main.update({"__name__": "__main__", "__file__": cell, "__doc__": None, "__package__": None,
                 "__spec__": None, "__loader__": None, "__cached__": None, "__builtins__": builtins})
    try:
        code = compile(source, cell, "exec", dont_inherit=True)
    except SyntaxError:
        finish(report(_sys.exc_info()[1], None))
    try:
        exec(code, main)
    except SystemExit as e:
        finish(exit_status(e))
    except BaseException:
        _, value, tb = _sys.exc_info()
        finish(report(value, tb.tb_next))  # without this frame, as the interpreter shows it
    finish(0)


def _load_dify_excepthook():
    """dify-run.py's excepthook(), from the file beside this one (run as a namespace of its own, not
    a module the code could import; its _run() is for `python3 dify-run.py` only)."""
    global _dify_excepthook
    path = os.path.join(os.path.dirname(__file__), "dify-run.py")
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    namespace = {"__name__": "_scopebox_dify_run", "__file__": path}
    exec(code, namespace)
    _dify_excepthook = namespace["excepthook"]


def _main():
    import importlib.machinery
    import importlib.util
    module_path, site = sys.argv[1], sys.argv[2]
    max_age, max_children, notify_fd = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    names = sys.argv[6:]
    dev, ino, mode, uid = (int(x) for x in site.split(":"))
    loader = importlib.machinery.ExtensionFileLoader("_scopebox_template", module_path)
    spec = importlib.util.spec_from_file_location("_scopebox_template", module_path, loader=loader)
    template = importlib.util.module_from_spec(spec)
    loader.exec_module(template)
    sys.modules["_scopebox_template"] = template
    _load_dify_excepthook()
    _preload(names)
    del importlib
    # What the imports left for the collector stays where it is: a payload that collects
    # does not copy the template's pages just to look at them.
    gc.collect()
    gc.freeze()
    print(f"scopebox-template: ready, {len(sys.modules)} modules imported", file=sys.stderr, flush=True)
    job = template.serve(3, notify_fd, dev, ino, mode, uid, max_age, max_children,
                         f"Serving, {len(sys.modules)} modules imported.")
    if job is None:
        # To be started anew (systemd restarts it): a new interpreter, so a new stack canary,
        # pointer guard, ASLR layout and hash secret for the next generation of children.
        sys.exit(75)
    _run_cell(*job)


_main()
