"""An error as one line for readers outside the process (kubelet's events, /healthz, the
CLI): on the client's exceptions as the apiserver's answers fill them."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from resourceslice._errortext import describe_error


def api_error(status: int, reason: str, body: str | None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    exc.headers = {"Audit-Id": "5f0c", "Set-Cookie": "session=secret"}
    return exc


def status_body(message: str) -> str:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "message": message, "code": 500,
         "details": {"causes": [{"message": "secret detail"}]}}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (api_error(403, "Forbidden", status_body('nodes "n" is forbidden')),
         '403 nodes "n" is forbidden'),
        # A webhook's message with line breaks: still one line.
        (api_error(500, "Internal Server Error", status_body("denied:\n  a\r\n  b\n")),
         "500 denied: a b"),
        # Not a Status (a proxy's page): the reason phrase, never the body.
        (api_error(502, "Bad Gateway", "<html>secret page</html>"), "502 Bad Gateway"),
        (api_error(503, "Service Unavailable", None), "503 Service Unavailable"),
        (api_error(500, "", json.dumps(["not", "a", "status"])), "500"),
        (ValueError("claim default/a not found"), "ValueError: claim default/a not found"),
        (ValueError("two\nlines"), "ValueError: two lines"),
        (TimeoutError(), "TimeoutError"),
    ],
)  # fmt: skip
def test_one_line(exc: BaseException, text: str) -> None:
    assert describe_error(exc) == text
