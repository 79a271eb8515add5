"""A full volume under a render: one line that says which volume, how much, and the fix.

A render writes to the local artifact store's ``.staging/`` directory, or (GCS) to a spool
file in the temp directory once the file outgrows memory. When that volume is full (ENOSPC)
or the user's quota is spent (EDQUOT), :func:`guard_space` removes the partial file and
raises :class:`~export_lib.errors.StorageFull`: its message starts with
:data:`~export_lib.errors.STORAGE_FULL_PREFIX`, which the ledger keeps as the run's reason, so
``exportctl runs``/``explain`` and the company page can say the run waits on storage. The task
is retryable: once space is freed its retry renders the period again and publishes once.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from export_lib.errors import STORAGE_FULL_PREFIX, StorageFull

FULL = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT"}


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a full volume or a spent quota."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def volume_of(path: Path) -> Path:
    """The mount point holding ``path`` (the volume to free or grow)."""
    here = Path(os.path.abspath(path))
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return here


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def full_message(path: Path, written: int, *, code: str, setting: str,
                 what: str | None = None) -> str:
    volume = volume_of(path)
    try:
        usage = shutil.disk_usage(volume)
        size = f"{_mib(usage.total)}, {_mib(usage.free)} free"
    except OSError:
        size = "size unknown"
    return (f"{STORAGE_FULL_PREFIX}the volume {volume} ({size}) ran out of space ({code}) after "
            f"{written} bytes ({_mib(written)}) of {what or path} were written: the file needs more than "
            f"that free there; the partial file was removed and nothing was published. Fix: "
            f"free space on {volume} (or raise the quota), or point {setting} at a larger "
            "volume; the task's retry renders the period again")


@contextmanager
def guard_space(path: Path, written: Callable[[], int], *, setting: str,
                cleanup: Callable[[], None], what: str | None = None) -> Iterator[None]:
    """Turn a full volume under the block into :class:`StorageFull` naming ``path``'s volume
    and ``written()`` bytes of ``what`` (default ``path``), after ``cleanup()`` removed the
    partial file. Other errors pass unchanged."""
    try:
        yield
    except BaseException as exc:
        if not is_full(exc):
            raise
        try:
            size = written()
        except OSError:
            size = 0
        cleanup()
        code = next(FULL[e.errno] for e in _chain(exc)
                    if isinstance(e, OSError) and e.errno in FULL)
        raise StorageFull(full_message(path, size, code=code, setting=setting, what=what),
                          path=str(path), written=size) from exc


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


__all__ = ["FULL", "full_message", "guard_space", "is_full", "volume_of"]
