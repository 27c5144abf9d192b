"""Checkpoint writes in a background thread: one at a time, in order, a failed one's error raised at the next wait.

The training loop hands a checkpoint's bytes (a snapshot taken at once) here, so hashing and writing them goes on
while it trains (:attr:`depthlab.training.checkpointer.Checkpointer.background`).
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from .. import checkpoint as ckpt

__all__ = ["BackgroundWrites"]


class BackgroundWrites:
    """The checkpoint write in flight (at most one) and the error of one that failed, until it is raised.

    Attributes:
        thread: the writing thread, None when no write is in flight (none started, or waited for).
    """

    def __init__(self) -> None:
        self.thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def start(self, *args) -> None:
        """Write a checkpoint (``args``: :func:`depthlab.checkpoint.write_checkpoint`'s) in a thread; the caller
        has waited (:meth:`wait`) for the write before it, so the writes stay in order."""
        self.thread = threading.Thread(target=self._write, args=args, name="depthlab-checkpoint", daemon=False)
        self.thread.start()

    def _write(self, *args) -> None:
        try:
            ckpt.write_checkpoint(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, raised at its next save or wait
            self._error = e

    def wait(self) -> None:
        """Wait for the write in flight, if any.

        Raises:
            the error that write ended with (once).
        """
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def settle(self, log: Callable[[str], None]) -> None:
        """:meth:`wait` where another error is already on its way: a failed write is a ``log`` line, not raised."""
        try:
            self.wait()
        except Exception as e:  # noqa: BLE001 - the error in flight is the one to report (Ctrl-C is not swallowed)
            log(f"warning: the last checkpoint write failed too ({type(e).__name__}: {e})")
