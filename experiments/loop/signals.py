"""SIGTERM / SIGINT during a run: the run loop finishes the chunk in flight,
checkpoints, says how to resume and exits with `Preempted`."""

from __future__ import annotations

import signal


class Preempted(SystemExit):
  """Raised after a checkpoint was written in answer to SIGTERM/SIGINT.

  A `SystemExit` with code 128 + the signal number, as a shell reports a
  process killed by that signal, so schedulers see a non-zero exit.
  """


class SignalCatcher:
  """Records SIGTERM/SIGINT instead of dying; a second one kills as usual."""

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.received: int | None = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.received is not None:  # Second signal: stop now.
      signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
      signal.raise_signal(signum)
      return
    self.received = signum
    print(
      f"\nReceived {signal.Signals(signum).name}: finishing the current "
      "chunk, then checkpointing (send it again to stop at once).",
      flush=True,
    )

  def __enter__(self):
    try:
      for sig in self.SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    except ValueError:  # Not the main thread: leave signals alone.
      self._previous.clear()
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    return False
