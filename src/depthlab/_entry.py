"""The ``depthlab`` console command: :func:`depthlab.cli.main`, with a Ctrl-C during its import an interruption.

The console script imports its target before calling it; a Ctrl-C in that first tenth of a second
would print Python's traceback instead of ``depthlab: interrupted`` (exit 130), which
:func:`depthlab.cli.main` says for every later moment.
"""

from __future__ import annotations

import signal
import sys
import threading


def main() -> int:
    """Import the command line and run it; exit status 130 when interrupted while importing."""
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("depthlab: interrupted", file=sys.stderr)
        return 130
    try:
        return cli_main()
    finally:
        # the command has ended: a Ctrl-C while the interpreter shuts down (torch's atexit callbacks) ends the process
        # as the signal does, not with "Exception ignored in atexit callback" and a traceback
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_DFL)
