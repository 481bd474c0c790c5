"""The helm binary for chart tests: on PATH, in the cache, or built from its Go module.

Built with ``go install helm.sh/helm/v3/cmd/helm@<version>`` into
``~/.cache/fluence/helm-<version>/`` (or ``$FLUENCE_HELM_CACHE``) the first time,
which takes a few minutes; later runs reuse it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HELM_VERSION = "v3.22.0"
KUBE_VERSION = "v1.36.3"
"""Cluster version ``helm template`` renders for (the chart needs 1.36 or newer)."""


def cache_dir() -> Path:
    base = os.environ.get("FLUENCE_HELM_CACHE") or str(Path.home() / ".cache" / "fluence")
    return Path(base) / f"helm-{HELM_VERSION}"


def ensure_helm() -> Path:
    cached = cache_dir() / "helm"
    if cached.exists():
        return cached
    found = shutil.which("helm")
    if found:
        return Path(found)
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            "helm is not installed and Go is not available to build it: install helm, or Go "
            f"and run `go install helm.sh/helm/v3/cmd/helm@{HELM_VERSION}`"
        )
    cache_dir().mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(cache_dir())}
    subprocess.run([go, "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], env=env, check=True)
    return cached


def template(chart: Path, *args: str, namespace: str = "kube-system") -> str:
    """``helm template`` output of ``chart``; raises with helm's message when it fails."""
    done = subprocess.run(
        [
            str(ensure_helm()),
            "template",
            "fluence",
            str(chart),
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)} failed: {done.stderr}")
    return done.stdout
