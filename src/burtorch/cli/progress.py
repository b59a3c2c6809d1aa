"""The one-line progress display of `burtorch train`."""
from __future__ import annotations

import sys
import time


class Progress:
    """One status line: redrawn in place on a terminal, printed every `every` steps otherwise."""

    def __init__(self, total: int, stream=None, every: int = 100):
        stream = stream if stream is not None else sys.stderr  # looked up now: it may be redirected
        self.total, self.stream, self.every = total, stream, every
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.perf_counter()

    def update(self, step: int, loss: float, val: float | None, force: bool = False) -> None:
        if not (self.tty or force or step % self.every == 0 or step == self.total):
            return
        rate = step / max(time.perf_counter() - self.t0, 1e-9)
        width = 24
        done = int(width * step / self.total)
        bar = "#" * done + "-" * (width - done)
        msg = f"[{bar}] step {step}/{self.total}  loss {loss:.4f}"
        if val is not None:
            msg += f"  val {val:.4f}"
        msg += f"  {rate:.0f} steps/s"
        if self.tty:
            self.stream.write("\r" + msg + " " * 4)
            if step == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(msg + "\n")
        self.stream.flush()
