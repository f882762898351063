"""What a training loop reports: a progress bar, throughput, metrics.jsonl and quiet orbax logs."""

from __future__ import annotations

import json
import os
import sys
import time

from absl import logging


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


def append_metrics(path: str, record: dict) -> None:
    """Appends one JSON record (one line) to a metrics.jsonl file."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def truncate_metrics(path: str, last_step: int) -> None:
    """Drops records past `last_step` (written by a killed run after its last checkpoint)."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            if r["step"] <= last_step:
                f.write(json.dumps(r) + "\n")


class QuietOrbax:
    """Drops orbax's INFO records (several per save) from absl's log; warnings still pass."""

    def filter(self, record) -> bool:
        """Keeps a record unless it is below WARNING and comes from orbax."""
        return record.levelno >= 30 or "orbax" not in record.pathname


def quiet_orbax_logs() -> None:
    """Installs `QuietOrbax` on absl's handler (once)."""
    handler = logging.get_absl_handler()
    if not any(isinstance(f, QuietOrbax) for f in handler.filters):
        handler.addFilter(QuietOrbax())
