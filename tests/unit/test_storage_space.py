"""The storage-full classifier (export_lib/storage/space.py): a spent quota (EDQUOT) reads as
a full volume too, wherever it sits in the exception chain; other errors pass unchanged. The
real ENOSPC on a size-limited tmpfs is tests/integration/ledger/test_storage_full.py (a tmpfs
with a quota needs a newer kernel than the test machines')."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from export_lib.errors import StorageFull
from export_lib.storage.space import guard_space, is_full, volume_of


def _quota() -> OSError:
    return OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))


def test_a_spent_quota_anywhere_in_the_chain_is_full():
    try:
        try:
            raise _quota()
        except OSError as exc:
            raise RuntimeError("the sink's writer thread failed") from exc
    except RuntimeError as exc:
        assert is_full(exc)
    assert not is_full(OSError(errno.EACCES, "Permission denied"))


def test_guard_space_names_the_volume_and_removes_the_partial_file(tmp_path: Path):
    partial = tmp_path / "staging.csv"
    partial.write_bytes(b"x" * 1000)
    with pytest.raises(StorageFull, match=rf"^storage full: the volume {volume_of(tmp_path)} "
                                          r"\(.* free\) ran out of space \(EDQUOT\) after 1000 "
                                          rf"bytes \(0\.0 MiB\) of {partial} were written"):
        with guard_space(partial, lambda: partial.stat().st_size, setting="X",
                         cleanup=lambda: partial.unlink()):
            raise _quota()
    assert not partial.exists()
    with pytest.raises(PermissionError):  # not a full volume: unchanged, file kept
        with guard_space(tmp_path / "other", lambda: 0, setting="X", cleanup=lambda: None):
            raise PermissionError(errno.EACCES, "Permission denied")
