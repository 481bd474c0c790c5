"""deviceplugin.api against the kubelet's own api.proto: same descriptor, same bytes.

The kubelet's proto is taken from the Go module cache (``k8s.io/kubelet`` as
pinned in ``hack/k8s-bins/go.mod``) or from ``FLUENCE_KUBELET_API_PROTO``, and
compiled here with grpcio-tools' protoc into a descriptor set, which is loaded
into a pool of its own. Without grpcio-tools or Go those tests skip, except
when ``CI`` is set, where they fail instead.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from deviceplugin import api

REPO = Path(__file__).resolve().parents[3]
GO_MODULE = REPO / "hack" / "k8s-bins"
PROTO_IN_MODULE = "pkg/apis/deviceplugin/v1beta1/api.proto"
PROTO_ENV = "FLUENCE_KUBELET_API_PROTO"
MESSAGES = sorted(api.DESCRIPTOR.message_types_by_name)
_F = descriptor_pb2.FieldDescriptorProto


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this does not skip)")
    pytest.skip(reason)


def _kubelet_proto() -> Path:
    if os.environ.get(PROTO_ENV):
        return Path(os.environ[PROTO_ENV])
    go = shutil.which("go")
    if go is None:
        _unavailable(f"Go is needed to find the kubelet's api.proto (or set {PROTO_ENV})")
    assert go is not None
    out = subprocess.run(
        [go, "mod", "download", "-json", "k8s.io/kubelet"],
        cwd=GO_MODULE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"go mod download k8s.io/kubelet failed: {out.stderr}"
    return Path(json.loads(out.stdout)["Dir"]) / PROTO_IN_MODULE


@pytest.fixture(scope="module")
def kubelet_file(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    """The kubelet's api.proto compiled by protoc, as a FileDescriptorProto."""
    try:
        from grpc_tools import protoc  # type: ignore[import-untyped]
    except ImportError:
        _unavailable("grpcio-tools is needed to compile the kubelet's api.proto")
    proto = _kubelet_proto()
    assert proto.is_file(), f"{proto} does not exist"
    out = tmp_path_factory.mktemp("kubelet-api") / "api.pb"
    rc = protoc.main(["protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}", proto.name])
    assert rc == 0, f"protoc failed on {proto}"
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert len(files) == 1, [f.name for f in files]
    return files[0]


@pytest.fixture(scope="module")
def kubelet_classes(
    kubelet_file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, type[Message]]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(kubelet_file)
    found = pool.FindFileByName(kubelet_file.name)
    return {
        name: message_factory.GetMessageClass(d) for name, d in found.message_types_by_name.items()
    }


# --- Comparing descriptors -----------------------------------------------------------


def _fields(message: descriptor_pb2.DescriptorProto) -> dict[str, tuple[Any, ...]]:
    return {
        f.name: (f.number, f.label, f.type, f.type_name, f.HasField("oneof_index"))
        for f in message.field
    }


def _shape(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """What the wire and the RPC paths depend on, keyed by name so order does not matter."""
    return {
        "package": file.package,
        "syntax": file.syntax,
        "dependencies": sorted(file.dependency),
        "messages": {
            m.name: {
                "fields": _fields(m),
                "nested": {
                    n.name: (n.options.map_entry, _fields(n), len(n.nested_type))
                    for n in m.nested_type
                },
                "enums": len(m.enum_type),
                "oneofs": [o.name for o in m.oneof_decl],
            }
            for m in file.message_type
        },
        "enums": [e.name for e in file.enum_type],
        "services": {
            s.name: {
                m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
                for m in s.method
            }
            for s in file.service
        },
    }


def test_descriptor_matches_the_kubelets_field_by_field(
    kubelet_file: descriptor_pb2.FileDescriptorProto,
) -> None:
    ours, theirs = _shape(api.file_descriptor_proto()), _shape(kubelet_file)
    assert sorted(ours["messages"]) == sorted(theirs["messages"])
    for name, message in theirs["messages"].items():
        assert ours["messages"][name] == message, name
    assert ours == theirs


# --- Comparing bytes ------------------------------------------------------------------


def _sample(field: Any, i: int) -> Any:
    """A value for the ``i``-th element of a scalar field (``field`` is a FieldDescriptor)."""
    if field.type == FieldDescriptor.TYPE_STRING:
        return f"{field.name}-{i}"
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64):
        return -(field.number * 1000 + i) if i else 2**31 - 1  # negatives: widest varints
    raise AssertionError(f"no sample value for {field.full_name} (type {field.type})")


def _fill(message: Message, depth: int = 0) -> Message:
    """Set every field of ``message`` to a value derived from its name (two of each repeated)."""
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            key, val = entry.fields_by_name["key"], entry.fields_by_name["value"]
            for i in range(2):
                value[_sample(key, i)] = _sample(val, i)
        elif entry is not None:
            if depth > 3:
                continue
            for sub in [value.add() for _ in range(2)] if field.is_repeated else [value]:
                _fill(sub, depth + 1)
        elif field.is_repeated:
            value.extend(_sample(field, i) for i in range(2))
        else:
            setattr(message, field.name, _sample(field, 1))
    return message


@pytest.mark.parametrize("name", MESSAGES)
def test_messages_encode_like_the_kubelets(
    name: str, kubelet_classes: dict[str, type[Message]]
) -> None:
    ours_cls: type[Message] = getattr(api, name)
    theirs_cls = kubelet_classes[name]
    ours, theirs = _fill(ours_cls()), _fill(theirs_cls())
    wire = ours.SerializeToString(deterministic=True)
    assert wire == theirs.SerializeToString(deterministic=True)
    # Each side reads what the other wrote, field for field.
    assert theirs_cls.FromString(wire) == theirs
    assert ours_cls.FromString(theirs.SerializeToString()) == ours
    if ours.DESCRIPTOR.fields:
        assert wire, f"{name}: the sample sets no field"


# --- Without the kubelet's proto ------------------------------------------------------


def test_rpc_paths_are_the_kubelets() -> None:
    paths = {
        f"/{s.full_name}/{m.name}": (m.input_type.name, m.output_type.name, m.server_streaming)
        for s in api.DESCRIPTOR.services_by_name.values()
        for m in s.methods
    }
    assert paths == {
        "/v1beta1.Registration/Register": ("RegisterRequest", "Empty", False),
        "/v1beta1.DevicePlugin/GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "/v1beta1.DevicePlugin/ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "/v1beta1.DevicePlugin/GetPreferredAllocation": (
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            False,
        ),
        "/v1beta1.DevicePlugin/Allocate": ("AllocateRequest", "AllocateResponse", False),
        "/v1beta1.DevicePlugin/PreStartContainer": (
            "PreStartContainerRequest",
            "PreStartContainerResponse",
            False,
        ),
    }


def _declared_fields(name: str) -> Iterator[str]:
    yield from api.DECLARATIONS[name].__dict__.get("__annotations__", {})


@pytest.mark.parametrize("name", MESSAGES)
def test_typed_constructor_takes_exactly_the_fields(name: str) -> None:
    """The ``__init__`` written for mypy names every field and nothing else, by keyword."""
    params = list(inspect.signature(api.DECLARATIONS[name].__init__).parameters.values())[1:]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), name
    assert [p.name for p in params] == list(_declared_fields(name))
    assert [f.name for f in api.DESCRIPTOR.message_types_by_name[name].fields] == [
        p.name for p in params
    ]
    # And the generated class accepts them with those defaults.
    getattr(api, name)(**{p.name: p.default for p in params})


def test_module_names_are_the_generated_classes() -> None:
    for name in MESSAGES:
        cls = getattr(api, name)
        assert cls is not api.DECLARATIONS[name]
        assert cls.DESCRIPTOR.full_name == f"v1beta1.{name}"
    assert sorted(api.DECLARATIONS) == MESSAGES


def test_map_fields_and_nested_messages_round_trip() -> None:
    response = api.AllocateResponse(
        container_responses=[
            api.ContainerAllocateResponse(
                envs={"A": "1"},
                annotations={"k": "v"},
                mounts=[api.Mount(container_path="/c", host_path="/h", read_only=True)],
                devices=[api.DeviceSpec(container_path="/dev/x", permissions="rw")],
                cdi_devices=[api.CDIDevice(name="vendor.com/qpu=0")],
            )
        ]
    )
    back = api.AllocateResponse.FromString(response.SerializeToString())
    assert back == response
    assert dict(back.container_responses[0].envs) == {"A": "1"}
    device = api.Device(
        ID="q-0", health="Healthy", topology=api.TopologyInfo(nodes=[api.NUMANode(ID=-1)])
    )
    assert api.Device.FromString(device.SerializeToString()).topology.nodes[0].ID == -1


def test_declaration_errors_say_what_is_wrong() -> None:
    with pytest.raises(TypeError, match=r"needs its wire type"):
        api._element(_F(), int, (), "X.n")
    with pytest.raises(TypeError, match=r"unsupported field type"):
        api._element(_F(), float, (), "X.f")
