"""List+watch reflectors: local copies of Nodes, Pods, (Composite)PodGroups, volumes and
devices, kept current.

One set of reflectors is shared by the graph, the ledger and the group lookup.
Each reflector lists with a resourceVersion, then watches from it with
bookmarks, decoding the raw stream lines with msgspec into the slim structs of
:mod:`fluence.pods`; a ``410 Gone`` (or any broken stream) makes it list again.
Blocking reads run in threads, one per reflector. PodGroup APIs that are not
served (404) are tolerated: the reflector counts as synced and looks again later.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import msgspec

from fluence import groups, names, untrusted
from fluence.device_claims import Devices
from fluence.pods import (
    CompositePodGroup,
    Pod,
    PodGroup,
    decode_attachment,
    decode_claim,
    decode_compositepodgroup,
    decode_csi_node,
    decode_namespace,
    decode_node,
    decode_pod,
    decode_podgroup,
    decode_status,
    decode_storage_class,
    decode_volume,
)
from fluence.resource_claims import (
    decode_device_class,
    decode_resource_claim,
    decode_resource_slice,
)
from fluence.volume_nodes import Storage

log = logging.getLogger(__name__)

T = TypeVar("T")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
Handler = Callable[[str, Any], None]
"""(event type, object) called after the store changed; DELETED carries the last state."""

WATCH_SECONDS = 240
RETRY_SECONDS = 1.0
"""First delay after a failed list or watch; it doubles (with jitter) up to MAX_RETRY_SECONDS."""
MAX_RETRY_SECONDS = 30.0
NOT_SERVED_RETRY_SECONDS = 30.0
LIST_PAGE = 500
"""Objects per list request: a cluster's pods come in pages, never in one huge body."""


def retry_delay(failures: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait after ``failures`` failures in a row: doubling, capped, jittered +-50%."""
    base = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2.0 ** max(0, failures - 1))
    return base * (0.5 + rand())


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""  # noqa: N815 - the API's spelling
    continue_: str = msgspec.field(default="", name="continue")


class _Named(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _NamedObj(msgspec.Struct):
    metadata: _Named = msgspec.field(default_factory=_Named)


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _ObjMeta(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)


_list_decoder = msgspec.json.Decoder(_List)
_event_decoder = msgspec.json.Decoder(_Event)
_rv_decoder = msgspec.json.Decoder(_ObjMeta)
_named_decoder = msgspec.json.Decoder(_NamedObj)


def _describe(raw: bytes) -> str:
    """namespace/name of an object that failed to decode, when even that can be read."""
    try:
        meta = _named_decoder.decode(raw).metadata
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "?"
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name or "?"


class ApiStatusError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class RawApi:
    """GET requests through a ``kubernetes`` ApiClient, returning the raw urllib3 response."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def get(self, path: str, query: list[tuple[str, Any]], timeout: float) -> Any:
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(method, url, header_params=headers, _request_timeout=(10, timeout))
        raw = resp.response
        if raw.status != 200:
            body = raw.data.decode(errors="replace") if raw.data else ""
            raw.release_conn()
            raise ApiStatusError(raw.status, body[:300])
        return raw


def _lines(raw: Any) -> Iterator[bytes]:
    buf = b""
    for chunk in raw.stream(64 * 1024, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


class Reflector(Generic[T]):
    """A local, watched copy of one kind of object, keyed by ``namespace/name``."""

    def __init__(
        self,
        api: RawApi,
        path: str,
        decode: Callable[[bytes], T],
        key: Callable[[T], str],
        *,
        optional: bool = False,
        name: str = "",
        kind: str = "",
    ) -> None:
        self.api = api
        self.kind = kind or name or path
        """The objects' kind, as counted when one is skipped."""
        self.path = path
        self.decode = decode
        self.key = key
        self.optional = optional
        self.name = name or path
        self.synced = threading.Event()
        self.served = True
        self._store: dict[str, T] = {}
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rv = ""
        self._failures = 0

    def add_handler(self, fn: Handler) -> None:
        self._handlers.append(fn)

    def items(self) -> list[T]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._store.get(key)

    def start(self) -> Reflector[T]:
        self._thread = threading.Thread(
            target=self._run, name=f"reflector {self.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _emit(self, kind: str, obj: T) -> None:
        for fn in self._handlers:
            try:
                fn(kind, obj)
            except Exception:
                log.exception("event handler failed", extra={"reflector": self.name, "event": kind})

    def _decode(self, raw: bytes) -> T | None:
        """The object, or None (logged and counted) when it cannot be decoded."""
        try:
            return self.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            untrusted.count(self.kind, untrusted.UNDECODABLE)
            log.warning(
                "object skipped: it cannot be decoded",
                extra={"reflector": self.name, "object": _describe(raw), "error": str(exc)},
            )
            return None

    def _backoff(self) -> None:
        self._failures += 1
        self._stop.wait(retry_delay(self._failures))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list()
                self._failures = 0
                while not self._stop.is_set():
                    self._watch()
            except ApiStatusError as exc:
                if exc.status == 404 and self.optional:
                    if self.served:
                        log.info("API not served; will look again", extra={"path": self.path})
                    self.served = False
                    with self._lock:  # what an API no longer served held is gone with it
                        self._store.clear()
                    self.synced.set()
                    self._stop.wait(NOT_SERVED_RETRY_SECONDS)
                    continue
                if exc.status != 410:
                    log.warning(
                        "list/watch failed; retrying", extra={"path": self.path, "error": str(exc)}
                    )
                    self._backoff()
            except Exception as exc:  # noqa: BLE001 - a broken stream must never end the loop
                log.warning(
                    "list/watch broke; listing again", extra={"path": self.path, "error": repr(exc)}
                )
                self._backoff()

    def _list(self) -> None:
        """List every object, a page at a time; one snapshot (an expired page token: 410)."""
        fresh: dict[str, T] = {}
        token = ""
        rv = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", LIST_PAGE)]
            if token:
                query.append(("continue", token))
            raw = self.api.get(self.path, query, timeout=60)
            try:
                data = raw.data
            finally:
                raw.release_conn()
            lst = _list_decoder.decode(data)
            rv = lst.metadata.resourceVersion or rv
            for item in lst.items:
                obj = self._decode(item)
                if obj is not None:
                    fresh[self.key(obj)] = obj
            token = lst.metadata.continue_
            if not token or self._stop.is_set():
                break
        with self._lock:
            old = self._store
            self._store = fresh
        self._rv = rv
        self.served = True
        for k, obj in fresh.items():
            self._emit(MODIFIED if k in old else ADDED, obj)
        for k, obj in old.items():
            if k not in fresh:
                self._emit(DELETED, obj)
        self.synced.set()

    def _watch(self) -> None:
        query: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("resourceVersion", self._rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", WATCH_SECONDS),
        ]
        raw = self.api.get(self.path, query, timeout=WATCH_SECONDS + 30)
        try:
            for line in _lines(raw):
                if self._stop.is_set():
                    return
                ev = _event_decoder.decode(line)
                if ev.type == "ERROR":
                    st = decode_status(ev.object)
                    raise ApiStatusError(st.code or 500, st.message)
                if ev.type == "BOOKMARK":
                    self._rv = _rv_decoder.decode(ev.object).metadata.resourceVersion
                    continue
                obj = self._decode(ev.object)
                if obj is None:
                    self._rv = _rv_decoder.decode(ev.object).metadata.resourceVersion or self._rv
                    continue
                k = self.key(obj)
                with self._lock:
                    if ev.type == DELETED:
                        self._store.pop(k, None)
                    else:
                        self._store[k] = obj
                self._rv = _rv_decoder.decode(ev.object).metadata.resourceVersion or self._rv
                self._emit(ev.type, obj)
        finally:
            raw.release_conn()


class ClusterReflectors:
    """The shared reflectors and the lookups the scheduler needs from them."""

    def __init__(self, api_client: Any) -> None:
        api = RawApi(api_client)

        def watched(
            path: str,
            decode: Callable[[bytes], T],
            kind: str,
            key: Callable[[T], str] = _name,
            *,
            name: str = "",
            optional: bool = False,
        ) -> Reflector[T]:
            """A reflector named after its path's last part unless ``name`` says otherwise."""
            label = name or path.rsplit("/", 1)[-1]
            return Reflector(api, path, decode, key, optional=optional, name=label, kind=kind)

        self.nodes = watched("/api/v1/nodes", decode_node, "Node")
        self.pods = watched("/api/v1/pods", decode_pod, "Pod", _key)
        # One optional reflector per PodGroup version: whichever the API server serves
        # fills its store, and a cluster upgraded to the next version is followed.
        self.podgroups: list[Reflector[PodGroup]] = [
            watched(
                f"/apis/{names.PODGROUP_GROUP}/{version}/{names.PODGROUP_PLURAL}",
                decode_podgroup,
                "PodGroup",
                _key,
                name=f"podgroups-{version}",
                optional=True,
            )
            for version in names.PODGROUP_VERSIONS
        ]
        self.x_podgroups = watched(
            f"/apis/{names.X_PODGROUP_GROUP}/{names.X_PODGROUP_VERSION}/{names.PODGROUP_PLURAL}",
            decode_podgroup,
            "PodGroup",
            _key,
            name="x-podgroups",
            optional=True,
        )
        self.composites = watched(
            f"/apis/{names.PODGROUP_GROUP}/{names.COMPOSITE_VERSION}/{names.COMPOSITE_PLURAL}",
            decode_compositepodgroup,
            "CompositePodGroup",
            _key,
            optional=True,
        )
        self.claims = watched(
            "/api/v1/persistentvolumeclaims", decode_claim, "PersistentVolumeClaim", _key
        )
        self.volumes = watched("/api/v1/persistentvolumes", decode_volume, "PersistentVolume")
        self.storage_classes = watched(
            names.STORAGE_CLASSES_PATH, decode_storage_class, "StorageClass"
        )
        self.namespaces = watched("/api/v1/namespaces", decode_namespace, "Namespace")
        self.csi_nodes = watched(names.CSI_NODES_PATH, decode_csi_node, "CSINode")
        self.attachments = watched(
            names.VOLUME_ATTACHMENTS_PATH, decode_attachment, "VolumeAttachment"
        )
        # Dynamic resource allocation: optional, as a cluster may not serve resource.k8s.io.
        self.resource_claims = watched(
            names.RESOURCE_CLAIMS_PATH, decode_resource_claim, "ResourceClaim", _key, optional=True
        )
        self.resource_slices = watched(
            names.RESOURCE_SLICES_PATH, decode_resource_slice, "ResourceSlice", optional=True
        )
        self.device_classes = watched(
            names.DEVICE_CLASSES_PATH, decode_device_class, "DeviceClass", optional=True
        )
        self.devices = Devices(
            self.resource_claims.get,
            self.resource_claims.items,
            self.resource_slices.items,
            self.device_classes.get,
            self.device_classes.items,
        )
        """ResourceClaims, ResourceSlices and DeviceClasses, as :mod:`fluence.device_claims`
        reads them."""
        self.storage = Storage(
            self.claims.get,
            self.volumes.get,
            self.volumes.items,
            self.storage_classes.get,
            self.csi_nodes.items,
            self.attachments.items,
        )
        """Claims, volumes and classes, as :mod:`fluence.volume_nodes` reads them."""
        self.all: list[Reflector[Any]] = [
            self.nodes,
            self.pods,
            self.claims,
            self.volumes,
            self.storage_classes,
            self.csi_nodes,
            self.attachments,
            self.resource_claims,
            self.resource_slices,
            self.device_classes,
            self.namespaces,
            *self.podgroups,
            self.x_podgroups,
            self.composites,
        ]
        # Registered first, so the index is current before any other pod handler runs.
        self.by_group = groups.PodsByGroup()
        self.pods.add_handler(self._index_pod)

    def _index_pod(self, kind: str, pod: Pod) -> None:
        if kind == DELETED:
            self.by_group.remove(pod)
        else:
            self.by_group.update(pod)

    def start(self) -> None:
        for r in self.all:
            r.start()

    def stop(self) -> None:
        for r in self.all:
            r.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for r in self.all:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not r.synced.wait(left):
                return False
        return True

    # ClusterView
    def pods_in(self, namespace: str) -> list[Pod]:
        return [p for p in self.pods.items() if p.metadata.namespace == namespace]

    def group_pods(self, ref: groups.GroupRef) -> list[Pod]:
        return self.by_group.members(ref)

    def podgroup(self, api_group: str, namespace: str, name: str) -> PodGroup | None:
        key = f"{namespace}/{name}"
        if api_group == names.X_PODGROUP_GROUP:
            return self.x_podgroups.get(key)
        for store in self.podgroups:
            found = store.get(key)
            if found is not None:
                return found
        return None

    def namespace_labels(self, name: str) -> dict[str, str]:
        """A namespace's labels ({} while it is not known): what pod affinity's
        ``namespaceSelector`` picks by."""
        ns = self.namespaces.get(name)
        return ns.metadata.labels if ns is not None else {}

    # CompositeView
    def composite(self, namespace: str, name: str) -> CompositePodGroup | None:
        return self.composites.get(f"{namespace}/{name}")

    def children(self, namespace: str, name: str) -> list[PodGroup]:
        """The native PodGroups whose parent is CompositePodGroup ``namespace/name``."""
        return [
            pg
            for store in self.podgroups
            for pg in store.items()
            if pg.metadata.namespace == namespace and pg.parent == name
        ]


def _key(obj: Any) -> str:
    return f"{obj.metadata.namespace}/{obj.metadata.name}"


def _name(obj: Any) -> str:
    """The key of a cluster-scoped object: its name."""
    return str(obj.metadata.name)
