//! Test support shared by the sealfs test suites (not published).
//!
//! The tests judge sealfs with programs nobody on this project wrote (`shared/design.md`, "What
//! proves correctness"): the running kernel's EROFS driver, erofs-utils, fsverity-utils,
//! veritysetup. This crate holds one copy of what those tests need around the oracles:
//!
//! - guards ([`oracle_guard`], [`need_tool`], [`need_program`], [`is_root`]): a test that cannot run
//!   here prints `SKIP: <reason>` and returns, except with `CI=true` in the environment, where the
//!   skip is a failure (CI must not pass by skipping);
//! - [`rng`]: a deterministic PRNG, so every input is reproducible; [`mixed`]: file contents of
//!   mixed compressibility from it;
//! - [`sys`]: the libc calls `std` lacks (`l*xattr`, `lchown`, `utimensat`, `mknod`, raw `readdir`);
//! - [`mount`]: tmpfs scratch space and loop mounts of EROFS images (with the `kernel` feature
//!   also file-backed ones, mount(2) of the image file), unmounted on drop;
//! - [`erofs_utils`]: `mkfs.erofs`, `fsck.erofs`, `dump.erofs` and raw superblock fields;
//! - fixture trees: [`fixture`] (the full tree of every case, root and tmpfs) and
//!   [`small_fixture`] (the reader's tree, any filesystem), and with the `proptest` feature
//!   `randtree` (random trees);
//! - [`servers`]: real servers on loopback for remote images (nginx, versitygw for S3);
//! - [`compare`]: a source tree against what the kernel shows of a mounted image;
//! - [`workspace`]: the `sealfs` binary and `libsealfs` for the tests of other crates (built
//!   with cargo in the test's own profile);
//! - with the `images` feature: the image crafters (`craft`, `layouts`, `zcraft`, `dircraft`) that
//!   write EROFS bytes no builder writes, `walk` (an image walked through the reader, compared
//!   with a source tree) and `build` (images from the builder library, no binary involved).
//!
//! Test crates take it as a dev-dependency. The reader's tests use the builder through it: the
//! reader never depends on the builder, its tests may.

#![allow(missing_docs, reason = "test helpers, not published")]

pub mod compare;
pub mod erofs_utils;
pub mod filetable;
pub mod fixture;
pub mod mixed;
pub mod mount;
pub mod rng;
pub mod servers;
pub mod small_fixture;
pub mod sys;
pub mod workspace;

#[cfg(feature = "images")]
pub mod build;
#[cfg(feature = "images")]
pub mod craft;
#[cfg(feature = "images")]
pub mod dircraft;
#[cfg(feature = "images")]
pub mod layouts;
#[cfg(feature = "proptest")]
pub mod randtree;
#[cfg(feature = "images")]
pub mod walk;
#[cfg(feature = "images")]
pub mod zcraft;

pub use erofs_utils::*;
#[cfg(feature = "kernel")]
pub use mount::{file_backed_env, mount_erofs_file};
pub use mount::{
    mount_env, mount_erofs, mount_squashfs, processes_naming, root_env, still_running_after,
    ErofsMount, Tmpfs,
};
pub use rng::{pseudo_random, Rng};

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output};

// ---------------------------------------------------------------------------------------------
// Guards
// ---------------------------------------------------------------------------------------------

/// Whether `CI=true` is set: oracle tests then fail instead of skipping.
pub fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

/// Decides whether an oracle test may run. `check` is `Err(reason)` when the machine lacks what the
/// test needs. Then the test is skipped (prints `SKIP: <reason>`, returns false), except under
/// `CI=true`, where a skip would hide a failure: it panics instead.
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

/// Whether `name` is a file in a directory of `PATH`.
pub fn have_tool(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// The Debian package that installs an oracle program (for skip messages).
pub fn package_of(tool: &str) -> &'static str {
    match tool {
        "mkfs.erofs" | "fsck.erofs" | "dump.erofs" | "erofsfuse" => "erofs-utils",
        "fsverity" => "fsverity",
        "veritysetup" => "cryptsetup-bin",
        "mksquashfs" | "unsquashfs" => "squashfs-tools",
        "squashfuse" => "squashfuse",
        "getfattr" | "setfattr" => "attr",
        "fio" => "fio",
        "mount" | "umount" | "losetup" => "util-linux",
        "openssl" => "openssl",
        "bsdtar" => "libarchive-tools",
        "tar" => "tar",
        "zstd" => "zstd",
        "xz" => "xz-utils",
        "bzip2" => "bzip2",
        "lz4" => "lz4",
        "gzip" => "gzip",
        "getfacl" | "setfacl" => "acl",
        "umoci" => "umoci",
        "skopeo" => "skopeo",
        "containerd" | "ctr" => "containerd",
        "runc" => "runc",
        _ => "unknown package",
    }
}

/// `Ok` when `tool` is in `PATH`; otherwise the reason, naming its Debian package.
pub fn need_tool(tool: &str) -> Result<(), String> {
    if have_tool(tool) {
        Ok(())
    } else {
        Err(format!(
            "{tool} not installed (Debian package {})",
            package_of(tool)
        ))
    }
}

/// `Ok` when `prog arg` runs and exits 0 (e.g. `fsverity --version`); otherwise
/// `"<package> not installed"`.
pub fn need_program(prog: &str, arg: &str, package: &str) -> Result<(), String> {
    let found = Command::new(prog)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(format!("{package} not installed"))
    }
}

/// Whether the tests run as root (devices, owners, mounts and trusted.* xattrs need it).
pub fn is_root() -> bool {
    sys::geteuid() == 0
}

// ---------------------------------------------------------------------------------------------
// Running programs
// ---------------------------------------------------------------------------------------------

/// Runs `cmd` and returns its output. Panics if it cannot be started, and, when it is the
/// `sealfs` binary, if its stderr says something twice on one line ([`assert_each_fact_once`]):
/// so every error path any test provokes is held to that rule.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    check_sealfs_stderr(cmd, &out);
    out
}

/// Runs `cmd`; its stdout when it exits 0, otherwise a message with its status and output. As
/// [`run`], `sealfs`'s stderr must say each fact once.
pub fn run_ok(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    check_sealfs_stderr(cmd, &out);
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

/// [`assert_each_fact_once`] on the stderr of `cmd` when it runs the `sealfs` binary.
fn check_sealfs_stderr(cmd: &Command, out: &Output) {
    if Path::new(cmd.get_program()).file_name() == Some(OsStr::new("sealfs")) {
        assert_each_fact_once(&format!("{cmd:?}"), &out.stderr);
    }
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// The clauses said twice on one line of `text`: a line is cut into clauses at every `": "` (how
/// an error and its causes are joined), and a clause of at least [`REPEAT_MIN_CHARS`] characters
/// that appears twice on its line is a repeat (an error whose message holds its cause, which the
/// chain then prints again; a wrapper naming the path or URL its cause names already). Shorter
/// clauses ("open", "error", a short file name) may recur by right.
pub fn repeated_clauses(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let clauses: Vec<&str> = line.split(": ").map(str::trim).collect();
        for (i, c) in clauses.iter().enumerate() {
            if c.chars().count() >= REPEAT_MIN_CHARS
                && clauses[..i].contains(c)
                && !found.iter().any(|f: &String| f == c)
            {
                found.push(c.to_string());
            }
        }
    }
    found
}

/// The shortest clause [`repeated_clauses`] counts.
pub const REPEAT_MIN_CHARS: usize = 20;

/// Panics when a line of `stderr` says a clause twice ([`repeated_clauses`]); `what` names the
/// command.
pub fn assert_each_fact_once(what: &str, stderr: &[u8]) {
    let text = String::from_utf8_lossy(stderr);
    let repeated = repeated_clauses(&text);
    assert!(
        repeated.is_empty(),
        "{what}: stderr says {repeated:?} twice:\n{text}"
    );
}

/// A human-readable rendering of a raw name or path.
pub fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// `Path` from raw bytes.
pub fn bpath(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

/// Asserts two byte strings are equal without printing megabytes on failure.
pub fn assert_same_bytes(ours: &[u8], theirs: &[u8], what: &str) {
    if ours == theirs {
        return;
    }
    let first = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    panic!(
        "{what}: ours is {} bytes, the oracle's {}; first difference at byte {first}",
        ours.len(),
        theirs.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of issue 29 (a cause printed in its error's text and again as its source) is a
    /// repeat; a wrapper naming the URL its cause names too is one; messages that only share
    /// short clauses, or say a long one once, are not.
    #[test]
    fn repeated_clauses_are_found_and_nothing_else() {
        let issue =
            "sealfs: error: z2.img: open: verification failed: data block 2735 does not match \
                     its hash (nid 1, offset 0xaaf000): verification failed: data block 2735 does \
                     not match its hash (nid 1, offset 0xaaf000)";
        assert_eq!(
            repeated_clauses(issue),
            ["data block 2735 does not match its hash (nid 1, offset 0xaaf000)"]
        );
        let url = "sealfs: error: http://127.0.0.1:9/z.img: open: http://127.0.0.1:9/z.img: the \
                   tail of the object: Connection refused (os error 111)";
        assert_eq!(repeated_clauses(url), ["http://127.0.0.1:9/z.img"]);
        for fine in [
            "sealfs: error: a.img: open: b.img: open: No such file or directory (os error 2)",
            "sealfs: error: z2.img: open: verification failed: data block 2735 does not match its \
             hash (nid 1, offset 0xaaf000)",
            // Two lines may say the same thing (two files, one failure each).
            "sealfs: error: /a: I/O error (offset 0x1000)\nsealfs: error: /b: I/O error (offset 0x1000)",
        ] {
            assert!(repeated_clauses(fine).is_empty(), "{fine}");
        }
    }
}
