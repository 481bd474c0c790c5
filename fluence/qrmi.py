"""QRMI's contract: its resource definitions, which of their settings are credentials,
and the annotations a placement writes so QRMI programs find their resources.

QRMI (the Quantum Resource Management Interface) programs learn their resources
from ``QRMI_JOB_QPU_RESOURCES``/``QRMI_JOB_QPU_TYPES`` and read each one's
settings from ``<name>_<key>`` variables; on Slurm its SPANK plugin sets them
from an administrator's ``qrmi_config.json``. fluence reads the same entries
(:mod:`fluence.resources`) and sets the same variables (:mod:`webhook.env`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fluence import names

_CREDENTIAL = re.compile(r"APIKEY|API_KEY|TOKEN|SECRET|PASSWORD|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL")
"""Key parts that name a credential in QRMI's settings: ``*_IAM_APIKEY``, ``*_AUTH_TOKEN``,
``*_ISA_TOKEN``, ``*_AB_FELIS_API_KEY``, ``*_CLIENT_SECRET``, ``*_AWS_ACCESS_KEY_ID``,
``*_AWS_SECRET_ACCESS_KEY``. A rule rather than a list, so a new type's keys are covered."""


def is_credential(key: str) -> bool:
    """True for a setting whose value must come from a Secret, never from the config."""
    return bool(_CREDENTIAL.search(key.upper()))


@dataclass(frozen=True)
class QrmiResource:
    """One ``qrmi_config.json`` entry: a backend, its QRMI type and its settings.

    ``settings`` are plain values the config holds; ``secrets`` are the keys whose
    values a pod reads from ``secret`` (a Secret in its own namespace), each under
    the key ``<name>_<key>``, the variable's own name. ``acquire``: fluence acquires
    the resource for the pods it is given and releases it when they are done, as
    QRMI's Slurm plugin does for a job (``false``: the program does it alone).
    """

    name: str
    type: str
    settings: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ()
    secret: str = names.QRMI_SECRET
    acquire: bool = True

    def variable(self, key: str) -> str:
        return names.qrmi_env(self.name, key)


def placement_annotations(backends: Iterable[tuple[str, Mapping[str, str]]]) -> dict[str, str]:
    """The QRMI annotations for a pod given ``backends`` ((name, attributes), in order).

    Only backends with a QRMI type count, so the two lists always have equal length
    (QRMI refuses lists that do not); no QRMI backend, no annotations.
    """
    chosen = [(n, a[names.ATTR_QRMI_TYPE]) for n, a in backends if a.get(names.ATTR_QRMI_TYPE)]
    if not chosen:
        return {}
    sep = names.QRMI_LIST_DELIMITER
    return {
        names.ANNOTATION_QRMI_RESOURCES: sep.join(n for n, _ in chosen),
        names.ANNOTATION_QRMI_TYPES: sep.join(t for _, t in chosen),
    }
