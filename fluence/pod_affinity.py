"""Inter-pod affinity: the required terms, as kube-scheduler's InterPodAffinity filter reads them.

The queue pins pods to nodes, and kube-scheduler refuses a pinned pod whose required
pod anti-affinity selects a pod in the node's topology domain (the nodes sharing the
term's ``topologyKey`` label value), whose required pod affinity finds no selected pod
in it, or that a running pod's anti-affinity shuts out of it. So the queue keeps to the
same rules, counting pods it released and kube-scheduler has not bound yet as placed:
:class:`PlacedPods` gives the nodes a group may not use, :func:`repelling` the members
to match on distinct nodes, :func:`apart` the domains (zones, racks) members kept apart
are dealt, and :func:`crowded` the nodes to leave out when a match put
members together that kube-scheduler would keep apart (or apart that it would keep
together).

A term picks pods of the namespaces it lists and of those its ``namespaceSelector``
picks by their labels (:data:`NamespaceLabels`, from the watched namespaces). Without
namespace labels (members of one group matched apart by :func:`repelling`), a selector
with requirements is read as "every namespace" for anti-affinity (it can only keep more
pods apart) and is not checked for affinity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from fluence import names
from fluence.node_rules import requirement_holds
from fluence.pods import LabelSelector, Pod, PodAffinityTerm

Labels = Mapping[str, str]
NodeLabels = Mapping[str, Labels]
"""Node name -> its labels."""
NamespaceLabels = Callable[[str], Labels]
"""Namespace name -> its labels (empty when it is not known)."""


LABEL_OPERATORS = frozenset(("In", "NotIn", "Exists", "DoesNotExist"))
"""What a label selector may ask (a node selector also has ``Gt`` and ``Lt``)."""


def selects(selector: LabelSelector | None, labels: Labels) -> bool:
    """Does a label selector pick ``labels``? (No selector picks nothing, an empty one all.)"""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(
        r.operator in LABEL_OPERATORS and requirement_holds(r, labels)
        for r in selector.match_expressions
    )


def term_selects(
    owner: Pod, term: PodAffinityTerm, pod: Pod, namespaces: NamespaceLabels | None = None
) -> bool:
    """Does ``owner``'s term pick ``pod`` (its namespaces, then its label selector)?"""
    ns = pod.metadata.namespace
    sel = term.namespace_selector
    if sel is None:
        picked = ns in (term.namespaces or [owner.metadata.namespace])
    elif namespaces is None:
        picked = True
    else:
        picked = ns in term.namespaces or selects(sel, namespaces(ns))
    return picked and selects(term.label_selector, pod.metadata.labels)


def _domain(labels_of: NodeLabels, node: str, key: str) -> str | None:
    labels = labels_of.get(node)
    return labels.get(key) if labels is not None else None


def _nodes_in(labels_of: NodeLabels, key: str, values: set[str]) -> set[str]:
    return {n for n, labels in labels_of.items() if labels.get(key) in values}


class PlacedPods:
    """Pods bound to a node or released pinned to one (not ended): what affinity looks at."""

    def __init__(self, namespaces: NamespaceLabels | None = None) -> None:
        self.namespaces = namespaces
        self.on: dict[str, tuple[str, Pod]] = {}
        """Pod key -> (node, pod)."""
        self.repelling: dict[str, tuple[str, Pod]] = {}
        """The placed pods that carry required anti-affinity terms."""

    def put(self, key: str, node: str, pod: Pod | None) -> None:
        """``pod`` is on ``node`` now; no pod (or no node): it is gone."""
        if pod is None or not node:
            self.on.pop(key, None)
            self.repelling.pop(key, None)
            return
        self.on[key] = (node, pod)
        if pod.anti_affinity_terms:
            self.repelling[key] = (node, pod)
        else:
            self.repelling.pop(key, None)

    def refusing(self, pods: Sequence[Pod], labels_of: NodeLabels) -> dict[str, set[str]]:
        """Per pod of ``pods`` (a group's), the nodes where kube-scheduler would refuse it
        for the pods placed."""
        out: dict[str, set[str]] = {}
        mine = {p.key for p in pods}
        seen: dict[bytes, set[str]] = {}
        for p in pods:
            # Members usually share labels and rules: work each distinct set out once.
            sig = msgspec.json.encode((p.metadata.namespace, p.metadata.labels, p.spec.affinity))
            if sig not in seen:
                nodes = self._shut_out(p, labels_of)
                if p.anti_affinity_terms:
                    nodes |= self._repelled(p, labels_of, mine)
                if p.affinity_terms:
                    nodes |= self._unattracted(p, labels_of, mine)
                seen[sig] = nodes
            out[p.key] = seen[sig]
        return out

    def _shut_out(self, pod: Pod, labels_of: NodeLabels) -> set[str]:
        """Nodes in the domain of a placed pod whose anti-affinity picks ``pod``."""
        out: set[str] = set()
        for node, other in self.repelling.values():
            for term in other.anti_affinity_terms:
                value = _domain(labels_of, node, term.topology_key)
                if value is not None and term_selects(other, term, pod, self.namespaces):
                    out |= _nodes_in(labels_of, term.topology_key, {value})
        return out

    def _repelled(self, pod: Pod, labels_of: NodeLabels, mine: set[str]) -> set[str]:
        """Nodes in the domain of a placed pod ``pod``'s anti-affinity picks."""
        out: set[str] = set()
        for term in pod.anti_affinity_terms:
            values = {
                v
                for key, (node, other) in self.on.items()
                if key not in mine
                and (v := _domain(labels_of, node, term.topology_key)) is not None
                and term_selects(pod, term, other, self.namespaces)
            }
            out |= _nodes_in(labels_of, term.topology_key, values)
        return out

    def _unattracted(self, pod: Pod, labels_of: NodeLabels, mine: set[str]) -> set[str]:
        """Nodes outside the domains where placed pods ``pod``'s affinity picks run.

        As kube-scheduler: the placed pods counted are those every term picks; when there
        are none and the pod is picked by its own terms (the first of a set that keeps
        together), any node with the terms' topology labels will do.
        """
        terms, ns = pod.affinity_terms, self.namespaces
        if ns is None and any(_has_rules(t) for t in terms):
            return set()
        values: dict[str, set[str]] = {t.topology_key: set() for t in terms}
        found = False
        for key, (node, other) in self.on.items():
            if key in mine or not all(term_selects(pod, t, other, ns) for t in terms):
                continue
            for t in terms:
                v = _domain(labels_of, node, t.topology_key)
                if v is not None:
                    values[t.topology_key].add(v)
                    found = True
        if not found and all(term_selects(pod, t, pod, ns) for t in terms):
            return {n for n, labels in labels_of.items() if any(k not in labels for k in values)}
        return {
            n
            for n, labels in labels_of.items()
            if any(labels.get(k) not in vs for k, vs in values.items())
        }


def _has_rules(term: PodAffinityTerm) -> bool:
    sel = term.namespace_selector
    return sel is not None and bool(sel.match_labels or sel.match_expressions)


def repelling(pods: Sequence[Pod]) -> list[tuple[str, str]]:
    """Pairs of ``pods`` that one's per-node anti-affinity keeps off each other's node."""
    pairs = []
    for a in pods:
        for term in a.anti_affinity_terms:
            if term.topology_key != names.LABEL_HOSTNAME:
                continue
            pairs += [(a.key, b.key) for b in pods if b.key != a.key and term_selects(a, term, b)]
    return pairs


def apart(
    pods: Sequence[Pod],
    labels_of: NodeLabels,
    refused: Mapping[str, set[str]],
    namespaces: NamespaceLabels | None = None,
) -> dict[str, set[str]]:
    """Members that one's anti-affinity over a domain wider than a node (a zone, a rack)
    keeps apart, each dealt a domain of its own: per member, the nodes outside it.
    Domains go in name order to the members in key order, each the first left where the
    member has a node not ``refused`` (left to themselves, a match packs them into one
    domain, and a few tries seldom undo that). Too few domains: nothing is dealt."""
    by_key: dict[str, set[str]] = {}
    for a in pods:
        for term in a.anti_affinity_terms:
            key = term.topology_key
            if key == names.LABEL_HOSTNAME:
                continue
            for b in pods:
                if b.key != a.key and term_selects(a, term, b, namespaces):
                    by_key.setdefault(key, set()).update((a.key, b.key))
    out: dict[str, set[str]] = {}
    for key, members in by_key.items():
        domains: dict[str, set[str]] = {}
        for n, labels in labels_of.items():
            if key in labels:
                domains.setdefault(labels[key], set()).add(n)
        used: set[str] = set()
        dealt: dict[str, str] = {}
        for m in sorted(members):
            shut = refused.get(m, set()) | out.get(m, set())
            pick = next((d for d in sorted(domains) if d not in used and domains[d] - shut), None)
            if pick is None:
                break
            used.add(pick)
            dealt[m] = pick
        if len(dealt) < len(members):
            continue
        for m, d in dealt.items():
            out.setdefault(m, set()).update(set(labels_of) - domains[d])
    return out


def crowded(
    placed: Iterable[tuple[Pod, str]],
    labels_of: NodeLabels,
    namespaces: NamespaceLabels | None = None,
) -> set[str]:
    """Nodes to leave out of a group's next match, where the one just made put members in
    one domain that one's anti-affinity keeps apart, or members that only keep together
    by each other's company (their affinity finds no pod placed before) in several."""
    members = list(placed)
    out: set[str] = set()
    for i, (a, node_a) in enumerate(members):
        for b, node_b in members[i + 1 :]:
            if _repels(a, node_a, b, node_b, labels_of, namespaces) or _repels(
                b, node_b, a, node_a, labels_of, namespaces
            ):
                out.add(node_b)
    return out | _scattered(members, labels_of, namespaces)


def _repels(
    a: Pod,
    node_a: str,
    b: Pod,
    node_b: str,
    labels_of: NodeLabels,
    namespaces: NamespaceLabels | None,
) -> bool:
    """Does ``a``'s anti-affinity pick ``b`` in the domain they share?"""
    for term in a.anti_affinity_terms:
        value = _domain(labels_of, node_a, term.topology_key)
        same = value is not None and value == _domain(labels_of, node_b, term.topology_key)
        if same and term_selects(a, term, b, namespaces):
            return True
    return False


def _scattered(
    members: list[tuple[Pod, str]], labels_of: NodeLabels, namespaces: NamespaceLabels | None
) -> set[str]:
    """For members whose affinity picks other members: the nodes of those outside the
    domain most of them are in (kube-scheduler lets the first in anywhere, then the rest
    only into its domain)."""
    out: set[str] = set()
    for a, _ in members:
        for term in a.affinity_terms:
            kin = [(b, n) for b, n in members if term_selects(a, term, b, namespaces)]
            if len(kin) < 2:
                continue
            counts = Counter(_domain(labels_of, n, term.topology_key) for _, n in kin)
            if len(counts) < 2:
                continue
            keep, _ = counts.most_common(1)[0]
            out |= {n for _, n in kin if _domain(labels_of, n, term.topology_key) != keep}
    return out
