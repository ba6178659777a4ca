"""One prepare or unprepare at a time, in this process and across a rolling update.

During a rolling update two instances of the driver run at once, in different processes,
possibly one built with Go's ``kubeletplugin`` helper and one with this package; they must
not prepare concurrently. Go's helper locks ``serialize.lock`` in the plugin data directory
with etcd's ``fileutil.LockFile``, which on Linux takes an *open file description* lock
(``fcntl(F_OFD_SETLKW)``, a write lock of the whole file; a classic POSIX ``F_SETLKW`` lock
where the kernel has no OFD locks) and creates the file with mode 0666. ``flock()`` locks
are a separate kind, and the kernel does not make them exclude ``fcntl`` locks: the same
kind is taken here, the same way. Like Go's, it belongs to the open file, so the kernel drops
it when the process dies: a crashed instance cannot block the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

#: Go opens the lock file with mode 0666 (less the umask); so does this.
LOCK_FILE_MODE = 0o666


def _whole_file_write_lock() -> bytes:
    """A ``struct flock`` for a write lock of the whole file; ``l_pid`` 0, as OFD locks need.

    Native layout (``short l_type, l_whence; off_t l_start, l_len; pid_t l_pid``), padded
    to the struct's alignment like the C compiler pads it.
    """
    return struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


def lock_file(fd: int) -> None:
    """Block until this open file holds the write lock Go's helper takes."""
    command = getattr(fcntl, "F_OFD_SETLKW", None)
    if command is None:  # not Linux: the POSIX record lock, as etcd's fileutil falls back to
        fcntl.lockf(fd, fcntl.LOCK_EX)
        return
    fcntl.fcntl(fd, command, _whole_file_write_lock())


class Serializer:
    """One call at a time: a thread lock within this instance, and with ``lock_file`` (a
    rolling update) the file lock across instances, taken for each call on the file opened
    anew (an OFD lock excludes other open files, so even two instances in one process)."""

    def __init__(self, enabled: bool, lock_file: Path | None) -> None:
        self._enabled = enabled
        self._lock_file = lock_file
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if not self._enabled:
            yield
            return
        with self._lock:
            if self._lock_file is None:
                yield
                return
            fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE)
            try:
                lock_file(fd)
                yield
            finally:
                os.close(fd)
