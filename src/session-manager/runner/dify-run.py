# SPDX-License-Identifier: LGPL-2.1-or-later
"""How a dify run's Python code runs (docs/dify.md): as `python3 /exec/cell.py` would, with
dify-sandbox's exception hook. Upstream's prescript sets a sys.excepthook that prints the
traceback and calls sys.exit(-1), so an uncaught exception (a SyntaxError too) exits with status
255, and Dify's users see "process exited with code 255" followed by the traceback. The runner
starts this in the finished sandbox, as the interpreter's own program; it is the sandbox's code,
under the sandbox's rules. The template (template.py) loads this file for excepthook() too, and
runs a dify run's code with the same hook."""


def excepthook(cell):
    """Upstream's hook for the code of 'cell', minus the frames before the cell's (they are no line
    of the user's). Locals only: its globals may be __main__'s, which the cell gets emptied."""
    import sys
    import traceback

    def hook(kind, value, tb):
        while tb is not None and tb.tb_frame.f_code.co_filename != cell:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
        sys.stderr.flush()
        sys.exit(-1)

    return hook


def _run():
    # This function's globals are __main__'s, which the cell gets emptied: locals only below.
    import builtins
    import sys

    cell = "/exec/cell.py"
    sys.excepthook = excepthook(cell)
    # What the cold interpreter gives the cell: its name, and its directory first on sys.path.
    sys.argv[:] = [cell]
    sys.path[0] = "/exec"
    with open(cell, "rb") as f:
        source = f.read()
    code = compile(source, cell, "exec", dont_inherit=True)
    main = sys.modules["__main__"].__dict__
    main.clear()
    main.update({"__name__": "__main__", "__file__": cell, "__doc__": None, "__package__": None,
                 "__spec__": None, "__loader__": None, "__cached__": None, "__builtins__": builtins})
    exec(code, main)


if __name__ == "__main__":
    _run()
