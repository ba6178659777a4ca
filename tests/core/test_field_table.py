"""The field table (``python/resourceslice/_fields.txt``) against ``k8s.io/api`` of every
supported release (``support.api_fields``): each member of the structs it lists is in it or
named below as not modelled, with the API's feature gates and JSON type."""

from __future__ import annotations

import dataclasses
import re

import pytest

import resourceslice as rs
from resourceslice._fields import CARRIED, FIELDS
from resourceslice._pycore.validate.slice import _CHECKERS
from resourceslice.testing.cluster import module_dir, module_files, releases
from support.api_fields import RELEASES, STRUCTS, api_fields

#: Members of the API the library does not model, each with why.
NOT_MODELLED = {
    # 1.36's alpha name of a device's nodeAllocatableResources, renamed in 1.37: the library
    # publishes 1.37's.
    ("device", "nodeAllocatableResourceMappings"),
}

TABLE = {(f.at, f.name): f for f in FIELDS}


@pytest.mark.parametrize("release", RELEASES)
def test_every_member_is_in_the_table(release: str) -> None:
    api = api_fields(release)
    assert set(api) - set(TABLE) <= NOT_MODELLED


@pytest.mark.parametrize("release", RELEASES)
def test_gates_and_types_are_the_apis(release: str) -> None:
    api = api_fields(release)
    for key, f in TABLE.items():
        if key in api:
            assert (list(f.gates), f.json) == (api[key]["gates"], api[key]["type"]), key


def test_every_row_is_in_the_newest_release() -> None:
    assert set(TABLE) <= set(api_fields(max(RELEASES, key=lambda r: tuple(map(int, r.split("."))))))
    assert {at for at, _ in TABLE} == set(STRUCTS)


def test_not_modelled_is_in_some_release() -> None:
    """A name that no release has any more leaves the list."""
    seen = set().union(*(api_fields(r) for r in RELEASES))
    assert seen >= NOT_MODELLED


@pytest.mark.parametrize("release", releases())
def test_test_server_pins_the_same_api(release: str) -> None:
    """The test apiserver of a release is built on the k8s.io/api read here."""
    gomod = (module_dir() / module_files(release)[0]).read_text()
    pinned = re.search(r"^\s*k8s\.io/api => k8s\.io/api (\S+)$", gomod, re.MULTILINE)
    assert pinned is not None
    assert pinned.group(1) == RELEASES[release][0]


def test_every_carried_field_has_its_checker() -> None:
    """Of the pure-Python core (the Rust core's: validate/slice.rs's unit test)."""
    assert {f.check for f in CARRIED} <= set(_CHECKERS)


def test_every_carried_field_is_an_attribute_of_slice() -> None:
    """``_plain`` reads a carried field from the public ``Slice`` by its snake_case name."""
    attributes = {f.name for f in dataclasses.fields(rs.Slice)}
    assert {f.attribute for f in CARRIED} <= attributes
