"""A JSON Patch (RFC 6902) builder that knows what already exists in the object.

RFC 6902 ``add`` fails when the parent of the target is missing, so an entry
for an absent list or map adds the whole container. Later entries for a
container the builder created go into that same op; entries for containers that
existed are appended (``/-`` for lists, an escaped key for maps).
"""

from __future__ import annotations

from typing import Any

PatchOp = dict[str, Any]


def escape(token: str) -> str:
    """One RFC 6901 reference token: ``~`` becomes ``~0`` first, then ``/`` becomes ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """A JSON Pointer from unescaped tokens, e.g. ``pointer("metadata", "annotations", "a/b")``."""
    return "".join("/" + escape(str(t)) for t in tokens)


class PatchBuilder:
    """Collects ``add`` ops; remembers which lists and maps it has created along the way."""

    def __init__(self) -> None:
        self.ops: list[PatchOp] = []
        self._created: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self.ops)

    def add(self, path: str, value: Any) -> None:
        """Set ``path`` to ``value`` (RFC 6902 ``add``: creates the member or replaces it)."""
        self.ops.append({"op": "add", "path": path, "value": value})

    def append(self, list_path: str, exists: bool, item: Any) -> None:
        """Append ``item`` to the list at ``list_path``, creating the list if it is absent."""
        created = self._created.get(list_path)
        if created is not None:
            created.append(item)
            return
        if exists:
            self.add(list_path + "/-", item)
            return
        new_list = [item]
        self._created[list_path] = new_list
        self.add(list_path, new_list)

    def put(self, map_path: str, exists: bool, key: str, value: Any) -> None:
        """Set ``key`` in the map at ``map_path``, creating the map if it is absent."""
        created = self._created.get(map_path)
        if created is not None:
            created[key] = value
            return
        if exists:
            self.add(map_path + "/" + escape(key), value)
            return
        new_map = {key: value}
        self._created[map_path] = new_map
        self.add(map_path, new_map)
