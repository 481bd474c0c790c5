"""Each shipped container runs as the user its job needs, with no capability left."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
IMAGE_USER = re.search(r"^USER (\d+)", (DEPLOY.parent / "Dockerfile").read_text(), re.M)


def containers() -> dict[str, dict[str, Any]]:
    found = {}
    for path in (DEPLOY / "fluence.yaml", DEPLOY / "fluence-resources.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("Deployment", "DaemonSet"):
                spec = doc["spec"]["template"]["spec"]
                for c in spec["containers"]:
                    found[f"{doc['metadata']['name']}/{c['name']}"] = {
                        "pod": spec.get("securityContext") or {},
                        "container": c.get("securityContext") or {},
                    }
    return found


def effective_user(sc: dict[str, Any]) -> int:
    user = sc["container"].get("runAsUser", sc["pod"].get("runAsUser"))
    assert IMAGE_USER is not None
    return int(user) if user is not None else int(IMAGE_USER.group(1))


def test_the_device_plugin_runs_as_root_to_use_the_kubelets_directory() -> None:
    """/var/lib/kubelet/device-plugins is root's (0755); user 65532 cannot create a socket."""
    sc = containers()["fluence-deviceplugin/deviceplugin"]
    assert effective_user(sc) == 0
    assert sc["container"]["capabilities"] == {"drop": ["ALL"]}
    assert sc["container"]["allowPrivilegeEscalation"] is False
    chart = (DEPLOY / "helm/fluence/templates/deviceplugin.yaml").read_text()
    assert "runAsUser: 0" in chart and "runAsNonRoot: false" in chart


def test_everything_else_runs_as_the_images_unprivileged_user() -> None:
    for name, sc in containers().items():
        if name == "fluence-deviceplugin/deviceplugin":
            continue
        assert effective_user(sc) != 0, name
        assert sc["container"].get("capabilities") == {"drop": ["ALL"]}, name
