"""The frames that cross the pipes between the ingest processes: a kind byte, a pickle (protocol 5) and
its arrays as raw out-of-band buffers, so neither side copies column data into or out of a pickle.
A frame cut short (the sender died) reads as end of file."""

from __future__ import annotations

import contextlib
import copyreg
import io
import pickle
import select
import struct
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import numpy as np

_HDR = struct.Struct("<cQI")  # kind, length of the pickle, number of out-of-band buffers after it
_LEN = struct.Struct("<Q")


def send(f: BinaryIO, kind: bytes, obj: Any) -> None:
    """One frame: the pickle, then each contiguous array's bytes as they are in memory (pickle protocol 5
    out-of-band buffers), so neither side copies column data into or out of a pickle."""
    bufs: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    p = pickle.Pickler(out, protocol=5, buffer_callback=bufs.append)
    p.dispatch_table = _DISPATCH
    p.dump(obj)
    data = out.getbuffer()
    _write_all(f, _HDR.pack(kind, len(data), len(bufs)))
    _write_all(f, data)
    for b in bufs:
        raw = b.raw()
        _write_all(f, _LEN.pack(raw.nbytes))
        _write_all(f, raw)
    f.flush()


def _masked(data: np.ndarray, mask: np.ndarray) -> np.ma.MaskedArray:
    import numpy as np

    return np.ma.MaskedArray(data, mask=mask)


def _reduce_masked(a: np.ma.MaskedArray) -> tuple[Any, tuple[Any, Any]]:
    """A masked array as its data and mask arrays: numpy's own reduce copies both into the pickle."""
    import numpy as np

    return _masked, (np.ascontiguousarray(a.data), np.ascontiguousarray(np.ma.getmaskarray(a)))


class _Dispatch(dict):
    """The pickler's dispatch table: copyreg's, plus masked arrays (without importing numpy here)."""

    def __missing__(self, cls: type) -> Any:
        if cls.__name__ == "MaskedArray" and cls.__module__.startswith("numpy"):
            return _reduce_masked
        return copyreg.dispatch_table[cls]


_DISPATCH = _Dispatch()


def _write_all(f: BinaryIO, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:  # a raw pipe may take part of a write
        n = f.write(view)
        view = view[n:]


def recv(f: BinaryIO) -> tuple[bytes, Any] | None:
    """One frame, or None at end of file (also mid-frame: the sender died). Arrays sent out of band come
    back as views of the buffers they were read into."""
    hdr = _read_exact(f, _HDR.size)
    if hdr is None:
        return None
    kind, n, nbufs = _HDR.unpack(hdr)
    data = _read_exact(f, n)
    bufs: list[bytearray] = []
    for _ in range(nbufs if data is not None else 0):
        size = _read_exact(f, _LEN.size)
        buf = None if size is None else _read_exact(f, _LEN.unpack(size)[0])
        if buf is None:
            return None
        bufs.append(buf)
    return None if data is None else (kind, pickle.loads(data, buffers=bufs))


def readable(f: BinaryIO) -> bool:
    """Whether a read of `f` would not block now (a frame, or its end, is there)."""
    return bool(select.select([f], [], [], 0)[0])


def widen_pipe(fd: int) -> None:
    """Ask for a 1 MiB pipe buffer (Linux; the default is 64 KiB): a rank's columns then cross in far
    fewer reads and writes, each of which may switch processes. Not possible elsewhere: nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]


def _read_exact(f: BinaryIO, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return buf
