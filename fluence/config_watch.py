"""Follow the resources config file: the one watcher every binary uses.

A ConfigMap volume is updated by swapping a ``..data`` symlink, so the file's
path stays the same while the inode, mtime and content behind it change. The
watcher therefore compares a stamp of the resolved file and its content, never
the path alone.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from fluence import resources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Stamp:
    inode: int
    mtime_ns: int
    size: int
    digest: str


class ConfigWatcher:
    """Reads the config when its file changed; keeps the last good config when a new one is broken.

    A missing file is the empty config (nothing configured yet), so a ConfigMap
    created after the binary starts is picked up.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: _Stamp | None = None
        self._seen_once = False
        self.config: resources.ResourcesConfig = resources.ResourcesConfig()
        self.last_error: str | None = None
        self.errors = 0
        """How many changed files could not be used (for the config_reloads metric)."""

    @property
    def types(self) -> frozenset[str]:
        return frozenset(self.config.types())

    def poll(self) -> resources.ResourcesConfig | None:
        """The new config if the file changed (appeared, vanished, edited) and can be used."""
        stamp = self._read_stamp()
        if self._seen_once and stamp == self._stamp:
            return None
        first = not self._seen_once
        self._seen_once = True
        self._stamp = stamp
        if stamp is None:
            log.info(
                "resources config not found; advertising nothing until it appears",
                extra={"path": str(self.path)},
            )
            new = resources.ResourcesConfig()
        else:
            try:
                new = resources.load(self.path)
            except (resources.ResourcesConfigError, OSError, UnicodeDecodeError) as e:
                self.last_error = str(e)
                self.errors += 1
                log.error(
                    "resources config cannot be used; keeping the resources advertised now. "
                    "Fix the file (the fluence-resources ConfigMap) to apply changes",
                    extra={"path": str(self.path), "error": str(e)},
                )
                return None
        self.last_error = None
        if new == self.config and not first:
            return None
        self.config = new
        return new

    def _read_stamp(self) -> _Stamp | None:
        try:
            st = os.stat(self.path)  # follows the ConfigMap symlinks to the real file
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning(
                "cannot read resources config", extra={"path": str(self.path), "error": str(e)}
            )
            return self._stamp
        return _Stamp(st.st_ino, st.st_mtime_ns, st.st_size, hashlib.sha256(data).hexdigest())
