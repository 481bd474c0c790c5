"""QRMI's contract: which settings are credentials, what a placement writes."""

from __future__ import annotations

import pytest

from fluence import names, qrmi


@pytest.mark.parametrize(
    ("key", "credential"),
    [
        ("QRMI_IBM_QS_IAM_APIKEY", True),
        ("QRMI_IBM_QS_AWS_ACCESS_KEY_ID", True),
        ("QRMI_IBM_QS_AWS_SECRET_ACCESS_KEY", True),
        ("QRMI_PASQAL_CLOUD_AUTH_TOKEN", True),
        ("QRMI_PASQAL_CLOUD_CLIENT_SECRET", True),
        ("QRMI_AB_FELIS_API_KEY", True),
        ("QRMI_IQM_ISA_TOKEN", True),
        ("QRMI_IBM_QS_ENDPOINT", False),
        ("QRMI_IBM_QS_SERVICE_CRN", False),
        ("QRMI_IBM_QS_S3_BUCKET", False),
        ("QRMI_PASQAL_CLOUD_PROJECT_ID", False),
        ("QRMI_PASQAL_CLOUD_CLIENT_ID", False),
        ("QRMI_IBM_QCS_SESSION_MODE", False),
    ],
)
def test_credentials_are_told_by_their_key(key: str, credential: bool) -> None:
    assert qrmi.is_credential(key) is credential


def test_placement_annotations_list_the_qrmi_backends_in_order() -> None:
    got = qrmi.placement_annotations(
        [
            ("FRESNEL", {"qrmi_type": "pasqal-cloud", "backend": "FRESNEL"}),
            ("annealer", {"vendor": "x"}),
            ("test_heron", {"qrmi_type": "ibm-quantum-system"}),
        ]
    )
    assert got == {
        names.ANNOTATION_QRMI_RESOURCES: "FRESNEL,test_heron",
        names.ANNOTATION_QRMI_TYPES: "pasqal-cloud,ibm-quantum-system",
    }


def test_no_qrmi_backend_no_annotations() -> None:
    assert qrmi.placement_annotations([("annealer", {"vendor": "x"})]) == {}
    assert qrmi.placement_annotations([]) == {}
