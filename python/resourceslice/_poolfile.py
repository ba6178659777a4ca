"""The pool file: a driver's pools as YAML or JSON, the FILE of the ``resourceslice`` command.

``{pools: {name: {devices | slices, nodeSelector, allNodes, generation}}}``: the fields of
:class:`resourceslice.Pool` and :class:`resourceslice.Slice` in the API's camelCase, plus a
compact form for big regular pools (``foreach``) and ``{node}`` in pool names. Only the
file's shape is checked here; the devices are checked as any others, by the controller.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from resourceslice.api import DriverResources, Pool, Slice, ValidationError
from resourceslice.types import NodeSelector

#: In a pool name, replaced by the node's name (``--node``).
NODE_PLACEHOLDER = "{node}"

_POOL_KEYS = ("allNodes", "devices", "generation", "nodeSelector", "slices")
_SLICE_KEYS = ("devices", "perDeviceNodeSelection", "sharedCounters")
_TEMPLATE_KEYS = ("device", "foreach")

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Selection:
    """Where the slices are available: a node, every node, or a node selector."""

    node: str | None = None
    all_nodes: bool = False
    node_selector: NodeSelector | Mapping[str, Any] | None = None


def read_document(path: Path) -> Any:
    """The parsed file: JSON for ``*.json``, YAML otherwise. OSError when it cannot be read;
    ValidationError with the one problem (its line and column) when it is not UTF-8 text in
    that syntax."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError([str(exc)]) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError([f"line {exc.lineno}, column {exc.colno}: {exc.msg}"]) from None
    try:
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.YAMLError as exc:
        raise ValidationError([_yaml_problem(exc)]) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _unknown_keys(value: Mapping[str, Any], allowed: Sequence[str], path: str) -> list[str]:
    return [
        f"{path}: unknown field {key!r} (expected one of {', '.join(allowed)})"
        for key in value
        if key not in allowed
    ]


def _template_fields(text: str, path: str, names: Sequence[str]) -> list[str]:
    """Problems with the ``{placeholders}`` of one template string (plain names only)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        return [f"{path}: {exc}"]
    return [
        f"{path}: unknown placeholder {{{name}}} (foreach defines {', '.join(names)})"
        for _, name, _, _ in parsed
        if name is not None and name not in names
    ]


def _fill(template: Any, values: Mapping[str, Any]) -> Any:
    """``template`` with every string formatted with ``values``.

    A string that is exactly one ``{name}`` becomes the value itself, so ``int: "{port}"``
    gives an int, as the API wants.
    """
    if isinstance(template, str):
        whole = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", template)
        if whole:
            return values[whole.group(1)]
        return template.format(**values)
    if isinstance(template, Mapping):
        return {key: _fill(item, values) for key, item in template.items()}
    if isinstance(template, list):
        return [_fill(item, values) for item in template]
    return template


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f'{path}["{key}"]')
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def _expand_template(entry: Mapping[str, Any], path: str, errors: list[str]) -> list[Any]:
    """The devices of one ``{foreach: {var: count | [values]}, device: {...}}`` entry.

    The compact form for big regular pools (ports of a switch fabric...): the cartesian
    product of the variables, the last one varying fastest.
    """
    problems = _unknown_keys(entry, _TEMPLATE_KEYS, path)
    ranges = entry.get("foreach")
    device = entry.get("device")
    if not isinstance(ranges, Mapping) or not ranges:
        problems.append(f"{path}.foreach: must map variable names to a count or a list")
    if not isinstance(device, Mapping):
        problems.append(f"{path}.device: must be an object (the device template)")
    if problems:
        errors += problems
        return []
    assert isinstance(ranges, Mapping) and isinstance(device, Mapping)
    axes: list[list[Any]] = []
    for name, spec in ranges.items():
        if not isinstance(name, str) or not name.isidentifier():
            problems.append(f"{path}.foreach: {name!r} is not a variable name")
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            axes.append(list(range(spec)))
        elif isinstance(spec, list):
            axes.append(spec)
        else:
            problems.append(f"{path}.foreach.{name}: must be a count (int >= 0) or a list")
    names = [str(name) for name in ranges]
    for where, text in _strings(device, f"{path}.device"):
        problems += _template_fields(text, where, names)
    if problems:
        errors += problems
        return []
    try:
        return [_fill(device, dict(zip(names, combo))) for combo in itertools.product(*axes)]
    except (ValueError, TypeError) as exc:  # a format spec that does not suit a value
        errors.append(f"{path}.device: {exc}")
        return []


def _devices(value: Any, path: str, errors: list[str]) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        errors.append(f"{path}: must be a list")
        return None
    devices: list[Any] = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping) and "foreach" in item:
            devices += _expand_template(item, f"{path}[{i}]", errors)
        else:
            devices.append(item)
    return devices


def _slice(value: Any, path: str, errors: list[str]) -> Slice | None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: must be an object")
        return None
    errors += _unknown_keys(value, _SLICE_KEYS, path)
    return Slice(
        devices=_devices(value.get("devices"), f"{path}.devices", errors) or [],
        shared_counters=value.get("sharedCounters"),
        per_device_node_selection=value.get("perDeviceNodeSelection"),
    )


def _pool(value: Any, path: str, selection: Selection, errors: list[str]) -> Pool | None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: must be an object with devices or slices")
        return None
    errors += _unknown_keys(value, _POOL_KEYS, path)
    all_nodes = value.get("allNodes", False)
    generation = value.get("generation", 0)
    if not isinstance(all_nodes, bool):
        errors.append(f"{path}.allNodes: must be a boolean")
    if not isinstance(generation, int) or isinstance(generation, bool):
        errors.append(f"{path}.generation: must be an integer")
    slices: list[Slice] | None = None
    if value.get("slices") is not None:
        if isinstance(value["slices"], list):
            built = [
                _slice(s, f"{path}.slices[{i}]", errors) for i, s in enumerate(value["slices"])
            ]
            slices = [s for s in built if s is not None]
        else:
            errors.append(f"{path}.slices: must be a list")
    node_selector = value.get("nodeSelector")
    # The command line's selection is the default; a pool that says where it is wins.
    if node_selector is None and not all_nodes:
        node_selector, all_nodes = selection.node_selector, selection.all_nodes
    return Pool(
        devices=_devices(value.get("devices"), f"{path}.devices", errors),
        slices=slices,
        node_selector=node_selector,
        all_nodes=all_nodes is True,
        generation=generation if isinstance(generation, int) else 0,
    )


def parse_resources(document: Any, selection: Selection) -> tuple[DriverResources, list[str]]:
    """``{pools: {name: {devices | slices, ...}}}`` as DriverResources, and the problems found."""
    if not isinstance(document, Mapping) or not isinstance(document.get("pools"), Mapping):
        return DriverResources(), ["the top level must be an object with a `pools` mapping"]
    errors = _unknown_keys(document, ("pools",), "the top level")
    pools: dict[str, Pool] = {}
    for name, value in document["pools"].items():
        path = f'pools["{name}"]'
        if not isinstance(name, str):
            errors.append(f"{path}: a pool name must be a string")
            continue
        if NODE_PLACEHOLDER in name:
            # A pool name is unique per driver cluster-wide: one file serves every node.
            if selection.node is None:
                errors.append(f"{path}: {NODE_PLACEHOLDER} in a pool name needs --node")
                continue
            name = name.replace(NODE_PLACEHOLDER, selection.node)
        pool = _pool(value, path, selection, errors)
        if pool is not None:
            pools[name] = pool
    return DriverResources(pools=pools), errors


def load_resources(
    path: str | os.PathLike[str],
    *,
    node: str | None = None,
    all_nodes: bool = False,
    node_selector: NodeSelector | Mapping[str, Any] | None = None,
) -> DriverResources:
    """The pools of the pool file at ``path`` (YAML; JSON for ``*.json``), templates expanded.

    ``node`` replaces ``{node}`` in pool names (one file for every node); ``all_nodes`` and
    ``node_selector`` are the selection of the pools that name none of their own, like the
    command's ``--all-nodes`` and ``--node-selector``. Raises OSError when the file cannot be
    read, and ValidationError listing every problem (a line and column, or the place in the
    document) when it is not a pool file. The devices themselves are checked by
    :func:`resourceslice.start_controller` and ``update()``, as any others.
    """
    selection = Selection(node=node, all_nodes=all_nodes, node_selector=node_selector)
    resources, errors = parse_resources(read_document(Path(path)), selection)
    if errors:
        raise ValidationError(errors)
    return resources
