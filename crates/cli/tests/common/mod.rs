//! The `sealfs` binary for the CLI integration tests; everything else comes from
//! `sealfs-testsupport` (guards, mounts, fixtures, comparators), re-exported here so the tests
//! keep writing `common::...`.
#![allow(dead_code)]

pub use sealfs_testsupport::*;

pub mod containerd;
pub mod cri;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Path of the `sealfs` binary under test.
pub fn sealfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sealfs")
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

/// `sealfs verify IMAGE` passes, and the kernel's mount of the image equals `src` (content and
/// every attribute, xattr lookups through the name filter included). `what` names the case.
pub fn assert_verifies_and_mounts_equal(src: &Path, image: &Path, what: &str) {
    let v = run(Command::new(sealfs_bin()).arg("verify").arg(image));
    assert!(
        v.status.success(),
        "{what}: verify: {}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    let mnt = mount_erofs(image).expect("mount");
    let diffs = compare::compare_trees(src, mnt.path(), &compare::Expect::default());
    assert!(
        diffs.is_empty(),
        "{what}: kernel view differs:\n{}",
        diffs.join("\n")
    );
    let (problems, checked) = compare::check_xattr_filter(mnt.path());
    assert!(
        problems.is_empty(),
        "{what}: xattr lookups: {problems:?} ({checked} checked)"
    );
}

/// Builds `src` with `args` on 1 and on 3 threads into `dir`: the images must be byte-identical,
/// and `sealfs digest --files` of the image must print what `fsverity digest` prints for the
/// source's files. `what` names the case in failures.
pub fn assert_deterministic_with_fsverity_digests(
    src: &Path,
    dir: &Path,
    args: &[&str],
    what: &str,
) {
    let a = dir.join("a.img");
    let b = dir.join("b.img");
    for (img, j) in [(&a, "1"), (&b, "3")] {
        let mut all = args.to_vec();
        all.extend(["-j", j]);
        build_ok(src, img, &all);
    }
    assert!(
        fs::read(&a).unwrap() == fs::read(&b).unwrap(),
        "{what}: -j1 and -j3 images differ"
    );
    let ours = run(Command::new(sealfs_bin())
        .args(["digest", "--files"])
        .arg(&a));
    assert!(ours.status.success());
    let oracle = run(Command::new("sh")
        .arg("-c")
        .arg("find . -type f -printf '%P\\0' | sort -z | xargs -0 fsverity digest --")
        .current_dir(src));
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&oracle.stdout),
        "{what}: per-file digests"
    );
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

/// The output of a QEMU guest (`scripts/vm-verity.sh`) between `BEGIN name` and `END name`.
pub fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let begin = format!("BEGIN {name}\n");
    let end = format!("END {name}");
    let start = out
        .find(&begin)
        .unwrap_or_else(|| panic!("no section {name} in the guest output:\n{out}"))
        + begin.len();
    let len = out[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("section {name} not ended in the guest output:\n{out}"));
    &out[start..start + len]
}
