//! Bad input: a build that fails exits non-zero (not by a signal, not by a panic), names the
//! offending path on stderr, and leaves nothing at the output path: no image, no `.sealfs-*`
//! temporary file beside it, and an existing file there untouched.
//!
//! Unreadable files need an unprivileged builder (root reads everything): those cases run it with
//! `setpriv` as nobody and need root to set up.

mod common;

use common::*;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Asserts that `out` is a clean failure: non-zero exit code, no panic, stderr mentioning every
/// string in `names`, no file at `image` and no temporary files beside it.
fn assert_clean_failure(what: &str, out: &Output, image: &Path, names: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: build succeeded; stderr: {stderr}"
    );
    assert!(
        out.status.code().is_some(),
        "{what}: builder killed by a signal ({:?}); stderr: {stderr}",
        out.status
    );
    assert!(
        !stderr.contains("panicked"),
        "{what}: builder panicked: {stderr}"
    );
    for n in names {
        assert!(
            stderr.contains(n),
            "{what}: stderr does not name {n:?}: {stderr}"
        );
    }
    assert!(
        !image.exists(),
        "{what}: a file was left at the output path {}",
        image.display()
    );
    if let Some(dir) = image.parent() {
        let left = temp_leftovers(dir);
        assert!(
            left.is_empty(),
            "{what}: temporary files left beside the output: {left:?}"
        );
    }
    println!(
        "{what}: exit {:?}, stderr: {}",
        out.status.code(),
        stderr.trim()
    );
}

/// A tempdir that user nobody can enter (tempfile makes them 0700).
fn open_tempdir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("sealfs-bad-")
        .tempdir()
        .unwrap();
    common::sys::chmod(d.path(), 0o755).unwrap();
    d
}

fn unprivileged_env() -> Result<(), String> {
    if common::sys::geteuid() != 0 {
        return Err("not root: cannot switch to an unprivileged user".into());
    }
    if !have_tool("setpriv") {
        return Err("setpriv (util-linux) not found".into());
    }
    Ok(())
}

/// `setpriv` as nobody (65534), running `sealfs build SRC OUT`.
fn build_as_nobody(src: &Path, out: &Path) -> Output {
    run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(sealfs_bin())
        .arg("build")
        .arg(src)
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH"))
}

/// Source with one unreadable file among readable ones, output dir writable by nobody.
fn unreadable_setup(d: &Path) -> (PathBuf, PathBuf) {
    let src = d.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("ok{i}.txt")), format!("readable {i}")).unwrap();
    }
    fs::write(src.join("sub/secret.bin"), b"nobody may read this").unwrap();
    common::sys::chmod(&src.join("sub/secret.bin"), 0o000).unwrap();
    let out = d.join("out");
    fs::create_dir(&out).unwrap();
    common::sys::chmod(&out, 0o777).unwrap();
    (src, out)
}

#[test]
fn unreadable_file_fails_cleanly() {
    if !oracle_guard(unprivileged_env()) {
        return;
    }
    let d = open_tempdir();
    let (src, out) = unreadable_setup(d.path());
    let image = out.join("image.erofs");
    let o = build_as_nobody(&src, &image);
    assert_clean_failure(
        "unreadable file (as nobody)",
        &o,
        &image,
        &["sub/secret.bin"],
    );
}

#[test]
fn unreadable_directory_fails_cleanly() {
    if !oracle_guard(unprivileged_env()) {
        return;
    }
    let d = open_tempdir();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("locked/inner")).unwrap();
    fs::write(src.join("locked/inner/f"), b"f").unwrap();
    fs::write(src.join("fine"), b"fine").unwrap();
    common::sys::chmod(&src.join("locked"), 0o000).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    common::sys::chmod(&out, 0o777).unwrap();
    let image = out.join("image.erofs");
    let o = build_as_nobody(&src, &image);
    assert_clean_failure("unreadable directory (as nobody)", &o, &image, &["locked"]);
}

#[test]
fn existing_output_survives_a_failed_build() {
    if !oracle_guard(unprivileged_env()) {
        return;
    }
    let d = open_tempdir();
    let (src, out) = unreadable_setup(d.path());
    let image = out.join("image.erofs");
    let precious = b"an older image that must survive a failed build".repeat(100);
    fs::write(&image, &precious).unwrap();
    common::sys::chmod(&image, 0o666).unwrap();
    let o = build_as_nobody(&src, &image);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "build succeeded despite an unreadable file: {stderr}"
    );
    assert!(
        o.status.code().is_some() && !stderr.contains("panicked"),
        "unclean failure: {stderr}"
    );
    assert!(
        stderr.contains("sub/secret.bin"),
        "stderr does not name the file: {stderr}"
    );
    assert_eq!(
        fs::read(&image).unwrap(),
        precious,
        "the existing output file was changed"
    );
    assert!(
        temp_leftovers(&out).is_empty(),
        "temp files left: {:?}",
        temp_leftovers(&out)
    );
    println!(
        "existing output kept intact after a failed build; stderr: {}",
        stderr.trim()
    );

    // Same with a failure found before any reading starts (missing source), as root.
    let o = run(&mut build_cmd(&d.path().join("no-such-src"), &image, &[]));
    assert!(!o.status.success());
    assert_eq!(
        fs::read(&image).unwrap(),
        precious,
        "the existing output file was changed"
    );
    println!("existing output kept intact after a build with a missing source");
}

#[test]
fn source_not_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("plain-file-src");
    fs::write(&file, b"not a directory").unwrap();
    let image = d.path().join("image.erofs");
    let o = run(&mut build_cmd(&file, &image, &[]));
    assert_clean_failure("source is a regular file", &o, &image, &["plain-file-src"]);

    let missing = d.path().join("no-such-dir");
    let o = run(&mut build_cmd(&missing, &image, &[]));
    assert_clean_failure("source does not exist", &o, &image, &["no-such-dir"]);
}

#[test]
fn output_in_missing_directory() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    let image = d.path().join("missing-dir/sub/image.erofs");
    let o = run(&mut build_cmd(&src, &image, &[]));
    assert_clean_failure("output directory missing", &o, &image, &["missing-dir"]);
    assert!(
        !d.path().join("missing-dir").exists(),
        "the builder created the missing output directory"
    );
}

#[test]
fn output_is_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    let out = d.path().join("out-dir");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("keep"), b"keep").unwrap();
    let o = run(&mut build_cmd(&src, &out, &[]));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "building onto a directory succeeded: {stderr}"
    );
    assert!(
        o.status.code().is_some() && !stderr.contains("panicked"),
        "unclean failure: {stderr}"
    );
    assert!(
        stderr.contains("out-dir"),
        "stderr does not name the output: {stderr}"
    );
    assert!(
        out.is_dir() && fs::read(out.join("keep")).unwrap() == b"keep",
        "the directory was changed"
    );
    let left = temp_leftovers(d.path());
    assert!(left.is_empty(), "temporary files left: {left:?}");
    println!(
        "output is a directory: exit {:?}, stderr: {}",
        o.status.code(),
        stderr.trim()
    );
}

/// Runs builds of `src` while `mutate` runs in a background thread (until the build ends), up to
/// `attempts` times or until a build fails. Checks every outcome: a failure must be clean and name
/// `name`; a success must leave a complete image that fsck.erofs accepts. Returns the number of
/// failed builds seen.
fn build_under_mutation(
    what: &str,
    src: &Path,
    out_dir: &Path,
    name: &str,
    attempts: usize,
    setup: &dyn Fn(),
    mutate: Arc<dyn Fn(&AtomicBool) + Send + Sync>,
) -> usize {
    let mut failures = 0;
    for attempt in 0..attempts {
        setup();
        let image = out_dir.join(format!("image{attempt}.erofs"));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (stop2, started2, mutate2) = (stop.clone(), started.clone(), mutate.clone());
        let th = std::thread::spawn(move || {
            started2.store(true, Ordering::SeqCst);
            mutate2(&stop2)
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        let o = run(&mut build_cmd(src, &image, &[]));
        stop.store(true, Ordering::SeqCst);
        th.join().unwrap();
        if o.status.success() {
            assert!(image.is_file(), "{what}: build succeeded without an image");
            if have_tool("fsck.erofs") {
                fsck(&image)
                    .unwrap_or_else(|e| panic!("{what}: successful build gave a bad image: {e}"));
            }
            println!(
                "{what}: attempt {attempt}: build succeeded in {:.2?} (race not hit)",
                t.elapsed()
            );
            fs::remove_file(&image).unwrap();
        } else {
            assert_clean_failure(&format!("{what} (attempt {attempt})"), &o, &image, &[name]);
            failures += 1;
            break;
        }
    }
    failures
}

/// A 64 MiB file whose size keeps changing (shrunk by 1 MiB and regrown) during the whole build.
#[test]
fn file_changing_size_during_build() {
    const SIZE: u64 = 64 << 20;
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..50 {
        fs::write(src.join(format!("other{i}")), vec![i as u8; 10_000]).unwrap();
    }
    let path = src.join("changing.bin");
    fs::write(&path, vec![0x5au8; SIZE as usize]).unwrap();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    let p2 = path.clone();
    let mutate = Arc::new(move |stop: &AtomicBool| {
        let f = fs::OpenOptions::new().write(true).open(&p2).unwrap();
        let chunk = vec![0xa5u8; 1 << 20];
        while !stop.load(Ordering::SeqCst) {
            f.set_len(SIZE - (1 << 20)).unwrap();
            f.write_all_at(&chunk, SIZE - (1 << 20)).unwrap();
        }
    });
    let p3 = path.clone();
    let setup = move || {
        let f = fs::OpenOptions::new().write(true).open(&p3).unwrap();
        f.set_len(SIZE).unwrap();
    };
    let failures = build_under_mutation(
        "file changing size",
        &src,
        &out,
        "changing.bin",
        8,
        &setup,
        mutate,
    );
    assert!(
        failures > 0,
        "8 builds of a file whose size kept changing all succeeded: the change was not detected"
    );
}

/// A file that grows (appended to) during the whole build: the size read differs from the size
/// scanned, which the builder must report.
#[test]
fn file_growing_during_build() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..50 {
        fs::write(src.join(format!("other{i}")), vec![i as u8; 10_000]).unwrap();
    }
    let path = src.join("growing.log");
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    let p2 = path.clone();
    let mutate = Arc::new(move |stop: &AtomicBool| {
        let mut f = fs::OpenOptions::new().append(true).open(&p2).unwrap();
        let line = b"another log line appended while the image is being built\n".repeat(64);
        let mut written = 0usize;
        while !stop.load(Ordering::SeqCst) && written < (1 << 30) {
            std::io::Write::write_all(&mut f, &line).unwrap();
            written += line.len();
        }
    });
    let p3 = path.clone();
    let setup = move || {
        File::create(&p3).unwrap();
        fs::write(&p3, vec![b'#'; 8 << 20]).unwrap();
    };
    let failures =
        build_under_mutation("file growing", &src, &out, "growing.log", 3, &setup, mutate);
    assert!(
        failures > 0,
        "3 builds of a file that grew throughout all succeeded: growth was not detected"
    );
}

/// Files deleted while the build runs. The race may or may not be hit; either outcome must be
/// clean (a failure names a path inside the source; a success gives a valid image).
#[test]
fn files_vanishing_during_build() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    const N: usize = 3000;
    let s2 = src.clone();
    let setup = move || {
        let _ = fs::remove_dir_all(&s2);
        fs::create_dir_all(s2.join("many")).unwrap();
        for i in 0..N {
            fs::write(
                s2.join(format!("many/f{i:05}")),
                format!("file {i} ").repeat(50),
            )
            .unwrap();
        }
    };
    let s3 = src.clone();
    let mutate = Arc::new(move |stop: &AtomicBool| {
        for i in (0..N).rev() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let _ = fs::remove_file(s3.join(format!("many/f{i:05}")));
        }
    });
    let failures =
        build_under_mutation("files vanishing", &src, &out, "many/f", 10, &setup, mutate);
    println!("files vanishing: {failures} clean failure(s) seen in at most 10 attempts");
}
