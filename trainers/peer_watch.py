"""Several processes of one run: each watches the others' heartbeat, so that a process that dies
without a word (SIGKILL, an out-of-memory kill, a host lost) ends the others within a bound,
with one line, instead of leaving them in the next collective until the engine's own timeout.

Neither engine reports such a death promptly in a way the trainer can print: a collective on CPU
fails at once with a transport error (TensorFlow's UnavailableError, gloo's "Connection closed by
peer" on JAX), while one on GPUs or TPUs waits; JAX's coordination service notices a silent
process after `heartbeat_timeout_seconds` (100 s) and then ends every other process with its own
fatal error; TensorFlow's after 10 s, as an error of the next collective. So the trainer keeps a
heartbeat of its own, next to the engine's, and independent of what the main thread is doing
(compiling, saving, or blocked in a collective):

* The chief (process 0) listens on a free TCP port, which every process learns through one
  collective when the run starts (`share`, the engine's); each other process connects to it.
  Every second each side sends a byte.
* A process is lost when its connection closes (a killed process: at once, its kernel closes the
  socket) or when nothing came from it for LOST_AFTER_S seconds (a host that vanished). The chief
  tells the others which process it lost before it stops, so each names the same one.
* A process that ends its run normally (results, or a SIGTERM's agreed stop) says goodbye first,
  so its end is not taken for a loss; one that ends with an error of its own says nothing: the
  others, left waiting, report it lost.
* On a loss the watcher waits for a checkpoint save under way in this process to end (the run's
  `newest_checkpoint`), prints one line naming the lost process and the newest checkpoint, and ends
  the process with status 1 at once (os._exit: the main thread may be blocked in a collective that
  will never return). Files are written atomically, so nothing is left half-written.
"""

import os
import select
import socket
import sys
import threading
import time

from trainers.flags import program_name

HEARTBEAT_S = 1.0
# Silence that makes a process lost. Well above a heartbeat's worst delay on a loaded machine
# (the watcher is a Python thread, and waits for the GIL), well below the engines' own timeouts.
LOST_AFTER_S = 15.0
EXIT_CODE = 1
_BYE = b"B"
_BEAT = b"."


def watch(cluster, newest_checkpoint):
    """A started PeerWatch for `cluster` (distribute.processes' value), or None for one process.

    Every process must call it at the same point of the run: the chief's port is shared by a
    collective. `newest_checkpoint()`: the path the line names (called once, on a loss).
    """
    if cluster is None or cluster.count < 2:
        return None
    return PeerWatch(cluster, newest_checkpoint).start()


class PeerWatch:
    def __init__(self, cluster, newest_checkpoint):
        self.cluster, self.newest_checkpoint = cluster, newest_checkpoint
        self.index, self.count = cluster.index, cluster.count
        self._peers = {}  # process index -> socket
        self._heard = {}  # process index -> time of its last byte
        self._done = set()  # processes that said goodbye
        self._buffers = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._lost = threading.Event()
        self._server = None
        self._thread = None
        self.exit = os._exit  # at once: the main thread may be blocked in a collective

    def start(self):
        if self.index == 0:
            if socket.has_dualstack_ipv6():
                self._server = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
            else:
                self._server = socket.create_server(("", 0))
            port = self.cluster.share(self._server.getsockname()[1])
            now = time.monotonic()
            self._heard = {k: now for k in range(1, self.count)}  # a process that never connects is lost too
        else:
            port = self.cluster.share(0)
            chief = socket.create_connection((self.cluster.chief_host, port), timeout=LOST_AFTER_S)
            chief.sendall(f"{self.index}\n".encode())
            self._add(0, chief)
        self._thread = threading.Thread(target=self._run, name="peer-watch", daemon=True)
        self._thread.start()
        return self

    def _add(self, index, sock):
        sock.setblocking(False)
        self._peers[index] = sock
        self._heard[index] = time.monotonic()
        self._buffers[index] = b""

    # -- the end of this process's run ------------------------------------------------------
    def finished(self):
        """This run ended normally here: goodbye to the others, and the watch ends."""
        self._close(goodbye=True)

    def failed(self):
        """This process ends with an error of its own (its own line): no goodbye, and no report."""
        self._close(goodbye=False)

    def wait_for_loss(self):
        """After an error of the engine in the main thread (a collective that failed): waits for
        the watch's word, up to its bound. On a loss the watcher ends the process before this
        returns; else the watch ends (no goodbye) and the caller raises the error."""
        seconds = LOST_AFTER_S + 2 * HEARTBEAT_S
        if self._lost.wait(seconds):
            time.sleep(seconds)  # the watcher is ending the process
        self.failed()

    def _close(self, goodbye):
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
            for sock in self._peers.values():
                try:
                    if goodbye:
                        sock.setblocking(True)
                        sock.settimeout(HEARTBEAT_S)
                        sock.sendall(_BYE)
                    sock.close()
                except OSError:
                    pass
            if self._server is not None:
                self._server.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * HEARTBEAT_S)

    # -- the watcher thread -----------------------------------------------------------------
    def _run(self):
        last_beat = 0.0
        while not self._stopping.is_set():
            sockets = list(self._peers.values()) + ([self._server] if self._server else [])
            try:
                readable, _, _ = select.select(sockets, [], [], HEARTBEAT_S / 2)
            except (OSError, ValueError):  # closed by finished()/failed() meanwhile
                return
            if self._stopping.is_set():
                return
            for sock in readable:
                if sock is self._server:
                    self._accept()
                else:
                    self._read(sock)
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                for index, sock in list(self._peers.items()):
                    try:
                        sock.send(_BEAT)
                    except BlockingIOError:
                        pass  # its buffer is full: it has not read for a while, which silence shows
                    except OSError:
                        self._lose(index, "its connection closed")
            for index, heard in list(self._heard.items()):
                if index not in self._done and now - heard > LOST_AFTER_S:
                    self._lose(index, f"no heartbeat for {LOST_AFTER_S:.0f} s")

    def _accept(self):
        try:
            sock, _ = self._server.accept()
            sock.settimeout(LOST_AFTER_S)
            line = b""
            while not line.endswith(b"\n"):
                chunk = sock.recv(16)
                if not chunk:
                    return
                line += chunk
            self._add(int(line.decode().strip()), sock)
        except (OSError, ValueError):
            pass

    def _read(self, sock):
        index = next((k for k, s in self._peers.items() if s is sock), None)
        if index is None:
            return
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            if index in self._done:
                self._forget(index)
            else:
                self._lose(index, "its connection closed")
            return
        self._heard[index] = time.monotonic()
        if _BYE in data:
            self._done.add(index)
            if index == 0:  # the chief is done: nothing is left to watch
                self._stopping.set()
        # b"L<index>\n": the chief lost another process, which this one then names too.
        _, mark, tail = (self._buffers[index] + data).rpartition(b"L")
        if mark and b"\n" in tail:
            self._lose(int(tail.partition(b"\n")[0]), "reported by process 0")
        self._buffers[index] = mark + tail if mark else b""

    def _forget(self, index):
        sock = self._peers.pop(index, None)
        self._heard.pop(index, None)
        if sock is not None:
            sock.close()

    def _lose(self, index, why):
        with self._lock:
            if self._stopping.is_set():
                return
            self._lost.set()
            if self.index == 0:
                for other, sock in self._peers.items():
                    if other != index:
                        try:
                            sock.send(f"L{index}\n".encode())
                        except OSError:
                            pass
            checkpoint = self.newest_checkpoint()
            where = self.cluster.names[index] if self.cluster.names else ""
            # One write with its newline: print() writes the text and the newline apart, so two
            # threads reporting at once could join their lines into one.
            sys.stderr.write(
                f"{program_name(sys.argv)}: error: process {index} of {self.count}"
                f"{f' ({where})' if where else ''} is gone ({why}); the last checkpoint is "
                f"{checkpoint or 'none (nothing saved yet)'}. Stopping this process too: rerun the same "
                "command on every process to resume from it.\n"
            )
            sys.stderr.flush()
            sys.stdout.flush()
            self._stopping.set()
            self.exit(EXIT_CODE)
