"""How a run is asked to stop: a signal (SIGTERM, SIGINT, a launcher's SIGUSR2), seen from any thread."""
from __future__ import annotations

import os
import signal
import threading


class StopSignal:
    """SIGTERM, SIGINT or SIGUSR2 asks the loop to stop after the current step; a second SIGINT
    forces it. SIGUSR2 is how submitit (the SLURM launcher) announces a timeout: once the run has
    written its checkpoint, `hand_over` passes the signal on to the handler that was there before
    (submitit's, which requeues the job), so the cluster's own mechanism still runs.

    Python runs a signal's handler in the main thread, and only between bytecodes: while the main
    thread waits in a compiled call that drives many env steps, the handler waits too, and the
    driven env steps (in TensorFlow's threads) would not see the request until the call returned.
    So the signal is also written at once, by the interpreter's C handler, to a pipe
    (`signal.set_wakeup_fd`) that `requested` reads from any thread."""

    SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGUSR2", None)) if s is not None)

    def __init__(self):
        self.signum: int | None = None  # set by the handler: the signal that stopped the run
        self._seen: int | None = None  # read from the pipe, possibly before the handler has run
        self._previous: dict = {}
        self._pipe: tuple[int, int] | None = None
        self._previous_fd = -1
        self._main = threading.main_thread().ident

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            self._pipe = (read, write)
            self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        return self

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc):
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_fd)
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def requested(self) -> bool:
        if self.signum is not None or self._seen is not None:
            return True
        # the main thread runs the handler itself, between bytecodes: only other threads read the pipe
        if self._pipe is not None and threading.get_ident() != self._main:
            try:
                arrived = os.read(self._pipe[0], 64)
            except BlockingIOError:  # nothing arrived
                return False
            for signum in arrived:  # the pipe carries every signal Python handles, not only these
                if signum in self.SIGNALS:
                    self._seen = signum
                    return True
        return False

    def hand_over(self, step: int) -> None:
        """Call the previous Python handler of the signal that stopped the run, if there was one."""
        previous = self._previous.get(self.signum)
        if self.signum is not None and callable(previous) and previous is not signal.default_int_handler:
            # the job's log says where the run stopped: the handler may requeue the job and exit
            print(f"stopped by {signal.Signals(self.signum).name} at step {step}; checkpoint written; passing the "
                  f"signal on to the handler that was there before (a launcher's, e.g. submitit's, which requeues "
                  f"the job)", flush=True)
            # submitit's handler runs `scontrol requeue`, and SLURM's SIGTERM for that requeue reaches
            # the command too: killed before it exits, it reads as the job's failure though the job was
            # requeued. A signal ignored here stays ignored in a child; the run has stopped already.
            term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                previous(self.signum, None)
            finally:
                signal.signal(signal.SIGTERM, term)
