"""Which containers get which backend variables, read through the downward API.

The scheduler writes the chosen backend and its attributes as pod annotations
in the Binding; the kubelet resolves ``valueFrom.fieldRef`` when it starts a
container, so the variables carry the placement without the webhook knowing
it. The set of ``FLUXION_<KEY>`` variables follows the resources config and is
re-read when that file changes (a ConfigMap update swaps it in place).

QRMI programs get what QRMI's Slurm plugin would give them: the job's resources and
types (``QRMI_JOB_QPU_*``, ``SLURM_JOB_QPU_*``) through the downward API as above,
and each resource's ``<name>_<key>`` settings. Those names depend on the backend, and
the backend is chosen after admission, so every QRMI backend the pod could be given
gets its settings: plain ones as values, credentials as references to a Secret in
the pod's namespace, ``<name>_QRMI_JOB_ACQUISITION_TOKEN`` from the annotation the
queue's release writes, ``<name>_QRMI_JOB_TIMEOUT_SECONDS`` from the pod's
``activeDeadlineSeconds``. QRMI reads only the resources it is told it has.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluence import names, qrmi, resources
from fluence.json_patch import PatchBuilder, pointer
from webhook.review import Container, Pod

log = logging.getLogger(__name__)

# Name part of a qualified annotation key, as the API server validates fieldPath subscripts.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def valid_annotation_key(annotation: str) -> bool:
    """True when ``annotation`` may appear in a downward-API fieldPath (prefix/name, name ≤ 63)."""
    _, _, name = annotation.rpartition("/")
    return len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


@dataclass(frozen=True)
class QrmiBackend:
    """A QRMI resource of the config with what decides whether a pod could be given it."""

    resource: qrmi.QrmiResource
    types: frozenset[str]
    """Every type in its subtree: a pod asking for one of them may land on it."""
    attributes: Mapping[str, str]

    def could_serve(self, requested: set[str], required: Mapping[str, str]) -> bool:
        """True when a pod asking ``requested`` types under ``required`` attributes may get it."""
        if not self.types & requested:
            return False
        for key, value in required.items():
            have = self.resource.name if key == names.ATTR_BACKEND else self.attributes.get(key)
            if have != value:
                return False
        return True


QRMI_JOB_VARIABLES: tuple[tuple[str, str], ...] = (
    (names.ENV_QRMI_JOB_QPU_RESOURCES, names.ANNOTATION_QRMI_RESOURCES),
    (names.ENV_QRMI_JOB_QPU_TYPES, names.ANNOTATION_QRMI_TYPES),
    (names.ENV_SLURM_JOB_QPU_RESOURCES, names.ANNOTATION_QRMI_RESOURCES),
    (names.ENV_SLURM_JOB_QPU_TYPES, names.ANNOTATION_QRMI_TYPES),
)
"""QRMI's job variables, from the annotations the placement writes (empty until then)."""


@dataclass(frozen=True)
class EnvContract:
    """The variables a backend-using container gets, each read from one pod annotation."""

    variables: tuple[tuple[str, str], ...] = (
        (names.ENV_QRMI_BACKEND, names.ANNOTATION_BACKEND),
        (names.ENV_FLUXION_BACKEND, names.ANNOTATION_BACKEND),
    )
    """(env var name, annotation) in injection order."""
    known_types: frozenset[str] | None = None
    """Resource types the config defines; None when no config is loaded (nothing to check)."""
    qrmi_variables: tuple[tuple[str, str], ...] = QRMI_JOB_VARIABLES
    """Like ``variables``, QRMI's: injected after them."""
    qrmi: tuple[QrmiBackend, ...] = ()
    """The config's QRMI resources, in config order."""

    @classmethod
    def from_config(cls, config: resources.ResourcesConfig, *, loaded: bool) -> EnvContract:
        variables = list(cls.variables)
        seen = {name for name, _ in variables}
        for key in config.attribute_keys():
            env_name = names.attr_env(key)
            annotation = names.attr_annotation(key)
            if env_name in seen:
                log.warning(
                    "attribute maps to an env var already injected; skipping it",
                    extra={"attribute": key, "env": env_name},
                )
                continue
            if not valid_annotation_key(annotation):
                log.warning(
                    "attribute key cannot be read through the downward API; rename it to "
                    "letters, digits, '-', '_' or '.' (at most 58 characters)",
                    extra={"attribute": key},
                )
                continue
            seen.add(env_name)
            variables.append((env_name, annotation))
        tops = {r.name: r for r in config.resources if r.name}
        backends = tuple(
            QrmiBackend(q, frozenset(tops[q.name].subtree_types()), tops[q.name].attributes)
            for q in config.qrmi
        )
        known = frozenset(config.types()) if loaded else None
        # QRMI's job variables only where a placement may name a QRMI backend.
        typed = any(r.attributes.get(names.ATTR_QRMI_TYPE) for r in config.walk())
        job = QRMI_JOB_VARIABLES if typed or not loaded else ()
        return cls(tuple(variables), known, qrmi_variables=job, qrmi=backends)

    def env_entry(self, env_name: str, annotation: str) -> dict[str, Any]:
        return {
            "name": env_name,
            "valueFrom": {"fieldRef": {"fieldPath": names.annotation_fieldpath(annotation)}},
        }


class ContractFile:
    """The contract derived from the resources config file, reloaded when the file changes.

    A file that stops parsing keeps the last good contract (and logs why), so
    a bad ConfigMap edit degrades nothing that already worked.
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int, int] | None = None
        self._contract = EnvContract()
        if self.path is not None and self._current_stamp() is None:
            log.warning(
                "resources config not found; injecting only the backend variables",
                extra={"path": str(self.path)},
            )
        self.refresh()

    def _current_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def refresh(self) -> None:
        stamp = self._current_stamp()
        if stamp == self._stamp:
            return
        if stamp is None:
            log.warning(
                "resources config not found; injecting only the backend variables",
                extra={"path": str(self.path)},
            )
            self._contract = EnvContract()
            self._stamp = None
            return
        try:
            config = resources.load(self.path)
        except (resources.ResourcesConfigError, OSError) as e:
            log.error(
                "resources config unusable, keeping the previous env contract",
                extra={"path": str(self.path), "error": str(e)},
            )
            self._stamp = stamp
            return
        self._contract = EnvContract.from_config(config, loaded=True)
        self._stamp = stamp
        log.info(
            "env contract loaded",
            extra={
                "path": str(self.path),
                "variables": [n for n, _ in self._contract.variables],
                "qrmi_resources": [b.resource.name for b in self._contract.qrmi],
            },
        )

    def current(self) -> EnvContract:
        """The contract for the file as it is now (a stat per call; parsing only on change)."""
        self.refresh()
        return self._contract


@dataclass(frozen=True)
class ContainerSlot:
    """A container and where it sits in the pod (``containers`` or ``initContainers``)."""

    field: str
    index: int
    container: Container

    @property
    def env_path(self) -> str:
        return pointer("spec", self.field, self.index, "env")


def containers(pod: Pod) -> Iterator[ContainerSlot]:
    for i, c in enumerate(pod.spec.init_containers or ()):
        yield ContainerSlot("initContainers", i, c)
    for i, c in enumerate(pod.spec.containers):
        yield ContainerSlot("containers", i, c)


def fluxion_types(container: Container) -> set[str]:
    """The fluxion resource types a container asks for (requests or limits)."""
    found = set()
    for resource in container.resource_names():
        rtype = names.resource_type(resource)
        if rtype:
            found.add(rtype)
    return found


def opted_in(pod: Pod) -> list[str]:
    """Container names listed in the env-containers annotation."""
    raw = pod.annotations.get(names.ANNOTATION_ENV_CONTAINERS, "")
    return [n.strip() for n in raw.split(",") if n.strip()]


def required_attributes(pod: Pod) -> dict[str, str]:
    """The pod's ``require-<attr>: <value>`` annotations as {attr: value}."""
    prefix = names.ANNOTATION_REQUIRE_PREFIX
    return {k[len(prefix) :]: v for k, v in pod.annotations.items() if k.startswith(prefix) and v}


@dataclass
class EnvPlan:
    """Which containers get the backend variables, and what the user should hear about."""

    targets: list[ContainerSlot] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    qrmi: list[qrmi.QrmiResource] = field(default_factory=list)
    """The QRMI resources the pod could be given: each one's settings are injected."""
    run_as_user: int | None = None
    """The pod's ``securityContext.runAsUser`` (a container's own wins)."""


def plan_env(pod: Pod, contract: EnvContract) -> EnvPlan:
    """Decide the target containers of a fluence pod; no targets unless a fluxion type is asked."""
    plan = EnvPlan()
    if pod.spec.security_context is not None:
        plan.run_as_user = pod.spec.security_context.run_as_user
    slots = list(containers(pod))
    # Each container's types once: every pod creation waits on this.
    asking = [(slot, fluxion_types(slot.container)) for slot in slots]
    requested: set[str] = set().union(*(types for _, types in asking))
    if not requested:
        if opted_in(pod):
            plan.warnings.append(
                f"{names.ANNOTATION_ENV_CONTAINERS} is set but no container requests a "
                f"{names.RESOURCE_PREFIX}<type> resource; no backend variables were added"
            )
        return plan
    if contract.known_types is not None:
        for rtype in sorted(requested - contract.known_types):
            plan.warnings.append(
                f"{names.resource_name(rtype)} is not defined in the fluence resources config; "
                "the pod cannot be placed until it is (check the type name)"
            )
    wanted = set(opted_in(pod))
    present = {s.container.name for s in slots}
    for missing in sorted(wanted - present):
        plan.warnings.append(
            f"{names.ANNOTATION_ENV_CONTAINERS} names container {missing!r}, which the pod "
            "does not have"
        )
    plan.targets = [slot for slot, types in asking if types or slot.container.name in wanted]
    required = required_attributes(pod)
    plan.qrmi = [b.resource for b in contract.qrmi if b.could_serve(requested, required)]
    return plan


def add_env(
    plan: EnvPlan, contract: EnvContract, patch: PatchBuilder, *, queued: bool = True
) -> None:
    """Add every contract variable a target container does not define yet (by name).

    ``queued``: the pod waits for the queue, which acquires its QRMI resources.
    """
    entries = [
        contract.env_entry(env_name, annotation)
        for env_name, annotation in (*contract.variables, *contract.qrmi_variables)
    ]
    entries += [entry for resource in plan.qrmi for entry in qrmi_settings(resource, queued)]
    _add_entries(plan, entries, patch)
    if plan.qrmi:
        for slot in plan.targets:
            _add_to(slot, qrmi_job(slot, plan.run_as_user), patch)


def qrmi_job(slot: ContainerSlot, pod_user: int | None) -> list[dict[str, Any]]:
    """``QRMI_JOB_ID`` (the pod's UID, through the downward API) and ``QRMI_JOB_UID`` (the
    user the container runs as, when the pod says): what QRMI's Slurm plugin sets from the
    job's id and user, and what session types such as pasqal-local require."""
    out: list[dict[str, Any]] = [
        {"name": names.ENV_QRMI_JOB_ID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    ]
    own = slot.container.security_context
    user = own.run_as_user if own is not None and own.run_as_user is not None else pod_user
    if user is not None:
        out.append({"name": names.ENV_QRMI_JOB_UID, "value": str(user)})
    return out


def add_timeouts(plan: EnvPlan, deadline: int | None, patch: PatchBuilder) -> None:
    """``<name>_QRMI_JOB_TIMEOUT_SECONDS`` for each QRMI resource: the pod's deadline.

    QRMI's Slurm plugin sets it from the job's time limit; a pod's limit is its
    ``activeDeadlineSeconds``. Without one the variable is left unset (QRMI's default).
    """
    if not deadline or deadline <= 0:
        return
    entries = [
        {"name": r.variable(names.QRMI_JOB_TIMEOUT_KEY), "value": str(deadline)} for r in plan.qrmi
    ]
    _add_entries(plan, entries, patch)


def qrmi_settings(resource: qrmi.QrmiResource, queued: bool = True) -> list[dict[str, Any]]:
    """``<name>_<key>`` for each setting of ``resource``: values inline, credentials by
    reference to its Secret in the pod's namespace, and the acquisition token when the
    queue acquires it (from the annotation the release writes).

    The references are required: a pod whose namespace lacks the Secret or a key is not
    started, and the kubelet says which in an Event (``CreateContainerConfigError``),
    where an optional one would leave QRMI failing inside the program, run after run.
    """
    out: list[dict[str, Any]] = [
        {"name": resource.variable(key), "value": value} for key, value in resource.settings
    ]
    for key in resource.secrets:
        variable = resource.variable(key)
        ref = {"name": resource.secret, "key": variable}
        out.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
    if queued and resource.acquire:
        path = names.annotation_fieldpath(names.qrmi_token_annotation(resource.name))
        variable = resource.variable(names.QRMI_JOB_ACQUISITION_TOKEN_KEY)
        out.append({"name": variable, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return out


def _add_entries(plan: EnvPlan, entries: list[dict[str, Any]], patch: PatchBuilder) -> None:
    """Append ``entries`` to each target container, skipping names it already defines."""
    for slot in plan.targets:
        _add_to(slot, entries, patch)


def _add_to(slot: ContainerSlot, entries: list[dict[str, Any]], patch: PatchBuilder) -> None:
    """Append ``entries`` to one container, skipping names it already defines."""
    defined = slot.container.env_names()
    has_env = slot.container.env is not None
    env_path = slot.env_path
    for entry in entries:
        if entry["name"] in defined:
            continue
        patch.append(env_path, has_env, entry)
        defined.add(entry["name"])
