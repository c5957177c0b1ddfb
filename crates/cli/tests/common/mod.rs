//! Shared support for the `sealfs` CLI integration tests.
//!
//! The tests judge images with programs nobody on this project wrote (see `shared/design.md`,
//! "What proves correctness"): the running kernel's EROFS driver (loop mount), `fsck.erofs` and
//! `dump.erofs` from erofs-utils. This module holds the plumbing:
//!
//! - [`oracle_guard`]: a test that needs root, mounting or the tools prints `SKIP: <reason>` and
//!   returns early, except with `CI=true` in the environment, where it panics (CI must not pass by
//!   skipping).
//! - [`Tmpfs`]: a tmpfs scratch directory (ext4 cannot hold 64 KiB xattr values), unmounted on drop.
//! - [`ErofsMount`]: `mount -t erofs -o loop,ro`, unmounted on drop.
//! - [`compare::compare_trees`], [`compare::check_xattr_filter`]: the kernel's view against the
//!   source, every difference listed.
//! - [`fsck`], [`dump_ls`], [`superblock`]: erofs-utils and raw superblock checks.
//! - [`fixture::make_full_fixture`] and [`randtree`]: source trees holding every case.
#![allow(dead_code)]

pub mod compare;
pub mod fixture;
pub mod randtree;
pub mod sys;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// Path of the `sealfs` binary under test.
pub fn sealfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sealfs")
}

// ---------------------------------------------------------------------------------------------
// Guard
// ---------------------------------------------------------------------------------------------

/// Decides whether an oracle test may run. `check` is `Err(reason)` when the machine lacks what the
/// test needs. Then the test is skipped (prints `SKIP: <reason>`, returns false), except under
/// `CI=true`, where a skip would hide a failure: it panics instead.
pub fn oracle_guard(check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(reason) => {
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!("oracle test cannot run and CI=true forbids skipping: {reason}");
            }
            println!("SKIP: {reason}");
            false
        }
    }
}

/// Whether `name` is an executable in `PATH`.
pub fn have_tool(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Root, and the ability to mount a tmpfs (needed for every fixture: devices, owners, big xattrs).
pub fn root_env() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            if sys::geteuid() != 0 {
                return Err("not running as root (needed for mknod, chown, tmpfs)".into());
            }
            Tmpfs::new("probe")
                .map(drop)
                .map_err(|e| format!("cannot mount tmpfs: {e}"))
        })
        .clone()
}

/// Everything [`root_env`] checks, plus the kernel's EROFS driver, loop devices and erofs-utils.
pub fn mount_env() -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            root_env()?;
            let has_erofs = || {
                fs::read_to_string("/proc/filesystems")
                    .map(|s| {
                        s.lines()
                            .any(|l| l.split_whitespace().last() == Some("erofs"))
                    })
                    .unwrap_or(false)
            };
            if !has_erofs() {
                let _ = Command::new("modprobe")
                    .arg("erofs")
                    .stderr(Stdio::null())
                    .status();
                if !has_erofs() {
                    return Err("the kernel has no erofs filesystem (/proc/filesystems)".into());
                }
            }
            if !Path::new("/dev/loop-control").exists() {
                return Err("no /dev/loop-control: loop devices unavailable".into());
            }
            for tool in ["mount", "umount", "fsck.erofs", "dump.erofs"] {
                if !have_tool(tool) {
                    return Err(format!(
                        "{tool} not found in PATH (package erofs-utils / util-linux)"
                    ));
                }
            }
            Ok(())
        })
        .clone()
}

// ---------------------------------------------------------------------------------------------
// Scratch space and mounts
// ---------------------------------------------------------------------------------------------

fn fresh_dir(prefix: &str) -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(std::env::temp_dir())?
        .keep())
}

/// Unmounts `path`, retrying a few times (a just-closed file may keep it busy for a moment), and
/// falls back to a lazy unmount. Returns the last error text if even that failed.
fn unmount(path: &Path) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..6 {
        let out = Command::new("umount").arg(path).output();
        match out {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => last = String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100 * (attempt + 1)));
    }
    match Command::new("umount").arg("-l").arg(path).output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(last),
    }
}

/// A tmpfs mounted on a fresh directory under the temp dir; unmounted and removed on drop.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a new tmpfs (size limit 16 GiB; pages are allocated only when written).
    pub fn new(tag: &str) -> Result<Tmpfs, String> {
        let path = fresh_dir(&format!("sealfs-tmpfs-{tag}-")).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16g,mode=0755", "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            let _ = fs::remove_dir(&path);
            return Err(format!(
                "mount -t tmpfs {}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { path })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Err(e) = unmount(&self.path) {
            eprintln!(
                "warning: could not unmount tmpfs {}: {e}",
                self.path.display()
            );
            return;
        }
        let _ = fs::remove_dir(&self.path);
    }
}

/// An EROFS image mounted read-only through a loop device; unmounted on drop.
pub struct ErofsMount {
    path: PathBuf,
}

impl ErofsMount {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ErofsMount {
    fn drop(&mut self) {
        if let Err(e) = unmount(&self.path) {
            eprintln!("warning: could not unmount {}: {e}", self.path.display());
            return;
        }
        let _ = fs::remove_dir(&self.path);
    }
}

/// `mount -t erofs -o loop,ro IMAGE MNT` on a fresh mount point. The error carries mount's own
/// message (the kernel's reason is in the kernel log, which tests do not depend on).
pub fn mount_erofs(image: &Path) -> Result<ErofsMount, String> {
    let path = fresh_dir("sealfs-mnt-").map_err(|e| e.to_string())?;
    let out = Command::new("mount")
        .args(["-t", "erofs", "-o", "loop,ro"])
        .arg(image)
        .arg(&path)
        .output()
        .map_err(|e| format!("running mount: {e}"))?;
    if !out.status.success() {
        let _ = fs::remove_dir(&path);
        return Err(format!(
            "mount -t erofs -o loop,ro {} failed (exit {:?}): {}{}",
            image.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    Ok(ErofsMount { path })
}

// ---------------------------------------------------------------------------------------------
// Running the builder
// ---------------------------------------------------------------------------------------------

/// `sealfs build ARGS... SRC OUT`, with `SOURCE_DATE_EPOCH` removed from the environment so the
/// caller's environment cannot change the result (tests that want it set it explicitly).
pub fn build_cmd(src: &Path, out: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(sealfs_bin());
    cmd.arg("build").args(args).arg(src).arg(out);
    cmd.env_remove("SOURCE_DATE_EPOCH");
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs `cmd` and returns its output (panics only if it cannot be started).
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Runs a build that must succeed; panics with its stderr otherwise.
pub fn build_ok(src: &Path, out: &Path, args: &[&str]) -> Output {
    build_ok_cmd(&mut build_cmd(src, out, args))
}

/// Runs a build command that must succeed; panics with its stderr otherwise.
pub fn build_ok_cmd(cmd: &mut Command) -> Output {
    let t = std::time::Instant::now();
    let out = run(cmd);
    assert!(
        out.status.success(),
        "build failed ({:?}): {:?}\nstdout: {}\nstderr: {}",
        out.status,
        cmd,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("built in {:.2?}: {:?}", t.elapsed(), cmd);
    out
}

/// A human-readable rendering of a raw name or path.
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// Names in `dir` that look like the builder's temporary files (`.sealfs-*`).
pub fn temp_leftovers(dir: &Path) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| n.as_bytes().starts_with(b".sealfs-"))
            .map(|n| show(n.as_bytes()))
            .collect(),
        Err(_) => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// erofs-utils and the superblock
// ---------------------------------------------------------------------------------------------

/// `fsck.erofs IMAGE` must exit 0. Returns its output for logging.
pub fn fsck(image: &Path) -> Result<String, String> {
    let out = Command::new("fsck.erofs")
        .arg(image)
        .output()
        .map_err(|e| format!("running fsck.erofs: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "fsck.erofs {} failed ({:?}): {}",
            image.display(),
            out.status,
            text.trim()
        ))
    }
}

/// One line of `dump.erofs --ls`: (nid, dirent file type, name).
pub type DumpEntry = (u64, u8, Vec<u8>);

/// The directory listing of `dir` (an absolute path inside the image, e.g. `/` or `/sub`) as
/// printed by `dump.erofs --ls --path=DIR` (erofs-utils 1.5 prints the nid right-aligned, the
/// file type right-aligned, two spaces, then the raw name, one dirent per line).
/// "." and ".." are left out. Names must not contain a newline.
pub fn dump_ls(image: &Path, dir: &str) -> Result<Vec<DumpEntry>, String> {
    let out = Command::new("dump.erofs")
        .arg("--ls")
        .arg(format!("--path={dir}"))
        .arg(image)
        .output()
        .map_err(|e| format!("running dump.erofs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dump.erofs --ls --path={dir} failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let stdout = out.stdout;
    let mut lines = stdout.split(|&b| b == b'\n');
    // Skip the inode summary up to the table header.
    for line in lines.by_ref() {
        if line.windows(8).any(|w| w == b"FILENAME") {
            break;
        }
    }
    let mut entries = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let start = line.iter().position(|&b| b != b' ').unwrap_or(line.len());
        let rest = &line[start..];
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad_line(line))?;
        let nid: u64 = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_line(line))?;
        let rest = &rest[sp..];
        let rest = &rest[rest
            .iter()
            .position(|&b| b != b' ')
            .ok_or_else(|| bad_line(line))?..];
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad_line(line))?;
        let ft: u8 = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_line(line))?;
        let name = rest.get(sp + 2..).ok_or_else(|| bad_line(line))?.to_vec();
        if name != b"." && name != b".." {
            entries.push((nid, ft, name));
        }
    }
    Ok(entries)
}

fn bad_line(line: &[u8]) -> String {
    format!("unparsable dump.erofs line: {}", show(line))
}

/// The EROFS dirent file type of an `lstat` result (FT_* values).
pub fn erofs_file_type(md: &fs::Metadata) -> u8 {
    match md.mode() & libc::S_IFMT {
        libc::S_IFREG => 1,
        libc::S_IFDIR => 2,
        libc::S_IFCHR => 3,
        libc::S_IFBLK => 4,
        libc::S_IFIFO => 5,
        libc::S_IFSOCK => 6,
        libc::S_IFLNK => 7,
        _ => 0,
    }
}

/// Compares `dump.erofs --ls` of `rel_dir` (relative, "" for the root) with the source directory
/// `src_root/rel_dir`: the same names with the same file types. `excluded` names source paths
/// (relative to `src_root`) that must be absent. Returns the differences.
pub fn compare_dump_listing(
    image: &Path,
    src_root: &Path,
    rel_dir: &str,
    excluded: &dyn Fn(&[u8]) -> bool,
) -> Vec<String> {
    let mut diffs = Vec::new();
    let dump = match dump_ls(image, &format!("/{rel_dir}")) {
        Ok(d) => d,
        Err(e) => return vec![e],
    };
    let mut expected = BTreeSet::new();
    for e in fs::read_dir(src_root.join(rel_dir)).expect("read source dir") {
        let e = e.unwrap();
        let name = e.file_name().as_bytes().to_vec();
        let rel = if rel_dir.is_empty() {
            name.clone()
        } else {
            [rel_dir.as_bytes(), b"/", &name].concat()
        };
        if excluded(&rel) {
            continue;
        }
        let md = fs::symlink_metadata(e.path()).unwrap();
        expected.insert((erofs_file_type(&md), name));
    }
    let got: BTreeSet<(u8, Vec<u8>)> = dump.iter().map(|(_, ft, n)| (*ft, n.clone())).collect();
    if got.len() != dump.len() {
        diffs.push(format!("dump.erofs /{rel_dir}: duplicate names in listing"));
    }
    for (ft, n) in expected.difference(&got) {
        diffs.push(format!(
            "dump.erofs /{rel_dir}: missing {} (type {ft})",
            show(n)
        ));
    }
    for (ft, n) in got.difference(&expected) {
        diffs.push(format!(
            "dump.erofs /{rel_dir}: unexpected {} (type {ft})",
            show(n)
        ));
    }
    diffs
}

/// The 128-byte superblock at byte 1024 of `image`.
pub fn superblock(image: &Path) -> [u8; 128] {
    let mut f = fs::File::open(image).expect("open image");
    let mut buf = [0u8; 1024 + 128];
    f.read_exact(&mut buf)
        .expect("image shorter than 1152 bytes");
    assert_eq!(
        u32::from_le_bytes(buf[1024..1028].try_into().unwrap()),
        0xE0F5_E1E2,
        "EROFS magic missing at byte 1024 of {}",
        image.display()
    );
    buf[1024..].try_into().unwrap()
}

/// Superblock `uuid` (bytes 48..64).
pub fn sb_uuid(sb: &[u8; 128]) -> [u8; 16] {
    sb[48..64].try_into().unwrap()
}

/// Superblock `volume_name` (bytes 64..80).
pub fn sb_label(sb: &[u8; 128]) -> [u8; 16] {
    sb[64..80].try_into().unwrap()
}

/// Superblock `feature_compat`.
pub fn sb_feature_compat(sb: &[u8; 128]) -> u32 {
    u32::from_le_bytes(sb[8..12].try_into().unwrap())
}

/// Superblock block count (`blocks_lo`; images here stay below 2^32 blocks).
pub fn sb_blocks(sb: &[u8; 128]) -> u64 {
    u32::from_le_bytes(sb[36..40].try_into().unwrap()) as u64
}

/// `EROFS_FEATURE_COMPAT_XATTR_FILTER`.
pub const COMPAT_XATTR_FILTER: u32 = 0x4;

/// Bytes the file occupies on its filesystem (`st_blocks * 512`).
pub fn allocated_bytes(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

/// `Path` from raw bytes.
pub fn bpath(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// Panics listing `diffs` (at most 60 shown) when it is not empty.
pub fn assert_no_diffs(what: &str, diffs: &[String]) {
    if diffs.is_empty() {
        println!("{what}: no differences");
        return;
    }
    let shown: Vec<&str> = diffs.iter().take(60).map(|s| s.as_str()).collect();
    panic!(
        "{what}: {} difference(s){}:\n  {}",
        diffs.len(),
        if diffs.len() > 60 { " (first 60)" } else { "" },
        shown.join("\n  ")
    );
}
