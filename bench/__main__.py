"""`python -m bench` and the `attnbench` command: Ctrl-C is ours from the first line, so one pressed while Python
imports the command line still ends with exit 130 and one line (bench.cli catches it from then on)."""

import signal
import sys
from typing import NoReturn


def entry() -> NoReturn:
    try:
        from bench.engine import interrupt

        interrupt.keep_lost()  # a Ctrl-C swallowed inside the imports below still ends the run (bench.engine.interrupt)
        from bench.cli import main

        code = main()
    except KeyboardInterrupt:  # before bench.cli could catch it: the same line as its own
        print("interrupted while starting; nothing was run", file=sys.stderr)
        code = 130
    # The outcome is decided: a Ctrl-C during the interpreter's shutdown must not replace it with a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code == 130:
        # A Ctrl-C that reached Python inside code run through C's PyRun_String (some of torch's start-up is) leaves
        # CPython's "unhandled KeyboardInterrupt" flag set although it was caught, and the interpreter would end by
        # killing itself with SIGINT instead of exiting 130. Running an empty program through that call clears it.
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"")
    sys.exit(code)


if __name__ == "__main__":
    entry()
