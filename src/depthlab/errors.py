"""The one exception type that depthlab raises for bad input.

The CLI turns a :class:`DepthlabError` into a single line ``depthlab: error: <message>`` on
stderr and exit status 2; library callers catch it like any exception.
"""


class DepthlabError(Exception):
    """Bad input or an impossible request, with a message that names the problem and the fix.

    Args:
        message: one sentence, no trailing newline, naming the offending field/file and a fix.
    """


class NonFiniteError(DepthlabError):
    """A non-finite loss or gradient stopped training (CLI exit status 3)."""
