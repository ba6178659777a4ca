"""An error as one line, for whoever reads it outside the process.

kubelet puts a claim's error text into the pod's events, ``/healthz`` serves a failing
pool's error to whoever can connect, the CLI prints them: each gets what :func:`describe_error`
makes. ``str()`` of the client's ``ApiError`` is several lines with the response's
headers and body, which can carry more than the reader of an event should see (and a
multi-line event is hard to read anyway); the status and the apiserver's own ``message``
say what went wrong.
"""

from __future__ import annotations

import contextlib
import json
import re

from resourceslice.connection import is_api_error

_LINE_BREAKS = re.compile(r"\s*[\r\n]+\s*")


def describe_error(exc: BaseException) -> str:
    """One line: an API error's HTTP status and the apiserver's ``message`` (from the Status
    in the body; the reason phrase when the body is none); any other error as its type and
    text."""
    if is_api_error(exc):
        message = getattr(exc, "reason", None) or ""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            message = str(json.loads(getattr(exc, "body", None) or "")["message"])
        text = f"{getattr(exc, 'status', None) or ''} {message}"
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _LINE_BREAKS.sub(" ", text.strip())
