"""Every Kubernetes name fluence reads or writes: labels, annotations, resources, env vars.

Kept in one module so that the extender, the webhook, the device plugin and the
manifests agree on spelling, and so that a rename happens in one place. The
names follow the Go fluence where it defined them, so clusters and users can
move between the two.
"""

from __future__ import annotations

import re

# The scheduler profile (spec.schedulerName) that fluence serves.
SCHEDULER_NAME = "fluence"

# Prefixes.
DOMAIN = "fluence.flux-framework.org"
RESOURCE_PREFIX = "fluxion.flux-framework.org/"
"""Extended resources advertised by the device plugin: fluxion.flux-framework.org/<type>."""

# Pod annotations written at bind (through the Binding, atomically with spec.nodeName).
ANNOTATION_BACKEND = f"{DOMAIN}/backend"
ANNOTATION_ATTR_PREFIX = f"{DOMAIN}/attr-"
ANNOTATION_ALLOCATION = f"{DOMAIN}/allocation"
"""JSON record of what a bound pod holds, read back on restart to rebuild the ledger."""
ANNOTATION_ALLOCATION_SEAL = f"{DOMAIN}/allocation-seal"
"""HMAC of the record under the scheduler's key: only sealed records are replayed."""

# The queue: pods of the fluence profile wait behind this scheduling gate (added at
# admission) until the queue has placed their whole group and pinned each to its node.
QUEUE_GATE = f"{DOMAIN}/queue"
QUEUE_LEASE = "fluence-queue"
"""The Lease whose holder runs the queue: one extender releases gated groups at a time."""
ANNOTATION_GANG_TIMEOUTS = f"{DOMAIN}/gang-timeouts"
"""On the queue's Lease: each requeued group's gang timeouts so far and when it may go again."""
NODE_NAME_FIELD = "metadata.name"
"""The node field a released pod's required node affinity names its node by."""

# A pod status condition of ours (the pods/status subresource).
CONDITION_QUEUED = f"{DOMAIN}/Queued"
"""On a gated pod: why its group still waits in fluence's queue."""
CONDITION_ROOM_FREE = f"{DOMAIN}/RoomFree"
"""On a waiting pod whose group fits now: writing it makes kube-scheduler try the pod again."""

# Pod annotations and labels set by users.
ANNOTATION_REQUIRE_PREFIX = f"{DOMAIN}/require-"
"""`require-<attr>: <value>` adds the constraint fluxion.flux-framework.org/<attr>=<value>."""
LABEL_GROUP = f"{DOMAIN}/group"
ANNOTATION_GROUP_SIZE = f"{DOMAIN}/group-size"
# A node label key (a topology level of the graph, e.g. topology.kubernetes.io/rack) one
# domain of which must hold the whole group: ours for gangs without a v1beta1 PodGroup.
ANNOTATION_TOPOLOGY = f"{DOMAIN}/topology"
ANNOTATION_RUNTIME = f"{DOMAIN}/runtime"
"""A pod's expected runtime, "90" (seconds) or "90s", "15m", "2h": for planning only."""
ANNOTATION_ENV_CONTAINERS = f"{DOMAIN}/env-containers"
"""Comma-separated container names that also get the backend env (sidecars)."""

# Objects fluence creates.
ANNOTATION_CREATED_BY = f"{DOMAIN}/created-by"
CREATED_BY_WEBHOOK = "fluence-webhook"
# The workload a webhook-made PodGroup was created for ("<Kind>/<name>/<uid>" of the pods'
# controlling owner, or "user/<username>" for bare pods); other workloads never adopt it.
ANNOTATION_CREATED_FOR = f"{DOMAIN}/created-for"
LABEL_FAKE_NODE = f"{DOMAIN}/fake-node"
"""On nodes the local test control plane creates (no kubelet behind them)."""

# The mutating webhook's registration.
WEBHOOK_CONFIG_NAME = "fluence-webhook"
WEBHOOK_NAME = f"pods.{DOMAIN}"
WEBHOOK_PATH = "/mutate"
CERT_MANAGER_INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
"""Annotation asking cert-manager's cainjector to keep a webhook's caBundle current."""
WEBHOOK_CLIENT_CA_CONFIGMAP = "fluence-webhook-client-ca"
"""ConfigMap (key ``ca.crt``) with the CA that signs the API server's webhook client
certificate: the only callers the webhook then answers."""
WEBHOOK_CLIENT_CA_KEY = "ca.crt"

# The API server's admission plugin configuration (--admission-control-config-file),
# through which it presents a client certificate to webhooks.
ADMISSION_CONFIG_API = "apiserver.config.k8s.io/v1"
ADMISSION_CONFIG_KIND = "AdmissionConfiguration"
WEBHOOK_ADMISSION_KIND = "WebhookAdmissionConfiguration"
MUTATING_ADMISSION_PLUGIN = "MutatingAdmissionWebhook"

# Well-known node labels.
LABEL_HOSTNAME = "kubernetes.io/hostname"
"""The node label the kubelet sets to the node's name: the per-node topology key."""
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
MULTI_ZONE_DELIMITER = "__"
"""Between the zones of a volume's zone label that names several."""

# Volume binding: what kube-scheduler's VolumeBinding filter and the volume binder read.
ANNOTATION_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
"""On a claim the binder has finished binding: only then is it bound for scheduling."""
ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""On a claim being provisioned for the node a pod went to."""
ANNOTATION_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
"""The old way to name a claim's or volume's class; it wins over ``storageClassName``."""
NO_PROVISIONER = "kubernetes.io/no-provisioner"
"""A storage class whose claims only bind to volumes made in advance."""
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
VOLUME_AVAILABLE = "Available"
STORAGE_CLASSES_PATH = "/apis/storage.k8s.io/v1/storageclasses"
CSI_NODES_PATH = "/apis/storage.k8s.io/v1/csinodes"
VOLUME_ATTACHMENTS_PATH = "/apis/storage.k8s.io/v1/volumeattachments"

# Dynamic resource allocation (resource.k8s.io/v1): what kube-scheduler's
# DynamicResources filter reads.
RESOURCE_CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
DEVICE_CLASSES_PATH = "/apis/resource.k8s.io/v1/deviceclasses"
EXTENDED_RESOURCE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""An extended resource named so asks for devices of the DeviceClass it names."""
ALLOCATE_ALL = "All"
"""A device request's ``allocationMode`` that takes every matching device."""

# Other projects' group labels that fluence honours.
LABEL_K8S_POD_GROUP = "scheduling.k8s.io/pod-group"
LABEL_X_K8S_POD_GROUP = "scheduling.x-k8s.io/pod-group"

# APIs.
PODGROUP_GROUP = "scheduling.k8s.io"
# Versions of the native PodGroup API, newest first: Kubernetes 1.37 serves v1beta1
# (and removed v1alpha2), 1.36 serves v1alpha2. The served one is discovered, not assumed.
PODGROUP_VERSIONS = ("v1beta1", "v1alpha2")
PODGROUP_PLURAL = "podgroups"
COMPOSITE_VERSION = "v1alpha3"
COMPOSITE_PLURAL = "compositepodgroups"
"""Kubernetes 1.37's CompositePodGroup (alpha, gate CompositePodGroup): PodGroups of PodGroups."""
X_PODGROUP_GROUP = "scheduling.x-k8s.io"
X_PODGROUP_VERSION = "v1alpha1"

# Standard Kubernetes resources the graph models per node.
RESOURCE_CPU = "cpu"
RESOURCE_MEMORY = "memory"
RESOURCE_GPU = "nvidia.com/gpu"

# Graph properties (RFC 31 property constraints test presence, so values ride in the key).
PROPERTY_VIRTUAL_TRUE = "virtual=true"
PROPERTY_VIRTUAL_FALSE = "virtual=false"
PROPERTY_CLASS_PREFIX = "class="
PROPERTY_ATTR_PREFIX = RESOURCE_PREFIX
"""Backend attributes become properties fluxion.flux-framework.org/<attr>=<value>."""
ATTR_BACKEND = "backend"

# Env vars injected into workload containers by the webhook.
ENV_QRMI_BACKEND = "QRMI_BACKEND"
ENV_FLUXION_BACKEND = "FLUXION_BACKEND"
ENV_FLUXION_PREFIX = "FLUXION_"

# Device plugin: socket files in the kubelet's device-plugins directory and the
# env var listing the devices granted to a container.
DEVICE_PLUGIN_SOCKET_PREFIX = "fluence-"
ENV_DEVICES_PREFIX = "FLUENCE_"
ENV_DEVICES_SUFFIX = "_DEVICES"

# Taints that keep a node out of the graph unless tolerated.
CONTROL_PLANE_TAINTS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def resource_name(rtype: str) -> str:
    """The extended resource a pod requests to get a ``rtype`` vertex."""
    return RESOURCE_PREFIX + rtype


def resource_type(name: str) -> str | None:
    """Inverse of :func:`resource_name`; None for names outside the prefix."""
    return name[len(RESOURCE_PREFIX) :] if name.startswith(RESOURCE_PREFIX) else None


def attr_annotation(key: str) -> str:
    return ANNOTATION_ATTR_PREFIX + key


def attr_property(key: str, value: str) -> str:
    return f"{PROPERTY_ATTR_PREFIX}{key}={value}" if value else f"{PROPERTY_ATTR_PREFIX}{key}"


def attr_env(key: str) -> str:
    """FLUXION_<KEY>: upper case, every character outside [A-Za-z0-9] turned into '_'."""
    return ENV_FLUXION_PREFIX + _NOT_ALNUM.sub("_", key).upper()


def annotation_fieldpath(annotation: str) -> str:
    """The downward-API fieldPath that reads one pod annotation."""
    return f"metadata.annotations['{annotation}']"


def devices_env(rtype: str) -> str:
    """FLUENCE_<TYPE>_DEVICES: the ``rtype`` device IDs the kubelet granted a container."""
    return ENV_DEVICES_PREFIX + _NOT_ALNUM.sub("_", rtype).upper() + ENV_DEVICES_SUFFIX


# QRMI (the Quantum Resource Management Interface): the names its programs read, so a
# program written for QRMI's Slurm plugin runs unchanged on the backend fluence chose.
ANNOTATION_QRMI_RESOURCES = f"{DOMAIN}/qrmi-resources"
"""Written at placement: the QRMI resource names a pod got, in order, comma-separated."""
ANNOTATION_QRMI_TYPES = f"{DOMAIN}/qrmi-types"
"""Written at placement: the QRMI type of each of those resources, same order."""
ENV_QRMI_JOB_QPU_RESOURCES = "QRMI_JOB_QPU_RESOURCES"
ENV_QRMI_JOB_ID = "QRMI_JOB_ID"
"""The job's id, as QRMI's Slurm plugin sets it (the Slurm job id): here the pod's UID."""
ENV_QRMI_JOB_UID = "QRMI_JOB_UID"
"""The user id the job runs as (a number): here the container's ``runAsUser``, when set."""
ENV_QRMI_JOB_QPU_TYPES = "QRMI_JOB_QPU_TYPES"
ENV_SLURM_JOB_QPU_RESOURCES = "SLURM_JOB_QPU_RESOURCES"
"""QRMI's fallback name, as its Slurm plugin also sets it; older programs read this one."""
ENV_SLURM_JOB_QPU_TYPES = "SLURM_JOB_QPU_TYPES"
QRMI_LIST_DELIMITER = ","
"""QRMI's default separator (``QRMI_LIST_DELIMITER`` unset)."""
QRMI_KEY_PREFIX = "QRMI_"
"""Keys of a QRMI resource's ``environment``: each becomes ``<resource name>_<key>``."""
QRMI_JOB_TIMEOUT_KEY = "QRMI_JOB_TIMEOUT_SECONDS"
QRMI_JOB_ACQUISITION_TOKEN_KEY = "QRMI_JOB_ACQUISITION_TOKEN"
ATTR_QRMI_TYPE = "qrmi_type"
"""The backend attribute holding a QRMI type; required as ``require-qrmi_type: <type>``."""
QRMI_SECRET = "fluence-qrmi"
"""Default Secret (in the pod's namespace) holding QRMI credentials, keyed ``<name>_<key>``."""
ANNOTATION_QRMI_TOKEN_PREFIX = f"{DOMAIN}/qrmi-token."
"""Written with a release: ``<prefix><name>`` holds the acquisition token of resource
``<name>``, read by the pod as ``<name>_QRMI_JOB_ACQUISITION_TOKEN``."""
ANNOTATION_QRMI_TOKEN_SEAL_PREFIX = f"{DOMAIN}/qrmi-token-seal."
"""``<prefix><name>``: the token's seal, bound to the pod; fluence releases only a token
whose seal it made, never one a tenant wrote."""
FINALIZER_QRMI_RELEASE = f"{DOMAIN}/qrmi-release"
"""On every pod holding an acquisition: the pod object stays until fluence released it."""


def qrmi_token_annotation(resource: str) -> str:
    """The annotation that carries ``resource``'s acquisition token on a pod."""
    return ANNOTATION_QRMI_TOKEN_PREFIX + resource


def qrmi_token_seal_annotation(resource: str) -> str:
    """The annotation that carries the seal of ``resource``'s token on a pod."""
    return ANNOTATION_QRMI_TOKEN_SEAL_PREFIX + resource


def qrmi_env(resource: str, key: str) -> str:
    """``<resource>_<key>``: QRMI's per-resource variable, the resource name as written."""
    return f"{resource}_{key}"


# A batch/v1 Job of the fluence profile (its pod template's schedulerName): the webhook's
# second entry gives it a podFailurePolicy rule so that pods evicted by the queue (the
# Eviction API marks them DisruptionTarget=True first) do not count toward backoffLimit.
WEBHOOK_JOBS_NAME = f"jobs.{DOMAIN}"
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
"""The pod condition the Eviction API (and preemption, taint and kubelet evictions) set."""
CONDITION_TRUE = "True"
JOB_ACTION_IGNORE = "Ignore"
"""A podFailurePolicy action: the failure is not counted and the pod is made again."""
JOB_RESTART_NEVER = "Never"
"""The only restartPolicy a Job with a podFailurePolicy may have."""
JOB_RESTART_ON_FAILURE = "OnFailure"
JOB_REPLACE_FAILED = "Failed"
JOB_REPLACE_TERMINATING_OR_FAILED = "TerminatingOrFailed"
JOB_MAX_POD_FAILURE_RULES = 20
"""Kubernetes' limit on spec.podFailurePolicy.rules (pkg/apis/batch/validation)."""
