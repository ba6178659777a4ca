"""The plugin's Unix sockets: put in place of a stale socket only, removed only while ours.

A socket path is shared by every instance of a driver on the node. A crashed instance
leaves its socket file behind, which a restart must take over. In a DaemonSet rollout
without ``rolling_update_uid``, the new pod binds the same paths while the old pod still
runs, and the old pod's stop must then leave them: removing the registration socket
unregisters the driver, the new pod's with it. Anything at a socket path that is not a
socket (a file, a symlink, a directory) is somebody else's and is never removed.

gRPC removes the file of a Unix socket it listened on when the server stops, by its path,
whatever is there by then. So the socket is bound at a private name beside its path, and
renamed into place once serving: gRPC's own cleanup then finds nothing at the private name,
and the rename replaces a stale socket in one step, with no moment without a socket at the
path. kubelet's plugin watcher skips names that start with ".", as the private one does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat

import grpc

from resourceslice.kubeletplugin.registration import UNIX_PATH_MAX

log = logging.getLogger("resourceslice.kubeletplugin")

#: A socket file as the kernel knows it: ``(st_dev, st_ino)``.
SocketId = tuple[int, int]


def _check_replaceable(path: str) -> None:
    """FileExistsError unless ``path`` is missing or a socket (the link itself: a symlink is
    not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        kind = (
            "a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else "a file"
        )
        raise FileExistsError(
            f"{path} exists and is not a socket ({kind}): it is left alone; remove it, "
            "or give the plugin another socket path"
        )


def listen(server: grpc.Server, path: str) -> SocketId:
    """Start ``server`` on a Unix socket at ``path``; returns the socket file's identity.

    A socket already at ``path`` is replaced; anything else there is a FileExistsError, and
    nothing is created.
    """
    private = os.path.join(os.path.dirname(path), f".{secrets.token_hex(3)}")
    for candidate in (path, private):
        if len(candidate) >= UNIX_PATH_MAX:
            raise ValueError(f"socket path {candidate} is longer than a Unix socket allows")
    _check_replaceable(path)
    try:
        if server.add_insecure_port(f"unix://{private}") == 0:
            raise OSError(f"cannot listen on {private}")
    except RuntimeError as exc:  # what grpcio raises when the bind fails
        raise OSError(f"cannot listen on {private}") from exc
    try:
        server.start()
        st = os.lstat(private)
        # Checked again just before: what appeared meanwhile is not overwritten either.
        _check_replaceable(path)
        os.rename(private, path)
    except BaseException:
        server.stop(grace=None).wait()  # gRPC removes the private name
        raise
    return st.st_dev, st.st_ino


def remove_if_ours(path: str, ours: SocketId) -> None:
    """Remove ``path`` if it still is the socket ``ours``; else another instance bound it
    since, and it stays. (A rebind between the check and the removal is not caught: POSIX
    has no removal conditional on the inode. The window is a system call wide.)"""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode) or (st.st_dev, st.st_ino) != ours:
        log.info("%s is another instance's socket now: left in place", path)
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
