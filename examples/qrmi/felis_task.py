"""A QRMI program as it runs under Slurm's QRMI plugin, unchanged: nothing in it knows fluence.

It asks QRMI which quantum resources the job was given (QRMI_JOB_QPU_RESOURCES and
QRMI_JOB_QPU_TYPES), then on each Alice & Bob Felis resource: acquire, start a task,
poll it, print its result, release. QRMI reads each resource's endpoint and API key
from <name>_QRMI_AB_FELIS_BASE_ENDPOINT and <name>_QRMI_AB_FELIS_API_KEY.

    python felis_task.py [input.qir]
"""

import json
import sys
import time
from pathlib import Path

from qrmi import (
    Payload,
    QuantumResource,
    ResourceType,
    TaskStatus,
    get_job_qpu_resources_and_types,
)

TYPES = {"alice-bob-felis": ResourceType.AliceBobFelis}
QIR = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("measure_one.qir"))


def run(name: str, resource_type: ResourceType) -> None:
    resource = QuantumResource(name, resource_type)
    token = resource.acquire()
    print(f"{name}: acquired ({token})", flush=True)
    try:
        params = json.dumps({"nbShots": 50, "averageNbPhotons": 4})
        payload = Payload.AliceBobFelis(human_qir=QIR.read_text(), input_params=params)
        task = resource.task_start(payload)
        print(f"{name}: task {task} started", flush=True)
        while (status := resource.task_status(task)) in (TaskStatus.Queued, TaskStatus.Running):
            time.sleep(1)
        print(f"{name}: task {task} ended {status}", flush=True)
        if status == TaskStatus.Completed:
            print(resource.task_result(task).value, flush=True)
        resource.task_stop(task)
    finally:
        resource.release(token)
        print(f"{name}: released", flush=True)


def main() -> int:
    names, types = get_job_qpu_resources_and_types()
    print(f"QPU resources of this job: {list(zip(names, types, strict=True))}", flush=True)
    ran = 0
    for name, type_name in zip(names, types, strict=True):
        if type_name in TYPES:
            run(name, TYPES[type_name])
            ran += 1
        else:
            print(f"{name}: type {type_name} is not one this program drives; skipped")
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
