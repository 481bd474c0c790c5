"""Container environment as the kubelet would compute it from a bound pod.

The webhook injects env vars whose values come from pod annotations through
the downward API (``valueFrom.fieldRef``). Without a kubelet nothing evaluates
them, so tests resolve them here with the kubelet's rules: ``value`` strings
expand ``$(VAR)`` references to earlier variables (``$$`` escapes), fieldRef
reads the pod object, and a missing label or annotation key yields "".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")
_SIMPLE_FIELDS: dict[str, tuple[str, str]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "metadata.uid": ("metadata", "uid"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.hostIP": ("status", "hostIP"),
    "status.podIP": ("status", "podIP"),
}


class UnsupportedEnvSource(ValueError):
    """The env var uses a source this resolver does not evaluate."""


def as_dict(pod: Any) -> dict[str, Any]:
    """Accept a JSON-shaped dict or a `kubernetes` client model."""
    if isinstance(pod, Mapping):
        return dict(pod)
    from kubernetes.client import ApiClient  # local: only needed for model objects

    data = ApiClient().sanitize_for_serialization(pod)  # type: ignore[no-untyped-call]
    if not isinstance(data, dict):
        raise TypeError(f"expected a Pod (dict or V1Pod), got {type(pod).__name__}")
    return data


def _format_map(values: Mapping[str, str]) -> str:
    """The kubelet's rendering of a whole label/annotation map: sorted key="value" lines."""
    return "\n".join(f'{key}="{values[key]}"' for key in sorted(values))


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    """Evaluate one downward-API ``fieldRef.fieldPath`` against a pod."""
    metadata: Mapping[str, Any] = pod.get("metadata") or {}
    match = _SUBSCRIPT.match(field_path)
    if match:
        section, key = match.groups()
        return str((metadata.get(section) or {}).get(key, ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        return _format_map(metadata.get(field_path.split(".", 1)[1]) or {})
    if field_path in _SIMPLE_FIELDS:
        section, key = _SIMPLE_FIELDS[field_path]
        return str((pod.get(section) or {}).get(key) or "")
    if field_path in ("status.hostIPs", "status.podIPs"):
        entries = (pod.get("status") or {}).get(field_path.split(".", 1)[1]) or []
        return ",".join(str(entry.get("ip", "")) for entry in entries)
    raise UnsupportedEnvSource(
        f"fieldRef.fieldPath {field_path!r} is not supported; use metadata.name/namespace/uid, "
        "metadata.labels['k'], metadata.annotations['k'], spec.nodeName, "
        "spec.serviceAccountName or status.hostIP/podIP"
    )


def expand(value: str, defined: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` with earlier variables; unknown references stay as written."""
    out: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = value.find(")", i + 2)
                if end != -1:
                    name = value[i + 2 : end]
                    out.append(defined[name] if name in defined else value[i : end + 1])
                    i = end + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """Resolve one container's ``env`` list in order."""
    name = container.get("name", "?")
    if container.get("envFrom"):
        raise UnsupportedEnvSource(
            f"container {name!r} uses envFrom (ConfigMap/Secret); only env entries are resolved"
        )
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        var = entry["name"]
        source = entry.get("valueFrom")
        if source is None:
            env[var] = expand(str(entry.get("value") or ""), env)
        elif "fieldRef" in source:
            env[var] = field_value(pod, source["fieldRef"]["fieldPath"])
        else:
            kinds = ", ".join(sorted(source))
            raise UnsupportedEnvSource(
                f"env {var!r} of container {name!r} uses valueFrom {kinds}; only fieldRef "
                "is resolved by the test harness"
            )
    return env


def resolve_env(pod: Any) -> dict[str, dict[str, str]]:
    """Env of every init and regular container: ``{container_name: {var: value}}``."""
    data = as_dict(pod)
    spec: Mapping[str, Any] = data.get("spec") or {}
    result: dict[str, dict[str, str]] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        result[container["name"]] = container_env(data, container)
    return result
