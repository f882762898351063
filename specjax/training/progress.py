"""A progress bar and a throughput meter for training loops (no dependency beyond the stdlib)."""

from __future__ import annotations

import sys
import time


class Throughput:
    """Tokens per second over the steps since the last `rate()` call (wall clock)."""

    def __init__(self):
        self._t0 = time.perf_counter()
        self._tokens = 0

    def add(self, tokens: int) -> None:
        """Counts `tokens` processed since the last `rate()`."""
        self._tokens += tokens

    def rate(self) -> float:
        """Tokens per second since the last call (or construction); resets the window."""
        now = time.perf_counter()
        rate = self._tokens / max(now - self._t0, 1e-9)
        self._t0, self._tokens = now, 0
        return rate


class ProgressBar:
    """`[#####.....] step/total  text` on one terminal line, redrawn in place.

    When the stream is not a terminal (a log file) nothing is drawn: the loop's periodic log
    lines carry the same information without filling the file with carriage returns.

    Args:
      total: the last step.
      start: the first step (a resumed run starts part-way).
      width: characters of the bar.
      stream: where to draw; default stderr.
    """

    def __init__(self, total: int, start: int = 0, width: int = 30, stream=None):
        self.total, self.width = max(int(total), 1), width
        self.stream = sys.stderr if stream is None else stream
        self.enabled = getattr(self.stream, "isatty", lambda: False)()
        self._t0, self._start = time.perf_counter(), start

    def eta_seconds(self, step: int) -> float | None:
        """Seconds left at the average pace since the bar was created, or None before a step."""
        done = step - self._start
        if done <= 0:
            return None
        return (time.perf_counter() - self._t0) / done * (self.total - step)

    def update(self, step: int, text: str = "") -> None:
        """Redraws the bar at `step` with a trailing `text`."""
        if not self.enabled:
            return
        filled = int(self.width * min(step, self.total) / self.total)
        eta = self.eta_seconds(step)
        eta_text = "" if eta is None else f" eta {eta / 60:.1f} min"
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(f"\r[{bar}] {step}/{self.total}{eta_text}  {text}\033[K")
        self.stream.flush()

    def close(self) -> None:
        """Ends the bar's line."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
