"""The exceptions sealfs raises besides plain ``OSError``\\ s (see ``help(sealfs)``)."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "SealfsError",
    "VerificationError",
    "CorruptedImageError",
    "OpenRefusedError",
    "DigestMismatchError",
    "SignatureError",
    "BuildError",
]


class SealfsError(Exception):
    """Base class of the exceptions sealfs defines."""


class VerificationError(SealfsError, OSError):
    """A block of the image did not match its hash: the image was damaged or tampered with.

    An ``OSError`` with ``errno.EIO``, as the kernel gives for a block that fails fs-verity. Only
    the read that touched the block fails; other files stay readable. ``str()`` names the block
    (its byte offset in the image) and ``filename`` the file being read.
    """


class CorruptedImageError(SealfsError, OSError):
    """The image's bytes are inconsistent (``errno.EUCLEAN``, the kernel's ``EFSCORRUPTED``), its
    seal is damaged, or the file is not an EROFS image at all."""


class OpenRefusedError(SealfsError):
    """``sealfs.open`` refused the image: it is not the one asked for, nobody vouched for it where
    that is required (a URL without ``digest`` or ``key``), or the options ask for what it cannot
    give (a digest for an unsealed image)."""


class DigestMismatchError(OpenRefusedError):
    """The image's digest is not the ``digest`` given.

    ``expected`` is the digest given, ``actual`` the digest the image's seal names.
    """

    def __init__(self, message: str, expected: Optional[str] = None, actual: Optional[str] = None):
        super().__init__(message)
        self.expected = expected
        self.actual = actual

    def __str__(self) -> str:
        return str(self.args[0])


class SignatureError(OpenRefusedError):
    """Keys were given, and no signature by one of them vouches for the image (or signing failed)."""


class BuildError(SealfsError):
    """``sealfs.build`` could not build the image from the source tree (an ``OSError`` is raised
    instead for a path it could not read or write)."""
