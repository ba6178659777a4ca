"""Long calls of the Rust core let other Python threads run (the informer, a driver's threads).

Checked by what another thread could do *during* the call (change an item not read yet, or
find the caller still inside it), never by how long anything took.
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import pytest
from core_helpers import DRIVER, MAX_BYTES, OWNER, pool

from resourceslice import _core as core

T = TypeVar("T")

#: Enough devices for a call to span many pauses.
N = 50_000


def devices(n: int) -> list[dict[str, Any]]:
    return [{"name": f"dev-{i}", "attributes": {"index": {"int": i}}} for i in range(n)]


def during(call: Callable[[], T], action: Callable[[], None], switch_interval: float) -> T:
    """``call()``, with ``action`` run by another thread that asks for the GIL as it starts.

    Nothing can hand the GIL over between the other thread's start and the call but the call:
    the garbage collector is off (a finalizer is Python code, where the interpreter may switch
    threads), and nothing but C runs from waking the other thread to entering ``call``, when
    that is a builtin or a ``partial`` of one (waking up takes that thread longer).
    """
    gate = threading.Lock()
    gate.acquire()

    def other() -> None:
        with gate:
            action()

    thread = threading.Thread(target=other)
    thread.start()
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    gc.disable()
    try:
        gate.release()
        return call()
    finally:
        gc.enable()
        sys.setswitchinterval(old_interval)
        thread.join()


# A thread waiting for the GIL asks for it after the switch interval, and gets it at the next
# pause of the conversion: almost at once here, long before the last device is read. Holding
# the GIL for the whole call, nothing could change in between.


def test_prepare_desired_hands_the_gil_over_while_reading_devices() -> None:
    devs = devices(N)

    def edit() -> None:
        devs[0]["name"] = "renamed"  # read already: the str it replaces must stay valid
        devs[-1]["name"] = "Not a DNS label"

    prepare = partial(core.prepare_desired, DRIVER, {"p": pool(devs)}, MAX_BYTES)
    desired, errors = during(prepare, edit, switch_interval=1e-6)
    assert desired is None
    assert [e.split(":")[0] for e in errors] == [f'pools["p"].devices[{N - 1}].name']


def test_non_plain_hands_the_gil_over() -> None:
    devs: list[Any] = devices(N)

    def edit() -> None:
        devs[-1] = {"name": "x", "attributes": {1, 2}}

    assert during(partial(core.non_plain, devs), edit, switch_interval=1e-6) == [N - 1]


# With a switch interval longer than any test, a waiting thread gets the GIL only when it is
# released; and the caller, until it blocks, only marks itself out of the call.


@pytest.mark.parametrize("name", ["plan_pool", "decode_list", "decode_list_chunks"])
def test_pure_rust_work_runs_without_the_gil(name: str) -> None:
    desired, errors = core.prepare_desired(DRIVER, {"p": pool(devices(N))}, MAX_BYTES)
    assert errors == []
    plan = core.plan_pool(desired, "p", [], OWNER, "node-1")
    relist = json.dumps(
        {
            "kind": "ResourceSliceList",
            "metadata": {"resourceVersion": "1"},
            "items": [
                {**json.loads(body), "metadata": {"name": f"s-{i}", "uid": "u"}}
                for i, body in enumerate(plan.creates)
            ],
        }
    ).encode()
    calls: dict[str, Callable[[], object]] = {
        "plan_pool": lambda: core.plan_pool(desired, "p", [], OWNER, "node-1"),
        "decode_list": lambda: core.decode_list(relist),
        "decode_list_chunks": lambda: core.decode_list_chunks(
            relist[i : i + 65536] for i in range(0, len(relist), 65536)
        ),
    }
    where = ["before"]
    seen: list[str] = []

    def call() -> None:
        where[0] = "inside"
        calls[name]()
        where[0] = "after"

    during(call, lambda: seen.append(where[0]), switch_interval=1000.0)
    assert seen == ["inside"]


def test_an_exception_raised_at_a_pause_is_raised_by_the_call() -> None:
    """What the interpreter raises at a pause (KeyboardInterrupt from a signal, here an
    asynchronous exception sent by another thread) is not lost: the call raises it once done.
    (Holding the GIL throughout, the interpreter raised it right after the call.)"""
    main = threading.get_ident()

    def interrupt() -> None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(main), ctypes.py_object(KeyboardInterrupt)
        )

    prepare = partial(core.prepare_desired, DRIVER, {"p": pool(devices(N))}, MAX_BYTES)
    with pytest.raises(KeyboardInterrupt):
        during(prepare, interrupt, switch_interval=1e-6)
