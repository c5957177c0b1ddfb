//! Helpers shared by the reader's integration tests: guards for oracle tests, a deterministic PRNG,
//! thin libc wrappers, the fixture tree, image builders (`mkfs.erofs`, `sealfs build`), the walk of an
//! image through the reader and its comparison with a source tree.
#![allow(dead_code)]

pub mod craft;
pub mod fixture;
pub mod layouts;
pub mod walk;
pub mod zcraft;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `CI=true` is set: oracle tests then fail instead of skipping.
pub fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

/// Decides whether an oracle test may run: `Err(reason)` prints `SKIP: <reason>` and returns false,
/// except under `CI=true`, where it panics (CI must not pass by skipping).
pub fn oracle_guard(check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(reason) => {
            if ci() {
                panic!("oracle test cannot run and CI=true forbids skipping: {reason}");
            }
            println!("SKIP: {reason}");
            false
        }
    }
}

/// Whether `name` is an executable in `PATH`.
pub fn have_tool(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            let f = d.join(name);
            f.is_file()
        })
    })
}

/// `Ok` when `tool` is installed.
pub fn need_tool(tool: &str) -> Result<(), String> {
    if have_tool(tool) {
        Ok(())
    } else {
        Err(format!("{tool} not installed (Debian package erofs-utils)"))
    }
}

/// Whether the tests run as root (devices, owners and trusted.* xattrs need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// The `sealfs` binary built by `cargo build --release -p sealfs-cli`, if present.
pub fn sealfs_bin() -> Result<PathBuf, String> {
    let root = workspace_root();
    for profile in ["release", "debug"] {
        let p = root.join("target").join(profile).join("sealfs");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(format!(
        "no sealfs binary under {}/target (run `cargo build --release -p sealfs-cli` first)",
        root.display()
    ))
}

/// Runs a command, returning stdout or a message with its output.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `mkfs.erofs ARGS OUT SRC`.
pub fn mkfs(src: &Path, out: &Path, args: &[&str]) -> Result<(), String> {
    run(Command::new("mkfs.erofs")
        .args(args)
        .arg("--quiet")
        .arg(out)
        .arg(src))
    .map(drop)
}

/// `sealfs build ARGS SRC OUT`.
pub fn sealfs_build(bin: &Path, src: &Path, out: &Path, args: &[&str]) -> Result<(), String> {
    run(Command::new(bin).arg("build").args(args).arg(src).arg(out)).map(drop)
}

/// `fsck.erofs --extract=DIR IMAGE`.
pub fn fsck_extract(image: &Path, dir: &Path) -> Result<(), String> {
    run(Command::new("fsck.erofs")
        .arg(format!("--extract={}", dir.display()))
        .arg(image))
    .map(drop)
}

/// A small deterministic PRNG (xorshift64*), so every test input is reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `lchown`.
pub fn lchown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path.
    check(unsafe { libc::lchown(cpath(path).as_ptr(), uid, gid) })
}

/// `mknod` of a character or block device or a FIFO.
pub fn mknod(path: &Path, mode: u32, major: u32, minor: u32) -> io::Result<()> {
    let dev = libc::makedev(major, minor);
    // SAFETY: a valid NUL-terminated path.
    check(unsafe { libc::mknod(cpath(path).as_ptr(), mode as libc::mode_t, dev) })
}

/// Sets the mtime (and atime) of `path` without following a symlink.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) -> io::Result<()> {
    let ts = [
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            cpath(path).as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// Bytes as text for messages.
pub fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fails the test with every difference listed.
pub fn assert_no_diffs(what: &str, diffs: &[String]) {
    if !diffs.is_empty() {
        let shown: Vec<&str> = diffs.iter().take(40).map(|s| s.as_str()).collect();
        panic!(
            "{what}: {} differences:\n  {}",
            diffs.len(),
            shown.join("\n  ")
        );
    }
}
