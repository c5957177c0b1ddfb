//! A source file that changes after the scan fails the build, naming the file, and leaves no
//! image: it grows, shrinks, is rewritten in place at the same size, is replaced by another file
//! or by a FIFO (which must not hang the build). The change is made from the progress callback
//! when the data step begins, after every file was scanned and before any was read.

use sealfs_builder::{build, BuildError, BuildOptions, Preset, Progress, SealOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Runs `change` once, when the step that reads file data begins.
struct ChangeAtCopy {
    change: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Progress for ChangeAtCopy {
    fn begin(&self, step: &'static str, _: Option<u64>) {
        if step != "scanning" && step != "sealing" {
            if let Some(change) = self.change.lock().unwrap().take() {
                change();
            }
        }
    }
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

fn tree(root: &Path) {
    fs::create_dir_all(root.join("d")).unwrap();
    fs::write(root.join("a.txt"), b"alpha\n").unwrap();
    fs::write(root.join("d/big.bin"), vec![7u8; 300_000]).unwrap();
    fs::write(root.join("d/small"), b"0123456789").unwrap();
}

/// Builds `src` with `opts`, changing it by `change` once the scan is done; the result.
fn build_changed(
    opts: BuildOptions,
    src: PathBuf,
    out: PathBuf,
    change: Box<dyn FnOnce() + Send>,
) -> sealfs_builder::Result<()> {
    let progress = ChangeAtCopy {
        change: Mutex::new(Some(change)),
    };
    // In a thread with a deadline: a FIFO in a file's place must fail the build, not hang it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(build(&src, &out, &opts, &progress).map(|_| ()));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the build ended within 60 s")
}

type Change = fn(&Path);

fn changes() -> Vec<(&'static str, &'static str, Change)> {
    vec![
        ("grows", "d/big.bin", |p| {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(p).unwrap();
            f.write_all(b"more").unwrap();
        }),
        ("shrinks", "d/big.bin", |p| {
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(1000)
                .unwrap();
        }),
        ("rewritten in place, same size", "d/small", |p| {
            // Past the file system's timestamp granularity, so the times can differ.
            std::thread::sleep(Duration::from_millis(30));
            fs::write(p, b"9876543210").unwrap();
        }),
        ("replaced by another file", "a.txt", |p| {
            let other = p.with_extension("new");
            fs::write(&other, b"alpha\n").unwrap();
            fs::rename(&other, p).unwrap();
        }),
        ("replaced by a FIFO", "d/small", |p| {
            fs::remove_file(p).unwrap();
            let made = std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap();
            assert!(made.success(), "mkfifo {}", p.display());
        }),
    ]
}

fn option_sets() -> Vec<(&'static str, BuildOptions)> {
    let plain = BuildOptions {
        seal: Some(SealOptions::default()),
        ..BuildOptions::default()
    };
    let compressed = BuildOptions {
        compress: Some(Preset::parse("fast").unwrap().options()),
        ..plain.clone()
    };
    vec![("plain", plain), ("compressed", compressed)]
}

#[test]
fn a_file_changed_after_the_scan_fails_the_build_and_leaves_no_image() {
    for (opts_name, opts) in option_sets() {
        for (what, rel, change) in changes() {
            let dir = tempfile::tempdir().unwrap();
            let src = dir.path().join("src");
            tree(&src);
            let out = dir.path().join("out.img");
            let target = src.join(rel);
            let result = build_changed(
                opts.clone(),
                src.clone(),
                out.clone(),
                Box::new(move || change(&target)),
            );
            match result {
                Err(BuildError::Changed { path, what: how }) => {
                    assert!(
                        path.ends_with(rel),
                        "{opts_name}, {what}: the error names {} (why: {how})",
                        path.display()
                    );
                }
                other => panic!("{opts_name}, {what}: expected a Changed error, got {other:?}"),
            }
            assert!(
                !out.exists(),
                "{opts_name}, {what}: no image is left behind"
            );
            // Nothing but the output's absence: no temporary file either.
            let left: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                left,
                vec![std::ffi::OsString::from("src")],
                "{opts_name}, {what}"
            );
        }
    }
}

/// The same tree, unchanged, builds (the checks do not refuse a quiet source).
#[test]
fn an_unchanged_source_builds() {
    for (opts_name, opts) in option_sets() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        tree(&src);
        let out = dir.path().join("out.img");
        build_changed(opts, src, out.clone(), Box::new(|| {}))
            .unwrap_or_else(|e| panic!("{opts_name}: {e}"));
        assert!(out.exists(), "{opts_name}");
    }
}
