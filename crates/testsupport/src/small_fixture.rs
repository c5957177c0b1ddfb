//! The small fixture tree: one source directory with every case the reader must get right, on any
//! filesystem and without root (root adds devices and owners).
//!
//! File sizes around block boundaries, a sparse file, directories of many entries spanning several
//! blocks (names of every length up to 255, bytes that sort before "."), deep nesting, symlinks (short,
//! long, dangling, absolute), hard links across directories, user.* and trusted.* xattrs (some shared
//! by many inodes, some large, many on one inode), odd permission bits and nanosecond mtimes. As root
//! also devices, a FIFO, a socket and owners beyond 16 bits.

use crate::sys::{lchown, lsetxattr, makedev, mknod, set_mtime};
use crate::{is_root, Rng};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// File sizes around block boundaries (4 KiB blocks) and a few larger ones.
pub const SIZES: &[u64] = &[
    0,
    1,
    100,
    2047,
    3000,
    4095,
    4096,
    4097,
    6000,
    8191,
    8192,
    8193,
    12289,
    65536,
    3 * 65536 + 17,
    (1 << 20) + 123,
];

/// Entries in `many/`.
pub const MANY: usize = 700;

struct Fx {
    root: PathBuf,
    rng: Rng,
    k: i64,
    dirs: Vec<PathBuf>,
    xattrs: bool,
}

impl Fx {
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn pb(&self, rel: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(rel))
    }

    fn tick(&mut self, path: &Path) {
        self.k += 1;
        let sec = 1_600_000_000 + self.k * 3_601;
        let nsec = (self.k * 7_919_113) % 1_000_000_000;
        set_mtime(path, sec, nsec).unwrap();
    }

    fn file(&mut self, rel: &str, content: &[u8]) -> PathBuf {
        let p = self.p(rel);
        fs::write(&p, content).unwrap();
        self.tick(&p);
        p
    }

    fn dir(&mut self, rel: &str) -> PathBuf {
        let p = self.p(rel);
        fs::create_dir_all(&p).unwrap();
        self.dirs.push(p.clone());
        p
    }

    fn xattr(&self, path: &Path, name: &str, value: &[u8]) {
        if !self.xattrs {
            return;
        }
        if name.starts_with("trusted.") && !is_root() {
            return;
        }
        match lsetxattr(path, name.as_bytes(), value) {
            Ok(()) => {}
            // trusted.* needs CAP_SYS_ADMIN, which a root in a container may lack: the source scan
            // then simply has no such xattr.
            Err(e) if name.starts_with("trusted.") => println!("note: setxattr {name}: {e}"),
            Err(e) => panic!("setxattr {name}: {e}"),
        }
    }
}

/// Whether the filesystem under `dir` takes user.* xattrs.
pub fn xattrs_supported(dir: &Path) -> bool {
    let probe = dir.join(".xattr-probe");
    fs::write(&probe, b"").unwrap();
    let ok = lsetxattr(&probe, b"user.probe", b"1").is_ok();
    fs::remove_file(&probe).unwrap();
    ok
}

/// Creates the fixture under `root` (which must exist and be empty). `seed` varies the content.
/// `name255` adds a file with a 255-byte name: erofs-utils 1.5 truncates such names to 254 bytes
/// (the kernel then shows two entries of the same name), so trees for it leave that one out.
pub fn build(root: &Path, seed: u64, name255: bool) {
    let mut fx = Fx {
        root: root.to_path_buf(),
        rng: Rng::scrambled(seed),
        k: 0,
        dirs: vec![root.to_path_buf()],
        xattrs: xattrs_supported(root),
    };

    // Sizes around block boundaries.
    fx.dir("sizes");
    for &n in SIZES {
        let data = fx.rng.bytes(n as usize);
        fx.file(&format!("sizes/f{n}"), &data);
    }
    // Compressible and all-zero content.
    fx.file("sizes/zeros", &vec![0u8; 20000]);
    fx.file("sizes/text", &b"hello sealfs\n".repeat(1000));

    // A sparse file: data, a hole of several chunks, data, and a trailing hole.
    {
        let p = fx.p("sizes/sparse");
        let f = File::create(&p).unwrap();
        f.write_all_at(&fx.rng.bytes(5000), 0).unwrap();
        f.write_all_at(&fx.rng.bytes(4096), 1 << 20).unwrap();
        f.write_all_at(b"end", (2 << 20) + 77).unwrap();
        f.set_len(3 << 20).unwrap();
        drop(f);
        fx.tick(&p);
    }

    // Many entries: several directory blocks, names of every length and odd bytes.
    fx.dir("many");
    for i in 0..MANY {
        let len = 1 + (i * 37) % 120;
        let mut name: Vec<u8> = format!("{i:04}-").into_bytes();
        while name.len() < len {
            name.push(b'a' + (fx.rng.below(26) as u8));
        }
        let p = fx.root.join("many").join(OsStr::from_bytes(&name));
        fs::write(&p, &name).unwrap();
        fx.tick(&p);
    }
    for name in [
        &b"-dash"[..],
        b"#hash",
        b"+plus",
        b"\xc3\xa9t\xc3\xa9",
        b"\xff\xfe",
        b"a",
        b"Z",
        b"~tilde",
    ] {
        let p = fx.root.join("many").join(OsStr::from_bytes(name));
        fs::write(&p, name).unwrap();
        fx.tick(&p);
    }
    let longest: &[usize] = if name255 {
        &[200, 254, 255]
    } else {
        &[200, 254]
    };
    for &len in longest {
        let name = vec![b'L'; len];
        let p = fx.pb(&[b"many/", &name[..]].concat());
        fs::write(&p, b"long name").unwrap();
        fx.tick(&p);
    }

    // Nesting and an empty directory.
    fx.dir("a/b/c/d/e");
    fx.file("a/b/c/d/e/deep.txt", b"deep\n");
    fx.file("a/b/mid.txt", b"mid\n");
    fx.dir("empty");

    // Symlinks.
    fx.dir("links");
    for (name, target) in [
        ("rel", "../a/b/mid.txt".to_string()),
        ("abs", "/a/b/c".to_string()),
        ("dangling", "does/not/exist".to_string()),
        ("dir", "../a".to_string()),
        ("self", "self".to_string()),
        ("long300", "x/".repeat(150)),
        ("long4000", "y".repeat(4000)),
    ] {
        let p = fx.p(&format!("links/{name}"));
        symlink(&target, &p).unwrap();
        fx.tick(&p);
    }

    // Hard links across directories.
    let hl = fx.file("a/hardlinked", b"shared by three names\n");
    fs::hard_link(&hl, fx.p("links/hard1")).unwrap();
    fs::hard_link(&hl, fx.p("sizes/hard2")).unwrap();

    // Permissions.
    fx.dir("perm");
    for (name, mode) in [
        ("suid", 0o4755),
        ("sgid", 0o2711),
        ("none", 0o000),
        ("ro", 0o444),
    ] {
        let p = fx.file(&format!("perm/{name}"), name.as_bytes());
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    let sticky = fx.dir("perm/sticky");
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();

    // Xattrs: per-file, shared by many inodes, large, many on one inode, on directories.
    fx.dir("xattr");
    for i in 0..6 {
        let p = fx.file(&format!("xattr/s{i}"), b"x");
        fx.xattr(&p, "user.shared", b"the same value everywhere");
        fx.xattr(&p, "trusted.shared", b"trusted and shared");
        fx.xattr(&p, &format!("user.own{i}"), format!("value {i}").as_bytes());
    }
    let big = fx.file("xattr/big", b"big");
    fx.xattr(&big, "user.big", &vec![b'v'; 1500]);
    fx.xattr(&big, "user.empty", b"");
    let many = fx.file("xattr/many", b"many");
    for i in 0..40 {
        fx.xattr(
            &many,
            &format!("user.k{i:02}"),
            &vec![b'0' + (i % 10) as u8; i],
        );
    }
    let xd = fx.p("xattr");
    fx.xattr(&xd, "user.on_dir", b"dir value");
    let lnk = fx.p("links/rel");
    fx.xattr(&lnk, "trusted.on_symlink", b"link value");
    fx.xattr(root, "user.root", b"root value");

    // Special files and owners (root only).
    if is_root() {
        fx.dir("dev");
        for (name, mode, major, minor) in [
            ("null", libc::S_IFCHR | 0o666, 1, 3),
            ("sda1", libc::S_IFBLK | 0o660, 8, 1),
            ("bigminor", libc::S_IFCHR | 0o600, 259, 0x12345),
            ("whiteout", libc::S_IFCHR, 0, 0),
            ("fifo", libc::S_IFIFO | 0o644, 0, 0),
        ] {
            let p = fx.p(&format!("dev/{name}"));
            // Devices need CAP_MKNOD, which a root in a container may lack.
            match mknod(&p, mode, makedev(major, minor)) {
                Ok(()) => fx.tick(&p),
                Err(e) => println!("note: mknod {name}: {e}"),
            }
        }
        let sock = fx.p("dev/socket");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(listener);
        fx.tick(&sock);

        fx.dir("owners");
        for (name, uid, gid) in [
            ("u1000", 1000, 1000),
            ("u65535", 65535, 65534),
            ("u70000", 70000, 80000),
        ] {
            let p = fx.file(&format!("owners/{name}"), name.as_bytes());
            lchown(&p, uid, gid).unwrap();
        }
        let l = fx.p("owners/link");
        symlink("u1000", &l).unwrap();
        lchown(&l, 4242, 4343).unwrap();
        fx.tick(&l);
        let d = fx.dir("owners/dir");
        lchown(&d, 1234, 5678).unwrap();
    }

    // Directory mtimes last, deepest first, so that creating children does not change them.
    let mut dirs = std::mem::take(&mut fx.dirs);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.dedup();
    for d in dirs {
        let mut cur = d.clone();
        // create_dir_all made parents too: give each a time.
        loop {
            fx.tick(&cur);
            if cur == root || !cur.pop() || !cur.starts_with(root) {
                break;
            }
        }
    }
    let _ = std::io::stdout().flush();
}
