//! Deterministic output: the same input and options give byte-identical images whatever the
//! thread count, build after build, and from two separately created copies of the same tree
//! (different inode numbers). The default UUID is derived from the content: stable for equal
//! content, different for different content; `-U clear` and `-U random` do what they say.
//!
//! Needs root for the full fixture (devices, owners, tmpfs).

mod common;

use common::fixture::make_full_fixture;
use common::*;
use std::fs;
use std::path::Path;

fn first_difference(a: &Path, b: &Path) -> Option<String> {
    let (x, y) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    if x == y {
        return None;
    }
    let i = x
        .iter()
        .zip(&y)
        .position(|(p, q)| p != q)
        .unwrap_or(x.len().min(y.len()));
    Some(format!(
        "{} ({} bytes) and {} ({} bytes) differ first at byte {i} (block {}, offset {})",
        a.display(),
        x.len(),
        b.display(),
        y.len(),
        i / 4096,
        i % 4096
    ))
}

#[test]
fn thread_count_and_rebuild_give_identical_images() {
    if !oracle_guard(root_env()) {
        return;
    }
    let tmp = Tmpfs::new("determinism").expect("tmpfs");
    let src = tmp.join("src");
    make_full_fixture(&src);
    let out = tempfile::Builder::new()
        .prefix("sealfs-det-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let j1 = out.path().join("j1.erofs");
    let j1b = out.path().join("j1b.erofs");
    let j2 = out.path().join("j2.erofs");
    let j8 = out.path().join("j8.erofs");
    let dflt = out.path().join("default.erofs");
    build_ok(&src, &j1, &["-j", "1"]);
    build_ok(&src, &j2, &["-j", "2"]);
    build_ok(&src, &j8, &["-j", "8"]);
    build_ok(&src, &j1b, &["-j", "1"]);
    build_ok(&src, &dflt, &[]);
    let mut diffs = Vec::new();
    for other in [&j2, &j8, &j1b, &dflt] {
        if let Some(d) = first_difference(&j1, other) {
            diffs.push(d);
        }
    }
    println!(
        "compared -j1, -j2, -j8, -j1 again and default ({} bytes each)",
        fs::metadata(&j1).unwrap().len()
    );
    assert_no_diffs("images of one source", &diffs);

    // A second, separately created copy of the same tree: other inode numbers, same content.
    let src2 = tmp.join("src2");
    make_full_fixture(&src2);
    let copy = out.path().join("copy.erofs");
    build_ok(&src2, &copy, &["-j", "2"]);
    if let Some(d) = first_difference(&j1, &copy) {
        panic!("two copies of one tree give different images: {d}");
    }
    println!("a second copy of the fixture gives the identical image");

    let uuid = sb_uuid(&superblock(&j1));
    assert_ne!(uuid, [0u8; 16], "default UUID is nil");
    println!("default UUID {uuid:02x?} is stable");
}

/// Small tree for the UUID tests (no root needed).
fn small_tree(dir: &Path, extra: bool) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("a"), b"alpha").unwrap();
    fs::write(dir.join("sub/b"), vec![7u8; 5000]).unwrap();
    if extra {
        fs::write(dir.join("c"), b"one more file").unwrap();
    }
}

#[test]
fn uuid_options() {
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (dir.path().join("s1"), dir.path().join("s2"));
    small_tree(&s1, false);
    small_tree(&s2, true);
    let img = |n: &str| dir.path().join(n);
    let args_t: &[&str] = &["-T", "1000000000"];
    build_ok(&s1, &img("a1"), args_t);
    build_ok(&s1, &img("a2"), args_t);
    build_ok(&s2, &img("b"), args_t);
    let (a1, a2, b) = (
        sb_uuid(&superblock(&img("a1"))),
        sb_uuid(&superblock(&img("a2"))),
        sb_uuid(&superblock(&img("b"))),
    );
    assert_eq!(
        a1, a2,
        "default UUID differs between two builds of one tree"
    );
    assert_ne!(a1, [0u8; 16], "default UUID is nil");
    assert_ne!(a1, b, "default UUID is the same for different content");
    assert_eq!(
        fs::read(img("a1")).unwrap(),
        fs::read(img("a2")).unwrap(),
        "rebuild not byte-identical"
    );
    println!("default UUID: stable per content ({a1:02x?}), differs for other content ({b:02x?})");

    build_ok(&s1, &img("clear"), &["-T", "1000000000", "-U", "clear"]);
    assert_eq!(
        sb_uuid(&superblock(&img("clear"))),
        [0u8; 16],
        "-U clear must give a nil UUID"
    );
    println!("-U clear: nil UUID");

    build_ok(&s1, &img("r1"), &["-U", "random"]);
    build_ok(&s1, &img("r2"), &["-U", "random"]);
    let (r1, r2) = (
        sb_uuid(&superblock(&img("r1"))),
        sb_uuid(&superblock(&img("r2"))),
    );
    assert_ne!(r1, r2, "-U random gave the same UUID twice");
    assert_ne!(r1, [0u8; 16]);
    assert_ne!(r1, a1);
    println!("-U random: {r1:02x?} and {r2:02x?}");

    build_ok(
        &s1,
        &img("given"),
        &["-U", "01234567-89AB-cdef-0123-456789abcdef"],
    );
    assert_eq!(
        sb_uuid(&superblock(&img("given"))),
        [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef
        ]
    );
    println!("-U with an explicit UUID (mixed case): stored as given");

    let out = run(&mut build_cmd(&s1, &img("bad"), &["-U", "not-a-uuid"]));
    assert!(!out.status.success(), "-U not-a-uuid was accepted");
    assert!(!img("bad").exists(), "rejected -U left an output file");
    println!("-U not-a-uuid rejected");
}
