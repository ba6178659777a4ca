"""The keywords of the blocking and the asyncio controller, and what each offers, cannot drift.

``ControllerOptions`` (and ``aio.AsyncControllerOptions``) type the keywords a second time,
for ``**options``; mypy checks that aio hands them on to ``Controller`` with compatible
types, and this checks that they name exactly the constructor's keywords.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import resourceslice as rs
from resourceslice import aio


def annotations(typed_dict: Any) -> dict[str, str]:
    """A TypedDict's fields with their annotations as written (``from __future__``)."""
    fields: dict[str, str] = {}
    for klass in reversed(typed_dict.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            fields[name] = getattr(annotation, "__forward_arg__", annotation)
    return fields


def constructor_keywords() -> dict[str, inspect.Parameter]:
    parameters = inspect.signature(rs.Controller.__init__).parameters
    return {n: p for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_controller_options_are_the_constructors_keywords() -> None:
    keywords = constructor_keywords()
    assert annotations(rs.ControllerOptions) == {n: p.annotation for n, p in keywords.items()}
    required = {n for n, p in keywords.items() if p.default is inspect.Parameter.empty}
    assert rs.ControllerOptions.__required_keys__ == required == {"driver"}


def test_the_async_options_differ_only_in_the_error_handler() -> None:
    sync, asynchronous = annotations(rs.ControllerOptions), annotations(aio.AsyncControllerOptions)
    assert sync.keys() == asynchronous.keys()
    assert {n for n in sync if sync[n] != asynchronous[n]} == {"error_handler"}
    assert aio.AsyncControllerOptions.__required_keys__ == {"driver"}


def public(cls: type) -> dict[str, Any]:
    return {n: v for klass in cls.__mro__ for n, v in vars(klass).items() if not n.startswith("_")}


def test_the_async_controller_offers_everything_the_controller_does() -> None:
    blocking, asynchronous = public(rs.Controller), public(aio.AsyncController)
    assert blocking.keys() <= asynchronous.keys()
    for name, attribute in blocking.items():
        mirror = asynchronous[name]
        assert isinstance(mirror, property) == isinstance(attribute, property), name
        if callable(attribute):
            assert inspect.signature(mirror).parameters.keys() == (
                inspect.signature(attribute).parameters.keys()
            ), name
    # What may wait (for a lock, a thread, the cluster) is awaited; the rest is not.
    awaited = {n for n, v in asynchronous.items() if inspect.iscoroutinefunction(v)}
    assert awaited == {"update", "update_devices", "wait_synced", "wait_idle", "stop"}


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"owner": "node-a"}, TypeError, "owner must be an Owner, not str"),
        ({"workers": 0}, ValueError, "workers must be at least 1, not 0"),
        ({"max_concurrent_writes": True}, TypeError, "max_concurrent_writes must be an int"),
        ({"max_concurrent_writes": 0}, ValueError, "max_concurrent_writes must be at least 1"),
        ({"max_writes_per_second": 0}, ValueError, "max_writes_per_second must be positive"),
    ],
)
def test_options_no_controller_can_run_with_are_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        rs.Controller(None, driver="gpu.example.com", **options)
