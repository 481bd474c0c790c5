"""Which cluster a binary talks to when no kubeconfig is named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.config.config_exception import ConfigException

from fluence.kube_client import api_client


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_outside_a_pod_the_default_kubeconfig_is_used_as_kubectl_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", "https://10.1.2.3:6443")))
    assert api_client("").configuration.host == "https://10.1.2.3:6443"
    assert api_client(None).configuration.host == "https://10.1.2.3:6443"


def test_in_a_pod_the_service_account_is_used_even_with_a_kubeconfig_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config", "https://10.1.2.3:6443")))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # No token file here: the in-cluster loader was chosen, and says what it misses.
    with pytest.raises(ConfigException):
        api_client("")


def test_a_named_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    named = _kubeconfig(tmp_path / "named", "https://192.0.2.9:6443")
    assert api_client(str(named)).configuration.host == "https://192.0.2.9:6443"
