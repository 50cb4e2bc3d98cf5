"""fleet.control.dirlimits: when a run directory's file system is (nearly) full, judged
from statvfs figures (a real file system's, made to say what one says)."""

from __future__ import annotations

import os

from fleet.control import dirlimits


def _statvfs(monkeypatch, **figures):
    real = os.statvfs("/")
    fields = {k: getattr(real, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                             "f_ffree", "f_favail", "f_flag", "f_namemax")}
    fields.update(figures)
    fake = os.statvfs_result(tuple(fields[k] for k in fields))
    monkeypatch.setattr(dirlimits.os, "statvfs", lambda path: fake)


def test_a_file_system_that_counts_no_files_is_not_full_for_want_of_a_file(tmp_path, monkeypatch):
    # btrfs says f_files = f_favail = 0: it has no file limit, not none left.
    _statvfs(monkeypatch, f_frsize=4096, f_bavail=1 << 20, f_files=0, f_ffree=0, f_favail=0)
    assert dirlimits.full_disk(tmp_path) is None and dirlimits.nearly_full(tmp_path) is None
    _statvfs(monkeypatch, f_frsize=4096, f_bavail=1 << 20, f_files=1000, f_ffree=0, f_favail=0)
    assert "no file free" in dirlimits.full_disk(tmp_path)


def test_under_a_mebibyte_free_is_nearly_full_and_more_is_not(tmp_path, monkeypatch):
    _statvfs(monkeypatch, f_frsize=4096, f_bavail=4, f_files=1000, f_favail=900)
    assert dirlimits.full_disk(tmp_path) is None
    assert dirlimits.nearly_full(tmp_path).endswith("is full (16 KiB free)")
    _statvfs(monkeypatch, f_frsize=4096, f_bavail=256, f_files=1000, f_favail=900)
    assert dirlimits.nearly_full(tmp_path) is None
