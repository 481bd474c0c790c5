"""Following the resources config: ConfigMap-style swaps, broken files, type-set diffs."""

from __future__ import annotations

import os
from pathlib import Path

from deviceplugin.manager import TypeDiff, diff_types
from fluence.config_watch import ConfigWatcher

TWO_TYPES = "resources:\n  - type: qdevice\n    name: a\n    with:\n      - type: qpu\n"
THREE_TYPES = TWO_TYPES + "        with:\n          - type: qubit\n            count: 4\n"


def polled_types(watcher: ConfigWatcher) -> frozenset[str] | None:
    """The types of the config a poll returned; None when it returned none."""
    config = watcher.poll()
    return None if config is None else frozenset(config.types())


def test_diff_types_reports_added_and_removed_sorted() -> None:
    assert diff_types({"a", "b"}, {"b", "d", "c"}) == TypeDiff(("c", "d"), ("a",))
    assert diff_types({"a"}, {"a"}).empty


def test_missing_file_means_no_types_and_is_picked_up_when_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    watcher = ConfigWatcher(path)
    assert polled_types(watcher) == frozenset()
    assert polled_types(watcher) is None
    path.write_text(TWO_TYPES)
    assert polled_types(watcher) == frozenset({"qdevice", "qpu"})
    assert polled_types(watcher) is None


def test_configmap_symlink_swap_is_seen(tmp_path: Path) -> None:
    # The layout kubelet gives a ConfigMap volume: file -> ..data/file, ..data -> ..<timestamp>.
    for name, text in (("..v1", TWO_TYPES), ("..v2", THREE_TYPES)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "resources.yaml").write_text(text)
    os.symlink("..v1", tmp_path / "..data")
    os.symlink("..data/resources.yaml", tmp_path / "resources.yaml")
    watcher = ConfigWatcher(tmp_path / "resources.yaml")
    assert polled_types(watcher) == frozenset({"qdevice", "qpu"})

    os.symlink("..v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert polled_types(watcher) == frozenset({"qdevice", "qpu", "qubit"})


def test_broken_config_keeps_the_current_types_and_reports_the_error(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    path.write_text(TWO_TYPES)
    watcher = ConfigWatcher(path)
    assert polled_types(watcher) == frozenset({"qdevice", "qpu"})
    path.write_text("backends:\n  - name: x\n")
    assert polled_types(watcher) is None
    assert watcher.types == frozenset({"qdevice", "qpu"})
    assert watcher.last_error and "resources" in watcher.last_error
    path.write_text(THREE_TYPES)
    assert polled_types(watcher) == frozenset({"qdevice", "qpu", "qubit"})
    assert watcher.last_error is None


def test_rewrite_with_the_same_types_is_not_a_change(tmp_path: Path) -> None:
    path = tmp_path / "resources.yaml"
    path.write_text(TWO_TYPES)
    watcher = ConfigWatcher(path)
    before = polled_types(watcher)
    path.write_text("# comment\n" + TWO_TYPES.replace("name: a", "name: b"))
    after = polled_types(watcher)
    assert before is not None and after is not None
    assert diff_types(before, after).empty
