"""Volume node affinity: a pod's bound volumes name the nodes it may run on."""

from __future__ import annotations

import json
from typing import Any

from fluence.pods import decode_claim, decode_pod, decode_volume
from fluence.volume_nodes import unreachable, volume_terms
from tests.unit.fluence.test_pods import make_node, make_pod


def local_volume(name: str, *nodes: str) -> Any:
    term = {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
        ]
    }
    doc = {
        "metadata": {"name": name},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
    }
    return decode_volume(json.dumps(doc))


def claim(name: str, volume: str = "", ns: str = "default") -> Any:
    doc = {"metadata": {"name": name, "namespace": ns}, "spec": {"volumeName": volume}}
    return decode_claim(json.dumps(doc))


def pod_with(*claims: str) -> Any:
    doc = make_pod("p", raw=True)
    doc["spec"]["volumes"] = [{"name": "token", "projected": {"sources": []}}] + [
        {"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims
    ]
    return decode_pod(json.dumps(doc))


CLAIMS = {
    "default/scratch": claim("scratch", "pv-a"),
    "default/shared": claim("shared", "pv-any"),
    "default/pending": claim("pending"),
}
VOLUMES = {
    "pv-a": local_volume("pv-a", "n1", "n2"),
    "pv-b": local_volume("pv-b", "n2"),
    "pv-any": decode_volume(json.dumps({"metadata": {"name": "pv-any"}, "spec": {}})),
}


def terms_of(pod: Any, claims: dict[str, Any] = CLAIMS) -> Any:
    return volume_terms(pod, claims.get, VOLUMES.get)


def test_a_bound_claims_volume_names_the_nodes_it_reaches() -> None:
    terms = terms_of(pod_with("scratch"))
    assert len(terms) == 1
    reach = [n for n in ("n1", "n2", "n3") if not unreachable(make_node(n), terms)]
    assert reach == ["n1", "n2"]


def test_every_volume_must_be_reached_from_the_node() -> None:
    claims = {**CLAIMS, "default/only-b": claim("only-b", "pv-b")}
    terms = terms_of(pod_with("scratch", "only-b"), claims)
    assert [n for n in ("n1", "n2", "n3") if not unreachable(make_node(n), terms)] == ["n2"]


def test_claims_unbound_missing_or_of_volumes_anywhere_rule_out_nothing() -> None:
    assert terms_of(pod_with("pending", "missing", "shared")) == []
    assert terms_of(pod_with()) == []
    # A claim of another namespace of the same name is not the pod's.
    assert terms_of(pod_with("scratch"), {"team/scratch": claim("scratch", "pv-b", "team")}) == []
