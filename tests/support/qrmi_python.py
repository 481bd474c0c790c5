"""An interpreter with the ``qrmi`` library, as the image's ``/opt/qrmi``: made once from
the ``qrmi`` dependency group of ``pyproject.toml`` into the cache, for the tests that
let the extender call QRMI (``FLUENCE_QRMI_PYTHON``).

QRMI cannot be installed beside fluence (it pins ``python-dateutil`` below 3, the
Kubernetes client above), hence an environment of its own. Where the package index
cannot be reached the tests skip with the reason; under CI they fail.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testbed.binaries import cache_root

ROOT = Path(__file__).resolve().parents[2]


def qrmi_requirements() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data["dependency-groups"]["qrmi"])


def qrmi_python() -> str:
    """The cached environment's interpreter, made if need be; skips (fails under CI) when
    it cannot be made."""
    requirements = qrmi_requirements()
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    env = cache_root() / f"qrmi-python-{digest}"
    python = env / "bin" / "python"
    ready = env / ".ready"
    if ready.exists():
        return str(python)
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(env)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *requirements],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        reason = f"no environment with {requirements} could be made: {detail.strip()[-300:]}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the QRMI tests: {reason}")
        pytest.skip(reason)
    ready.write_text("\n".join(requirements) + "\n")
    return str(python)
