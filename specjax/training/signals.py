"""Stopping a training loop cleanly: SIGTERM/SIGINT become a flag checked after each step."""

from __future__ import annotations

import signal
import threading


class StopRequest:
    """Turns SIGTERM/SIGINT into a flag the loop checks after each step (then saves and exits).

    A context manager: the previous handlers come back on exit. Outside the main thread (where
    `signal.signal` is not allowed) it installs nothing and `signal` stays None.

    Attributes:
      signal: the name of the signal received ("SIGTERM"), or None.
    """

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signal() needs it
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        del frame
        self.signal = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
