//! A plain archive file is read in place: its data is read while the image is written, so an
//! archive changed after its scan must fail the build (naming it), never give a mixed image.

use sealfs_builder::{build_from, BuildError, BuildOptions, Progress};
use sealfs_import::TarSource;
use std::fs;
use std::path::PathBuf;
use std::sync::Mutex;

/// Rewrites the archive (same bytes, a new modification time) once the data step begins.
struct TouchAtCopy(Mutex<Option<PathBuf>>);

impl Progress for TouchAtCopy {
    fn begin(&self, step: &'static str, _: Option<u64>) {
        if step != "reading the archive" {
            if let Some(p) = self.0.lock().unwrap().take() {
                let bytes = fs::read(&p).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
                fs::write(&p, bytes).unwrap();
            }
        }
    }
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

#[test]
fn an_archive_changed_during_the_build_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.tar");
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_mode(0o644);
    h.set_size(10_000);
    b.append_data(&mut h, "f", &vec![7u8; 10_000][..]).unwrap();
    fs::write(&archive, b.into_inner().unwrap()).unwrap();
    let out = dir.path().join("out.img");
    let opts = BuildOptions::default();
    let touch = TouchAtCopy(Mutex::new(Some(archive.clone())));
    let e = build_from(&mut TarSource::open(&archive).unwrap(), &out, &opts, &touch).unwrap_err();
    assert!(matches!(e, BuildError::Changed { .. }), "{e}");
    assert!(e.to_string().contains("a.tar"), "{e}");
    assert!(!out.exists());
    // Unchanged, it builds.
    build_from(
        &mut TarSource::open(&archive).unwrap(),
        &out,
        &opts,
        &sealfs_builder::NoProgress,
    )
    .unwrap();
}
