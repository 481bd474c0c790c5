"""Local Kubernetes control plane for tests, benchmarks and the demo.

etcd and kube-apiserver (and kube-schedulers on demand) run as real processes
on loopback, built from the pinned Go module in ``hack/k8s-bins``; fake nodes
and a stand-in kubelet make pods schedulable and let them run to completion.
"""

import os

# The harness forks component processes (fork + exec, see processes.py) while gRPC
# threads of the stand-in kubelet run. gRPC's fork handlers would then restart its
# threads in the child before exec, which can crash the child; the children exec at
# once and need none of that. Set before anything here imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from fluence.pki import CertificateAuthority, issue_serving_cert  # noqa: E402
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
