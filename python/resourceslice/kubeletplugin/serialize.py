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
import errno
import fcntl
import os
import struct
import threading
import time
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


def lock_file(fd: int, wait: bool = True) -> None:
    """Block until this open file holds the write lock Go's helper takes; with ``wait``
    False, BlockingIOError at once when another open file holds it."""
    command = getattr(fcntl, "F_OFD_SETLKW" if wait else "F_OFD_SETLK", None)
    try:
        if command is None:  # not Linux: the POSIX record lock, as etcd's fileutil falls back to
            fcntl.lockf(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        fcntl.fcntl(fd, command, _whole_file_write_lock())
    except OSError as exc:
        # POSIX lets a held lock answer EACCES or EAGAIN.
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise BlockingIOError(exc.errno, "the lock is held") from exc
        raise


def try_open_locked(path: Path) -> int | None:
    """``path`` opened and locked (the descriptor: closing it unlocks) if no other open file
    holds the lock now; None, at once, if one does."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE)
    try:
        lock_file(fd, wait=False)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_locked(path: Path, deadline: float | None = None) -> int:
    """``path`` opened and locked (the descriptor: closing it unlocks); TimeoutError if
    ``deadline`` (``time.monotonic()``) passes first.

    A blocking lock wait cannot time out, and polling would lose the kernel's queue of
    waiters; so with a deadline the file is opened and locked by a thread of its own. If the
    caller gives up first, that thread closes the file as soon as it gets the lock, which
    hands it straight on.
    """

    def take() -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE)
        try:
            lock_file(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    if deadline is None:
        return take()
    guard = threading.Lock()
    taken = threading.Event()
    outcome: list[int | BaseException] = []
    abandoned = False

    def wait() -> None:
        try:
            result: int | BaseException = take()
        except BaseException as exc:
            result = exc
        with guard:
            if abandoned and isinstance(result, int):
                os.close(result)
                return
            outcome.append(result)
        taken.set()

    threading.Thread(target=wait, name="kubeletplugin-lock", daemon=True).start()
    taken.wait(max(0.0, deadline - time.monotonic()))
    with guard:
        if not outcome:
            abandoned = True
            raise TimeoutError("kubelet's deadline passed while another instance held the lock")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


class Serializer:
    """One call at a time: a thread lock within this instance, and with ``lock_file`` (a
    rolling update) the file lock across instances, taken for each call on the file opened
    anew (an OFD lock excludes other open files, so even two instances in one process)."""

    def __init__(self, enabled: bool, lock_file: Path | None) -> None:
        self._enabled = enabled
        self._lock_file = lock_file
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, deadline: float | None = None) -> Iterator[None]:
        """Hold the lock for one call; TimeoutError if ``deadline`` (kubelet's, on
        ``time.monotonic()``) passes while waiting: kubelet gave up on the call."""
        if not self._enabled:
            yield
            return
        left = -1.0 if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._lock.acquire(timeout=left):
            raise TimeoutError("kubelet's deadline passed while another call held the lock")
        try:
            if self._lock_file is None:
                yield
                return
            fd = open_locked(self._lock_file, deadline)
            try:
                yield
            finally:
                os.close(fd)
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def try_hold(self) -> Iterator[bool]:
        """Hold the lock if nobody holds it now (True); False at once if someone does. Leaves
        no waiter behind (a waiting thread would take the lock later, from whoever is next)."""
        if not self._enabled:
            yield True
            return
        if not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            fd = None if self._lock_file is None else try_open_locked(self._lock_file)
            if self._lock_file is not None and fd is None:
                yield False
                return
            try:
                yield True
            finally:
                if fd is not None:
                    os.close(fd)
        finally:
            self._lock.release()
