"""The kubelet's device plugin API (``v1beta1``), declared here in Python.

The kubelet talks to device plugins over gRPC with protobuf messages of the
package ``v1beta1``. Only the wire format has to match the kubelet's: the
package name (it is part of every RPC path), the message names that appear in
the service signatures, and for every field its number, type and label. So the
messages are declared below as annotated Python classes, and at import time a
``FileDescriptorProto`` is built from those declarations, loaded into a private
descriptor pool and turned into real message classes with
:func:`google.protobuf.message_factory.GetMessageClass`. Nothing is generated at
build time; no protoc and no Go are involved.

How to read a declaration::

    class NUMANode(_Declared):
        ID: Annotated[int, 1, INT64]

is a message ``v1beta1.NUMANode`` whose field ``ID`` has number 1 and type
``int64``. The Python annotation gives the rest: ``str`` and ``bool`` are
``string`` and ``bool``; ``int`` needs its wire type (``INT32`` or ``INT64``);
another declared class is a sub-message; ``Scalars[T]`` and ``Messages[T]`` are
repeated fields; ``ScalarMap[str, str]`` is a ``map<string, string>``. The
``__init__`` of each class only types the keyword constructor for mypy; the
classes themselves are replaced, name by name, with the generated ones, so
``api.Device(ID="q-0", health="Healthy")`` builds a real protobuf message.

``tests/unit/deviceplugin/test_api.py`` checks this against the kubelet's own
proto when protoc (grpcio-tools) and Go are available, and the Go peer test
(``tests/integration/test_deviceplugin_go_peer.py``) runs the kubelet's device
manager against the plugin built on it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Annotated, Final, NamedTuple, TypeAlias, get_args, get_origin, get_type_hints

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.internal.containers import (
    RepeatedCompositeFieldContainer as Messages,
)
from google.protobuf.internal.containers import (
    RepeatedScalarFieldContainer as Scalars,
)
from google.protobuf.internal.containers import ScalarMap
from google.protobuf.message import Message

__all__ = [
    "DESCRIPTOR",
    "PACKAGE",
    "AllocateRequest",
    "AllocateResponse",
    "CDIDevice",
    "ContainerAllocateRequest",
    "ContainerAllocateResponse",
    "ContainerPreferredAllocationRequest",
    "ContainerPreferredAllocationResponse",
    "Device",
    "DevicePluginOptions",
    "DeviceSpec",
    "Empty",
    "ListAndWatchResponse",
    "Mount",
    "NUMANode",
    "PreStartContainerRequest",
    "PreStartContainerResponse",
    "PreferredAllocationRequest",
    "PreferredAllocationResponse",
    "RegisterRequest",
    "TopologyInfo",
    "file_descriptor_proto",
]

PACKAGE: Final = "v1beta1"
"""The protobuf package; RPC paths are ``/v1beta1.<Service>/<Method>``."""
FILE_NAME: Final = "deviceplugin/api/v1beta1.proto"
"""Name of the file in our private pool; it never appears on the wire."""

INT32: Final = "int32"
"""Marks an ``int`` field as ``int32`` on the wire."""
INT64: Final = "int64"
"""Marks an ``int`` field as ``int64`` on the wire."""


class _Declared(Message):
    """Base of the message declarations; never instantiated (see the module docstring)."""


# --- Registration: a plugin announces itself on kubelet.sock ------------------------


class Empty(_Declared):
    """No payload: the answer to Register, the request of ListAndWatch and of the options."""

    def __init__(self) -> None: ...


class DevicePluginOptions(_Declared):
    """Which optional calls the plugin wants the kubelet to make."""

    pre_start_required: Annotated[bool, 1]
    get_preferred_allocation_available: Annotated[bool, 2]

    def __init__(
        self,
        *,
        pre_start_required: bool = False,
        get_preferred_allocation_available: bool = False,
    ) -> None: ...


class RegisterRequest(_Declared):
    """Sent by a plugin: API version, its socket's name in the plugin directory, its resource."""

    version: Annotated[str, 1]
    endpoint: Annotated[str, 2]
    resource_name: Annotated[str, 3]
    options: Annotated[DevicePluginOptions, 4]

    def __init__(
        self,
        *,
        version: str = "",
        endpoint: str = "",
        resource_name: str = "",
        options: DevicePluginOptions | None = None,
    ) -> None: ...


# --- ListAndWatch: the device list, resent whole on every change ---------------------


class NUMANode(_Declared):
    ID: Annotated[int, 1, INT64]

    def __init__(self, *, ID: int = 0) -> None: ...


class TopologyInfo(_Declared):
    """The NUMA nodes a device is attached to."""

    nodes: Annotated[Messages[NUMANode], 1]

    def __init__(self, *, nodes: Iterable[NUMANode] | None = None) -> None: ...


class Device(_Declared):
    """One device: an ID unique within the resource, ``Healthy`` or ``Unhealthy``."""

    ID: Annotated[str, 1]
    health: Annotated[str, 2]
    topology: Annotated[TopologyInfo, 3]

    def __init__(
        self, *, ID: str = "", health: str = "", topology: TopologyInfo | None = None
    ) -> None: ...


class ListAndWatchResponse(_Declared):
    devices: Annotated[Messages[Device], 1]

    def __init__(self, *, devices: Iterable[Device] | None = None) -> None: ...


# --- GetPreferredAllocation: the plugin picks among the free devices -----------------


class ContainerPreferredAllocationRequest(_Declared):
    available_deviceIDs: Annotated[Scalars[str], 1]
    must_include_deviceIDs: Annotated[Scalars[str], 2]
    allocation_size: Annotated[int, 3, INT32]

    def __init__(
        self,
        *,
        available_deviceIDs: Iterable[str] | None = None,
        must_include_deviceIDs: Iterable[str] | None = None,
        allocation_size: int = 0,
    ) -> None: ...


class PreferredAllocationRequest(_Declared):
    container_requests: Annotated[Messages[ContainerPreferredAllocationRequest], 1]

    def __init__(
        self, *, container_requests: Iterable[ContainerPreferredAllocationRequest] | None = None
    ) -> None: ...


class ContainerPreferredAllocationResponse(_Declared):
    deviceIDs: Annotated[Scalars[str], 1]

    def __init__(self, *, deviceIDs: Iterable[str] | None = None) -> None: ...


class PreferredAllocationResponse(_Declared):
    container_responses: Annotated[Messages[ContainerPreferredAllocationResponse], 1]

    def __init__(
        self, *, container_responses: Iterable[ContainerPreferredAllocationResponse] | None = None
    ) -> None: ...


# --- Allocate: what a container gets for the devices chosen --------------------------


class ContainerAllocateRequest(_Declared):
    devices_ids: Annotated[Scalars[str], 1]

    def __init__(self, *, devices_ids: Iterable[str] | None = None) -> None: ...


class AllocateRequest(_Declared):
    container_requests: Annotated[Messages[ContainerAllocateRequest], 1]

    def __init__(
        self, *, container_requests: Iterable[ContainerAllocateRequest] | None = None
    ) -> None: ...


class Mount(_Declared):
    """A host path bound into the container."""

    container_path: Annotated[str, 1]
    host_path: Annotated[str, 2]
    read_only: Annotated[bool, 3]

    def __init__(
        self, *, container_path: str = "", host_path: str = "", read_only: bool = False
    ) -> None: ...


class DeviceSpec(_Declared):
    """A device node exposed to the container; ``permissions`` is a subset of ``rwm``."""

    container_path: Annotated[str, 1]
    host_path: Annotated[str, 2]
    permissions: Annotated[str, 3]

    def __init__(
        self, *, container_path: str = "", host_path: str = "", permissions: str = ""
    ) -> None: ...


class CDIDevice(_Declared):
    """A device by its fully qualified CDI name."""

    name: Annotated[str, 1]

    def __init__(self, *, name: str = "") -> None: ...


class ContainerAllocateResponse(_Declared):
    envs: Annotated[ScalarMap[str, str], 1]
    mounts: Annotated[Messages[Mount], 2]
    devices: Annotated[Messages[DeviceSpec], 3]
    annotations: Annotated[ScalarMap[str, str], 4]
    cdi_devices: Annotated[Messages[CDIDevice], 5]

    def __init__(
        self,
        *,
        envs: Mapping[str, str] | None = None,
        mounts: Iterable[Mount] | None = None,
        devices: Iterable[DeviceSpec] | None = None,
        annotations: Mapping[str, str] | None = None,
        cdi_devices: Iterable[CDIDevice] | None = None,
    ) -> None: ...


class AllocateResponse(_Declared):
    container_responses: Annotated[Messages[ContainerAllocateResponse], 1]

    def __init__(
        self, *, container_responses: Iterable[ContainerAllocateResponse] | None = None
    ) -> None: ...


# --- PreStartContainer: a last call before the container starts ----------------------


class PreStartContainerRequest(_Declared):
    devices_ids: Annotated[Scalars[str], 1]

    def __init__(self, *, devices_ids: Iterable[str] | None = None) -> None: ...


class PreStartContainerResponse(_Declared):
    def __init__(self) -> None: ...


# --- Services ------------------------------------------------------------------------


class _Rpc(NamedTuple):
    name: str
    request: type[_Declared]
    response: type[_Declared]
    streams_responses: bool = False


_SERVICES: Final[dict[str, tuple[_Rpc, ...]]] = {
    # Served by the kubelet on kubelet.sock.
    "Registration": (_Rpc("Register", RegisterRequest, Empty),),
    # Served by every plugin on its own socket.
    "DevicePlugin": (
        _Rpc("GetDevicePluginOptions", Empty, DevicePluginOptions),
        _Rpc("ListAndWatch", Empty, ListAndWatchResponse, streams_responses=True),
        _Rpc("GetPreferredAllocation", PreferredAllocationRequest, PreferredAllocationResponse),
        _Rpc("Allocate", AllocateRequest, AllocateResponse),
        _Rpc("PreStartContainer", PreStartContainerRequest, PreStartContainerResponse),
    ),
}


# --- From declarations to a FileDescriptorProto --------------------------------------

_F = descriptor_pb2.FieldDescriptorProto
_FieldType: TypeAlias = "descriptor_pb2.FieldDescriptorProto.Type.ValueType"
_SCALARS: Final[dict[object, _FieldType]] = {str: _F.TYPE_STRING, bool: _F.TYPE_BOOL}
_INTS: Final[dict[object, _FieldType]] = {INT32: _F.TYPE_INT32, INT64: _F.TYPE_INT64}


def _type_name(cls: type[_Declared]) -> str:
    return f".{PACKAGE}.{cls.__name__}"


def _element(field: _F, hint: object, extra: tuple[object, ...], where: str) -> None:
    """Set ``field``'s type from one element type (the field itself, or what it repeats)."""
    if isinstance(hint, type) and issubclass(hint, _Declared):
        field.type = _F.TYPE_MESSAGE
        field.type_name = _type_name(hint)
    elif hint is int:
        wire = _INTS.get(extra[0]) if len(extra) == 1 else None
        if wire is None:
            raise TypeError(f"{where}: an int field needs its wire type, INT32 or INT64")
        field.type = wire
    elif hint in _SCALARS:
        field.type = _SCALARS[hint]
    else:
        raise TypeError(f"{where}: unsupported field type {hint!r}")


def _message(cls: type[_Declared]) -> descriptor_pb2.DescriptorProto:
    out = descriptor_pb2.DescriptorProto(name=cls.__name__)
    # Names resolve to the declarations, also once the module holds the generated classes.
    hints = get_type_hints(cls, localns=dict(DECLARATIONS), include_extras=True)
    for name in cls.__dict__.get("__annotations__", {}):
        where = f"{cls.__name__}.{name}"
        hint = hints[name]
        if get_origin(hint) is not Annotated:
            raise TypeError(f"{where}: declare as Annotated[<type>, <number>, ...]")
        value, number, *extra = get_args(hint)
        field = out.field.add(name=name, number=number, label=_F.LABEL_OPTIONAL)
        container, args = get_origin(value), get_args(value)
        if container is ScalarMap:
            # A map is a repeated message of a nested key/value entry type marked map_entry.
            entry = out.nested_type.add(name="".join(p.title() for p in name.split("_")) + "Entry")
            entry.options.map_entry = True
            for n, (part, hint_part) in enumerate(zip(("key", "value"), args, strict=True), 1):
                _element(
                    entry.field.add(name=part, number=n, label=_F.LABEL_OPTIONAL),
                    hint_part,
                    (),
                    f"{where}.{part}",
                )
            field.label = _F.LABEL_REPEATED
            field.type = _F.TYPE_MESSAGE
            field.type_name = f"{_type_name(cls)}.{entry.name}"
        elif container in (Scalars, Messages):
            field.label = _F.LABEL_REPEATED
            _element(field, args[0], tuple(extra), where)
        else:
            _element(field, value, tuple(extra), where)
    return out


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The API as a ``FileDescriptorProto``, built from the declarations in this module."""
    proto = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for cls in DECLARATIONS.values():
        proto.message_type.append(_message(cls))
    for service, rpcs in _SERVICES.items():
        s = proto.service.add(name=service)
        for rpc in rpcs:
            s.method.add(
                name=rpc.name,
                input_type=_type_name(rpc.request),
                output_type=_type_name(rpc.response),
                server_streaming=rpc.streams_responses,
            )
    return proto


def _load() -> FileDescriptor:
    """Build the message classes and put each in place of its declaration."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    file = pool.FindFileByName(FILE_NAME)
    module = vars(sys.modules[__name__])
    for name, descriptor in file.message_types_by_name.items():
        module[name] = message_factory.GetMessageClass(descriptor)
    return file


DECLARATIONS: Final[dict[str, type[_Declared]]] = {
    cls.__name__: cls for cls in _Declared.__subclasses__()
}
"""The declarations by message name, in source order (the module's names get the real classes)."""
DESCRIPTOR: Final[FileDescriptor] = _load()
"""The file descriptor of the API; its ``services_by_name`` gives the RPC paths."""
