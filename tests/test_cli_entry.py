"""The console command's entry: a Ctrl-C while it imports the command line is an interruption."""

import subprocess
import sys

# A finder that raises KeyboardInterrupt when depthlab.cli is imported: the Ctrl-C of a user who
# presses it in the first tenth of a second, made deterministic.
INTERRUPT_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "depthlab.cli":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
from depthlab._entry import main
sys.exit(main())
"""


def test_ctrl_c_while_importing_is_one_line_and_130():
    r = subprocess.run([sys.executable, "-c", INTERRUPT_IMPORT, "train"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "depthlab: interrupted" and "Traceback" not in r.stderr


def test_the_console_command_runs_the_command_line():
    r = subprocess.run([sys.executable, "-m", "depthlab", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("depthlab ")
