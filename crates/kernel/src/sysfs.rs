//! What the kernel says about mounts and block devices: `/proc/self/mountinfo` and `/sys/dev/block`.

use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// The file system type (`erofs`, `fuse.sealfs`, ...).
    pub fstype: String,
    /// The mount source (a device node, or the image file of a file-backed mount).
    pub source: PathBuf,
    /// The device number the mount reports (`st_dev` of its files).
    pub dev: (u32, u32),
}

/// The mount visible at `mountpoint` (absolute), if any: the last one on that path.
pub fn mount_at(mountpoint: &Path) -> io::Result<Option<MountEntry>> {
    let info = std::fs::read("/proc/self/mountinfo")?;
    Ok(parse_mountinfo(&info)
        .into_iter()
        .rfind(|m| m.mountpoint == mountpoint))
}

/// Every mount in a `mountinfo` text (lines it cannot read are skipped).
pub fn parse_mountinfo(text: &[u8]) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        if fields.len() < 5 || fields.len() <= sep + 2 {
            continue;
        }
        let dev = std::str::from_utf8(fields[2]).ok().and_then(|d| {
            let (a, b) = d.split_once(':')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        });
        let Some(dev) = dev else { continue };
        out.push(MountEntry {
            mountpoint: PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(fields[4]))),
            fstype: String::from_utf8_lossy(fields[sep + 1]).into_owned(),
            source: PathBuf::from(std::ffi::OsString::from_vec(unescape_mountinfo(
                fields[sep + 2],
            ))),
            dev,
        });
    }
    out
}

/// Undoes mountinfo's octal escapes (`\040` for a space and so on).
pub fn unescape_mountinfo(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 3 < s.len() && s[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (s[i + 1] - b'0') as u32 * 64
                + (s[i + 2] - b'0') as u32 * 8
                + (s[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// `/sys/dev/block/MAJ:MIN`, the kernel's directory for a block device.
pub fn block_dir(dev: (u32, u32)) -> PathBuf {
    PathBuf::from(format!("/sys/dev/block/{}:{}", dev.0, dev.1))
}

/// The kernel's name of a block device (`dm-0`, `loop3`), if it exists.
pub fn block_name(dev: (u32, u32)) -> Option<String> {
    let uevent = std::fs::read_to_string(block_dir(dev).join("uevent")).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

/// One line of a sysfs attribute, trimmed.
pub fn attr(dir: &Path, name: &str) -> Option<String> {
    let s = std::fs::read(dir.join(name)).ok()?;
    let s = s.strip_suffix(b"\n").unwrap_or(&s);
    Some(String::from_utf8_lossy(s).into_owned())
}

/// The file behind a loop device (`/sys/block/loopN/loop/backing_file`), if it is bound to one.
pub fn loop_backing_file(name: &str) -> Option<PathBuf> {
    let s = std::fs::read(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    let s = s.strip_suffix(b"\n").unwrap_or(&s);
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(s)))
}

/// The device numbers of the block devices `dev` sits on (`/sys/dev/block/MAJ:MIN/slaves`).
pub fn slaves(dev: (u32, u32)) -> Vec<(String, (u32, u32))> {
    let Ok(dir) = std::fs::read_dir(block_dir(dev).join("slaves")) else {
        return Vec::new();
    };
    let mut out: Vec<_> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let d = attr(&e.path(), "dev")?;
            let (a, b) = d.split_once(':')?;
            Some((name, (a.parse().ok()?, b.parse().ok()?)))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(br"/a\040b\134c"), b"/a b\\c".to_vec());
        assert_eq!(unescape_mountinfo(br"/x\04"), br"/x\04".to_vec());
    }

    #[test]
    fn mountinfo_lines() {
        let text =
            b"36 35 253:0 / /mnt/a\\040b ro,relatime shared:1 - erofs /dev/dm-0 ro,user_xattr\n\
                     37 35 0:52 / /mnt/f ro - erofs /srv/img.erofs ro\nbroken line\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, Path::new("/mnt/a b"));
        assert_eq!(m[0].fstype, "erofs");
        assert_eq!(m[0].source, Path::new("/dev/dm-0"));
        assert_eq!(m[0].dev, (253, 0));
        assert_eq!(m[1].source, Path::new("/srv/img.erofs"));
        assert_eq!(m[1].dev, (0, 52));
    }
}
