"""Files replaced whole (`modeling.common.file_writes`): a text or an array is the file, or the earlier file stays, and
no temporary is left behind."""

import os

import numpy as np
import pytest

from modeling.common import file_writes
from modeling.common.file_writes import replace_array, replace_text


def test_a_text_replaces_the_file_a_link_names_keeping_its_permissions(tmp_path):
    (tmp_path / "target.txt").write_text("old")
    (tmp_path / "target.txt").chmod(0o600)
    (tmp_path / "link.txt").symlink_to("target.txt")
    assert replace_text(tmp_path / "link.txt", "new ☃") == tmp_path / "target.txt"
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "target.txt").read_text(encoding="utf-8") == "new ☃"
    assert (tmp_path / "target.txt").stat().st_mode & 0o777 == 0o600
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link.txt", "target.txt"]


def test_an_array_is_saved_as_the_npy_file_named(tmp_path):
    array = np.arange(10, dtype=np.int32)
    assert replace_array(tmp_path / "indices.npy", array) == tmp_path / "indices.npy"
    np.testing.assert_array_equal(np.load(tmp_path / "indices.npy"), array)
    assert [path.name for path in tmp_path.iterdir()] == ["indices.npy"]


@pytest.mark.parametrize("write", [lambda path: replace_text(path, "new"), lambda path: replace_array(path, [1])],
                         ids=["text", "array"])
def test_a_write_stopped_midway_leaves_the_earlier_file_and_no_temporary(tmp_path, monkeypatch, write):
    (tmp_path / "kept").write_text("earlier")

    def full_disk(source, destination):
        assert os.path.basename(source).startswith(f".kept.{os.getpid()}.writing")  # `writing_pattern`'s name
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_writes.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write(tmp_path / "kept")
    assert (tmp_path / "kept").read_text() == "earlier"
    assert [path.name for path in tmp_path.iterdir()] == ["kept"]
