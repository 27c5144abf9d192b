"""The ``depthlab`` console command: :func:`depthlab.cli.main`, with a Ctrl-C during its import an interruption.

The console script imports its target before calling it; a Ctrl-C in that first tenth of a second
would print Python's traceback instead of ``depthlab: interrupted`` (exit 130), which
:func:`depthlab.cli.main` says for every later moment.
"""

from __future__ import annotations

import sys


def main() -> int:
    """Import the command line and run it; exit status 130 when interrupted while importing."""
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print("depthlab: interrupted", file=sys.stderr)
        return 130
    return cli_main()
