"""Which containers get which backend variables, read through the downward API.

The scheduler writes the chosen backend and its attributes as pod annotations
in the Binding; the kubelet resolves ``valueFrom.fieldRef`` when it starts a
container, so the variables carry the placement without the webhook knowing
it. The set of ``FLUXION_<KEY>`` variables follows the resources config and is
re-read when that file changes (a ConfigMap update swaps it in place).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluence import names, resources
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
class EnvContract:
    """The variables a backend-using container gets, each read from one pod annotation."""

    variables: tuple[tuple[str, str], ...] = (
        (names.ENV_QRMI_BACKEND, names.ANNOTATION_BACKEND),
        (names.ENV_FLUXION_BACKEND, names.ANNOTATION_BACKEND),
    )
    """(env var name, annotation) in injection order."""
    known_types: frozenset[str] | None = None
    """Resource types the config defines; None when no config is loaded (nothing to check)."""

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
        return cls(tuple(variables), frozenset(config.types()) if loaded else None)

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
            extra={"path": str(self.path), "variables": [n for n, _ in self._contract.variables]},
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


@dataclass
class EnvPlan:
    """Which containers get the backend variables, and what the user should hear about."""

    targets: list[ContainerSlot] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def plan_env(pod: Pod, contract: EnvContract) -> EnvPlan:
    """Decide the target containers of a fluence pod; no targets unless a fluxion type is asked."""
    plan = EnvPlan()
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
    return plan


def add_env(plan: EnvPlan, contract: EnvContract, patch: PatchBuilder) -> None:
    """Add every contract variable a target container does not define yet (by name)."""
    for slot in plan.targets:
        defined = slot.container.env_names()
        has_env = slot.container.env is not None
        env_path = slot.env_path
        for env_name, annotation in contract.variables:
            if env_name in defined:
                continue
            patch.append(env_path, has_env, contract.env_entry(env_name, annotation))
            defined.add(env_name)
