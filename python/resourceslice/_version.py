"""The installed distribution's version, in a module of its own: the package's ``__init__``
and the connection's User-Agent both read it, and the connection must not import the
package that imports it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("resourceslice")
except PackageNotFoundError:  # python/ on the path without an installation
    VERSION = "0+unknown"
