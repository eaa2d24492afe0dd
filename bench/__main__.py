"""`python -m bench`: Ctrl-C is ours from the first line, so one pressed while Python imports the command line
still ends with exit 130 and one line (bench.cli catches it from then on)."""

import signal
import sys

try:
    from bench.cli import main

    code = main()
except KeyboardInterrupt:  # before bench.cli could catch it: the same line as its own
    print("interrupted while starting; nothing was run", file=sys.stderr)
    code = 130
# The outcome is decided: a Ctrl-C during the interpreter's shutdown must not replace it with a traceback.
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.exit(code)
