"""Typed exceptions raised by the matcher (re-exported from the C++ core)."""

from fluxion_nb._core import InputError, NotFoundError, StateError, UnknownTypeError

__all__ = ["InputError", "NotFoundError", "StateError", "UnknownTypeError"]
