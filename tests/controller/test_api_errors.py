"""The exceptions of the public API survive pickling (multiprocessing, logging handlers)."""

from __future__ import annotations

import copy
import pickle

import pytest

import resourceslice as rs


@pytest.mark.parametrize(
    ("error", "fields"),
    [
        (
            rs.DroppedFieldsError("p", "s-1", 2, ["spec.taints"], ["DRADeviceTaints"]),
            {
                "pool": "p",
                "slice_name": "s-1",
                "slice_index": 2,
                "paths": ["spec.taints"],
                "features": ["DRADeviceTaints"],
            },
        ),
        (rs.ConflictingWriterError("p", "s-2"), {"pool": "p", "slice_name": "s-2"}),
        (rs.SliceExistsError("p", ("a", "b")), {"pool": "p", "slice_names": ["a", "b"]}),
        (rs.ValidationError(["x: bad", "y: worse"]), {"errors": ["x: bad", "y: worse"]}),
        (
            rs.ValidationError(["x: bad"], summary="invalid status"),
            {"errors": ["x: bad"], "summary": "invalid status"},
        ),
        (
            rs.DeviceStatusConflictError("ns/c", ["other"], [".status.devices[x].data"]),
            {"claim": "ns/c", "managers": ["other"], "fields": [".status.devices[x].data"]},
        ),
        (rs.DeviceStatusDroppedError("ns/c", ["status.devices"]), {"paths": ["status.devices"]}),
        (
            rs.DeviceTaintRuleExistsError("r", ["admin"]),
            {"name": "r", "managers": ["admin"]},
        ),
        (
            rs.DeviceTaintRuleConflictError("r", ["kubectl-edit"], True),
            {"name": "r", "managers": ["kubectl-edit"], "restored": True},
        ),
        (rs.NoDeviceTaintRuleAPIError(["v1beta1"]), {"served": ["v1beta1"]}),
    ],
)
def test_errors_survive_pickling(error: Exception, fields: dict[str, object]) -> None:
    error.context = "set by a handler"  # type: ignore[attr-defined]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(error, protocol))
        assert type(back) is type(error)
        assert {name: getattr(back, name) for name in fields} == fields
        assert (str(back), back.args) == (str(error), error.args)
        assert back.context == "set by a handler"  # type: ignore[attr-defined]
    assert str(copy.copy(error)) == str(error)
