"""resourceslice.types: the TypedDicts a driver annotates its devices with. mypy checks them
(a misspelt field is an error), and at run time they are the plain dicts the API takes."""

from __future__ import annotations

import pytest

import resourceslice as rs
from typecheck import mypy

DRIVER = """
from __future__ import annotations

import resourceslice as rs

devices: list[rs.Device] = [
    {
        "name": "gpu-0",
        "attributes": {"model": {"string": "a100"}, "cores": {"int": 108}},
        "capacity": {
            "memory": {"value": "80Gi"},
            "bandwidth": {
                "value": 1000,
                "requestPolicy": {"default": "100", "validRange": {"min": "1"}},
            },
        },
        "taints": [{"key": "example.com/unhealthy", "effect": "NoSchedule"}],
        "consumesCounters": [
            {"counterSet": "gpu-0-memory", "counters": {"memory": {"value": "80Gi"}}}
        ],
        "allowMultipleAllocations": True,
    },
]
counters: list[rs.CounterSet] = [
    {"name": "gpu-0-memory", "counters": {"memory": {"value": "80Gi"}}}
]
selector: rs.NodeSelector = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
}
pool = rs.Pool(
    slices=[rs.Slice(shared_counters=counters), rs.Slice(devices=devices)], node_selector=selector
)
"""


#: Snippets mypy --strict must accept: typed dicts, the client's models, both kinds of
#: error handler, the errors' common base.
ACCEPTED = {
    "typed": DRIVER,
    "models": """
        from kubernetes.client import (
            V1CounterSet, V1Device, V1NodeSelector, V1NodeSelectorRequirement, V1NodeSelectorTerm
        )

        import resourceslice as rs

        selector = V1NodeSelector(node_selector_terms=[V1NodeSelectorTerm(match_expressions=[
            V1NodeSelectorRequirement(key="gpu", operator="Exists")
        ])])
        pool = rs.Pool(
            slices=[rs.Slice(devices=[V1Device(name="gpu-0"), {"name": "gpu-1"}],
                             shared_counters=[V1CounterSet(name="c", counters={})])],
            node_selector=selector,
        )
    """,
    "handlers": """
        from __future__ import annotations

        import resourceslice as rs
        from resourceslice import aio

        async def on_error(exc: BaseException, message: str) -> None: ...
        def log_error(exc: BaseException, message: str) -> None: ...

        async def main() -> None:
            async with aio.start_controller(driver="d", error_handler=on_error) as ctrl:
                ctrl.is_leader()
            await aio.start_controller(driver="d", error_handler=log_error, workers=2)
            try:
                rs.start_controller(None, driver="d", error_handler=log_error)
            except rs.ResourceSliceError as exc:
                print(exc)
    """,
}

#: Snippets mypy --strict must refuse, and a part of the message it gives for each.
REFUSED = {
    "misspelt": (DRIVER.replace('{"int": 108}', '{"integer": 108}'), '"integer"'),
    "unnamed": (
        DRIVER.replace('"name": "gpu-0",', ""),
        'Missing key "name" for TypedDict "Device"',
    ),
    "inline_misspelt": (
        "import resourceslice as rs\n"
        'rs.Pool(devices=[{"name": "a", "attributes": {"x": {"integer": 1}}}], all_nodes=True)\n',
        # The typed dict does not fit, nor the model: a plain dict in the wrong place.
        "List item 0 has incompatible type",
    ),
    "inline_unknown_field": (
        'import resourceslice as rs\nrs.Pool(devices=[{"name": "a", "capacty": {}}])\n',
        'expected "Device | KubernetesModel"',
    ),
    "bad_selector": (
        'import resourceslice as rs\nrs.Pool(devices=[], node_selector={"bogus": 1})\n',
        '"node_selector" to "Pool"',
    ),
    "bad_operator": (
        "import resourceslice as rs\n"
        's: rs.NodeSelector = {"nodeSelectorTerms": [{"matchExpressions": ['
        '{"key": "k", "operator": "Equals"}]}]}\n',
        "'Equals'",
    ),
    "bad_effect": (
        'import resourceslice as rs\nt: rs.DeviceTaint = {"key": "k", "effect": "NoScheduel"}\n',
        "'NoScheduel'",
    ),
    "sync_keyword": (
        'import resourceslice as rs\nrs.start_controller(None, driver="d", ownr=None)\n',
        'Unexpected keyword argument "ownr"',
    ),
    "async_keyword": (
        'from resourceslice import aio\naio.start_controller(driver="d", ownr=None)\n',
        'Unexpected keyword argument "ownr"',
    ),
    "async_handler": (
        "from resourceslice import aio\n"
        "errors: list[BaseException] = []\n"
        'aio.start_controller(driver="d", error_handler=errors.append)\n',
        '"error_handler"',
    ),
}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every snippet checked in one mypy run (a run takes seconds)."""
    snippets = {**ACCEPTED, **{name: code for name, (code, _) in REFUSED.items()}}
    return mypy(tmp_path_factory.mktemp("mypy"), **snippets)


@pytest.mark.parametrize("name", ACCEPTED)
def test_mypy_accepts(mypy_errors: dict[str, list[str]], name: str) -> None:
    assert mypy_errors[name] == []


@pytest.mark.parametrize("name", REFUSED)
def test_mypy_refuses(mypy_errors: dict[str, list[str]], name: str) -> None:
    (error,) = mypy_errors[name]
    assert REFUSED[name][1] in error, error


def test_typed_devices_are_plain_dicts_the_core_publishes() -> None:
    namespace: dict[str, object] = {}
    exec(DRIVER, namespace)
    pool = namespace["pool"]
    assert isinstance(pool, rs.Pool)
    ctrl = rs.start_controller(None, driver="gpu.example.com", resources=rs.DriverResources())
    with ctrl:
        ctrl.update(rs.DriverResources(pools={"p": pool}))  # raises ValidationError if not


def test_required_keys() -> None:
    assert rs.Device.__required_keys__ == {"name"}
    assert rs.DeviceCapacity.__required_keys__ == {"value"}
    assert rs.DeviceTaint.__required_keys__ == {"key", "effect"}
    assert rs.NodeSelector.__required_keys__ == {"nodeSelectorTerms"}
    assert rs.DeviceAttribute.__required_keys__ == frozenset()


def test_the_librarys_errors_share_a_base_and_keep_their_own() -> None:
    from resourceslice import kubeletplugin
    from resourceslice._apiversion import NoResourceAPIError
    from resourceslice.leaderelection import NotLeaderError

    bases = {
        kubeletplugin.ConfigError: ValueError,
        kubeletplugin.HealthNotSupportedError: Exception,
        NotLeaderError: RuntimeError,
        rs.RequestDeadlineError: TimeoutError,
        rs.ValidationError: ValueError,
        rs.ControllerStoppedError: RuntimeError,
        rs.LeadershipLostError: RuntimeError,
        NoResourceAPIError: RuntimeError,
        rs.DroppedFieldsError: Exception,
        rs.ConflictingWriterError: Exception,
        rs.SliceExistsError: Exception,
    }
    for error, base in bases.items():
        assert issubclass(error, rs.ResourceSliceError) and issubclass(error, base), error
    with pytest.raises(rs.ResourceSliceError, match="DNS label"):
        rs.start_controller(
            None, driver="d.example.com", resources=rs.DriverResources(
                pools={"p": rs.Pool(devices=[{"name": "Not A Label"}], all_nodes=True)}
            )
        )  # fmt: skip
