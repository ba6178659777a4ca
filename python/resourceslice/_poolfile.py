"""The pool file: a driver's pools as YAML or JSON, the FILE of the ``resourceslice`` command.

``{pools: {name: {devices | slices, nodeSelector, allNodes, generation, maxDevicesPerSlice}}}``:
the fields of :class:`resourceslice.Pool` and :class:`resourceslice.Slice` in the API's
camelCase, plus a compact form for big regular pools (``foreach``) and ``{node}`` in pool
names. Only the file's shape is checked here; the devices are checked as any others, by the
controller.

A pool file is data, often from a ConfigMap anyone with edit rights can change, and it must
not be able to run code, crash the reader, or exhaust its memory: templates take plain
``{name}`` / ``{name:spec}`` fields only (``str.format`` would follow ``{i.__class__}`` or a
nested ``{i:{j}}``), with bounded widths; the expansion's size is known before it is made;
YAML aliases are refused (a few hundred bytes of them make gigabytes), and so is nesting
deeper than any pool needs.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from resourceslice._names import BAD_POOL_NAME, MAX_POOL_NAME_LENGTH
from resourceslice.api import DriverResources, Pool, Slice, ValidationError
from resourceslice.types import KubernetesModel, NodeSelector

#: In a pool name, replaced by the node's name (``--node``).
NODE_PLACEHOLDER = "{node}"

_POOL_KEYS = ("allNodes", "devices", "generation", "maxDevicesPerSlice", "nodeSelector", "slices")
_SLICE_KEYS = ("devices", "perDeviceNodeSelection", "sharedCounters")
_TEMPLATE_KEYS = ("device", "foreach")

_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: The most devices the ``foreach`` templates of one file may make: ten times the biggest pool
#: the benchmarks publish.
MAX_EXPANDED_DEVICES = 100_000
#: The most the templates of one file may make, in characters of strings and numbers written
#: out, plus :data:`_NODE_WEIGHT` for each other value: a few hundred MB in memory at most. Each
#: field counts as the longest text its values can format to (see :func:`_field_size`), so a
#: small file of big values is charged for what it makes. The charge is an upper bound, a few
#: times what a plain template makes (the fabric example's devices: 728 charged, 163 made), so
#: 100,000 devices fit only when each is charged under 640.
MAX_EXPANDED_SIZE = 64_000_000
_NODE_WEIGHT = 16
#: The largest width or precision in a template's format spec (a name is at most 63 bytes).
MAX_FORMAT_WIDTH = 64
#: The deepest nesting of a document: a pool file needs about ten levels.
MAX_DEPTH = 64

# The format spec mini-language with nothing nested: [[fill]align][sign][z][#][0][width]
# [grouping][.precision][type].
_PLAIN_SPEC = re.compile(
    r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>[0-9]*)[_,]?(?:\.(?P<precision>[0-9]+))?"
    r"[bcdeEfFgGnosxX%]?",
    re.DOTALL,
)


@dataclass(frozen=True)
class Selection:
    """Where the slices are available: a node, every node, or a node selector."""

    node: str | None = None
    all_nodes: bool = False
    node_selector: NodeSelector | KubernetesModel | None = None


def read_document(path: Path) -> Any:
    """The parsed file: JSON for ``*.json``, YAML otherwise. OSError when it cannot be read;
    ValidationError with the one problem (its line and column) when it is not UTF-8 text in
    that syntax."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError([str(exc)]) from None
    try:
        if path.suffix.lower() == ".json":
            document = json.loads(text)
        else:
            _refuse_aliases_and_depth(text)
            document = yaml.load(text, Loader=_YamlLoader)
    except json.JSONDecodeError as exc:
        raise ValidationError([f"line {exc.lineno}, column {exc.colno}: {exc.msg}"]) from None
    except yaml.YAMLError as exc:
        raise ValidationError([_yaml_problem(exc)]) from None
    except ValueError as exc:
        # Valid syntax, a value Python will not make: an integer of more digits than
        # int() reads (4,300), or a YAML date such as 2020-13-45. Neither parser says where.
        raise ValidationError([f"a value that cannot be read: {exc}"]) from None
    except RecursionError:  # the parsers recurse per level of nesting
        raise ValidationError([f"nested more than {MAX_DEPTH} levels deep"]) from None
    if _depth_exceeds(document, MAX_DEPTH):
        raise ValidationError([f"nested more than {MAX_DEPTH} levels deep"])
    return document


def _refuse_aliases_and_depth(text: str) -> None:
    """A ValidationError at the first alias (``*name``), or past :data:`MAX_DEPTH` levels of
    nesting, read from the parser's events before anything is built: aliases share a node,
    so a few hundred bytes of them expand to gigabytes once loaded, or loop forever; and
    the composer recurses per level (older PyYAML and libyaml set no limit, and a deep
    document overflows the C stack)."""
    depth = 0
    for event in yaml.parse(text, Loader=_YamlLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ValidationError([f"nested more than {MAX_DEPTH} levels deep"])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            where = "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}: "
            raise ValidationError([f"{where}YAML aliases (*name) are not allowed in a pool file"])


def _depth_exceeds(document: Any, limit: int) -> bool:
    """Whether ``document`` nests deeper than ``limit`` (without recursing: it may be deep)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (Mapping, list)):
            if depth > limit:
                return True
            items = value.values() if isinstance(value, Mapping) else value
            stack.extend((item, depth + 1) for item in items)
    return False


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
    """Problems with the ``{placeholders}`` of one template string: each must be ``{name}`` or
    ``{name:spec}``, a variable of ``foreach`` and a plain format spec of bounded width."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        return [f"{path}: {exc}"]
    problems = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        field = f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
        if name not in names:
            problems.append(
                f"{path}: unknown placeholder {field} (foreach defines {', '.join(names)})"
            )
        elif conversion:
            problems.append(f"{path}: {field}: only {{name}} or {{name:spec}}, no !conversion")
        elif spec and not _plain_spec(spec):
            problems.append(
                f"{path}: {field}: the format spec must be plain (no nested fields), with a "
                f"width and precision of at most {MAX_FORMAT_WIDTH}"
            )
    return problems


def _plain_spec(spec: str) -> bool:
    match = _PLAIN_SPEC.fullmatch(spec)
    return match is not None and all(
        int(match[part] or 0) <= MAX_FORMAT_WIDTH for part in ("width", "precision")
    )


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


class _Budget:
    """How much more the file's templates may make (:data:`MAX_EXPANDED_DEVICES` devices,
    :data:`MAX_EXPANDED_SIZE` in all)."""

    def __init__(self) -> None:
        self.devices = MAX_EXPANDED_DEVICES
        self.size = MAX_EXPANDED_SIZE


def _weight(value: Any) -> int:
    """The size of ``value`` as :data:`MAX_EXPANDED_SIZE` counts it (iterative: it may be deep).

    A number counts its digits, not a flat :data:`_NODE_WEIGHT`: an int of the template or a
    foreach value put whole in every device is written out in each (at most bits / 3 digits
    and a sign; a float's repr is at most 24 characters)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, int):
            total += max(_NODE_WEIGHT, abs(item).bit_length() // 3 + 2)
        elif isinstance(item, float):
            total += 24
        else:
            total += _NODE_WEIGHT
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _field_size(value: Any) -> int:
    """The most characters a ``{name}`` or ``{name:spec}`` field of ``value`` makes, for any spec
    :func:`_template_fields` allows, and no less than :func:`_weight` (a field that is a whole
    string stands for the value itself).

    From the value's own size, not a flat weight: ``{v:_b}`` of a 4,300-digit int is about 17,850
    characters, and ``{v}`` of a list of them as many as their digits. A width pads to at most
    :data:`MAX_FORMAT_WIDTH`, and a precision cuts a string.
    """
    if isinstance(value, str):
        return max(len(value), MAX_FORMAT_WIDTH)
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else 0
    if isinstance(value, int):
        bits = abs(value).bit_length()
        # The longest of: binary, a digit per bit, a "_" per four, "-0b"; and a float
        # presentation, whose integer part (at most 2**bits) is at most bits * 0.302 + 3
        # digits (2 for "%"), bits * 0.402 + 4 with a "," per three, then a sign, a point, at
        # most MAX_FORMAT_WIDTH decimals and "%" ("e": 2 digits and "e+308" around them).
        return max(bits + bits // 4 + 3, bits // 2 + MAX_FORMAT_WIDTH + 8)
    # Anything else (a list, a mapping, None) formats only to its str(); a date's spec is a
    # strftime format: the spec's own text, counted in the template, and two directives at most
    # (the fill and the type may be "%"), padded to at most MAX_FORMAT_WIDTH each.
    try:
        text = len(str(value))
    except ValueError:  # an int past the digits str() writes: formatting it fails as well
        text = 0
    return max(text, _weight(value)) + 2 * MAX_FORMAT_WIDTH


def _expand_template(
    entry: Mapping[str, Any], path: str, errors: list[str], budget: _Budget
) -> list[Any]:
    """The devices of one ``{foreach: {var: count | [values]}, device: {...}}`` entry.

    The compact form for big regular pools (ports of a switch fabric...): the cartesian
    product of the variables, the last one varying fastest. Its size is checked against
    what is left of the file's budget before anything is made.
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
    axes: list[Sequence[Any]] = []
    # The sizes as counted, not len() of the axes: that of a range is limited to a C ssize_t,
    # and a count past it must get the same error as any other too big.
    sizes: list[int] = []
    for name, spec in ranges.items():
        if not isinstance(name, str) or not name.isidentifier():
            problems.append(f"{path}.foreach: {name!r} is not a variable name")
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            axes.append(range(spec))
            sizes.append(spec)
        elif isinstance(spec, list):
            axes.append(spec)
            sizes.append(len(spec))
        else:
            problems.append(f"{path}.foreach.{name}: must be a count (int >= 0) or a list")
    names = [str(name) for name in ranges]
    for where, text in _strings(device, f"{path}.device"):
        problems += _template_fields(text, where, names)
    if problems:
        errors += problems
        return []
    count = math.prod(sizes)
    # Each device: the template, and each field filled with the value of its variable that
    # makes the most (of a count: its last value, the biggest number).
    widest = {
        name: max(map(_field_size, axis), default=0)
        if isinstance(axis, list)
        else _field_size(max(length - 1, 0))
        for name, axis, length in zip(names, axes, sizes)
    }
    fields = sum(
        widest[name]
        for _, text in _strings(device, "")
        for _, name, _, _ in string.Formatter().parse(text)
        if name is not None
    )
    size = count * (_weight(device) + fields)
    if count > budget.devices or size > budget.size:
        errors.append(
            f"{path}: makes {count} devices of about {size} characters in all, more than a "
            f"pool file's templates may make ({MAX_EXPANDED_DEVICES} devices, "
            f"{MAX_EXPANDED_SIZE} characters)"
        )
        budget.devices = budget.size = 0  # one such error is enough
        return []
    budget.devices -= count
    budget.size -= size
    if count == 0:  # an empty axis: product() would still make a tuple of each other axis
        return []
    try:
        return [_fill(device, dict(zip(names, combo))) for combo in itertools.product(*axes)]
    except (ValueError, TypeError, OverflowError) as exc:  # a spec that does not suit a value
        errors.append(f"{path}.device: {exc}")
        return []


def _devices(value: Any, path: str, errors: list[str], budget: _Budget) -> list[Any] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        errors.append(f"{path}: must be a list")
        return None
    devices: list[Any] = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping) and "foreach" in item:
            devices += _expand_template(item, f"{path}[{i}]", errors, budget)
        else:
            devices.append(item)
    return devices


def _slice(value: Any, path: str, errors: list[str], budget: _Budget) -> Slice | None:
    if not isinstance(value, Mapping):
        errors.append(f"{path}: must be an object")
        return None
    errors += _unknown_keys(value, _SLICE_KEYS, path)
    return Slice(
        devices=_devices(value.get("devices"), f"{path}.devices", errors, budget) or [],
        shared_counters=value.get("sharedCounters"),
        per_device_node_selection=value.get("perDeviceNodeSelection"),
    )


def _pool(
    value: Any, path: str, selection: Selection, errors: list[str], budget: _Budget
) -> Pool | None:
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
                _slice(s, f"{path}.slices[{i}]", errors, budget)
                for i, s in enumerate(value["slices"])
            ]
            slices = [s for s in built if s is not None]
        else:
            errors.append(f"{path}.slices: must be a list")
    pool = Pool(
        devices=_devices(value.get("devices"), f"{path}.devices", errors, budget),
        slices=slices,
        node_selector=value.get("nodeSelector"),
        all_nodes=all_nodes is True,
        generation=generation if isinstance(generation, int) else 0,
        max_devices_per_slice=value.get("maxDevicesPerSlice"),  # checked by the core
    )
    return with_selection(pool, selection.all_nodes, selection.node_selector)


def with_selection(
    pool: Pool, all_nodes: bool, node_selector: NodeSelector | KubernetesModel | None
) -> Pool:
    """``pool``, on ``all_nodes`` or ``node_selector`` when it names no node selection of its
    own: the command line's selection is the default, a pool that says where it is wins."""
    if not isinstance(pool, Pool) or pool.node_selector is not None or pool.all_nodes:
        return pool  # (not a Pool: reported by the validation)
    return replace(pool, node_selector=node_selector, all_nodes=all_nodes)


def parse_resources(document: Any, selection: Selection) -> tuple[DriverResources, list[str]]:
    """``{pools: {name: {devices | slices, ...}}}`` as DriverResources, and the problems found."""
    if not isinstance(document, Mapping) or not isinstance(document.get("pools"), Mapping):
        return DriverResources(), ["the top level must be an object with a `pools` mapping"]
    errors = _unknown_keys(document, ("pools",), "the top level")
    pools: dict[str, Pool] = {}
    budget = _Budget()
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
        if len(name) > MAX_POOL_NAME_LENGTH:
            # Refused here, before its templates are expanded, not left to the core with the
            # other name checks: every error the core finds in one of the pool's devices
            # starts with the pool's name, and a 100,000-character name on 100,000 devices
            # with bad names is 10 GB of error text. (Characters, not bytes: a name that is
            # not UTF-8 cannot be encoded, and the core reports it.)
            errors.append(f"{path}: {BAD_POOL_NAME}")
            continue
        pool = _pool(value, path, selection, errors, budget)
        if pool is not None:
            pools[name] = pool
    return DriverResources(pools=pools), errors


def load_resources(
    path: str | os.PathLike[str],
    *,
    node: str | None = None,
    all_nodes: bool = False,
    node_selector: NodeSelector | KubernetesModel | None = None,
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
