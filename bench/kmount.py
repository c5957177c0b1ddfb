#!/usr/bin/env python3
"""File-backed kernel EROFS mounts for the benchmarks (Linux 6.12+, CONFIG_EROFS_FS_BACKED_BY_FILE).

mount(8) of util-linux 2.38 sets up a loop device for a regular-file source, so
`mount -t erofs -o ro IMAGE MNT` is a loop mount here. A file-backed mount is mount(2) with the
image file itself as the source: the kernel then reads the file through fs/erofs/fileio.c and
/proc/self/mountinfo shows the file, not /dev/loopN, as the source. This module does that and
checks it afterwards. The image must not be on tmpfs: the kernel cannot back an EROFS mount by a
tmpfs file (ENOTBLK); ext4, xfs, btrfs can.

    python3 bench/kmount.py IMAGE MNT        (as root; unmount with umount MNT)

From Python: `import kmount; kmount.mount_file(image, mnt)`.
"""

import ctypes
import errno
import os
import sys

MS_RDONLY = 1


def _unescape(field):
    """mountinfo's octal escapes (\\040 for a space and so on) undone."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i:i + 1] == b"\\" and len(field) >= i + 4 and field[i + 1:i + 4].isdigit():
            out.append(int(field[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def source_of(mnt):
    """(source, fstype) of the last mount on `mnt` in /proc/self/mountinfo, or None."""
    want = os.path.realpath(mnt).encode()
    found = None
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            fields = line.rstrip(b"\n").split(b" ")
            if b"-" not in fields:
                continue
            sep = fields.index(b"-")
            if len(fields) > 4 and len(fields) > sep + 2 and _unescape(fields[4]) == want:
                found = (os.fsdecode(_unescape(fields[sep + 2])), os.fsdecode(fields[sep + 1]))
    return found


def mount_file(image, mnt):
    """mount(2) of the image file read-only as erofs on `mnt`; raises OSError naming the image and
    errno, or RuntimeError (after unmounting) if mountinfo's source is not the file."""
    image = os.path.realpath(image)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if libc.mount(os.fsencode(image), os.fsencode(mnt), b"erofs", MS_RDONLY, None) != 0:
        e = ctypes.get_errno()
        hint = (" (the image's file system cannot back it, as tmpfs cannot (no read_folio), or the kernel"
                " has no file-backed EROFS: Linux 6.12+ with CONFIG_EROFS_FS_BACKED_BY_FILE)") \
            if e == errno.ENOTBLK else ""
        raise OSError(e, f"mount(2) of {image} on {mnt} (erofs, read-only, file-backed): "
                         f"{os.strerror(e)} (errno {errno.errorcode.get(e, e)}){hint}")
    got = source_of(mnt)
    if got != (image, "erofs"):
        libc.umount2(os.fsencode(mnt), 0)
        raise RuntimeError(f"{mnt}: mounted from {got}, not file-backed from {image}")


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} IMAGE MNT", file=sys.stderr)
        return 2
    try:
        mount_file(argv[1], argv[2])
    except (OSError, RuntimeError) as e:
        print(f"kmount: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
