"""The kube-scheduler extender protocol on the wire (extender/v1), decoded with msgspec.

Top-level keys are Go field names, capitalised. The Pod inside a request is
kept as raw bytes and decoded into the slim :class:`fluence.pods.Pod` only when
a verb needs it.
"""

from __future__ import annotations

import msgspec

from fluence.pods import Pod, decode_pod
from scheduler_extender.candidates import Candidates


class NodeList(msgspec.Struct, omit_defaults=True):
    """A v1 NodeList with items kept raw, so a reply can hand back exactly what came in."""

    items: list[msgspec.Raw] = []
    metadata: dict[str, object] = {}
    api_version: str = msgspec.field(default="", name="apiVersion")
    kind: str = ""


_NULL = msgspec.Raw(b"null")


class _Meta(msgspec.Struct):
    name: str = ""


class _Named(msgspec.Struct):
    metadata: _Meta


class ExtenderArgs(msgspec.Struct):
    pod: msgspec.Raw = msgspec.field(name="Pod")
    nodes: NodeList | None = msgspec.field(default=None, name="Nodes")
    # Kept raw: decoding 5,000 names costs more than answering most requests (see Candidates).
    node_names: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL, name="NodeNames")

    def decode_pod(self) -> Pod:
        return decode_pod(self.pod)

    @property
    def has_node_names(self) -> bool:
        raw = self.node_names
        # Only a short value can be null; a list of names is not copied to find out.
        return len(raw) > 16 or bytes(raw).strip() != b"null"

    def candidates(self) -> Candidates:
        """Node names offered, whichever form (names or full nodes) the scheduler sent."""
        if self.has_node_names:
            return Candidates.from_json(bytes(self.node_names))
        if self.nodes is not None:
            return Candidates(node_name(raw) for raw in self.nodes.items)
        return Candidates()


def node_name(raw: msgspec.Raw) -> str:
    return _named_decoder.decode(raw).metadata.name


class ExtenderFilterResult(msgspec.Struct):
    nodes: NodeList | None = msgspec.field(default=None, name="Nodes")
    node_names: list[str] | None = msgspec.field(default=None, name="NodeNames")
    failed_nodes: dict[str, str] = msgspec.field(default_factory=dict, name="FailedNodes")
    failed_and_unresolvable: dict[str, str] = msgspec.field(
        default_factory=dict, name="FailedAndUnresolvableNodes"
    )
    error: str = msgspec.field(default="", name="Error")


class HostPriority(msgspec.Struct):
    host: str = msgspec.field(name="Host")
    score: int = msgspec.field(name="Score")


class ExtenderBindingArgs(msgspec.Struct):
    pod_name: str = msgspec.field(name="PodName")
    pod_namespace: str = msgspec.field(name="PodNamespace")
    node: str = msgspec.field(name="Node")
    pod_uid: str = msgspec.field(default="", name="PodUID")


class ExtenderBindingResult(msgspec.Struct):
    error: str = msgspec.field(default="", name="Error")


class MetaPod(msgspec.Struct):
    uid: str = msgspec.field(name="UID")


class MetaVictims(msgspec.Struct):
    pods: list[MetaPod] = msgspec.field(default_factory=list, name="Pods")
    num_pdb_violations: int = msgspec.field(default=0, name="NumPDBViolations")


class Victims(msgspec.Struct):
    pods: list[msgspec.Raw] = msgspec.field(default_factory=list, name="Pods")
    num_pdb_violations: int = msgspec.field(default=0, name="NumPDBViolations")


class ExtenderPreemptionArgs(msgspec.Struct):
    pod: msgspec.Raw = msgspec.field(name="Pod")
    node_name_to_victims: dict[str, Victims] | None = msgspec.field(
        default=None, name="NodeNameToVictims"
    )
    node_name_to_meta_victims: dict[str, MetaVictims] | None = msgspec.field(
        default=None, name="NodeNameToMetaVictims"
    )


class ExtenderPreemptionResult(msgspec.Struct):
    node_name_to_meta_victims: dict[str, MetaVictims] = msgspec.field(
        default_factory=dict, name="NodeNameToMetaVictims"
    )


class _UidMeta(msgspec.Struct):
    uid: str = ""


class _Uid(msgspec.Struct):
    metadata: _UidMeta


def pod_uid(raw: msgspec.Raw) -> str:
    return _uid_decoder.decode(raw).metadata.uid


_named_decoder = msgspec.json.Decoder(_Named)
_uid_decoder = msgspec.json.Decoder(_Uid)
filter_args = msgspec.json.Decoder(ExtenderArgs)
binding_args = msgspec.json.Decoder(ExtenderBindingArgs)
preemption_args = msgspec.json.Decoder(ExtenderPreemptionArgs)
encoder = msgspec.json.Encoder()
