//! Random source trees for property tests: a proptest [`Strategy`] producing a [`TreeDesc`]
//! (plain data, so proptest can print and shrink it) and [`materialize`] creating it on disk.
//!
//! Trees are small (at most 60 entries, files up to 64 KiB) so each case is fast. Names are raw
//! bytes (any byte but NUL and '/'), sizes cluster around block boundaries, and there are all file
//! types, hard links, 12-bit modes, 16/32-bit owners, mtimes with nanoseconds (negative and past
//! 2^32 included) and xattrs (some drawn from a small pool so that inodes share them).

use crate::fixture::{
    posix_acl, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_UNDEFINED_ID, ACL_USER, ACL_USER_OBJ,
};
use crate::sys::{self, lchown, lsetxattr, mknod, set_mtime};
use crate::Rng;
use proptest::collection::vec;
use proptest::prelude::*;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Attributes of one inode.
#[derive(Clone, Debug)]
pub struct Attrs {
    /// Permission bits (12 bits).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Extended attributes (name, value); `user.` names are turned into `trusted.` on inodes that
    /// cannot carry them (symlinks, devices, FIFOs, sockets).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What an entry is.
#[derive(Clone, Debug)]
pub enum Kind {
    /// Regular file of `size` bytes of PRNG data from `seed` (with zero runs when `seed` is even).
    File { size: usize, seed: u64 },
    /// Directory.
    Dir,
    /// Symbolic link with this target.
    Symlink(Vec<u8>),
    /// FIFO.
    Fifo,
    /// Socket (made with mknod).
    Socket,
    /// Character device (major, minor).
    Chr(u32, u32),
    /// Block device (major, minor).
    Blk(u32, u32),
    /// Another name for an earlier non-directory (index modulo their count).
    HardLink(usize),
}

/// One entry: in directory `parent` (index modulo the number of directories created so far,
/// 0 = root), named `name`.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Parent directory selector.
    pub parent: usize,
    /// Name bytes (no NUL, no '/'; "." and ".." are renamed).
    pub name: Vec<u8>,
    /// Type and content.
    pub kind: Kind,
    /// Attributes (ignored for hard links).
    pub attrs: Attrs,
}

/// A whole random tree.
#[derive(Clone, Debug)]
pub struct TreeDesc {
    /// Attributes of the root directory.
    pub root: Attrs,
    /// Entries in creation order.
    pub entries: Vec<Entry>,
}

fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => "[a-z0-9._-]{1,12}".prop_map(|s| s.into_bytes()),
        3 => vec(1u8..=255, 1..24),
        1 => vec(prop_oneof![Just(b'n'), 1u8..=255], 200..=255),
    ]
    .prop_map(|v| {
        v.into_iter()
            .map(|b| if b == b'/' { b'_' } else { b })
            .collect()
    })
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        1usize..=16,
        4090usize..=4100,
        8185usize..=8200,
        0usize..=65536,
    ]
}

fn mtime_strategy() -> impl Strategy<Value = (i64, i64)> {
    (
        prop_oneof![
            3 => 1_500_000_000i64..1_800_000_000,
            1 => -(1i64 << 33)..(1i64 << 34),
            1 => Just(1_650_000_000i64),
        ],
        prop_oneof![Just(0i64), 0i64..1_000_000_000],
    )
}

fn id_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), 0u32..70_000, 0u32..u32::MAX]
}

fn xattr_strategy() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let acl = posix_acl(&[
        (ACL_USER_OBJ, 7, ACL_UNDEFINED_ID),
        (ACL_USER, 5, 4242),
        (ACL_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
        (ACL_MASK, 5, ACL_UNDEFINED_ID),
        (ACL_OTHER, 1, ACL_UNDEFINED_ID),
    ]);
    prop_oneof![
        4 => (
            prop_oneof![Just("user."), Just("trusted."), Just("security.")],
            "[a-zA-Z0-9._-]{1,20}",
            prop_oneof![vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..5000)],
        )
            .prop_map(|(p, s, v)| (format!("{p}{s}").into_bytes(), v)),
        2 => prop_oneof![
            Just((b"user.pool".to_vec(), b"pooled value".to_vec())),
            Just((b"trusted.pool".to_vec(), vec![0u8; 300])),
            Just((b"security.selinux".to_vec(), b"system_u:object_r:usr_t:s0\0".to_vec())),
        ],
        1 => Just((b"system.posix_acl_access".to_vec(), acl)),
    ]
}

fn attrs_strategy() -> impl Strategy<Value = Attrs> {
    (
        0u32..=0o7777,
        id_strategy(),
        id_strategy(),
        mtime_strategy(),
        vec(xattr_strategy(), 0..4),
    )
        .prop_map(|(mode, uid, gid, mtime, xattrs)| Attrs {
            mode,
            uid,
            gid,
            mtime,
            xattrs,
        })
}

fn kind_strategy() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => (size_strategy(), any::<u64>()).prop_map(|(size, seed)| Kind::File { size, seed }),
        3 => Just(Kind::Dir),
        2 => prop_oneof![vec(1u8..=255, 1..300), vec(1u8..=255, 3900..=4095)].prop_map(Kind::Symlink),
        1 => Just(Kind::Fifo),
        1 => Just(Kind::Socket),
        1 => (0u32..4096, 0u32..(1 << 20)).prop_map(|(a, b)| Kind::Chr(a, b)),
        1 => (0u32..4096, 0u32..(1 << 20)).prop_map(|(a, b)| Kind::Blk(a, b)),
        2 => any::<usize>().prop_map(Kind::HardLink),
    ]
}

/// The strategy for random trees of at most 60 entries.
pub fn tree_strategy() -> impl Strategy<Value = TreeDesc> {
    (
        attrs_strategy(),
        vec(
            (
                any::<usize>(),
                name_strategy(),
                kind_strategy(),
                attrs_strategy(),
            ),
            0..60,
        ),
    )
        .prop_map(|(root, entries)| TreeDesc {
            root,
            entries: entries
                .into_iter()
                .map(|(parent, name, kind, attrs)| Entry {
                    parent,
                    name,
                    kind,
                    attrs,
                })
                .collect(),
        })
}

fn file_data(size: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed | 1);
    let mut data = rng.bytes(size);
    if seed & 1 == 0 {
        // Zero runs, some of them whole blocks, to tempt hole detection.
        let mut i = 0;
        while i < size {
            let run = (rng.below(6000) as usize).min(size - i);
            if rng.below(2) == 0 {
                data[i..i + run].fill(0);
            }
            i += run + 1;
        }
    }
    data
}

fn apply_attrs(path: &Path, a: &Attrs, is_symlink: bool, user_ok: bool) -> std::io::Result<()> {
    lchown(path, a.uid, a.gid)?;
    if !is_symlink {
        sys::chmod(path, a.mode)?;
    }
    for (name, value) in &a.xattrs {
        let mut name = name.clone();
        if name.starts_with(b"system.posix_acl") && is_symlink {
            continue;
        }
        if !user_ok && name.starts_with(b"user.") {
            name = [b"trusted.".as_slice(), &name[5..]].concat();
        }
        lsetxattr(path, &name, value)?;
    }
    Ok(())
}

/// Creates `desc` under `root` (which must exist and be empty). Duplicate names in a directory
/// are skipped; hard links without an earlier non-directory are skipped.
pub fn materialize(desc: &TreeDesc, root: &Path) -> std::io::Result<()> {
    let mut dirs: Vec<(PathBuf, Attrs)> = vec![(root.to_path_buf(), desc.root.clone())];
    let mut others: Vec<PathBuf> = Vec::new();
    for e in &desc.entries {
        let parent = dirs[e.parent % dirs.len()].0.clone();
        let name: &[u8] = match e.name.as_slice() {
            b"." => b"_dot",
            b".." => b"_dotdot",
            n => n,
        };
        let path = parent.join(OsStr::from_bytes(name));
        if fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        let a = &e.attrs;
        match &e.kind {
            Kind::Dir => {
                fs::create_dir(&path)?;
                dirs.push((path, a.clone()));
                continue;
            }
            Kind::HardLink(i) => {
                if !others.is_empty() {
                    fs::hard_link(&others[i % others.len()], &path)?;
                    others.push(path);
                }
                continue;
            }
            Kind::File { size, seed } => {
                File::create(&path)?.write_all(&file_data(*size, *seed))?;
                apply_attrs(&path, a, false, true)?;
            }
            Kind::Symlink(target) => {
                std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)?;
                apply_attrs(&path, a, true, false)?;
            }
            Kind::Fifo => {
                sys::mkfifo(&path, 0o600)?;
                apply_attrs(&path, a, false, false)?;
            }
            Kind::Socket => {
                mknod(&path, libc::S_IFSOCK | 0o600, 0)?;
                apply_attrs(&path, a, false, false)?;
            }
            Kind::Chr(ma, mi) => {
                mknod(&path, libc::S_IFCHR | 0o600, sys::makedev(*ma, *mi))?;
                apply_attrs(&path, a, false, false)?;
            }
            Kind::Blk(ma, mi) => {
                mknod(&path, libc::S_IFBLK | 0o600, sys::makedev(*ma, *mi))?;
                apply_attrs(&path, a, false, false)?;
            }
        }
        set_mtime(&path, a.mtime.0, a.mtime.1)?;
        others.push(path);
    }
    // Directory attributes last: adding entries changes a directory's mtime.
    for (path, a) in dirs.iter().rev() {
        apply_attrs(path, a, false, true)?;
        set_mtime(path, a.mtime.0, a.mtime.1)?;
    }
    Ok(())
}
