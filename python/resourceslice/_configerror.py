"""The errors of loading a connection's configuration, below both the connection and the
kubeconfig readers that raise them (so that neither imports the other back). Public as
:mod:`resourceslice.connection`'s, where users catch them."""

from __future__ import annotations


class ConfigError(Exception):
    """A connection's configuration cannot be loaded (a missing file, a kubeconfig without
    the context asked for)."""

    __module__ = "resourceslice.connection"


class UnsupportedConfig(ConfigError):
    """A kubeconfig that needs what :class:`Connection` does not do (an exec plugin, an auth
    provider, a proxy): :func:`connect` hands it to the ``kubernetes`` client instead."""

    __module__ = "resourceslice.connection"
