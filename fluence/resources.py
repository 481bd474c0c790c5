"""The resources config: non-node resources (quantum backends and the like) to add to the graph.

Same schema as the Go fluence's ``FLUENCE_RESOURCES`` file, so one ConfigMap
serves both::

    resources:
      - type: qdevice          # required; requestable as fluxion.flux-framework.org/qdevice
        name: ibm_fez          # optional; a top-level name is the backend identity
        count: 1               # optional, default 1
        parent: cluster        # optional, top level only: "cluster" or a node name
        attributes: ibm        # a reference into `attributes:`, or an inline map
        with: [...]            # children, same schema
    attributes:
      ibm: {vendor: ibm, qrmi_type: qiskit-runtime-service}

Attributes are inherited by children, which may override a key or clear it
with an empty string.

An entry with an ``environment`` map is a QRMI resource definition, as in the
``qrmi_config.json`` an HPC centre keeps for QRMI's Slurm plugin, so that file
is a resources config as it stands::

    {"resources": [{"name": "ibm_fez", "type": "ibm-quantum-system",
                    "environment": {"QRMI_IBM_QS_ENDPOINT": "https://...",
                                    "QRMI_IBM_QS_IAM_APIKEY": ""}}]}

Each becomes a backend shaped like the YAML ones, a ``qdevice`` named after it
holding one ``qpu`` (and ``qubits`` qubits when given), so a pod asking for a
qpu may get it, and at most one pod holds it at a time; its QRMI type is the
attribute ``qrmi_type``. Credentials (API keys, tokens, secrets) are never
written here: their value is left empty and read by the pod from a Secret
(``secret``, default ``fluence-qrmi``, key ``<name>_<key>``); a value written
inline makes the whole config refused. fluence acquires each resource for the
pods it gives it and releases it when they are done, as QRMI's Slurm plugin
does (``acquire: false`` leaves both to the program); the acquisition uses the
same Secret in the extender's own namespace. ``secret``, ``qubits``, ``acquire``
and ``attributes`` are fluence's own fields; QRMI ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fluence import names, qrmi


class ResourcesConfigError(ValueError):
    """The resources config cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Resource:
    """One configured resource with its attributes resolved (inherited and overridden)."""

    type: str
    name: str
    count: int
    parent: str
    attributes: Mapping[str, str]
    backend: str
    """Name of the top-level resource this one belongs to ("" when it has none)."""
    children: tuple[Resource, ...] = ()

    def walk(self) -> Iterator[Resource]:
        """This resource and every descendant, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def subtree_types(self) -> set[str]:
        return {r.type for r in self.walk()}


@dataclass(frozen=True)
class ResourcesConfig:
    resources: tuple[Resource, ...] = ()
    registry: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    qrmi: tuple[qrmi.QrmiResource, ...] = ()
    """The QRMI resource definitions among ``resources``, in config order."""

    def walk(self) -> Iterator[Resource]:
        for r in self.resources:
            yield from r.walk()

    def types(self) -> list[str]:
        """Every configured type at every depth, sorted and unique."""
        return sorted({r.type for r in self.walk()})

    def resource_names(self) -> list[str]:
        """The extended resources to advertise: fluxion.flux-framework.org/<type>."""
        return [names.resource_name(t) for t in self.types()]

    def attribute_keys(self) -> list[str]:
        """Union of resolved attribute keys (the webhook's env contract), without ``backend``."""
        keys = {k for r in self.walk() for k in r.attributes}
        keys.discard(names.ATTR_BACKEND)
        return sorted(keys)

    @property
    def empty(self) -> bool:
        return not self.resources


def parse(text: str) -> ResourcesConfig:
    """Parse and validate a resources config (YAML or JSON). Empty text means no resources."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Not str(e): it quotes the offending line, which may hold a credential.
        where = ""
        mark = getattr(e, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or "unparsable"
        raise ResourcesConfigError(
            f"resources config is not valid YAML (or JSON): {problem}{where}"
        ) from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ResourcesConfigError("resources config must be a mapping with a 'resources:' list")
    raw_resources = doc.get("resources") or []
    if not isinstance(raw_resources, list):
        raise ResourcesConfigError("'resources' must be a list")
    if "resources" not in doc and _has_content(text):
        raise ResourcesConfigError(
            "resources config has content but defines no resources: expected a top-level "
            "'resources:' list (check the schema)"
        )
    registry = _registry(doc.get("attributes"))
    qrmi_defs = []
    resolved_list = []
    for raw in raw_resources:
        if isinstance(raw, dict) and "environment" in raw:
            definition, raw = _qrmi_entry(raw, registry)
            qrmi_defs.append(definition)
        resolved_list.append(_resource(raw, {}, "", registry, top=True))
    resolved = tuple(resolved_list)
    seen_names: set[str] = set()
    for r in resolved:
        if r.name:
            if r.name in seen_names:
                raise ResourcesConfigError(f"resource name {r.name!r} is used twice")
            seen_names.add(r.name)
    return ResourcesConfig(resolved, registry, tuple(qrmi_defs))


def load(path: str | Path | None) -> ResourcesConfig:
    """Read the config file; a path that is unset or missing means classical-only (no resources)."""
    if not path:
        return ResourcesConfig()
    p = Path(path)
    if not p.exists():
        return ResourcesConfig()
    return parse(p.read_text())


def _qrmi_entry(
    raw: dict[str, Any], registry: Mapping[str, Mapping[str, str]]
) -> tuple[qrmi.QrmiResource, dict[str, Any]]:
    """A QRMI resource definition, and the resource entry it stands for in the graph.

    Errors name the entry and the key, never a value: a value may be a credential.
    """
    name = raw.get("name")
    if not name or not isinstance(name, str):
        raise ResourcesConfigError("a QRMI resource (an entry with 'environment') needs a 'name'")
    rtype = raw.get("type")
    if not rtype or not isinstance(rtype, str) or not _valid_type(rtype):
        raise ResourcesConfigError(
            f"QRMI resource {name!r}: 'type' must be a QRMI resource type such as "
            "'ibm-quantum-system', 'pasqal-cloud' or 'alice-bob-felis'"
        )
    if raw.get("is_dynamic"):
        raise ResourcesConfigError(
            f"QRMI resource {name!r} is dynamic (is_dynamic: true): fluence schedules named "
            "backends, so list each backend as an entry of its own"
        )
    secret = raw.get("secret", names.QRMI_SECRET)
    if not isinstance(secret, str) or not _SECRET_NAME.match(secret):
        raise ResourcesConfigError(
            f"QRMI resource {name!r}: 'secret' must name a Secret (lower-case letters, digits, "
            "'-' or '.', at most 253)"
        )
    environment = raw.get("environment")
    if environment is None:
        environment = {}
    if not isinstance(environment, dict):
        raise ResourcesConfigError(f"QRMI resource {name!r}: 'environment' must be a map")
    settings: list[tuple[str, str]] = []
    secrets: list[str] = []
    for key, value in environment.items():
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            raise ResourcesConfigError(
                f"QRMI resource {name!r}: environment key {key!r} must be letters, digits "
                "and '_', not starting with a digit"
            )
        if key in (names.QRMI_JOB_ACQUISITION_TOKEN_KEY, names.QRMI_JOB_TIMEOUT_KEY):
            raise ResourcesConfigError(
                f"QRMI resource {name!r}: {key} is set for each job (the acquisition, the "
                "pod's activeDeadlineSeconds), not in the config; remove it"
            )
        if qrmi.is_credential(key):
            if value not in (None, ""):
                raise ResourcesConfigError(
                    f"QRMI resource {name!r}: {key} is a credential and its value must not be "
                    'in the config (a ConfigMap, copied into every pod spec): set it to "" and '
                    f"store the value in Secret {secret!r}, key "
                    f"{names.qrmi_env(name, key)!r}, in each namespace whose pods may use "
                    f"{name!r}"
                )
            secrets.append(key)
            continue
        settings.append((key, _scalar(value)))
    acquire = raw.get("acquire", True)
    if not isinstance(acquire, bool):
        raise ResourcesConfigError(f"QRMI resource {name!r}: 'acquire' must be true or false")
    longest = names.qrmi_token_seal_annotation(name).split("/")[1]
    if acquire and not _ANNOTATION_NAME.match(longest):
        raise ResourcesConfigError(
            f"QRMI resource {name!r}: fluence acquires it and writes its token in annotation "
            f"{names.qrmi_token_annotation(name)!r} and its seal in {longest!r}, which the "
            "name makes invalid (letters, digits, '-', '_' or '.', at most 47 characters); "
            "rename it or set 'acquire: false'"
        )
    qubits = raw.get("qubits")
    if qubits is not None and (
        isinstance(qubits, bool) or not isinstance(qubits, int) or qubits < 1
    ):
        raise ResourcesConfigError(f"QRMI resource {name!r}: 'qubits' must be a positive integer")
    attrs = _attributes(raw.get("attributes"), registry, name)
    attrs[names.ATTR_QRMI_TYPE] = rtype
    qpu: dict[str, Any] = {"type": QRMI_QPU_TYPE, "count": 1}
    if qubits:
        qpu["with"] = [{"type": QRMI_QUBIT_TYPE, "count": qubits}]
    entry = {"type": QRMI_DEVICE_TYPE, "name": name, "attributes": attrs, "with": [qpu]}
    definition = qrmi.QrmiResource(
        name, rtype, tuple(settings), tuple(secrets), secret, acquire=acquire
    )
    return definition, entry


QRMI_DEVICE_TYPE = "qdevice"
QRMI_QPU_TYPE = "qpu"
QRMI_QUBIT_TYPE = "qubit"
"""The graph shape of a QRMI resource: the types the YAML examples use, so one pod spec
asks for either kind of backend."""

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ANNOTATION_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SECRET_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _has_content(text: str) -> bool:
    return any(line.strip() and not line.strip().startswith("#") for line in text.splitlines())


def _registry(raw: Any) -> dict[str, dict[str, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ResourcesConfigError("'attributes' must map a set name to a map of attributes")
    out: dict[str, dict[str, str]] = {}
    for set_name, attrs in raw.items():
        if not isinstance(attrs, dict):
            raise ResourcesConfigError(f"attribute set {set_name!r} must be a map")
        out[str(set_name)] = {str(k): _scalar(v) for k, v in attrs.items()}
    return out


def _scalar(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return str(v)
    raise ResourcesConfigError(f"attribute values must be scalars, got: {v!r}")


def _resource(
    raw: Any,
    inherited: Mapping[str, str],
    backend: str,
    registry: Mapping[str, Mapping[str, str]],
    *,
    top: bool,
) -> Resource:
    if not isinstance(raw, dict):
        raise ResourcesConfigError(f"a resource must be a map, got: {raw!r}")
    rtype = raw.get("type")
    if not rtype or not isinstance(rtype, str):
        raise ResourcesConfigError("resource is missing required field 'type'")
    if not _valid_type(rtype):
        raise ResourcesConfigError(
            f"resource type {rtype!r} must be lower-case letters, digits, '-', '_' or '.'"
        )
    name = raw.get("name") or ""
    if not isinstance(name, str):
        raise ResourcesConfigError(f"resource {rtype!r}: 'name' must be a string")
    if name and not _NAME.match(name):
        raise ResourcesConfigError(
            f"resource name {name!r} must be 1-63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit (it names a graph vertex and an annotation value)"
        )
    count = raw.get("count", 1)
    if count is None:
        count = 1
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ResourcesConfigError(f"resource {rtype!r}: 'count' must be a positive integer")
    parent = raw.get("parent") or "cluster"
    if not top and raw.get("parent"):
        raise ResourcesConfigError(f"resource {rtype!r}: only top-level resources take 'parent'")
    attrs = dict(inherited)
    attrs.update(_attributes(raw.get("attributes"), registry, name or rtype))
    attrs = {k: v for k, v in attrs.items() if v != ""}
    for key in attrs:
        if not _NAME.match(names.attr_annotation(key).split("/", 1)[1]):
            raise ResourcesConfigError(
                f"resource {name or rtype!r}: attribute key {key!r} must be letters, digits, "
                "'-', '_' or '.' (at most 58), starting and ending with a letter or digit: it "
                f"becomes the annotation {names.attr_annotation(key)!r}"
            )
    if top:
        backend = name
    kids_raw = raw.get("with") or []
    if not isinstance(kids_raw, list):
        raise ResourcesConfigError(f"resource {rtype!r}: 'with' must be a list")
    children = tuple(_resource(k, attrs, backend, registry, top=False) for k in kids_raw)
    return Resource(rtype, name, int(count), str(parent), attrs, backend, children)


def _attributes(spec: Any, registry: Mapping[str, Mapping[str, str]], who: str) -> dict[str, str]:
    """An entry's own attributes: a reference into the registry (copied) or an inline map."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        if spec not in registry:
            raise ResourcesConfigError(
                f"resource {who!r} references unknown attribute set {spec!r}"
            )
        return dict(registry[spec])
    if isinstance(spec, dict):
        return {str(k): _scalar(v) for k, v in spec.items()}
    raise ResourcesConfigError(f"attributes must be a string reference or a map, got: {spec!r}")


_NAME = re.compile(r"^(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
"""A Kubernetes qualified name's name part: resource names and annotation key names."""


def _valid_type(t: str) -> bool:
    return all(c.islower() or c.isdigit() or c in "-_." for c in t) and t[0].isalnum()
