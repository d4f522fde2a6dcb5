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

A run's whole life is watched, not only its loop (`watching`: a command's handlers go up before
it parses its flags and stay until the process ends). The safe points besides the loop
boundaries: the first loop call (one process signalled while it started, built or restored stops
there, with nothing new to save; several processes go on to their first boundary, where they
agree), and at the end, after the final checkpoint and after the final evaluations (the run stops
with that checkpoint saved: the rerun evaluates and exports it). The export and results.json are
written to the end once begun; a signal that arrives then is reported after them.

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

import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading

import tensorflow as tf

from trainers import early_signals, engines


class Stopped(Exception):
    """SIGTERM where no run reads the flag (a command starting, a few-shot probe): the command
    stops at once, as Ctrl-C does there."""


class _Signals:
    """What SIGTERM and SIGINT did to this process since the outermost `watching()` began."""

    def __init__(self):
        self.signalled = self.interrupted = False
        self.depth = 0
        self.readers = 0  # watchers that read the flags at safe points (a run)
        self.previous = {}
        self.watcher = None
        self.kept = False  # a command's handlers, left in place until the process ends
        self.raised = False  # a Ctrl-C stopped the command at once (no acknowledgement then)


_SIGNALS = _Signals()


@contextlib.contextmanager
def watching(reads=True, whole_process=False):
    """SIGTERM and Ctrl-C handled by this module while inside (nested uses share one set of
    handlers; the outermost clears the flags).

    reads: the block reads the flags at safe points (a run: trainers/training.py), so a signal
    only sets them. Where no block that reads them is under way, SIGTERM raises `Stopped` and
    Ctrl-C KeyboardInterrupt at once, as no handler would, but with the command's own line.
    whole_process: the command's own process (trainers/cli.py): when the block ends the signals
    are ignored to the process's end, so a signal during the interpreter's shutdown (seconds,
    with TensorFlow or JAX loaded) cannot turn a finished command into one killed by SIGTERM
    (status 143).
    """
    state = _SIGNALS
    early = []
    if state.depth == 0 and not state.kept:
        state.signalled = state.interrupted = state.raised = False
        # What came while the command was importing (trainers/early_signals.py).
        early = early_signals.take()
        state.signalled = bool(early)
        state.interrupted = signal.SIGINT in early
        for signum, handler in ((signal.SIGTERM, _on_sigterm), (signal.SIGINT, _on_sigint)):
            try:
                state.previous[signum] = signal.signal(signum, handler)
            except ValueError:  # not the main thread (e.g. a notebook's worker thread): no handler
                pass
        if signal.SIGINT in state.previous and not _interactive():
            state.watcher = _InterruptWatcher()
    state.depth += 1
    state.readers += bool(reads)
    try:
        if early and _unread():  # the command is starting: it stops at once, as after its start
            state.raised = state.interrupted
            raise KeyboardInterrupt if state.interrupted else Stopped()
        yield state
    finally:
        state.depth -= 1
        state.readers -= bool(reads)
        if whole_process:
            state.kept = True
            if state.depth == 0:
                _ignore_to_the_end(state)
        if state.depth == 0 and not state.kept:
            _restore(state)


def _ignore_to_the_end(state):
    """The command is over: SIGTERM and Ctrl-C are ignored for the rest of the process. Its
    handlers would not do: as the interpreter shuts down, Python puts the signals it handled back
    to their default action, which would end a finished command as killed (status 143) in the
    seconds TensorFlow and JAX take to unload; an ignored signal it leaves ignored."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        if signum in state.previous:
            signal.signal(signum, signal.SIG_IGN)


def reclaim_signals():
    """Puts this module's handlers back after a runtime took SIGTERM for itself: TensorFlow's
    and JAX's coordination services install a C-level handler of their own when a process joins
    a cluster (MultiWorkerMirroredStrategy, jax.distributed.initialize), which would swallow the
    signal. Nothing to do where no watch is under way."""
    if _SIGNALS.depth == 0 and not _SIGNALS.kept:
        return
    for signum, handler in ((signal.SIGTERM, _on_sigterm), (signal.SIGINT, _on_sigint)):
        if signum in _SIGNALS.previous:
            signal.signal(signum, handler)


def _restore(state):
    if state.watcher is not None:
        state.watcher.close()
        state.watcher = None
    for signum, previous in state.previous.items():
        if previous is not None:
            signal.signal(signum, previous)
    state.previous = {}


def _unread():
    """A signal now would not be read: no run is under way, and the command is not over."""
    return _SIGNALS.readers == 0 and _SIGNALS.depth > 0


def _on_sigterm(signum, frame):
    # Only a flag: the save happens in the main loop, between compiled loop calls.
    _SIGNALS.signalled = True
    if _unread():
        raise Stopped()


def _on_sigint(signum, frame):
    _SIGNALS.signalled = _SIGNALS.interrupted = True
    if _unread():
        _SIGNALS.raised = True  # the watcher may see this Ctrl-C after the block it ended
        raise KeyboardInterrupt
    if _SIGNALS.watcher is None:  # interactive: say it here, and leave a second one to the session
        _acknowledge()
        signal.signal(signal.SIGINT, _SIGNALS.previous.get(signal.SIGINT) or signal.default_int_handler)


@contextlib.contextmanager
def stops_at_once():
    """A block where SIGTERM and Ctrl-C stop the command at once, as while it starts, even inside
    a run that reads the flags: a wait in Python before the run has anything to save (its
    cluster forming, trainers/rendezvous.py), which a flag read at the first step would not end.
    A signal already noted stops it as the block begins."""
    if _SIGNALS.signalled and _SIGNALS.depth:
        _SIGNALS.raised = _SIGNALS.interrupted
        raise KeyboardInterrupt if _SIGNALS.interrupted else Stopped()
    readers, _SIGNALS.readers = _SIGNALS.readers, 0
    try:
        yield
    finally:
        _SIGNALS.readers = readers


def stopped_line(interrupted=False):
    """The last line of a command that `Stopped` ended, or (`interrupted`) that a Ctrl-C ended at once."""
    cause = "interrupted (Ctrl-C)" if interrupted else "preempted (SIGTERM)"
    return f"{cause}: stopped at once, with nothing being saved; rerun the same command to go on."


def interrupted_at_once():
    """Whether a Ctrl-C stopped the command at once, where no run was under way to save (its
    start, its flags, the few-shot probes), rather than a second Ctrl-C during a run."""
    return _SIGNALS.raised


class Preemption:
    """Watches for SIGTERM and SIGINT during one run, from its start to its results (a context
    manager; inside a command, whose handlers it shares, they were watched from the start).

    `save()` writes this worker's checkpoint of the current step unless it has one (the chief's
    real one, or a non-chief worker's temporary copy). Call `saved_checkpoint()` at every loop
    boundary and at each of the end's safe points, on every worker; `interrupted` says whether
    the signal was Ctrl-C (SIGINT) rather than SIGTERM.
    """

    def __init__(self, strategy, save):
        self.save = save
        self._cluster = engines.of(strategy).stop_coordinator(strategy)
        self._watch = None

    def __enter__(self):
        self._watch = watching(reads=True)
        self._watch.__enter__()
        reclaim_signals()
        if self._cluster is not None:
            self._cluster.run = self
        return self

    def __exit__(self, *exc_info):
        if self._cluster is not None:
            self._cluster.run = None
        self._watch.__exit__(*exc_info)
        return False

    @property
    def signalled(self):
        return _SIGNALS.signalled

    @signalled.setter
    def signalled(self, value):
        _SIGNALS.signalled = value

    @property
    def interrupted(self):
        return _SIGNALS.interrupted

    @interrupted.setter
    def interrupted(self, value):
        _SIGNALS.interrupted = value

    def cause(self):
        """Why this process stopped, as its last line says it: its own signal, or (several
        processes) another process's, which reaches it only as the agreed step to stop at."""
        if self.interrupted:
            return "interrupted (Ctrl-C)"
        if self.signalled:
            return "preempted (SIGTERM)"
        return "stopped with the other processes (one of them got SIGTERM or Ctrl-C)"

    def stops_before_training(self):
        """True when one process was signalled before its first loop call (while it started,
        built, compiled or restored): it stops there, with nothing new to save. Several
        processes go on to their first loop boundary instead, where they agree on the step."""
        return self._cluster is None and self.signalled

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
        "\nCtrl-C: stopping at the next step boundary, with a checkpoint of that step once "
        "training has begun (Ctrl-C again stops at once, without saving)",
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
                        if _SIGNALS.readers and not _SIGNALS.raised:  # else it stops at once
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


# The handler's threads that wait on the coordination service: when a process of the run is lost,
# their wait fails with the service, which trainers/peer_watch.py reports in one line.
_HANDLER_THREADS = ("PeerTerminationWatcher", "WorkerTerminationSignalWatcher")


def _quiet_handler_threads():
    """Drops the traceback of a handler thread whose wait on the lost cluster failed."""
    previous = threading.excepthook

    def hook(args):
        name = getattr(args.thread, "name", "") or ""
        if name.startswith(_HANDLER_THREADS) and issubclass(args.exc_type, tf.errors.OpError):
            return
        previous(args)

    threading.excepthook = hook


_HANDLER = []


def cluster_handler(strategy):
    """The process's handler of several tf.distribute workers (the tf engine's stop coordinator)."""
    if not _HANDLER:
        _quiet_handler_threads()
        _HANDLER.append(_ClusterHandler(strategy))
    return _HANDLER[0]
