"""An error as one line for readers outside the process (kubelet's events, /healthz, the
CLI): on the library's ApiError and on the client's ApiException (a driver's own calls),
as the apiserver's answers fill them."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes.client.exceptions import ApiException

from resourceslice._errortext import describe_error
from resourceslice.connection import ApiError

HEADERS = {"Audit-Id": "5f0c", "Set-Cookie": "session=secret"}


def client_error(status: int, reason: str, body: str | None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    exc.headers = HEADERS
    return exc


def library_error(status: int, reason: str, body: str | None) -> ApiError:
    return ApiError(status, reason, body, HEADERS)


def status_body(message: str) -> str:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "message": message, "code": 500,
         "details": {"causes": [{"message": "secret detail"}]}}
    )  # fmt: skip


@pytest.mark.parametrize("api_error", [client_error, library_error])
@pytest.mark.parametrize(
    ("exc", "text"),
    [
        ((403, "Forbidden", status_body('nodes "n" is forbidden')),
         '403 nodes "n" is forbidden'),
        # A webhook's message with line breaks: still one line.
        ((500, "Internal Server Error", status_body("denied:\n  a\r\n  b\n")),
         "500 denied: a b"),
        # Not a Status (a proxy's page): the reason phrase, never the body.
        ((502, "Bad Gateway", "<html>secret page</html>"), "502 Bad Gateway"),
        ((503, "Service Unavailable", None), "503 Service Unavailable"),
        ((500, "", json.dumps(["not", "a", "status"])), "500"),
    ],
)  # fmt: skip
def test_an_api_error_is_one_line(
    api_error: Callable[[int, str, str | None], Exception],
    exc: tuple[int, str, str | None],
    text: str,
) -> None:
    assert describe_error(api_error(*exc)) == text


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (ValueError("claim default/a not found"), "ValueError: claim default/a not found"),
        (ValueError("two\nlines"), "ValueError: two lines"),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_another_error_is_its_type_and_text(exc: BaseException, text: str) -> None:
    assert describe_error(exc) == text
