"""One QRMI acquire or release, run in an interpreter that has the ``qrmi`` library.

QRMI and the Kubernetes client cannot share one environment (they pin
``python-dateutil`` on either side of 3), so the extender runs this file by path
under the interpreter of the ``qrmi`` dependency group (``FLUENCE_QRMI_PYTHON``),
as QRMI's Slurm plugin calls the library in the job's context. It imports the
standard library and ``qrmi`` only. The resource's settings, credentials and job
variables come in the environment, as QRMI reads them; a release reads the token
from ``<name>_QRMI_JOB_ACQUISITION_TOKEN``, as QRMI's own session types do.

    python qrmi_runner.py acquire|release <name> <type>

Prints one JSON object: ``{"token": ...}`` after an acquire, ``{}`` after a
release; on failure ``{"error": ...}`` and exit status 1.
"""

from __future__ import annotations

import json
import os
import sys

TYPES = {
    "ibm-quantum-system": "IBMQuantumSystem",
    "qiskit-runtime-service": "IBMQiskitRuntimeService",
    "ibm-quantum-compute-service": "IBMQuantumComputeService",
    "pasqal-cloud": "PasqalCloud",
    "pasqal-local": "PasqalLocal",
    "alice-bob-felis": "AliceBobFelis",
    "iqm-server": "IQMServer",
    "oqtopus": "OQTOPUS",
}
"""QRMI's type names (``qrmi_config.json``) -> its ``ResourceType`` members."""

MAX_ERROR = 400


def run(op: str, name: str, type_name: str) -> dict[str, str]:
    import qrmi  # the library this file exists to call

    member = TYPES.get(type_name)
    if member is None:
        raise ValueError(f"QRMI type {type_name!r} is not one this runner knows")
    resource = qrmi.QuantumResource(name, getattr(qrmi.ResourceType, member))
    if op == "acquire":
        return {"token": str(resource.acquire())}
    if op == "release":
        resource.release(os.environ.get(f"{name}_QRMI_JOB_ACQUISITION_TOKEN", ""))
        return {}
    raise ValueError(f"unknown operation {op!r} (acquire or release)")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(json.dumps({"error": "usage: qrmi_runner.py acquire|release <name> <type>"}))
        return 2
    try:
        out = run(*argv)
    except BaseException as exc:  # noqa: BLE001 - a Rust panic arrives as BaseException
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR]}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
