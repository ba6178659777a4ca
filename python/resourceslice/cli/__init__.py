"""The ``resourceslice`` command: plan, publish and check a driver's ResourceSlices.

``plan`` needs no cluster; ``publish`` runs a :class:`resourceslice.Controller` over the pools
of a YAML/JSON file (:mod:`resourceslice._poolfile`); ``status`` says whether each pool in the
cluster is one a scheduler would trust; ``prune`` deletes the driver's slices. A module each,
with its own arguments; :mod:`.common` holds what they share, :mod:`.command` wires them into
one parser and has ``main``. Cluster access is kubectl's: ``--kubeconfig``, ``KUBECONFIG``,
``~/.kube/config``, then the in-cluster service account.

Exit codes: 0 success; 1 the cluster side failed (an API error, a pool that did not sync in
time, a pool ``status`` finds incomplete or inconsistent); 2 the command line, the FILE or the
kubeconfig is wrong. User errors are one message, never a traceback.
"""

from resourceslice.cli.command import main

__all__ = ["main"]
