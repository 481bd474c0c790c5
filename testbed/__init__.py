"""Local Kubernetes control plane for tests, benchmarks and the demo.

etcd, kube-apiserver and kube-controller-manager (and kube-schedulers on demand)
run as real processes on loopback, built from the pinned Go module in
``hack/k8s-bins``; simulated nodes, whose pods KWOK runs to completion, make pods
schedulable.
"""

import os

# The harness forks component processes (fork + exec, see processes.py) while gRPC
# threads (the device plugin tests' fake kubelet) run. gRPC's fork handlers would then restart its
# threads in the child before exec, which can crash the child; the children exec at
# once and need none of that. Set before anything here imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from fluence.pki import CertificateAuthority, issue_serving_cert  # noqa: E402
from testbed.binaries import Binaries, BinariesError, ensure_binaries, ensure_release
from testbed.cluster import ControlPlane, Release, SchedulerHandle, Timings, selected_release
from testbed.kwok import Kwok
from testbed.processes import ProcessStartError
from testbed.rest import KubeApiError, KubeRest

__all__ = [
    "Binaries",
    "BinariesError",
    "CertificateAuthority",
    "ControlPlane",
    "KubeApiError",
    "KubeRest",
    "Kwok",
    "ProcessStartError",
    "Release",
    "SchedulerHandle",
    "Timings",
    "ensure_binaries",
    "ensure_release",
    "issue_serving_cert",
    "selected_release",
]
