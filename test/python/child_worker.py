"""A persistent child process for the fuzzers: work that may crash or hang the process runs there.

The parent sends pickled messages and reads pickled replies (each an 8-byte length, then the
bytes) over the child's stdin/stdout; a reply that does not come before the deadline is a hang,
a closed pipe a crash. Either way the parent kills the child, records the case, and starts a
new one: one bad case never ends a fuzzing run. Used by program_fuzzer.py (mutated programs) and
model_fuzzer.py (random models).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time


class ChildWorker:
    """`python <script> --worker` (its `serve` loop), talked to with `send` / `receive`."""

    def __init__(self, script: str, cwd: str | None = None, extra_args=()):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(script), "--worker", *extra_args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=cwd or os.path.dirname(os.path.abspath(script)))

    def send(self, message) -> None:
        payload = pickle.dumps(message)
        self.proc.stdin.write(struct.pack("<Q", len(payload)) + payload)
        self.proc.stdin.flush()

    def receive(self, timeout: float):
        """The next message, or "crash" (the child died) / "hang" (nothing within `timeout` s)."""
        buf = b""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        need = 8
        length = None
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return "hang"
            chunk = os.read(fd, need - len(buf))
            if not chunk:
                return "crash"
            buf += chunk
            if length is None and len(buf) == 8:
                length = struct.unpack("<Q", buf)[0]
                need = 8 + length
        return pickle.loads(buf[8:])

    def kill(self) -> str:
        """Stop the child; how it ended ("signal SIGSEGV", "exit 134")."""
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.kill()


def serve(handle) -> None:
    """The child's loop: each message from the parent -> `handle(message, reply)`; `reply(obj)`
    sends one message back (a handler may send progress messages before its answer)."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # What the code under test prints must not corrupt the message stream.
    sys.stdout = sys.stderr

    def reply(message) -> None:
        payload = pickle.dumps(message)
        stdout.write(struct.pack("<Q", len(payload)) + payload)
        stdout.flush()

    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        handle(pickle.loads(stdin.read(struct.unpack("<Q", header)[0])), reply)
