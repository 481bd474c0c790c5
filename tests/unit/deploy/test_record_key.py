"""The record key is required where the extender runs: no replica seals with a key of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def _scheduler_pod() -> dict[str, Any]:
    for doc in yaml.safe_load_all((DEPLOY / "fluence.yaml").read_text()):
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == "fluence-scheduler":
            spec: dict[str, Any] = doc["spec"]["template"]["spec"]
            return spec
    raise AssertionError("deploy/fluence.yaml has no Deployment named fluence-scheduler")


def test_the_manifest_mounts_the_record_key_secret_as_required() -> None:
    """A missing Secret keeps the pod from starting instead of letting each replica make a key:
    after a failover the standby would treat every record as foreign and double-book."""
    spec = _scheduler_pod()
    (volume,) = [
        v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "fluence-record-key"
    ]
    assert volume["secret"].get("optional", False) is False
    extender = next(c for c in spec["containers"] if c["name"] == "extender")
    assert any(m["name"] == volume["name"] for m in extender["volumeMounts"])
    others = [c for c in spec["containers"] if c["name"] != "extender"]
    assert not any(m["name"] == volume["name"] for c in others for m in c.get("volumeMounts", []))
