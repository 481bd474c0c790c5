"""Jobspec loading: YAML or JSON text (or a mapping) to the canonical JSON the core reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from fluxion_nb import _core
from fluxion_nb.errors import InputError

JobspecLike = str | bytes | Mapping[str, Any] | Path


def to_json(jobspec: JobspecLike) -> str:
    """Return the jobspec as JSON text; YAML is accepted because RFC 14 allows both."""
    if type(jobspec) is str:  # the common case first: the Mapping check is an ABC's
        return _text_to_json(jobspec)
    if isinstance(jobspec, Path):
        jobspec = jobspec.read_text()
    if isinstance(jobspec, bytes):
        jobspec = jobspec.decode()
    if isinstance(jobspec, Mapping):
        return json.dumps(jobspec)
    return _text_to_json(jobspec)


MAX_VALUES = 100_000
"""Values a jobspec may hold once YAML aliases are expanded (real ones hold dozens)."""


def _refuse_expansion(doc: Any) -> None:
    """InputError when ``doc`` expands to more than MAX_VALUES values.

    YAML aliases let a few hundred bytes stand for billions of values ("billion
    laughs"); PyYAML shares them, but writing the JSON the core reads would
    expand every one. Counting stops at the limit, so the check is cheap.
    """
    seen = 0
    stack = [doc]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise InputError(
                f"jobspec: more than {MAX_VALUES} values once YAML aliases are expanded; "
                "a jobspec needs no aliases"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _member(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next((v for k, v in node.value if getattr(k, "value", None) == key), None)


def _check_property_styles(root: yaml.Node) -> None:
    """InputError for a property constraint that is not a quoted YAML string.

    Fluxion's jobspec reader takes a property only as a quoted scalar (``"fast"``,
    ``'fast'``; JSON's strings always are): a plain ``fast`` is "non-string property
    specified". The style is gone once the text is read into values, so it is checked
    on the composed nodes; a node reached twice through aliases is checked once.
    """
    seen: set[int] = set()
    stack = [_member(_member(_member(root, "attributes"), "system"), "constraints")]
    while stack:
        node = stack.pop()
        if not isinstance(node, yaml.MappingNode) or id(node) in seen:
            continue
        seen.add(id(node))
        for key, value in node.value:
            if not isinstance(value, yaml.SequenceNode):
                continue
            if key.value == "properties":
                for item in value.value:
                    if not isinstance(item, yaml.ScalarNode) or item.style not in ("'", '"'):
                        shown = item.value if isinstance(item, yaml.ScalarNode) else item.id
                        raise InputError(
                            "jobspec: attributes.system.constraints: non-string property "
                            f"specified ({shown!r}); write a property as a quoted string"
                        )
            elif key.value in ("and", "or", "not"):
                stack.extend(value.value)


# Schedulers send the same few jobspec texts over and over; YAML parsing costs
# more than a whole match, so the canonical JSON of recent texts is kept.
@lru_cache(maxsize=256)
def _text_to_json(jobspec: str) -> str:
    # The core reads the plain YAML jobspecs are written in (and JSON) in a few
    # microseconds, PyYAML in hundreds; what the core declines, PyYAML reads or rejects.
    fast = _core.yaml_to_json(jobspec)
    if fast is not None and fast.startswith("{"):
        return fast
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(jobspec)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_property_styles(node)
        doc = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise InputError(f"jobspec: not valid YAML or JSON: {exc}") from None
    finally:
        loader.dispose()
    if not isinstance(doc, dict):
        raise InputError("jobspec: the document must be a mapping")
    _refuse_expansion(doc)
    try:
        return json.dumps(doc, default=str)
    except (TypeError, ValueError) as exc:
        raise InputError(f"jobspec: cannot be represented as JSON: {exc}") from None
