"""DeviceTaintRules of one driver: taints put on its devices from outside their ResourceSlices.

A driver taints its devices in its own slices (a device's ``taints``, through ``update()`` or
``update_devices()``); a ``DeviceTaintRule`` (``resource.k8s.io``, GA in Kubernetes 1.37)
taints them without rewriting a slice: one device, the devices of a pool, or every device
of the driver. kube-scheduler allocates no device with a ``NoSchedule`` or ``NoExecute``
taint to a claim that does not tolerate it, and the device-taint eviction controller of
kube-controller-manager deletes the pods whose claims use a device with a ``NoExecute`` taint
they do not tolerate. A node agent (the rule owned by its Node) and a central driver use the
same calls.

:class:`DeviceTaintRules` keeps the rules it was told about as told, in the background, like
the slice controller: :meth:`~DeviceTaintRules.set` and :meth:`~DeviceTaintRules.remove`
validate at once (:class:`~resourceslice.ValidationError` naming each problem's path) and
return; a worker thread writes, and retries what fails with backoff, each failure going to
``error_handler(exc, message)``. Rules are written by server-side apply under the object's
own field manager, so a rule of the same name that someone else made is left alone (reported
as :class:`DeviceTaintRuleExistsError`), and a change another writer made to one of ours is
put back when the rule is next set (reported as :class:`DeviceTaintRuleConflictError`); the
rules are not watched, so one deleted by someone else stays deleted until it is set again.

The API version is the newest the cluster serves DeviceTaintRules in: ``v1`` (1.37),
``v1beta2`` (1.36, where that version is switched on), ``v1alpha3`` (1.33 to 1.35, where it
is switched on and the ``DRADeviceTaints`` feature gate is).
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Union
from urllib.parse import quote

from resourceslice._http import delete_options, get_json, node_uid, request, retry_after
from resourceslice._names import (
    BAD_DNS_LABEL,
    BAD_DRIVER,
    BAD_LABEL_NAME,
    BAD_LABEL_VALUE,
    BAD_POOL_NAME,
    is_dns_label,
    is_dns_subdomain,
    is_driver_name,
    is_label_name,
    is_label_value,
    is_pool_name,
)
from resourceslice._plain import _plain
from resourceslice._pycore import canonical
from resourceslice._pycore.validate.device import BAD_EFFECT, BAD_TIME, TAINT_EFFECTS
from resourceslice.api import Owner, ResourceSliceError, ValidationError, _PickledByFields
from resourceslice.connection import ApiError
from resourceslice.controller import ControllerStoppedError, ErrorHandler
from resourceslice.workqueue import WorkQueue

if TYPE_CHECKING:
    from types import TracebackType

    from resourceslice.connection import Client
    from resourceslice.types import DeviceTaint, KubernetesModel

__all__ = [
    "DeviceTaintRuleConflictError",
    "DeviceTaintRuleExistsError",
    "DeviceTaintRules",
    "DeviceTaintSelector",
    "NoDeviceTaintRuleAPIError",
]

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
#: Most preferred first: GA, then beta (1.36), then alpha (1.33 to 1.35).
VERSIONS = ("v1", "v1beta2", "v1alpha3")
RESOURCE = "devicetaintrules"
_TAINT_FIELDS = ("key", "value", "effect", "timeAdded")


@dataclass(frozen=True)
class DeviceTaintSelector:
    """Which of the driver's devices a rule taints: every one (neither set), those of one
    pool, those of that name in any pool, or one device (both set; ``(pool, device)`` says
    the same). The driver is always the :class:`DeviceTaintRules`' own."""

    pool: str | None = None
    device: str | None = None


#: What :meth:`DeviceTaintRules.set` taints: a selector, or ``(pool, device)``.
Target = Union[DeviceTaintSelector, tuple[str, str]]


class NoDeviceTaintRuleAPIError(_PickledByFields, RuntimeError, ResourceSliceError):
    """The cluster serves DeviceTaintRules in none of ``resource.k8s.io`` v1, v1beta2,
    v1alpha3 (before 1.33 there are none; up to 1.36 the version must be switched on).
    ``served``: the versions of the group it does serve."""

    _fields = ("served",)

    def __init__(self, served: list[str]) -> None:
        self.served = list(served)
        super().__init__(
            f"the cluster serves no DeviceTaintRules in {GROUP} {', '.join(VERSIONS)} (served "
            f"versions: {', '.join(served) or 'none'}); 1.33 to 1.35 need "
            f"--runtime-config={GROUP}/v1alpha3=true and the DRADeviceTaints feature gate, "
            f"1.36 {GROUP}/v1beta2=true"
        )


class DeviceTaintRuleExistsError(_PickledByFields, ResourceSliceError):
    """A rule of this name exists and is not this driver's (none of its fields was written
    by the :class:`DeviceTaintRules`' field manager): it is left alone. ``managers`` are the
    field managers that wrote it. A :meth:`~DeviceTaintRules.set` is retried with backoff (the
    name may be freed); a :meth:`~DeviceTaintRules.remove` is done with (the rule is not ours
    to delete)."""

    _fields = ("name", "managers")

    def __init__(self, name: str, managers: list[str]) -> None:
        self.name = name
        self.managers = list(managers)
        super().__init__(
            f"DeviceTaintRule {name!r} exists and was not written by this driver "
            f"(field managers: {', '.join(self.managers) or 'none'}); left alone"
        )


class DeviceTaintRuleConflictError(_PickledByFields, ResourceSliceError):
    """Another writer (``managers``) changed fields of one of this driver's rules. With
    ``restored`` the rule was put back as set, else (fields of the other writer that the
    driver does not set, such as a pool in a selector the driver left open) it stays as it is
    and is retried with backoff."""

    _fields = ("name", "managers", "restored")

    def __init__(self, name: str, managers: list[str], restored: bool) -> None:
        self.name = name
        self.managers = list(managers)
        self.restored = restored
        done = "restoring it" if restored else "it does not match what was set"
        super().__init__(
            f"DeviceTaintRule {name!r}: changed by another writer "
            f"({', '.join(self.managers) or 'unknown'}); {done}"
        )


def _log_error(exc: BaseException, message: str) -> None:
    log.error("%s: %s", message, exc, exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)


def _check_name(name: object) -> list[str]:
    if not isinstance(name, str):
        return ["name: must be a string"]
    if not name:
        return ["name: is required"]
    if not is_dns_subdomain(name):
        return [f"name: {name!r} must be a DNS subdomain of at most 253 characters"]
    return []


def _check_selector(target: object) -> tuple[dict[str, str], list[str]]:
    """The selector's ``pool`` and ``device`` as given, and its problems."""
    if isinstance(target, tuple):
        if len(target) != 2:
            return {}, ["target: must be a DeviceTaintSelector or (pool, device)"]
        target = DeviceTaintSelector(pool=target[0], device=target[1])
    if not isinstance(target, DeviceTaintSelector):
        return {}, ["target: must be a DeviceTaintSelector or (pool, device)"]
    fields: dict[str, str] = {}
    errors = []
    for key, value, valid, problem in (
        ("pool", target.pool, is_pool_name, BAD_POOL_NAME),
        ("device", target.device, is_dns_label, BAD_DNS_LABEL),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            errors.append(f"target.{key}: must be a string")
        elif not valid(value):
            errors.append(f"target.{key}: {problem}")
        else:
            fields[key] = value
    return fields, errors


def _check_taint(taint: object) -> tuple[dict[str, Any], list[str]]:
    """The taint as plain JSON, and its problems (the apiserver's rules for a rule's taint;
    a field it does not know is refused rather than dropped)."""
    errors: list[str] = []
    plain = _plain(taint, "taint", errors)
    if errors:
        return {}, errors
    if not isinstance(plain, dict):
        return {}, ["taint: must be an object"]
    for key in sorted(set(plain) - set(_TAINT_FIELDS)):
        errors.append(f"taint.{key}: unknown field (known: {', '.join(_TAINT_FIELDS)})")
    checks = (
        ("key", is_label_name, BAD_LABEL_NAME, True),
        ("value", is_label_value, BAD_LABEL_VALUE, False),
        ("effect", lambda s: s in TAINT_EFFECTS, BAD_EFFECT, True),
        ("timeAdded", lambda s: canonical.normalise_time(s) is not None, BAD_TIME, False),
    )
    for key, valid, problem, required in checks:
        value = plain.get(key)
        if value is None or value == "":
            if required:
                errors.append(f"taint.{key}: is required")
        elif not isinstance(value, str):
            errors.append(f"taint.{key}: must be a string")
        elif not valid(value):
            errors.append(f"taint.{key}: {problem}")
    return {k: v for k, v in plain.items() if v not in (None, "")}, errors


class _RuleAPI:
    """DeviceTaintRule requests in the newest version the cluster serves them in; found once,
    and again after a 404 (the cluster changed)."""

    def __init__(self, api_client: Client) -> None:
        self._client = api_client
        self._lock = threading.Lock()
        self._version: str | None = None

    def version(self) -> str:
        with self._lock:
            if self._version is not None:
                return self._version
        group = json.loads(get_json(self._client, f"/apis/{GROUP}"))
        served = [entry.get("version", "") for entry in group.get("versions") or ()]
        for version in VERSIONS:
            if version not in served:
                continue
            resources = json.loads(get_json(self._client, f"/apis/{GROUP}/{version}"))
            if any(r.get("name") == RESOURCE for r in resources.get("resources") or ()):
                with self._lock:
                    self._version = version
                log.info("using %s/%s for DeviceTaintRules", GROUP, version)
                return version
        raise NoDeviceTaintRuleAPIError(served)

    def _path(self, version: str, name: str) -> str:
        return f"/apis/{GROUP}/{version}/{RESOURCE}/{quote(name, safe='')}"

    def _call(self, version: str, send: Any) -> Any:
        try:
            return send()
        except ApiError as exc:
            if exc.status == 404:
                with self._lock:
                    if self._version == version:
                        self._version = None
            raise

    def get(self, name: str) -> dict[str, Any] | None:
        """The stored rule, or None when there is none."""
        version = self.version()
        try:
            data = self._call(version, lambda: get_json(self._client, self._path(version, name)))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        rule: dict[str, Any] = json.loads(data)
        return rule

    def apply(self, body: dict[str, Any], manager: str, force: bool) -> dict[str, Any]:
        """Server-side apply of ``body`` (its apiVersion set here); the stored rule."""
        version = self.version()
        body = {**body, "apiVersion": f"{GROUP}/{version}"}
        query = [("fieldManager", manager), ("force", "true" if force else "false")]
        response = self._call(
            version,
            lambda: request(
                self._client,
                "PATCH",
                self._path(version, body["metadata"]["name"]),
                query=query,
                body=json.dumps(body).encode(),
                content_type="application/apply-patch+yaml",
            ),
        )
        rule: dict[str, Any] = json.loads(response.data)
        return rule

    def delete(self, name: str, uid: str, resource_version: str) -> None:
        """DELETE this incarnation of the rule, unchanged (409 when it changed; 404 ignored)."""
        version = self.version()
        try:
            self._call(
                version,
                lambda: request(
                    self._client,
                    "DELETE",
                    self._path(version, name),
                    body=delete_options(uid, resource_version),
                ),
            )
        except ApiError as exc:
            if exc.status != 404:
                raise


def _managers(rule: Mapping[str, Any]) -> list[str]:
    entries = rule.get("metadata", {}).get("managedFields") or ()
    return sorted({str(e.get("manager", "")) for e in entries})


def _conflict_managers(exc: ApiError) -> list[str]:
    """The field managers a server-side apply conflicted with, from its 409's causes."""
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        return []
    causes = (status.get("details") or {}).get("causes") or ()
    found = set()
    for cause in causes:
        message = str(cause.get("message", ""))
        # 'conflict with "kubectl-edit" using resource.k8s.io/v1: .spec.taint.value'
        if message.startswith('conflict with "'):
            found.add(message.split('"')[1])
    return sorted(found)


def _spec_matches(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the stored rule selects and taints as ``wanted`` (``timeAdded`` aside: the
    apiserver sets it)."""
    spec = stored.get("spec") or {}
    if (spec.get("deviceSelector") or {}) != wanted["deviceSelector"]:
        return False
    taint = spec.get("taint") or {}
    return all(taint.get(k, "") == wanted["taint"].get(k, "") for k in ("key", "value", "effect"))


class DeviceTaintRules:
    """The DeviceTaintRules of ``driver`` that this object was told to keep, kept in the
    cluster by a worker thread from construction until :meth:`stop`.

    ``owner``: the object the rules belong to (their controller reference), a node agent's
    Node: the rules go when it is deleted. ``error_handler(exc, message)``: cluster errors
    (default: logged); the rule is retried with backoff. ``field_manager``: the name its
    writes are made under (``resourceslice-<driver>`` by default): a rule of that name that
    no write under it made is not this driver's. Thread-safe.
    """

    def __init__(
        self,
        api_client: Client,
        *,
        driver: str,
        owner: Owner | None = None,
        error_handler: ErrorHandler | None = None,
        field_manager: str | None = None,
    ) -> None:
        if not isinstance(driver, str) or not is_driver_name(driver):
            raise ValidationError([f"driver: {BAD_DRIVER}"])
        if owner is not None and not isinstance(owner, Owner):
            raise TypeError(f"owner must be an Owner, not {type(owner).__name__}")
        self._driver = driver
        self._owner = owner
        self._manager = field_manager or f"resourceslice-{driver}"
        self._error_handler: ErrorHandler = error_handler or _log_error
        self._api = _RuleAPI(api_client)
        self._client = api_client
        self._lock = threading.Condition()
        # name -> the rule's spec as set; a name set and then removed is absent.
        self._desired: dict[str, dict[str, Any]] = {}
        # name -> the number of the last change not yet written; gone once written.
        self._pending: dict[str, int] = {}
        self._changes = 0
        self._stopped = False
        self._queue: WorkQueue[str] = WorkQueue()
        self._worker = threading.Thread(
            target=self._work, name=f"devicetaintrules-{driver}", daemon=True
        )
        self._worker.start()

    # -- public ---------------------------------------------------------------------------

    def set(
        self, name: str, target: Target, taint: DeviceTaint | KubernetesModel | Mapping[str, Any]
    ) -> None:
        """Create rule ``name``, or replace what it selects and its taint: the driver's
        devices that ``target`` selects get ``taint`` (``{"key", "value", "effect"}``; a
        ``timeAdded`` is the apiserver's to set). Returns at once; ValidationError (nothing
        changes) when any of the three is invalid."""
        errors = _check_name(name)
        selector, problems = _check_selector(target)
        errors += problems
        plain, problems = _check_taint(taint)
        errors += problems
        if errors:
            raise ValidationError(errors)
        spec = {"deviceSelector": {"driver": self._driver, **selector}, "taint": plain}
        self._change(name, spec)

    def remove(self, name: str) -> None:
        """Delete rule ``name`` if it is this driver's (also one set before a restart);
        nothing happens when there is none. Returns at once."""
        errors = _check_name(name)
        if errors:
            raise ValidationError(errors)
        self._change(name, None)

    def rules(self) -> dict[str, dict[str, Any]]:
        """The rules set and not removed since construction: name -> spec, as written."""
        with self._lock:
            return copy.deepcopy(self._desired)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Wait until every :meth:`set` and :meth:`remove` so far is done in the cluster;
        False when ``timeout`` ran out first (a rule may be failing: see the error handler)
        or after :meth:`stop`."""
        with self._lock:
            return (
                self._lock.wait_for(lambda: self._stopped or not self._pending, timeout)
                and not self._stopped
            )

    def stop(self) -> None:
        """Stop writing; the rules stay as they are. Waits for a write under way; a later
        :meth:`set` or :meth:`remove` raises :class:`~resourceslice.ControllerStoppedError`."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._lock.notify_all()
        self._queue.shutdown()
        if self._worker is not threading.current_thread():
            self._worker.join()

    def __enter__(self) -> DeviceTaintRules:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- background -----------------------------------------------------------------------

    def _change(self, name: str, spec: dict[str, Any] | None) -> None:
        with self._lock:
            if self._stopped:
                raise ControllerStoppedError("the DeviceTaintRules were stopped")
            if spec is None:
                self._desired.pop(name, None)
            else:
                self._desired[name] = spec
            self._changes += 1
            self._pending[name] = self._changes
        self._queue.add(name)

    def _report(self, exc: BaseException, message: str) -> None:
        try:
            self._error_handler(exc, message)
        except Exception:
            log.exception("the error handler failed")

    def _work(self) -> None:
        while True:
            name = self._queue.get()
            if name is None:
                return
            try:
                with self._lock:
                    change = self._pending.get(name)
                    spec = self._desired.get(name)
                if change is None:
                    continue
                try:
                    if spec is None:
                        self._delete(name)
                    else:
                        self._apply(name, spec)
                except Exception as exc:  # reported, and retried
                    self._report(exc, f"DeviceTaintRule {name!r}")
                    self._queue.add_rate_limited(name, at_least=retry_after(exc))
                    continue
                self._queue.forget(name)
                with self._lock:
                    if self._pending.get(name) == change:
                        del self._pending[name]
                        self._lock.notify_all()
            finally:
                self._queue.done(name)

    def _owner_references(self) -> list[dict[str, Any]]:
        owner = self._owner
        if owner is None:
            return []
        if not owner.uid and owner.is_node:
            # Looked up once: a Node's uid changes only when the Node is recreated.
            owner = self._owner = replace(owner, uid=node_uid(self._client, owner.name))
        return [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
            }
        ]

    def _apply(self, name: str, spec: dict[str, Any]) -> None:
        metadata: dict[str, Any] = {"name": name}
        references = self._owner_references()
        if references:
            metadata["ownerReferences"] = references
        body = {"kind": "DeviceTaintRule", "metadata": metadata, "spec": spec}
        try:
            stored = self._api.apply(body, self._manager, force=False)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Fields of ours that another manager holds with other values: ours to put back
            # if the rule is ours, else someone else's rule of the same name.
            current = self._api.get(name)
            if current is None:
                raise  # gone meanwhile: the retry creates it
            managers = _managers(current)
            if self._manager not in managers:
                raise DeviceTaintRuleExistsError(name, managers) from exc
            self._report(
                DeviceTaintRuleConflictError(name, _conflict_managers(exc) or managers, True),
                f"DeviceTaintRule {name!r}",
            )
            stored = self._api.apply(body, self._manager, force=True)
        if not _spec_matches(stored, spec):
            # Fields we do not set, kept for another manager (a pool in a selector left open).
            others = [m for m in _managers(stored) if m != self._manager]
            raise DeviceTaintRuleConflictError(name, others, False)

    def _delete(self, name: str) -> None:
        current = self._api.get(name)
        if current is None:
            return
        managers = _managers(current)
        if self._manager not in managers:
            # Not ours to delete: said once, and done with.
            self._report(DeviceTaintRuleExistsError(name, managers), f"DeviceTaintRule {name!r}")
            return
        meta = current["metadata"]
        self._api.delete(name, meta["uid"], meta["resourceVersion"])
