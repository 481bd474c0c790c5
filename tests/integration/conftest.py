"""Fixtures shared by the integration tests."""

from tests.support.deviceplugin_process import workdir

__all__ = ["workdir"]
