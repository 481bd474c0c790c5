"""CSI attach limits: a node takes no pod whose volumes would take a driver past the
count its CSINode gives, as kube-scheduler's NodeVolumeLimits filter counts them."""

from __future__ import annotations

import json
from typing import Any

from fluence.pods import decode_attachment, decode_csi_node, decode_volume
from fluence.volume_limits import AttachedByNode, attachable, by_pod
from fluence.volume_nodes import Storage
from tests.unit.fluence.test_volume_nodes import BOUND, CLASSES, claim, pod_with

DRIVER = "csi.example"


def csi_volume(name: str, handle: str = "", driver: str = DRIVER) -> Any:
    doc = {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "now",
            "csi": {"driver": driver, "volumeHandle": handle or f"h-{name}"},
        },
        "status": {"phase": "Bound"},
    }
    return decode_volume(json.dumps(doc))


def csi_node(node: str, **counts: int | None) -> Any:
    drivers = [
        {"name": d.replace("_", "."), **({"allocatable": {"count": c}} if c is not None else {})}
        for d, c in counts.items()
    ]
    return decode_csi_node(json.dumps({"metadata": {"name": node}, "spec": {"drivers": drivers}}))


def attachment(name: str, node: str, volume: str, attacher: str = DRIVER) -> Any:
    spec = {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": volume}}
    return decode_attachment(json.dumps({"metadata": {"name": name}, "spec": spec}))


def csi_storage(
    claims: list[Any],
    volumes: list[Any],
    csi_nodes: list[Any],
    attachments: list[Any] | None = None,
) -> Storage:
    by_claim = {c.key: c for c in claims}
    by_name = {v.metadata.name: v for v in volumes}
    return Storage(
        by_claim.get,
        by_name.get,
        lambda: list(by_name.values()),
        CLASSES.get,
        lambda: csi_nodes,
        lambda: attachments or [],
    )


def bound_claims(n: int) -> tuple[list[Any], list[Any]]:
    claims = [claim(f"c{i}", f"pv{i}", cls="now", annotations=BOUND) for i in range(n)]
    return claims, [csi_volume(f"pv{i}") for i in range(n)]


def test_a_pods_volumes_are_named_by_driver_and_handle_or_by_its_class() -> None:
    claims, volumes = bound_claims(1)
    claims.append(claim("new", cls="anywhere"))
    claims.append(claim("local", cls="local"))
    claims.append(claim("gone", "pv-gone", cls="now", annotations=BOUND))
    store = csi_storage(claims, volumes, [])
    pod = pod_with("c0", "new", "local", "gone", "missing")
    assert attachable(pod, store) == {
        f"{DRIVER}/h-pv0": DRIVER,
        # Not bound yet, or its volume gone: a new volume of the class's provisioner.
        f"{DRIVER}/claim default/new": DRIVER,
        "kubernetes.io/no-provisioner/claim default/local": "kubernetes.io/no-provisioner",
        f"{DRIVER}/claim default/gone": DRIVER,
    }
    assert by_pod([pod_with(name="plain")], store) == {}


def test_nodes_without_a_count_for_the_driver_take_any_number() -> None:
    claims, volumes = bound_claims(3)
    store = csi_storage(claims, volumes, [csi_node("n1", other_driver=1), csi_node("n2")])
    attached = AttachedByNode(store)
    assert attached.limits == {"n1": {"other.driver": 1}}
    assert attached.refusing(attachable(pod_with("c0", "c1", "c2"), store)) == set()
    assert not AttachedByNode(csi_storage(claims, volumes, [csi_node("n2", csi_example=None)]))


def test_a_node_at_its_count_refuses_a_new_volume_but_not_one_it_has() -> None:
    claims, volumes = bound_claims(4)
    store = csi_storage(
        claims,
        volumes,
        [csi_node("n1", csi_example=2), csi_node("n2", csi_example=2)],
        # pv3 is attached to n2 though no pod there uses it (a pod just ended).
        [attachment("va3", "n2", "pv3"), attachment("va-none", "n2", "pv-missing")],
    )
    attached = AttachedByNode(store)
    attached.add("n1", attachable(pod_with("c0", "c1"), store))
    assert attached.refusing(attachable(pod_with("c2"), store)) == {"n1"}
    # A volume already used there counts once.
    assert attached.refusing(attachable(pod_with("c1"), store)) == set()
    assert attached.refusing(attachable(pod_with("c3"), store)) == {"n1"}
    assert attached.refusing(attachable(pod_with("c1", "c2"), store)) == {"n1", "n2"}
    assert attached.refusing(attachable(pod_with("c3", "c2"), store)) == {"n1"}


def test_members_share_each_nodes_attach_count_and_a_match_past_it_is_found() -> None:
    claims, volumes = bound_claims(5)
    store = csi_storage(
        claims,
        volumes,
        [
            csi_node("n1", csi_example=1),
            csi_node("n2", csi_example=3),
            csi_node("n4", csi_example=4),
        ],
    )
    attached = AttachedByNode(store)
    attached.add("n2", attachable(pod_with("c4"), store))
    members = [attachable(pod_with(f"c{i}"), store) for i in range(4)]
    assert attached.capacity(members, ["n1", "n2", "n3"]) == {"n1": 1, "n2": 2, "n3": 4}
    two_each = [{**members[0], **members[1]}, {**members[2], **members[3]}]
    assert attached.capacity(two_each, ["n1", "n2", "n4"]) == {"n1": 0, "n2": 1, "n4": 2}
    matched = [(f"m{i}", "n1" if i < 2 else "n2", members[i]) for i in range(4)]
    matched.append(("m4", "n2", attachable(pod_with("c4"), store)))
    assert attached.overflow(matched) == {"m1": "n1"}
    matched.insert(0, ("m", "n2", members[1]))
    assert attached.overflow(matched) == {"m1": "n1", "m3": "n2"}
    # Two members sharing one volume on a node take one attachment.
    assert attached.overflow([("a", "n1", members[0]), ("b", "n1", members[0])]) == {}
