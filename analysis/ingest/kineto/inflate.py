"""The decompressed bytes of a Kineto file, read block by block (gzip inflated here, so that the bytes
before damage are kept), and what the stream found besides the events (`Doc`)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ...errors import ProfileError
from ...files import open_regular


@dataclass
class Doc:
    """What the stream found besides the events."""

    meta: dict[str, Any] = field(default_factory=dict)
    top_level_list: bool = False
    head: bytes = b""  # what was read before falling back to the whole-document decode
    damage: str | None = None  # why reading stopped early (a cut gzip, truncated JSON), events kept
    not_utf8: int = 0          # byte sequences that were not UTF-8, read as U+FFFD


class Source:
    """Decompressed bytes of a trace, read block by block; maps I/O and gzip errors to ProfileError."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: BinaryIO = open_regular(path)
        except OSError as e:
            raise ProfileError(path, f"cannot read ({e.strerror})") from None
        magic = self._raw.read(2)
        self._raw.seek(0)
        self.gz = magic == b"\x1f\x8b"
        self._f: BinaryIO = self._raw
        # gzip is inflated here, not by GzipFile, so that the bytes inflated before damage (a file cut
        # short, a corrupt block) are returned: the damage then reads as the end of the stream, and
        # `damage` holds the error for the caller
        self._z = zlib.decompressobj(31) if self.gz else None
        self.damage: ProfileError | None = None
        self.eof = False

    def read(self, n: int) -> bytes:
        if self.eof:
            return b""
        if self._z is not None:
            return self._inflate(n)
        try:
            data = self._f.read(n)
        except OSError as e:
            raise ProfileError(self.path, f"cannot read ({e})") from None
        if not data:
            self.eof = True
        return data

    def _inflate(self, n: int) -> bytes:
        """Up to about n inflated bytes (members of a multi-member gzip in turn); b"" at the end."""
        z = self._z
        assert z is not None
        out: list[bytes] = []
        have = 0
        while have < n:
            try:
                comp = z.unconsumed_tail or self._raw.read(64 << 10)
                if not comp:
                    if not z.eof:
                        self.eof = True
                        self.damage = ProfileError(self.path, "corrupt gzip (Compressed file ended before "
                                                     "the end-of-stream marker was reached)")
                    break
                data = z.decompress(comp, n - have)
            except OSError as e:
                self.eof = True
                self.damage = ProfileError(self.path, f"cannot read ({e})")
                break
            except zlib.error as e:
                self.eof = True
                self.damage = ProfileError(self.path, f"corrupt gzip ({e})")
                break
            out.append(data)
            have += len(data)
            if z.eof:  # end of a member: another member, or the end (zero padding counts as the end)
                if z.unused_data:
                    self._raw.seek(-len(z.unused_data), 1)
                nxt = self._raw.read(1)
                if nxt in (b"", b"\0"):
                    self.eof = True
                    break
                self._raw.seek(-1, 1)
                self._z = z = zlib.decompressobj(31)
        if not have:
            self.eof = True
        return b"".join(out)

    def read_all(self) -> bytes:
        parts = []
        while chunk := self.read(64 << 20):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()
