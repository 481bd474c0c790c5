"""Local Kubernetes control plane for tests, benchmarks and the demo.

etcd and kube-apiserver (and kube-schedulers on demand) run as real processes
on loopback, built from the pinned Go module in ``hack/k8s-bins``; fake nodes
and a stand-in kubelet make pods schedulable and let them run to completion.
"""

from fluence.pki import CertificateAuthority, issue_serving_cert
from testbed.binaries import Binaries, BinariesError, ensure_binaries
from testbed.cluster import ControlPlane, SchedulerHandle, Timings
from testbed.downward import resolve_env
from testbed.kubelet import StandInKubelet
from testbed.processes import ProcessStartError
from testbed.rest import KubeApiError, KubeRest

__all__ = [
    "Binaries",
    "BinariesError",
    "CertificateAuthority",
    "ControlPlane",
    "KubeApiError",
    "KubeRest",
    "ProcessStartError",
    "SchedulerHandle",
    "StandInKubelet",
    "Timings",
    "ensure_binaries",
    "issue_serving_cert",
    "resolve_env",
]
