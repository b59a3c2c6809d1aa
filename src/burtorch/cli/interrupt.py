"""Turning Ctrl-C and SIGTERM into "stop after this step" while training.

A training step interrupted halfway would leave parameters and optimizer state out of step with
each other, so the first SIGINT or SIGTERM only asks the loop to stop at the next step boundary
(where a checkpoint is consistent); a second SIGINT interrupts at once.
"""
from __future__ import annotations

import signal
import threading

from ..platform import STOP_SIGNALS


class StopRequests:
    """``with StopRequests() as stop:`` ... ``if stop.signal: break`` (the signal's number).

    Handlers are installed only in the main thread (the only one Python delivers signals to) and
    the previous ones are restored on exit.
    """

    SIGNALS = STOP_SIGNALS  # SIGINT and SIGTERM on POSIX, SIGINT and SIGBREAK on Windows

    def __init__(self):
        self.signal = None
        self._previous = {}

    def _handle(self, signum, frame):
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # asked twice: stop now, without a checkpoint
        self.signal = signum

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                signum = getattr(signal, name, None)
                if signum is not None:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as shells report a process a signal stopped."""
        return 128 + int(self.signal) if self.signal is not None else 0
