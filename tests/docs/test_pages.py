"""What the pages say of the code (how the site renders them: test_rendering.py).

- Every signature a page writes out (``LeaderElection(namespace, name, identity=None, ...)``)
  names the parameters of the code, in order, of their kind, with their defaults; one written
  whole names them all. docs/cli.md's synopsis names every option of the command's parser.
- No page tells to install the package from an index: it is on none (README).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

import resourceslice as rs
from resourceslice import aio, deviceattribute, kubeletplugin, metrics, testing
from resourceslice.cli.command import build_parser
from resourceslice.testing import helm, kubelet, sysfs

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- signatures ---

MODULES = [rs, aio, kubeletplugin, deviceattribute, metrics, testing, kubelet, helm, sysfs]
PREFIXES: dict[str, list[Any]] = {
    "rs": [rs],
    "resourceslice": [rs],
    "aio": [aio],
    "kubeletplugin": [kubeletplugin],
    "resourceslice.kubeletplugin": [kubeletplugin],
    "deviceattribute": [deviceattribute],
    "metrics": [metrics],
    "resourceslice.metrics": [metrics],
    "resourceslice.testing": [testing],
    # The names the pages give instances.
    "ctrl": [rs.Controller],
    "helper": [kubeletplugin.Helper],
    "cdi": [kubeletplugin.CDISpecWriter],
    "cluster": [testing.TestCluster, testing.DRACluster],
    "dra_cluster": [testing.DRACluster],
    "kubelet": [kubelet.KubeletHarness],
    "server": [rs.HealthServer, metrics.MetricsServer],
}
# What a name calls: start_controller's keywords are the Controller's (reference.md).
CALLS: dict[Any, Any] = {rs.start_controller: rs.Controller.__init__}
CLASSES = [c for values in PREFIXES.values() for c in values if inspect.isclass(c)]


def candidates(name: str) -> list[Callable[..., Any]]:
    """What ``name`` (``rs.plan``, ``ctrl.update``, ``serve_health``...) may be."""
    *prefix, attr = name.split(".")
    if prefix:
        owners = PREFIXES.get(".".join(prefix))
        if owners is None:  # a class: KubeletHarness.start
            owners = [getattr(m, prefix[-1]) for m in MODULES if hasattr(m, prefix[-1])]
    else:
        owners = [*MODULES, *CLASSES]
    found = [getattr(owner, attr) for owner in owners if hasattr(owner, attr)]
    return [CALLS.get(f, f) for f in found if callable(f)]


def spans(page: Path) -> Iterator[str]:
    """The inline code of the page (outside fenced blocks), a span across lines joined."""
    text = re.sub(r"^\s*```.*?^\s*```", "", page.read_text(), flags=re.S | re.M)
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        yield " ".join(match.group(1).split())


def written_signatures() -> list[tuple[str, str, ast.arguments, bool]]:
    """(page, text, parameters, partial) of each span shaped like a signature with its
    parameters: ``f(a, b=1)``, ``f(a, *, b)``, ``f(a, ...)``; ``partial`` when it leaves
    some out (``...``)."""
    found = []
    for page in PAGES:
        for text in spans(page):
            match = re.fullmatch(r"([A-Za-z_][\w.]*)\((.+)\)", text)
            if not match:
                continue
            params = re.sub(r",\s*\.\.\.\s*$", "", match.group(2))
            try:
                tree = ast.parse(f"def f({params}): pass")
            except SyntaxError:
                continue  # a call: f(FILE, node=NODE)
            [function] = tree.body
            assert isinstance(function, ast.FunctionDef)
            partial = "..." in match.group(2)
            found.append((relative(page), text, function.args, partial))
    return found


def mismatch(written: ast.arguments, partial: bool, function: Callable[..., Any]) -> str | None:
    """Why ``written`` is not ``function``'s signature (None: it is).

    Names alone (``wait_until(condition, timeout)``) are a signature when they are the
    parameters' names, else a call with the reader's values: then only their number is
    checked. With a parameter that has no default, or a ``*``, it is a signature: names, order,
    kinds and literal defaults are the code's, and written whole (no ``...``) it names every
    parameter. Keywords alone (``Pool(devices=..., max_devices_per_slice=64)``) are a call:
    each keyword is a parameter."""
    signature = inspect.signature(function)
    actual = [p for p in signature.parameters.values() if p.name != "self"]
    if any(p.kind is p.VAR_KEYWORD for p in actual):
        return None  # **options: checked by the table of reference.md
    names = [p.name for p in actual]
    kinds = {p.name: p.kind for p in actual}
    positional = [a.arg for a in [*written.posonlyargs, *written.args]]
    keyword_only = [a.arg for a in written.kwonlyargs]
    star = [written.vararg.arg] if written.vararg else []
    defaults = dict(zip(positional[len(positional) - len(written.defaults) :], written.defaults))
    defaults.update({a.arg: d for a, d in zip(written.kwonlyargs, written.kw_defaults) if d})
    if not (defaults or star or keyword_only or partial):
        takes = [p for p in actual if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if positional == [p.name for p in takes][: len(positional)]:
            return None
        required = [p for p in takes if p.default is p.empty]
        many = any(p.kind is p.VAR_POSITIONAL for p in actual)
        if len(required) <= len(positional) and (many or len(positional) <= len(takes)):
            return None
        return f"takes {len(required)} to {len(takes)} positional arguments"
    mentioned = [*positional, *star, *keyword_only]
    if unknown := [n for n in mentioned if n not in names]:
        return f"no parameter {unknown}"
    bare = [n for n in positional if n not in defaults]
    if not (bare or star or keyword_only):
        return None  # a call with keywords
    if [n for n in names if n in mentioned] != mentioned:
        return f"the order is {names}"
    if wrong := [n for n in keyword_only if kinds[n] is not inspect.Parameter.KEYWORD_ONLY]:
        return f"{wrong} are not keyword-only"
    if wrong := [n for n in bare if kinds[n] is inspect.Parameter.KEYWORD_ONLY]:
        return f"{wrong} are keyword-only (after *)"
    if star and kinds[star[0]] is not inspect.Parameter.VAR_POSITIONAL:
        return f"*{star[0]} is not variadic"
    for name, node in defaults.items():
        try:
            value = ast.literal_eval(node)
        except ValueError:
            continue  # a name or an expression: not compared
        if value is Ellipsis or (isinstance(value, (list, dict, set)) and ... in value):
            continue
        if value != signature.parameters[name].default:
            return f"{name}'s default is {signature.parameters[name].default!r}"
    if not partial and (missing := [n for n in names if n not in mentioned]):
        return f"written whole, it leaves out {missing}"
    return None


def test_every_written_signature_is_the_codes() -> None:
    checked, wrong = 0, []
    for page, text, written, partial in written_signatures():
        functions = candidates(text.split("(", 1)[0])
        if not functions:
            continue  # a callback of the driver's (prepare_resource_claims), Go's, ...
        reasons = [mismatch(written, partial, f) for f in functions]
        checked += 1
        if None not in reasons:
            wrong.append(f"{page}: `{text}`: {reasons[0]}")
    assert wrong == []
    assert checked >= 30  # the check sees the pages' signatures


def test_a_signature_missing_a_parameter_is_caught() -> None:
    """The check fails on the fault it is for (docs/operations.md had it: LeaderElection's
    signature without shards), and on a keyword-only parameter written as positional."""
    [written] = ast.parse("def f(namespace, name, identity=None, lease_duration=15.0): pass").body
    assert isinstance(written, ast.FunctionDef)
    assert "leaves out" in str(mismatch(written.args, False, rs.LeaderElection))
    assert mismatch(written.args, True, rs.LeaderElection) is None
    [written] = ast.parse("def f(path, node=None): pass").body
    assert isinstance(written, ast.FunctionDef)
    assert "keyword-only" not in str(mismatch(written.args, True, rs.load_resources))
    [written] = ast.parse("def f(path, node): pass").body
    assert isinstance(written, ast.FunctionDef)
    assert "takes 1 to 1" in str(mismatch(written.args, False, rs.load_resources))


# --- the command's synopsis ---

# Options the page gives outside the synopsis (it says where): -v before or after the
# subcommand; cluster access as kubectl's.
ELSEWHERE = {"-h", "--verbose", "--kubeconfig", "--context"}


def synopsis() -> dict[str, str]:
    """docs/cli.md's synopsis: each subcommand's lines, joined."""
    page = (ROOT / "docs" / "cli.md").read_text()
    [block] = re.findall(r"```sh\n(.*?)```", page, re.S)[:1]
    commands: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        match = re.match(r"resourceslice (\w+)\s", line)
        if match:
            current = match.group(1)
            commands[current] = line[match.end() :]
        elif line.startswith("resourceslice --version"):
            continue
        else:
            commands[current] += " " + line.strip()
    return commands


def parser_options(command: str) -> dict[str, argparse.Action]:
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub = subparsers.choices[command]
    return {
        max(action.option_strings, key=len) if action.option_strings else action.metavar: action
        for action in sub._actions
    }


@pytest.mark.parametrize("command", ["plan", "publish", "diff", "status", "prune"])
def test_the_synopsis_names_every_option(command: str) -> None:
    """Each option of the parser, with an argument where it takes one, in brackets where it
    is optional; -o with its choices."""
    line = synopsis()[command]
    options = {
        name: action
        for name, action in parser_options(command).items()
        if not (set(action.option_strings) & ELSEWHERE)
    }
    written = dict.fromkeys(re.findall(r"(?<![\w-])(--[\w-]+|-o|FILE)\b", line))
    long = {
        max(a.option_strings, key=len) if a.option_strings else "FILE": a for a in options.values()
    }
    assert list(written) == [w for w in written if w in long or w == "-o"]
    assert set(written) == {"-o" if n == "--output" else n for n in long}
    for name, action in long.items():
        shown = "-o" if name == "--output" else name
        [found] = re.finditer(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", line)
        before, after = line[: found.start()], line[found.end() :].split()
        depth = before.count("[") - before.count("]")
        assert (depth == 0) == (action.required or name == "FILE"), (command, name)
        takes = action.nargs != 0 and name != "FILE"
        argument = after[0].rstrip("]").strip() if after else ""
        assert takes == bool(re.fullmatch(r"[A-Z:]+|[a-z]+(\|[a-z]+)+", argument)), (name, line)
        if action.choices:
            assert set(argument.split("|")) == set(action.choices), name


def test_the_options_outside_the_synopsis_are_on_the_page() -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    for option in ("`-v`", "`-vv`", "`--kubeconfig`", "`--context`", "`--version`"):
        assert option in page


# --- installing ---


# The pages, the examples, and the package's docstrings and messages (the API reference).
READ = [
    *PAGES,
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted(p for p in (ROOT / "python").rglob("*.py") if "_pb" not in p.parts),
]


@pytest.mark.parametrize("page", READ, ids=relative)
def test_no_page_installs_from_an_index(page: Path) -> None:
    """The package is on no index (README): `pip install resourceslice[...]` fails; the
    wheel `make dist` builds is what a reader installs."""
    assert not re.findall(r"pip install ['\"]?resourceslice(\[|==|['\"\s]|$)", page.read_text())


# --- threads ---


@pytest.mark.integration
def test_the_threads_page_names_the_threads_that_run(kube_cluster: testing.TestCluster) -> None:
    """Every thread an asyncio controller with leader election runs is named on
    docs/threads.md as Python names it (a ThreadPoolExecutor's thread: ``<prefix>_0``)."""
    import asyncio
    import threading

    page = (ROOT / "docs" / "threads.md").read_text()
    documented = set(re.findall(r"`((?:resourceslice|kubeletplugin)-[\w-]+)`", page))
    driver = "threads.example.com"
    pools = {"p": rs.Pool(devices=[{"name": "d0"}], all_nodes=True)}
    election = rs.LeaderElection(
        "default", "threads-page", lease_duration=3, renew_deadline=2, retry_period=0.5
    )

    async def running() -> set[str]:
        async with aio.start_controller(
            kubeconfig=str(kube_cluster.kubeconfigs["admin"]),
            driver=driver,
            resources=rs.DriverResources(pools=pools),
            leader_election=election,
        ) as ctrl:
            assert await ctrl.wait_synced(timeout=60)
            await ctrl.update(rs.DriverResources(pools={}))
            assert await ctrl.wait_synced(timeout=60)
            return {t.name for t in threading.enumerate()}

    try:
        names = asyncio.run(running())
    finally:
        admin = kube_cluster.api_client("admin")
        try:
            kubernetes.client.CoordinationV1Api(admin).delete_namespaced_lease(
                "threads-page", "default"
            )
        finally:
            admin.close()
    live = {re.sub(r"-\d+$", "-N", n) for n in names if n.startswith("resourceslice")}
    assert "resourceslice-aio_0" in live and "resourceslice-worker-N" in live
    assert live <= documented


# --- examples ---


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.py")), ids=relative)
def test_the_examples_use_the_public_api(example: Path) -> None:
    """What a driver author copies from examples/ must keep working: no private module or
    name of the package (the demo read slices through resourceslice._http)."""
    private = []
    for node in ast.walk(ast.parse(example.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = [f"{node.value.id}.{node.attr}"]
        else:
            continue
        private += [
            n
            for n in names
            if n.split(".")[0] in ("resourceslice", "rs", "kubeletplugin")
            and any(part.startswith("_") for part in n.split(".")[1:])
        ]
    assert private == []


def test_every_example_is_shown_by_a_page() -> None:
    """Each file of examples/ is named by a page: an example nobody is pointed at is dead."""
    text = "".join(page.read_text() for page in PAGES)
    unreferenced = [
        p.name
        for p in sorted((ROOT / "examples").iterdir())
        if p.name != "__pycache__" and f"examples/{p.name}" not in text  # Python's, not ours
    ]
    assert unreferenced == []


# --- the support policy ---


def test_the_support_policy_is_what_the_project_declares_and_tests() -> None:
    """docs/install.md's policy names the Pythons pyproject.toml declares, the client's
    bounds it sets, and the Kubernetes releases the test servers are built for."""
    page = (ROOT / "docs" / "install.md").read_text()
    policy = page.split("### Support policy\n", 1)[1].split("\n## ", 1)[0]
    rows = {
        row.split(" | ")[0].strip("| `"): row
        for row in policy.splitlines()
        if row.startswith("| ") and not row.startswith("| |")
    }
    project = (ROOT / "pyproject.toml").read_text()
    pythons = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', project)
    newest, oldest = max(pythons, key=lambda v: int(v[2:])), min(pythons, key=lambda v: int(v[2:]))
    assert f"| {oldest} to {newest} |" in rows["Python (CPython)"]
    assert f"| {oldest} (with the oldest dependencies)" in rows["Python (CPython)"]
    low, high = re.search(r'"kubernetes>=([\d.]+),<(\d+)"', project).groups()  # type: ignore[union-attr]
    assert f"| {low} to {int(high) - 1}.x |" in rows["kubernetes` client"]
    releases = sorted(testing.releases(), key=lambda r: tuple(map(int, r.split("."))))
    assert f"| {releases[0]} to {releases[-1]}," in rows["Kubernetes"]
    assert f"| {', '.join(releases)} (a real apiserver" in rows["Kubernetes"]


# --- concepts ---


def test_the_concepts_objects_are_what_the_code_makes() -> None:
    """docs/concepts.md's ResourceSlice is what rs.plan makes of its two GPUs; its DeviceClass
    is the Helm chart's for that driver."""
    import yaml

    from chart.renders import CHART, TEST_IMAGE

    page = (ROOT / "docs" / "concepts.md").read_text()
    shown = {d["kind"]: d for d in yaml.safe_load_all("\n---\n".join(
        re.findall(r"```yaml\n(.*?)```", page, re.S)))}  # fmt: skip
    assert set(shown) == {"ResourceSlice", "DeviceClass"}
    devices = [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "H100"}},
         "capacity": {"memory": {"value": "80Gi"}}} for i in range(2)
    ]  # fmt: skip
    resources = rs.DriverResources(pools={"node-1": rs.Pool(devices=devices)})  # type: ignore[arg-type]
    [planned] = rs.plan(resources, driver="gpu.example.com", node="node-1")
    assert shown["ResourceSlice"] == planned
    rendered = helm.template(CHART, values={"driver": "gpu.example.com", "image": TEST_IMAGE})
    [device_class] = [d for d in rendered if d["kind"] == "DeviceClass"]
    del device_class["metadata"]["labels"]
    assert shown["DeviceClass"] == device_class
