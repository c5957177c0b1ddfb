//! The reading commands: `ls`, `cat`, `stat`, `getfattr`, `extract` and `inspect`.
//!
//! Each one opens the image through [`crate::open::ImageArgs`] (so it reads through whatever checks the
//! open established: see [`sealfs_reader::Trust`]) and uses the reader's API only: paths are resolved with
//! the kernel's lookup, directories iterated with its checks, data read through the block source.
//!
//! Paths in the image are raw bytes: names that are not UTF-8 are written out as they are, and error
//! messages show them with [`show`]. Exit codes: 0 success, 1 a problem the image causes (corruption,
//! verification failure, a path that does not exist, an unsafe name), 2 could not run (usage, local
//! I/O errors); `extract` also exits 3 when the destination refused something (see its module).
//! Commands that go on after an error (several paths, recursion) report each one and exit with the
//! worst code; others return the error and [`finish`] classifies it.

pub mod cat;
pub mod extract;
pub mod getfattr;
pub mod inspect;
pub mod ls;
pub mod stat;

use anyhow::Result;
use sealfs_reader::{DataLayout, FileType, Follow, Image, Inode};
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// An error the image causes (not found, unsafe content, a file that is not what the command needs):
/// exit code 1, like the reader's own errors.
#[derive(Debug)]
pub struct ImageFault(pub String);

impl fmt::Display for ImageFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ImageFault {}

/// An [`ImageFault`] as an `anyhow` error.
pub fn fault(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(ImageFault(msg.into()))
}

/// Exit code 1: the image is at fault.
pub const EXIT_IMAGE: u8 = 1;
/// Exit code 2: the command could not run.
pub const EXIT_CANNOT_RUN: u8 = 2;

/// The exit code an error calls for: `None` for a closed stdout (`sealfs ls | head`), which ends the
/// command quietly and successfully, as ripgrep does.
pub fn exit_code(e: &anyhow::Error) -> Option<u8> {
    let mut code = EXIT_CANNOT_RUN;
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::BrokenPipe {
                return None;
            }
        }
        let open_fault = cause
            .downcast_ref::<sealfs_reader::OpenError>()
            .is_some_and(|o| o.is_image_fault());
        let registry_fault = cause
            .downcast_ref::<sealfs_registry::RegistryError>()
            .is_some_and(|r| r.is_content_fault());
        let delta_fault = cause
            .downcast_ref::<sealfs_delta::DeltaError>()
            .is_some_and(|d| d.is_image_fault());
        if cause.is::<sealfs_reader::Error>()
            || cause.is::<ImageFault>()
            || delta_fault
            || open_fault
            || registry_fault
        {
            code = EXIT_IMAGE;
        }
    }
    Some(code)
}

/// Prints `e` to stderr and returns its exit code (0 for a closed stdout, printed silently).
pub fn report(e: &anyhow::Error) -> u8 {
    match exit_code(e) {
        None => 0,
        Some(code) => {
            eprintln!("sealfs: error: {}", sealfs_reader::ErrorChain(e.as_ref()));
            code
        }
    }
}

/// Turns a command's error into its exit code (after printing it), so `main` sees only `Ok`.
pub fn finish(result: Result<ExitCode>) -> Result<ExitCode> {
    Ok(match result {
        Ok(code) => code,
        Err(e) => ExitCode::from(report(&e)),
    })
}

/// Tracks the worst exit code of a command that goes on after errors.
#[derive(Default)]
pub struct Status(u8);

impl Status {
    /// Reports `e` and remembers its code.
    pub fn error(&mut self, e: &anyhow::Error) {
        self.0 = self.0.max(report(e));
    }

    /// The exit code.
    pub fn code(&self) -> ExitCode {
        ExitCode::from(self.0)
    }
}

pub use sealfs_reader::show_path as show;

/// The bytes of a command-line path.
pub fn arg_bytes(arg: &OsStr) -> &[u8] {
    arg.as_bytes()
}

/// Resolves `path` in the image; the error names the path (once: not again when the reader's
/// error ends with it, as "not found: PATH" does).
pub fn resolve(img: &Image, path: &[u8], follow: Follow) -> Result<Inode> {
    img.resolve(path, follow).map_err(|e| {
        let shown = show(path);
        if e.to_string().ends_with(&format!(": {shown}")) {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(shown)
        }
    })
}

/// `path` joined with `name` (no doubled '/').
pub fn join(path: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// A short type name for JSON.
pub fn type_key(ft: FileType) -> &'static str {
    match ft {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::CharDevice => "chardev",
        FileType::BlockDevice => "blockdev",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::Symlink => "symlink",
    }
}

/// The `ls -l` mode string: type letter and nine permission letters with setuid, setgid and sticky.
pub fn mode_string(mode: u32) -> String {
    let t = match FileType::from_mode(mode as u16) {
        Some(FileType::Regular) => '-',
        Some(FileType::Directory) => 'd',
        Some(FileType::CharDevice) => 'c',
        Some(FileType::BlockDevice) => 'b',
        Some(FileType::Fifo) => 'p',
        Some(FileType::Socket) => 's',
        Some(FileType::Symlink) => 'l',
        None => '?',
    };
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let special = |x: u32, s: u32, on: char, off: char| match (mode & x != 0, mode & s != 0) {
        (true, true) => on,
        (false, true) => off,
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        t,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        special(0o100, 0o4000, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        special(0o010, 0o2000, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        special(0o001, 0o1000, 't', 'T'),
    ]
    .iter()
    .collect()
}

/// The data layout in words.
pub fn layout_name(layout: DataLayout) -> &'static str {
    match layout {
        DataLayout::FlatPlain => "flat plain",
        DataLayout::FlatInline => "flat inline",
        DataLayout::ChunkBased => "chunk-based",
        DataLayout::CompressedFull => "compressed (full indexes)",
        DataLayout::CompressedCompact => "compressed (compact indexes)",
    }
}

/// Broken-down local time (the `TZ` rules of the C library) and its UTC offset in seconds.
#[allow(
    unsafe_code,
    reason = "localtime_r, for `ls -l` times in the TZ rules of the C library, has no safe binding"
)]
fn local_time(sec: i64) -> Option<(libc::tm, i64)> {
    let t = sec as libc::time_t;
    // SAFETY: `tm` is plain data; localtime_r only writes it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to a time_t and a tm for the duration of the call.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    let off = tm.tm_gmtoff;
    Some((tm, off))
}

/// How much of a time to show.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TimeStyle {
    /// `2024-01-31 13:05` (`ls --time-style=long-iso`).
    LongIso,
    /// `2024-01-31 13:05:59.123456789 +0100` (`stat`, `ls --full-time`).
    Full,
}

/// Formats a time in the local time zone (seconds since the epoch are shown for times the C library
/// cannot break down).
pub fn format_time(sec: i64, nsec: u32, style: TimeStyle) -> String {
    let Some((tm, off)) = local_time(sec) else {
        return format!("@{sec}.{nsec:09}");
    };
    let date = format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        tm.tm_year as i64 + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    );
    match style {
        TimeStyle::LongIso => date,
        TimeStyle::Full => {
            let sign = if off < 0 { '-' } else { '+' };
            let a = off.abs();
            format!(
                "{date}:{:02}.{nsec:09} {sign}{:02}{:02}",
                tm.tm_sec,
                a / 3600,
                (a / 60) % 60
            )
        }
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_strings_match_ls() {
        assert_eq!(mode_string(0o100644), "-rw-r--r--");
        assert_eq!(mode_string(0o040755), "drwxr-xr-x");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o102644), "-rw-r-Sr--");
        assert_eq!(mode_string(0o041777), "drwxrwxrwt");
        assert_eq!(mode_string(0o041776), "drwxrwxrwT");
        assert_eq!(mode_string(0o107777), "-rwsrwsrwt");
        assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
        assert_eq!(mode_string(0o020600), "crw-------");
        assert_eq!(mode_string(0o060660), "brw-rw----");
        assert_eq!(mode_string(0o010640), "prw-r-----");
        assert_eq!(mode_string(0o140755), "srwxr-xr-x");
        assert_eq!(mode_string(0o100000), "----------");
    }

    #[test]
    fn names_are_shown_escaped() {
        assert_eq!(show(b"a\xffb\n"), "a\\377b\\n");
        assert_eq!(show(b"n\0ul\\"), "n\\000ul\\\\");
        assert_eq!(show("café".as_bytes()), "caf\\303\\251");
    }

    #[test]
    fn exit_codes_follow_the_cause() {
        let e = fault("no such attribute");
        assert_eq!(exit_code(&e), Some(EXIT_IMAGE));
        let e = anyhow::Error::new(sealfs_reader::Error::NotFound("/x".into())).context("/x");
        assert_eq!(exit_code(&e), Some(EXIT_IMAGE));
        let e = anyhow::anyhow!("bad option");
        assert_eq!(exit_code(&e), Some(EXIT_CANNOT_RUN));
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(exit_code(&e), None);
    }
}
