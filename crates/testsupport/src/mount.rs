//! Scratch space and mounts: a tmpfs (ext4 cannot hold 64 KiB xattr values) and read-only loop
//! mounts of EROFS images (and, with the `kernel` feature, file-backed ones), each unmounted on
//! drop; and the checks of what mounting needs.

use crate::{have_tool, sys};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

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

fn fresh_dir(prefix: &str) -> std::io::Result<PathBuf> {
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(std::env::temp_dir())?
        .keep())
}

/// The processes whose command line has `path` as one of its arguments (a mount daemon started as
/// `sealfs mount ... MOUNTPOINT`), as /proc shows them.
pub fn processes_naming(path: &Path) -> Vec<u32> {
    let want = path.as_os_str().as_encoded_bytes();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == want))
        })
        .collect()
}

/// Waits up to `limit` for the processes `pids` to exit; returns those still running then. A
/// zombie has exited (a daemon's parent is gone, and whoever inherits it reaps it when it will).
pub fn still_running_after(pids: &[u32], limit: Duration) -> Vec<u32> {
    let running = || -> Vec<u32> {
        pids.iter()
            .copied()
            .filter(|p| {
                // The state follows the command name, which ends with the last `)`.
                fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                    stat.rsplit_once(')')
                        .is_none_or(|(_, rest)| rest.trim_start().as_bytes().first() != Some(&b'Z'))
                })
            })
            .collect()
    };
    let start = std::time::Instant::now();
    while !running().is_empty() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    running()
}

/// Unmounts `path`, retrying a few times (a just-closed file may keep it busy for a moment), and
/// falls back to a lazy unmount. Returns the last error text if even that failed.
pub fn unmount(path: &Path) -> Result<(), String> {
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

/// Runs `mount ARGS SOURCE MNT` on a fresh mount point under the temp dir (named `prefix...`) and
/// returns it. The error carries mount's own message (the kernel's reason is in the kernel log,
/// which tests do not depend on).
fn mount_fresh(prefix: &str, args: &[&str], source: &OsStr) -> Result<PathBuf, String> {
    let path = fresh_dir(prefix).map_err(|e| e.to_string())?;
    let out = Command::new("mount")
        .args(args)
        .arg(source)
        .arg(&path)
        .output()
        .map_err(|e| format!("running mount: {e}"))?;
    if !out.status.success() {
        let _ = fs::remove_dir(&path);
        return Err(format!(
            "mount {} {} {} failed (exit {:?}): {}{}",
            args.join(" "),
            Path::new(source).display(),
            path.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    Ok(path)
}

/// Unmounts `path` and removes the directory; a failure is only reported (a drop cannot fail).
fn release(path: &Path) {
    match unmount(path) {
        Ok(()) => {
            let _ = fs::remove_dir(path);
        }
        Err(e) => eprintln!("warning: could not unmount {}: {e}", path.display()),
    }
}

/// A tmpfs mounted on a fresh directory under the temp dir; unmounted and removed on drop.
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a new tmpfs (size limit 16 GiB; pages are allocated only when written).
    pub fn new(tag: &str) -> Result<Tmpfs, String> {
        let path = mount_fresh(
            &format!("sealfs-tmpfs-{tag}-"),
            &["-t", "tmpfs", "-o", "size=16g,mode=0755"],
            OsStr::new("tmpfs"),
        )?;
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
        release(&self.path);
    }
}

/// An EROFS image mounted read-only (through a loop device, or file-backed); unmounted on drop.
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
        release(&self.path);
    }
}

/// `mount -t squashfs -o loop,ro IMAGE MNT` on a fresh mount point (the kernel's SquashFS
/// driver; the guard is the same as for EROFS mounts).
pub fn mount_squashfs(image: &Path) -> Result<ErofsMount, String> {
    let path = mount_fresh(
        "sealfs-sqfs-",
        &["-t", "squashfs", "-o", "loop,ro"],
        image.as_os_str(),
    )?;
    Ok(ErofsMount { path })
}

/// `mount -t erofs -o loop,ro IMAGE MNT` on a fresh mount point.
pub fn mount_erofs(image: &Path) -> Result<ErofsMount, String> {
    let path = mount_fresh(
        "sealfs-mnt-",
        &["-t", "erofs", "-o", "loop,ro"],
        image.as_os_str(),
    )?;
    Ok(ErofsMount { path })
}

/// mount(2) of the image file itself, read-only, on a fresh mount point: the kernel's file-backed
/// EROFS (Linux 6.12+, `CONFIG_EROFS_FS_BACKED_BY_FILE`), which reads the file through
/// `fs/erofs/fileio.c` and not through a block device. mount(8) would set up a loop device for
/// a regular file (util-linux 2.38), so this calls mount(2) directly, and then checks that
/// `/proc/self/mountinfo` names the file as the mount's source (not `/dev/loopN`). The image
/// must not be on tmpfs: the kernel cannot back an EROFS mount by a tmpfs file (it has no
/// `read_folio`; mount(2) fails with ENOTBLK, as on a kernel without file-backed mounts).
#[cfg(feature = "kernel")]
pub fn mount_erofs_file(image: &Path) -> Result<ErofsMount, String> {
    let image = fs::canonicalize(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let path = fresh_dir("sealfs-filemnt-").map_err(|e| e.to_string())?;
    if let Err(e) = rustix::mount::mount(
        &image,
        &path,
        "erofs",
        rustix::mount::MountFlags::RDONLY,
        None,
    ) {
        let _ = fs::remove_dir(&path);
        return Err(format!(
            "mount(2) of {} on {} (erofs, read-only, file-backed) failed: {e} (errno {})",
            image.display(),
            path.display(),
            e.raw_os_error()
        ));
    }
    let mounted = ErofsMount { path };
    match sealfs_kernel::sysfs::mount_at(&mounted.path) {
        Ok(Some(m)) if m.source == image && m.fstype == "erofs" => Ok(mounted),
        Ok(Some(m)) => Err(format!(
            "{}: mounted from {} ({}), not file-backed from {}",
            mounted.path.display(),
            m.source.display(),
            m.fstype,
            image.display()
        )),
        Ok(None) => Err(format!(
            "{}: not in /proc/self/mountinfo after mount(2)",
            mounted.path.display()
        )),
        Err(e) => Err(format!("reading /proc/self/mountinfo: {e}")),
    }
}

/// Everything [`mount_env`] checks, plus the kernel mounting `probe` (a valid EROFS image, not on
/// tmpfs) file-backed ([`mount_erofs_file`]).
#[cfg(feature = "kernel")]
pub fn file_backed_env(probe: &Path) -> Result<(), String> {
    mount_env()?;
    mount_erofs_file(probe).map(drop).map_err(|e| {
        format!(
            "the kernel cannot mount an EROFS image file-backed \
             (Linux 6.12+ with CONFIG_EROFS_FS_BACKED_BY_FILE; the image not on tmpfs): {e}"
        )
    })
}

/// Unmounts (lazily, `umount -l`) whatever is still mounted at its path when dropped: a FUSE
/// mount a failed test leaves behind.
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        let mounted = fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(1) == Some(&*self.0.to_string_lossy()))
        });
        if mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
