"""The node names kube-scheduler offers a pod, decoded only when a reply needs all of them.

With ``nodeCacheCapable: true`` every filter request carries every feasible node
name (5,000 on a big cluster). Most replies name one node, so turning the whole
JSON array into Python strings first would be most of a request's cost. A
:class:`Candidates` keeps the array's bytes and answers "is node X offered?"
by searching them; the list is decoded the first time someone iterates it.

The byte search is exact for node names: Kubernetes names never contain a
quote or a backslash, so ``"<name>"`` standing between ``[``/``,`` and
``,``/``]`` (whitespace allowed) is one whole element of the (already
syntax-checked) array. Names that could need JSON escaping fall back to the
decoded list.

That the array holds only strings is checked by ``len()`` without decoding it
(:func:`_plain_count`); the scheduler reads it before any decision that changes
state, so a bad list is refused first rather than when a reply walks it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator

import msgspec

_names_decoder = msgspec.json.Decoder(list[str])
_WHITESPACE = b" \t\r\n"
_BEFORE = b"[,"
_AFTER = b",]"
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[],{}:')))


class Candidates(Collection[str]):
    """A set-like view of the offered node names; iteration keeps the scheduler's order."""

    __slots__ = ("_raw", "_list", "_set", "_len")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._raw: bytes | None = None
        self._list: list[str] | None = list(names)
        self._set: frozenset[str] | None = None
        self._len: int | None = None

    @classmethod
    def from_json(cls, raw: bytes) -> Candidates:
        """From the JSON array of names as it came on the wire (``null`` = none offered).

        The bytes must be syntactically valid JSON (msgspec checks that while
        keeping them raw). That every element is a string is checked by ``len()``
        (without decoding, :func:`_plain_count`) or when the names are decoded:
        msgspec.ValidationError then. A caller that is about to change state reads
        ``len()`` first, so a bad list is refused before anything is decided; the
        answers that need only "is X offered?" never pay for the check.
        """
        out = cls()
        stripped = raw.strip()
        if stripped != b"null":
            out._raw = stripped
            out._list = None
        return out

    def names(self) -> list[str]:
        """Every offered name, in order. Raises msgspec.ValidationError for a non-string list."""
        if self._list is None:
            assert self._raw is not None
            self._list = _names_decoder.decode(self._raw)
        return self._list

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if self._list is None and self._raw is not None and _plain(name):
            return _find(self._raw, name)
        if self._set is None:
            self._set = frozenset(self.names())
        return name in self._set

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        if self._len is None:
            count = _plain_count(self._raw) if self._list is None and self._raw else None
            self._len = count if count is not None else len(self.names())
        return self._len

    def __repr__(self) -> str:
        if self._list is None:
            return f"Candidates(<{len(self._raw or b'')} bytes of JSON>)"
        return f"Candidates({self._list!r})"


def _plain(name: str) -> bool:
    """Does the name appear verbatim inside its JSON string (nothing to escape)?"""
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name


def _plain_count(raw: bytes) -> int | None:
    """How many names a JSON array of ASCII strings without escapes holds; None for anything else.

    Keeping only quotes, brackets, braces, commas and colons leaves exactly
    ``["","",...,""]`` for such an array: a number, literal, object or nested
    array as an element adds or misses a comma or bracket, and a name holding
    one of those characters adds it between its quotes. Costs about half of
    decoding the names (5,000 names: 40 us against 85).
    """
    if not raw.isascii() or b"\\" in raw:
        return None
    kept = raw.translate(None, _NOT_STRUCTURE)
    n = len(kept) // 3
    if n == 0:
        # No strings: only "[]" with blanks between qualifies ("[1]" also keeps just "[]").
        return 0 if kept == b"[]" and not raw[1:-1].strip() else None
    return n if kept == b"[" + b'"",' * (n - 1) + b'""]' else None


def _find(raw: bytes, name: str) -> bool:
    needle = b'"' + name.encode() + b'"'
    start = 0
    while True:
        i = raw.find(needle, start)
        if i < 0:
            return False
        before = i - 1
        while before >= 0 and raw[before] in _WHITESPACE:
            before -= 1
        after = i + len(needle)
        while after < len(raw) and raw[after] in _WHITESPACE:
            after += 1
        if before >= 0 and raw[before] in _BEFORE and after < len(raw) and raw[after] in _AFTER:
            return True
        start = i + 1
