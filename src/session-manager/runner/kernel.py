# SPDX-License-Identifier: LGPL-2.1-or-later
"""The kernel of a stateful session (docs/api.md "Stateful sessions"): one interpreter that runs
every python cell of the session in the same namespace, like a notebook kernel. PID 1 of the
sandbox (sandbox-kernel.c) starts it as the sandbox's payload, under the sandbox's rules, and
hands it each cell on fd 4: a message with the cell's number (4 bytes) and the code, the cell's
stdout and its stderr as fds, and for a cell whose results are wanted as records ("display") a
fourth fd, the pipe for them. The cell runs as __main__ code; an exception prints its traceback
and gives exit code 1, SystemExit(n) gives n (as `python3 /exec/cell.py` would) and the kernel
goes on. It says the cell's number (4 bytes) when the cell begins, and the number and its exit
code (4 bytes each) when it is over; PID 1 then stops this process until the next cell. Everything
here is the sandbox's own code: PID 1 trusts nothing it says beyond that answer, and drops one
whose number is not the cell's.

A display cell writes its records on the fourth fd, one JSON object a line (docs/api.md "Display
records"): the execution count first, then each value shown (display(), plt.show(), the figures
left open at its end, its last expression's value as the main result) and an uncaught exception
as an error record instead of a traceback on stderr. The runner frames those lines as they come
and never reads them; the gateway parses them."""


def _kernel():
    # This function's globals are __main__'s, which the cells get emptied: locals only below.
    import linecache
    import os
    import socket
    import struct
    import sys
    import traceback

    here = _kernel.__code__.co_filename
    display_support = _display_support
    ns = sys.modules["__main__"].__dict__
    for name in [n for n in ns if n not in ("__name__", "__builtins__", "__spec__", "__loader__")]:
        del ns[name]
    ns["__doc__"] = None
    sys.argv[:] = ["/exec/cell.py"]
    sys.path[0] = "/exec"
    sock = socket.socket(fileno=4)
    null = os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
    count = 0
    display = None

    def flush_output():
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass

    # The environment block a cell's code may begin with (src/shared/exec-command.h): NUL-terminated
    # "NAME=value" entries up to an empty one, set for the cell; what they replaced comes back after.
    ENV_MAGIC = b"\0scopebox-env-1\0"

    def cell_environment(source, saved):
        pos = len(ENV_MAGIC)
        for _ in range(1024 + 1):
            end = source.find(b"\0", pos)
            if end < 0:
                raise ValueError("an environment block without its end")
            entry = source[pos:end]
            pos = end + 1
            if not entry:
                return source[pos:]
            name, sep, value = entry.partition(b"=")
            if not sep or not name:
                raise ValueError("an environment entry without a name")
            if name not in saved:
                saved[name] = os.environb.get(name)
            os.environb[name] = value
        raise ValueError("too many environment entries")

    def restore_environment(saved):
        for name, value in saved.items():
            if value is None:
                os.environb.pop(name, None)
            else:
                os.environb[name] = value

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
        msg, fds, _, _ = socket.recv_fds(sock, 16, 4)
        if len(msg) != 4 or len(fds) not in (3, 4):
            os._exit(70)
        (seq,) = struct.unpack("=I", msg)
        code_fd, out_fd, err_fd = fds[:3]
        results_fd = fds[3] if len(fds) == 4 else -1
        if results_fd >= 0:
            # Received as they were sent: kept from what the cell executes.
            os.set_inheritable(results_fd, False)
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
        if results_fd >= 0 and display is None:
            display = display_support(here, flush_output)
        # The cell begins: from now on, whatever ends this process ended it.
        try:
            sock.send(struct.pack("=I", seq))
        except OSError:
            os._exit(70)
        saved_env = None
        try:
            source = b"".join(chunks)
            if source.startswith(ENV_MAGIC):
                saved_env = {}
                source = cell_environment(source, saved_env)
            filename = "<cell %d>" % count
            try:
                text = source.decode("utf-8")
                linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
            except UnicodeDecodeError:
                pass
            if results_fd >= 0:
                status = display.run(source, filename, ns, results_fd, count, exit_code,
                                     [os.fstat(1), os.fstat(2)])
            else:
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
        flush_output()
        if saved_env is not None:
            restore_environment(saved_env)
        # The cell's pipes end with the cell: the runner sees them close.
        os.dup2(null, 1)
        os.dup2(null, 2)
        if results_fd >= 0:
            display.end()
            try:
                os.close(results_fd)
            except OSError:
                pass
        try:
            sock.send(struct.pack("=Ii", seq, status))
        except OSError:
            os._exit(70)


def _display_support(here, flush_output):
    """What a display cell has beyond a plain one: its records, the `display` builtin, matplotlib's
    figures as PNG. Made at the first display cell: a kernel that never runs one is as before."""
    import ast
    import base64
    import builtins
    import fcntl
    import importlib.machinery
    import io
    import json
    import os
    import stat
    import sys
    import termios
    import threading
    import time
    import tokenize
    import traceback

    # The MIME types of Jupyter's bundles and the keys E2B gives them; others go to "extra".
    keys = {
        "text/plain": "text",
        "text/html": "html",
        "text/markdown": "markdown",
        "image/svg+xml": "svg",
        "image/png": "png",
        "image/jpeg": "jpeg",
        "application/pdf": "pdf",
        "text/latex": "latex",
        "application/json": "json",
        "application/javascript": "javascript",
    }
    # IPython's _repr_*_ methods, in its formatters' order.
    reprs = [
        ("text/html", "_repr_html_"),
        ("text/markdown", "_repr_markdown_"),
        ("image/svg+xml", "_repr_svg_"),
        ("image/png", "_repr_png_"),
        ("image/jpeg", "_repr_jpeg_"),
        ("application/pdf", "_repr_pdf_"),
        ("text/latex", "_repr_latex_"),
        ("application/json", "_repr_json_"),
        ("application/javascript", "_repr_javascript_"),
    ]
    binary = {"image/png", "image/jpeg", "application/pdf"}

    class Display:
        fd = -1
        pipes = []     # the cell's stdout and stderr (st_dev, st_ino)
        shown = set()  # ids of the figures shown during the cell
        lock = threading.Lock()  # the cell's threads display too: one line at a time

        def write(self, record):
            """One record, after what the cell printed before it, and read before what it prints
            after: the runner frames each pipe as it reads it, so each waits for the other."""
            if self.fd < 0:
                return
            line = None
            for drop in (None, "json", "extra"):
                record.pop(drop, None)
                try:
                    line = json.dumps(record, ensure_ascii=False, allow_nan=False)
                    break
                except (TypeError, ValueError, RecursionError):
                    pass
            if line is None:
                return
            with self.lock:
                self.write_line((line + "\n").encode("utf-8", "replace"))

        def write_line(self, data):
            if self.fd < 0:
                return
            flush_output()
            for fd in (1, 2):
                try:
                    st = os.fstat(fd)
                except OSError:
                    continue
                # The cell's own pipes, not what it put in their place.
                if (st.st_dev, st.st_ino) == self.pipes[fd - 1]:
                    drained(fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError:
                self.fd = -1
                return
            drained(self.fd)

        def result(self, obj, main):
            record = {"type": "result", "is_main_result": main}
            record.update(bundle(obj))
            # As E2B's server gives it: a string's text without its quotes ('abc' is abc).
            text = record.get("text")
            if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
                record["text"] = text[1:-1]
            self.write(record)

        def run(self, source, filename, ns, fd, count, exit_code, pipes):
            self.fd = fd
            self.pipes = [(st.st_dev, st.st_ino) for st in pipes]
            self.shown = set()
            builtins.display = show
            self.write({"type": "number_of_executions", "execution_count": count})
            # A display cell's output comes a line at a time, as a notebook's does (print("a")
            # is one "a\n", not "a" and "\n"); every other cell's is written through as before.
            for f in (sys.__stdout__, sys.__stderr__):
                try:
                    f.reconfigure(line_buffering=True, write_through=False)
                except Exception:
                    pass
            try:
                return self.run_cell(source, filename, ns, exit_code)
            finally:
                for f in (sys.__stdout__, sys.__stderr__):
                    try:
                        f.flush()
                        f.reconfigure(line_buffering=False, write_through=True)
                    except Exception:
                        pass

        def run_cell(self, source, filename, ns, exit_code):
            try:
                tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr) and not quiet(source):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, filename, "exec"), ns)
                if last is not None:
                    value = eval(compile(last, filename, "eval"), ns)
                    if value is not None:
                        self.result(value, True)
                self.figures()
                return 0
            except SystemExit as e:
                self.figures()
                return exit_code(e)
            except BaseException as e:
                self.figures()
                self.error(e)
                return 1

        def error(self, e):
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == here:
                tb = tb.tb_next
            try:
                text = "".join(traceback.format_exception(type(e), e, tb))
            except Exception:
                text = ""
            try:
                value = str(e)
            except Exception:
                value = ""
            self.write({"type": "error", "name": type(e).__name__, "value": value, "traceback": text})

        def figures(self, close=True):
            """The figures still open at the end of the cell (or at plt.show()), each once, as a
            notebook shows them; then closed."""
            plt = sys.modules.get("matplotlib.pyplot")
            if plt is None:
                return
            try:
                helpers = sys.modules["matplotlib._pylab_helpers"]
                figs = [m.canvas.figure for m in helpers.Gcf.get_all_fig_managers()]
            except Exception:
                return
            for fig in figs:
                if id(fig) not in self.shown:
                    png = figure_png(fig)
                    if png is not None:
                        self.write({"type": "result", "is_main_result": False,
                                    "text": repr(fig), "png": png})
            if close:
                try:
                    plt.close("all")
                except Exception:
                    pass

        def end(self):
            self.fd = -1
            if getattr(builtins, "display", None) is show:
                del builtins.display

    d = Display()

    def drained(fd):
        # Until the runner read what this pipe holds: it frames each pipe as it reads it. A reader
        # that lags holds it back; one that stops for long only costs the order.
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return
        except OSError:
            return
        buf = bytearray(4)
        pause = 0.0001
        left = None
        since = time.monotonic()
        while True:
            try:
                fcntl.ioctl(fd, termios.FIONREAD, buf)
            except OSError:
                return
            n = int.from_bytes(buf, sys.byteorder)
            if n == 0:
                return
            if n != left:
                left, since = n, time.monotonic()
            elif time.monotonic() - since > 10:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def quiet(source):
        # As in IPython: a cell whose last token is ";" shows no value.
        try:
            tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
        except Exception:
            return False
        skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER,
                tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
        for t in reversed(tokens):
            if t.type not in skip:
                return t.type == tokenize.OP and t.string == ";"
        return False

    def figure_png(fig):
        # As IPython's inline figures: none for a figure without axes.
        try:
            if not fig.axes:
                return None
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            d.shown.add(id(fig))
            return base64.b64encode(buf.getvalue()).decode("ascii")
        except Exception:
            return None

    def is_figure(obj):
        figure = sys.modules.get("matplotlib.figure")
        return figure is not None and isinstance(obj, figure.Figure)

    def bundle(obj):
        data = {}
        mimebundle = getattr(obj, "_repr_mimebundle_", None) if not isinstance(obj, type) else None
        if callable(mimebundle):
            try:
                b = mimebundle(include=None, exclude=None)
                if isinstance(b, tuple):
                    b = b[0]
                if isinstance(b, dict):
                    data.update((k, v) for k, v in b.items() if isinstance(k, str))
            except Exception:
                pass
        for mime, name in reprs:
            method = getattr(obj, name, None) if not isinstance(obj, type) else None
            if mime in data or not callable(method):
                continue
            try:
                v = method()
            except Exception:
                continue
            if isinstance(v, tuple):
                v = v[0]
            if v is not None:
                data[mime] = v
        if "image/png" not in data and is_figure(obj):
            png = figure_png(obj)
            if png is not None:
                data["image/png"] = png
        if "application/json" not in data and type(obj) in (dict, list):
            data["application/json"] = obj
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(obj)
            except Exception as e:
                data["text/plain"] = "<%s: repr failed (%s)>" % (type(obj).__name__, type(e).__name__)
        record = {}
        for mime, v in data.items():
            if mime in binary and isinstance(v, (bytes, bytearray)):
                v = base64.b64encode(v).decode("ascii")
            elif isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            if mime in keys:
                record[keys[mime]] = v
            else:
                record.setdefault("extra", {})[mime] = v
        return record

    def show(*objs, **kwargs):
        """display(obj, ...): each object as a result record, as IPython's display() in a notebook."""
        for obj in objs:
            d.result(obj, False)

    # plt.show() shows the open figures and closes them, as a notebook's inline backend does. The
    # sandbox's MPLBACKEND is Agg already; pyplot's show is wrapped as it is imported.
    def pyplot_show(*args, **kwargs):
        if d.fd >= 0:
            d.figures()

    def wrap_pyplot(module):
        orig = getattr(module, "show", None)
        if getattr(orig, "__wrapped_by_scopebox__", False):
            return
        pyplot_show.__wrapped_by_scopebox__ = True
        pyplot_show.__doc__ = getattr(orig, "__doc__", None)
        module.show = pyplot_show

    class PyplotLoader:
        def __init__(self, loader):
            self.loader = loader

        def create_module(self, spec):
            return self.loader.create_module(spec)

        def exec_module(self, module):
            self.loader.exec_module(module)
            wrap_pyplot(module)

    class PyplotFinder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "matplotlib.pyplot":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = PyplotLoader(spec.loader)
            return spec

    if "matplotlib.pyplot" in sys.modules:
        wrap_pyplot(sys.modules["matplotlib.pyplot"])
    else:
        sys.meta_path.insert(0, PyplotFinder)
    return d


_kernel()
