"""SIGTERM (a preempted VM, a scheduler) or Ctrl-C (SIGINT): save a checkpoint at a loop boundary
and stop the run.

One process (--strategy=cpu, gpu, tpu, or multi_worker with one worker): the signal sets a flag, and
at the next loop boundary the run saves and stops. SIGTERM then ends the command with status 0 (a
scheduler's stop is a normal end); Ctrl-C with 130, as an interrupted command does, after the same
save. A Python signal handler runs only when the main thread is back in Python, i.e. after the
compiled loop call under way; so a thread woken by signal.set_wakeup_fd sees each Ctrl-C as it
arrives: the first is acknowledged at once, and a second ends the process at once (status 130)
without saving. In an interactive session (IPython, a notebook kernel) there is no such thread and
the second interrupt goes to the session's own handler, so it does not kill the kernel.

Several worker processes (--strategy=multi_worker): a signal often reaches only some workers, and a
worker that stopped alone would leave the others waiting forever in the next all-reduce. There,
tf.distribute's PreemptionCheckpointHandler coordinates the stop: the signalled worker posts on the
cluster's coordination service the boundary to save at (the one after the next loop call), waits until
every worker has read it, and then every worker saves that same step and stops. A worker that was
not signalled itself says so in its last line: it stopped with the others.

Several JAX processes (--engine=jax with --strategy=multi_worker): the same promise without the
handler, which is tf.distribute's. At every loop boundary each process passes its own flag to
one collective (`JaxStrategy.any_process`, an all-gather of one bool, small next to a loop call);
every process gets the same answer, so when any of them was signalled all of them save
that same step and stop, with status 0. Ctrl-C on one process: that process exits 130 after the
shared save, the others stop as after SIGTERM (each says whether the signal was its own).
"""

import os
import signal
import socket
import sys
import tempfile
import threading

import tensorflow as tf

from trainers import engines


class Preemption:
    """Watches for SIGTERM and SIGINT during one run's training loop (a context manager).

    `save()` writes this worker's checkpoint of the current step (the chief's real one, or a non-chief
    worker's temporary copy). Call `saved_checkpoint()` at every loop boundary, on every worker;
    `interrupted` says whether the signal was Ctrl-C (SIGINT) rather than SIGTERM.
    """

    def __init__(self, strategy, save):
        self.save = save
        self.signalled = False
        self.interrupted = False
        self._previous = {}
        self._watcher = None
        self._cluster = engines.of(strategy).stop_coordinator(strategy)

    def __enter__(self):
        for signum, handler in ((signal.SIGTERM, self._on_sigterm), (signal.SIGINT, self._on_sigint)):
            try:
                self._previous[signum] = signal.signal(signum, handler)
            except ValueError:  # not the main thread (e.g. a notebook's worker thread): no handler
                pass
        if signal.SIGINT in self._previous and not _interactive():
            self._watcher = _InterruptWatcher()
        if self._cluster is not None:
            self._cluster.run = self
        return self

    def __exit__(self, *exc_info):
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        for signum, previous in self._previous.items():
            if previous is not None:
                signal.signal(signum, previous)
        self._previous = {}
        if self._cluster is not None:
            self._cluster.run = None
        return False

    def _on_sigterm(self, signum, frame):
        # Only a flag: the save happens in the main loop, between compiled loop calls.
        self.signalled = True

    def _on_sigint(self, signum, frame):
        self.signalled = self.interrupted = True
        if self._watcher is None:  # interactive: say it here, and leave a second one to the session
            _acknowledge()
            signal.signal(signal.SIGINT, self._previous.get(signal.SIGINT) or signal.default_int_handler)

    def cause(self):
        """Why this process stopped, as its last line says it: its own signal, or (several
        processes) another process's, which reaches it only as the agreed step to stop at."""
        if self.interrupted:
            return "interrupted (Ctrl-C)"
        if self.signalled:
            return "preempted (SIGTERM)"
        return "stopped with the other processes (one of them got SIGTERM or Ctrl-C)"

    def saved_checkpoint(self):
        """True once this run has saved the checkpoint of the current step because of a SIGTERM (here
        or, with several workers, on any worker): the run must then stop."""
        if self._cluster is None:
            if self.signalled:
                self.save()
            return self.signalled
        return self._cluster.saved_checkpoint()


def _interactive():
    """In `python -i`, or inside a running IPython shell or notebook kernel (the IPython package
    alone is no sign: other libraries import it when it is installed)."""
    ipython = sys.modules.get("IPython")
    running = getattr(ipython, "get_ipython", lambda: None)() is not None if ipython else False
    return bool(sys.flags.interactive) or running


def _acknowledge():
    print(
        "\nCtrl-C: saving a checkpoint at the next step boundary, then stopping "
        "(Ctrl-C again stops at once, without saving)",
        file=sys.stderr,
        flush=True,
    )


_STOP = 0  # no signal has number 0: the byte that tells the watcher to end


class _InterruptWatcher:
    """Counts SIGINTs the moment they arrive, while the main thread may be inside a compiled call.

    Python's C-level handler writes each signal's number to the wakeup socket at once; this
    thread reads it (the main thread releases the GIL while TensorFlow runs).
    """

    def __init__(self):
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        self._count = 0
        self._thread = threading.Thread(target=self._watch, name="interrupt-watcher", daemon=True)
        self._thread.start()

    def _watch(self):
        while True:
            try:
                received = self._read.recv(64)
            except OSError:  # closed
                return
            if not received or _STOP in received:
                return
            for signum in received:
                if signum == signal.SIGINT:
                    self._count += 1
                    if self._count == 1:
                        _acknowledge()
                    else:
                        print("Ctrl-C again: stopped without saving", file=sys.stderr, flush=True)
                        sys.stdout.flush()
                        os._exit(130)

    def close(self):
        signal.set_wakeup_fd(self._previous_fd)
        # Wake the thread and let it end before its socket closes (a recv blocked on a closed
        # descriptor would not return, and the number could be reused by another file).
        try:
            self._write.send(bytes([_STOP]))
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._write.close()
        self._read.close()


class _Saved(Exception):
    """Raised by the handler's exit_fn: every worker has saved, the run returns."""


class _ClusterHandler:
    """The process's PreemptionCheckpointHandler, adapted to the trainer; `run` is the Preemption
    of the run under way (None between runs).

    How it is made to fit:
    - termination_watcher_fn reads the run's SIGTERM flag (the handler polls it every second), so
      SIGTERM is the signal everywhere: left to itself, on a Google Cloud GPU VM the handler would watch
      the metadata server's maintenance events instead. (On a Google Cloud CPU VM TensorFlow makes
      the handler do nothing at all, so there a multi-worker run ignores SIGTERM.)
    - save_fn is the run's own save, so checkpoints keep their layout (the chief's in
      WORKDIR/checkpoints, the others' in a temporary folder they delete) and their number (the step).
    - exit_fn raises instead of ending the process (by default sys.exit(42)), so that the command
      prints its line and exits 0 like a single process.
    - grace_period=0: save at the first step all workers can agree on, then stop.
    - The handler counts its calls to agree on a step, restores that count from the checkpoint
      manager it is given and adds it to that manager's checkpoint. The trainer's manager would not
      do: the chief would restore the count from WORKDIR/checkpoints and the other workers from their
      empty temporary folders, and after a resume they would save at different steps. An empty
      checkpoint in an empty folder makes every worker count from 0: once per loop boundary, the
      same sequence on every worker, so the counts agree.
    - One handler per process, shared by the runs it makes (a sweep makes several): its keys on the
      coordination service have fixed names and can be posted once per cluster, and its watcher
      threads outlive a run.
    """

    def __init__(self, strategy):
        self.run = None
        config = tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=lambda: self.run is not None and self.run.signalled,
            exit_fn=_raise_saved,
            grace_period=0,
            save_fn=lambda: self.run.save(),
        )
        with tempfile.TemporaryDirectory() as empty:
            manager = tf.train.CheckpointManager(tf.train.Checkpoint(), empty, max_to_keep=1)
            self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver, manager, termination_config=config
            )

    def saved_checkpoint(self):
        try:
            self.handler.save_checkpoint_if_preempted()
        except _Saved:
            return True
        return False


def _raise_saved():
    raise _Saved()


_HANDLER = []


def cluster_handler(strategy):
    """The process's handler of several tf.distribute workers (the tf engine's stop coordinator)."""
    if not _HANDLER:
        _HANDLER.append(_ClusterHandler(strategy))
    return _HANDLER[0]
