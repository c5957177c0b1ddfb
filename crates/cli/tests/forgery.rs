//! Forgeries of the bytes outside `[0, erofs_length)`: every row of docs/format.md §11.2 where a
//! forgery is possible is tried here, as an attacker who controls the medium would make it: the
//! bytes changed, then every CRC the reader checks recomputed (files_crc, header_crc, footer_crc:
//! CRC-32C, which anyone can compute). Offsets are the ones format.md gives, written here as
//! numbers, not taken from sealfs's code.
//!
//! The rule every row must keep: with an authority given (`--digest`, `--key`), each reading
//! command either fails or prints exactly what it printed for the untouched image. Rows the table
//! calls "ignored" must print the same everywhere; rows it calls "refused" must make `verify` fail.
//! Per-file digests of a seal written before they moved into the image are the one place where a
//! forgery can change what is printed: there `digest --files` must flag them (exit 4).

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const FOOTER: usize = 64;
const HEADER: usize = 512;

/// Where the header of a sealed file (or sidecar) starts: the footer's `header_offset` (bytes 16..24).
fn header_at(f: &[u8]) -> usize {
    let footer = f.len() - FOOTER;
    u64::from_le_bytes(f[footer + 16..footer + 24].try_into().unwrap()) as usize
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes what a reader checks against accidents: the per-file section's CRC (header 20..24,
/// when the section is there), the header's (footer 32..36) and the footer's (48..52, over the
/// footer with those bytes zero). `base` is where the seal's offsets count from (0, or the image
/// length for a sidecar read as one file: not used here).
fn refix(f: &mut [u8]) {
    let h = header_at(f);
    let (fo, fl) = (le64(f, h + 48) as usize, le64(f, h + 56) as usize);
    if fl != 0 && fo + fl <= f.len() {
        let crc = crc32c::crc32c(&f[fo..fo + fl]);
        f[h + 20..h + 24].copy_from_slice(&crc.to_le_bytes());
    }
    let hcrc = crc32c::crc32c(&f[h..h + HEADER]);
    let footer = f.len() - FOOTER;
    f[footer + 32..footer + 36].copy_from_slice(&hcrc.to_le_bytes());
    f[footer + 48..footer + 52].fill(0);
    let fcrc = crc32c::crc32c(&f[footer..]);
    f[footer + 48..footer + 52].copy_from_slice(&fcrc.to_le_bytes());
}

/// Inserts `extra` bytes at `at` and moves every offset the trailer holds that lies at or after
/// it (tree, per-file section, signatures, header), so the seal stays well-formed.
fn insert(f: &mut Vec<u8>, at: usize, extra: &[u8]) {
    let h = header_at(f);
    for field in [32, 48, 64] {
        let len = le64(f, h + field + 8);
        let off = le64(f, h + field);
        if len != 0 && off as usize >= at {
            put64(f, h + field, off + extra.len() as u64);
        }
    }
    let footer = f.len() - FOOTER;
    if h >= at {
        put64(f, footer + 16, (h + extra.len()) as u64);
    }
    f.splice(at..at, extra.iter().copied());
}

/// What the reading commands print for an image, with an authority given.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Seen {
    verify: (i32, String),
    files: (i32, String),
    ls: (i32, String),
    cat: (i32, Vec<u8>),
}

struct Case {
    dir: PathBuf,
    digest: String,
    key: PathBuf,
    files: Vec<String>,
}

impl Case {
    fn sealfs(&self) -> Command {
        let mut c = Command::new(sealfs_bin());
        c.current_dir(&self.dir);
        c
    }

    /// Runs the commands on `img` (a name in the case's directory) with `--digest` and `--key`.
    fn see(&self, img: &str, sidecar: Option<&str>) -> Seen {
        let auth = |c: &mut Command| {
            c.args(["--digest", &self.digest, "--key"]).arg(&self.key);
            if let Some(s) = sidecar {
                c.args(["--sidecar", s]);
            }
        };
        let code = |o: &std::process::Output| o.status.code().unwrap_or(-1);
        let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
        let mut v = self.sealfs();
        v.args(["verify", "--json"]).arg(img);
        auth(&mut v);
        let v = run(&mut v);
        let mut d = self.sealfs();
        d.args(["digest", "--files"]).arg(img);
        auth(&mut d);
        let d = run(&mut d);
        let mut l = self.sealfs();
        l.args(["ls", "-lR"]).arg(img).arg("/");
        auth(&mut l);
        let l = run(&mut l);
        let mut c = self.sealfs();
        c.arg("cat").arg(img);
        auth(&mut c);
        c.args(&self.files);
        let c = run(&mut c);
        Seen {
            verify: (code(&v), text(&v)),
            files: (code(&d), text(&d)),
            ls: (code(&l), text(&l)),
            cat: (code(&c), c.stdout.clone()),
        }
    }
}

/// What a forgery must do.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// Nothing observable changes.
    Same,
    /// `verify` fails; every other command fails or prints what it printed before.
    Refused,
}

fn check(case: &Case, base: &Seen, name: &str, got: &Seen, want: Want) {
    // The rule for every row: a command that succeeds prints what it printed before.
    for (what, (code, out), (_, before)) in [
        ("digest --files", &got.files, &base.files),
        ("ls -lR", &got.ls, &base.ls),
    ] {
        assert!(
            *code != 0 || out == before,
            "{name}: `{what}` succeeded with other output:\n{out}\nbefore:\n{before}"
        );
    }
    assert!(
        got.cat.0 != 0 || got.cat.1 == base.cat.1,
        "{name}: `cat` succeeded with other bytes"
    );
    match want {
        Want::Same => assert_eq!(
            got, base,
            "{name}: a forgery the reader ignores changed output"
        ),
        Want::Refused => assert_ne!(
            got.verify.0, 0,
            "{name}: verify accepted the forgery: {}",
            got.verify.1
        ),
    }
    let _ = case;
}

/// A tree with a file whose content is a per-file digest section (`SEALFDG1`, the trailer format of
/// earlier seals) listing forged digests: a place an attacker who controls a file's content could
/// try to point a reader at.
fn make_tree(dir: &Path) -> Vec<u8> {
    fs::create_dir_all(dir.join("d")).unwrap();
    fs::write(dir.join("hello.txt"), b"hello\n").unwrap();
    fs::write(dir.join("d/big"), vec![b'x'; 20_000]).unwrap();
    fs::hard_link(dir.join("hello.txt"), dir.join("d/link")).unwrap();
    let mut crafted = b"SEALFDG1\x01\x0c\x20\x00".to_vec();
    crafted.extend_from_slice(&3u32.to_le_bytes());
    for nid in [36u64, 40, 44] {
        crafted.extend_from_slice(&nid.to_le_bytes());
        crafted.extend_from_slice(&[0xee; 32]);
    }
    // Enough of it to sit in a data block of its own, where a block-aligned offset finds it.
    let mut body = crafted.clone();
    body.resize(8192, b'.');
    fs::write(dir.join("crafted.bin"), &body).unwrap();
    crafted
}

fn find_unique(hay: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "the probe bytes are not unique in the image");
    hits[0]
}

/// Every forgeable field and section of an attached, signed seal made by this release.
#[test]
fn forged_trailers_are_refused_or_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    let crafted = make_tree(&src);
    let img = d.join("good.img");
    let out = build_ok(&src, &img, &["-q", "-T", "0"]);
    let digest = String::from_utf8(out.stdout).unwrap().trim().to_string();
    for k in ["a", "b"] {
        let out = run(Command::new(sealfs_bin()).arg("keygen").arg(d.join(k)));
        assert!(out.status.success(), "keygen: {out:?}");
    }
    let out = run(Command::new(sealfs_bin())
        .args(["sign", "--version", "2", "--key"])
        .arg(d.join("a"))
        .arg(&img));
    assert!(out.status.success(), "sign: {out:?}");
    let case = Case {
        dir: d.to_path_buf(),
        digest,
        key: d.join("a.pub"),
        files: ["/hello.txt", "/d/big", "/d/link", "/crafted.bin"]
            .map(String::from)
            .to_vec(),
    };
    let good = fs::read(&img).unwrap();
    // Every run reads `forged.img`, so the outputs name the same image.
    let forged = d.join("forged.img");
    fs::write(&forged, &good).unwrap();
    let base = case.see("forged.img", None);
    assert_eq!(base.verify.0, 0, "the untouched image verifies: {:?}", base);
    assert!(
        base.verify.1.contains(r#""file_digests":"image""#),
        "{}",
        base.verify.1
    );
    assert!(base
        .verify
        .1
        .contains(r#""file_digests_authenticated":true"#));
    assert_eq!(base.files.0, 0);
    let h = header_at(&good);
    let footer = good.len() - FOOTER;
    let erofs_length = le64(&good, h + 24) as usize;
    let (tree_off, tree_len) = (le64(&good, h + 32) as usize, le64(&good, h + 40) as usize);
    let (sig_off, sig_len) = (le64(&good, h + 64) as usize, le64(&good, h + 72) as usize);
    assert!(sig_len > 0 && tree_len > 0);

    type Forge = Box<dyn Fn(&mut Vec<u8>)>;
    let rows: Vec<(&str, Want, Forge)> = vec![
        // Footer (§3).
        (
            "footer reserved 36..48",
            Want::Same,
            Box::new(move |f| f[footer + 36..footer + 48].fill(0xa5)),
        ),
        (
            "footer reserved2 52..56",
            Want::Same,
            Box::new(move |f| f[footer + 52..footer + 56].fill(0x5a)),
        ),
        (
            "footer version 2",
            Want::Refused,
            Box::new(move |f| f[footer + 8] = 2),
        ),
        (
            "footer_size 65",
            Want::Refused,
            Box::new(move |f| f[footer + 12] = 65),
        ),
        (
            "footer magic2",
            Want::Refused,
            Box::new(move |f| f[footer + 63] ^= 1),
        ),
        (
            "trailer_len: bytes between header and footer",
            Want::Same,
            Box::new(|f| {
                let at = f.len() - FOOTER;
                f.splice(at..at, [0x77u8; 100]);
                let footer = f.len() - FOOTER;
                let t = le64(f, footer + 24);
                put64(f, footer + 24, t + 100);
            }),
        ),
        (
            "header_offset at another header",
            Want::Refused,
            Box::new(move |f| {
                // A second header (its descriptor's salt changed, so another digest) placed in the
                // gap before the real one, and the footer pointed at it.
                let mut other = f[h..h + HEADER].to_vec();
                other[18] = 1; // salt_size
                other[144 + 3] = 1;
                other[144 + 80] = 0x42;
                insert(f, h, &other);
                let footer = f.len() - FOOTER;
                let trailer = f.len() - h;
                put64(f, footer + 16, h as u64);
                put64(f, footer + 24, trailer as u64);
            }),
        ),
        // Header (§4).
        ("header magic", Want::Refused, Box::new(move |f| f[h] ^= 1)),
        (
            "header version 2",
            Want::Refused,
            Box::new(move |f| f[h + 8] = 2),
        ),
        (
            "header hash_algorithm",
            Want::Refused,
            Box::new(move |f| f[h + 16] = 2),
        ),
        (
            "header log_blocksize",
            Want::Refused,
            Box::new(move |f| f[h + 17] = 13),
        ),
        (
            "header salt_size",
            Want::Refused,
            Box::new(move |f| f[h + 18] = 4),
        ),
        (
            "header flags DETACHED",
            Want::Refused,
            Box::new(move |f| f[h + 19] |= 1),
        ),
        (
            "header flags, other bits",
            Want::Same,
            Box::new(move |f| f[h + 19] |= 0xf0),
        ),
        (
            "header erofs_length",
            Want::Refused,
            Box::new(move |f| {
                let e = le64(f, h + 24);
                put64(f, h + 24, e - 4096);
            }),
        ),
        (
            "header tree_offset",
            Want::Refused,
            Box::new(move |f| {
                let t = le64(f, h + 32);
                put64(f, h + 32, t - 4096);
            }),
        ),
        (
            "header tree_length",
            Want::Refused,
            Box::new(move |f| {
                let t = le64(f, h + 40);
                put64(f, h + 40, t + 4096);
            }),
        ),
        (
            "per-file section pointed into a file's data",
            Want::Refused,
            Box::new(move |f| {
                let at = find_unique(&f[..erofs_length], &crafted);
                put64(f, h + 48, at as u64);
                put64(f, h + 56, crafted.len() as u64);
            }),
        ),
        (
            "per-file section added in the trailer",
            Want::Refused,
            Box::new(move |f| {
                let mut sec = b"SEALFDG1\x01\x0c\x20\x00".to_vec();
                sec.extend_from_slice(&1u32.to_le_bytes());
                sec.extend_from_slice(&40u64.to_le_bytes());
                sec.extend_from_slice(&[0xee; 32]);
                let len = sec.len();
                insert(f, h, &sec);
                put64(f, h + len + 48, h as u64);
                put64(f, h + len + 56, len as u64);
            }),
        ),
        (
            "sig_offset at other bytes",
            Want::Refused,
            Box::new(move |f| put64(f, h + 64, tree_off as u64)),
        ),
        (
            "sig_length 0 (signature removed)",
            Want::Refused,
            Box::new(move |f| {
                put64(f, h + 64, 0);
                put64(f, h + 72, 0);
            }),
        ),
        (
            "header root_hash",
            Want::Refused,
            Box::new(move |f| f[h + 80] ^= 1),
        ),
        (
            "descriptor salt, consistently (header, descriptor, digest field)",
            Want::Refused,
            Box::new(move |f| {
                f[h + 18] = 1;
                f[h + 144 + 3] = 1;
                f[h + 144 + 80] = 0x42;
                use sha2::Digest as _;
                let d = sha2::Sha256::digest(&f[h + 144..h + 400]);
                f[h + 400..h + 432].copy_from_slice(&d);
            }),
        ),
        (
            "digest field 400..464",
            Want::Refused,
            Box::new(move |f| f[h + 400] ^= 1),
        ),
        (
            "header reserved 464..512",
            Want::Same,
            Box::new(move |f| f[h + 464..h + 512].fill(0x33)),
        ),
        // Sections (§2.4, §7, §10.3).
        (
            "a gap between the tree and the signatures",
            Want::Same,
            Box::new(move |f| {
                insert(f, sig_off, &[0x99; 333]);
            }),
        ),
        (
            "a tree block",
            Want::Refused,
            Box::new(move |f| f[tree_off + 100] ^= 1),
        ),
        (
            "a signature byte",
            Want::Refused,
            Box::new(move |f| {
                let end = sig_off + sig_len;
                f[end - 1] ^= 1;
            }),
        ),
    ];
    for (name, want, forge) in &rows {
        let mut f = good.clone();
        forge(&mut f);
        refix(&mut f);
        fs::write(&forged, &f).unwrap();
        let got = case.see("forged.img", None);
        check(&case, &base, name, &got, *want);
        println!("{name}: {want:?} (verify exit {})", got.verify.0);
    }

    // A signature by a key not given, added to the seal: nothing changes for `--key a.pub`, and
    // `inspect` says it vouches for nothing.
    fs::copy(&img, &forged).unwrap();
    let out = run(Command::new(sealfs_bin())
        .args(["sign", "--name", "official", "--version", "99", "--key"])
        .arg(d.join("b"))
        .arg(&forged));
    assert!(out.status.success());
    check(
        &case,
        &base,
        "a signature by another key",
        &case.see("forged.img", None),
        Want::Same,
    );
    let inspect = run(Command::new(sealfs_bin())
        .arg("inspect")
        .arg(&forged)
        .args(["--key"])
        .arg(d.join("a.pub")));
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains(r#"key not given: vouches for nothing): "#)
            && text.contains("name official,"),
        "{text}"
    );

    // Detached signatures (IMAGE.sig): garbage there is refused when keys are given (the section
    // does not parse); a well-formed one by another key changes nothing.
    fs::copy(&img, &forged).unwrap();
    fs::write(d.join("forged.img.sig"), b"SEALSIG1 garbage").unwrap();
    check(
        &case,
        &base,
        "IMAGE.sig garbage",
        &case.see("forged.img", None),
        Want::Refused,
    );
    fs::remove_file(d.join("forged.img.sig")).unwrap();
    let out = run(Command::new(sealfs_bin())
        .args(["sign", "--detached", "--version", "100", "--key"])
        .arg(d.join("b"))
        .arg(&forged));
    assert!(out.status.success());
    check(
        &case,
        &base,
        "IMAGE.sig by another key",
        &case.see("forged.img", None),
        Want::Same,
    );
    fs::remove_file(d.join("forged.img.sig")).unwrap();

    // Rollback: the same key's older statement for this image is refused by --min-version.
    let v = run(Command::new(sealfs_bin()).current_dir(d).args([
        "verify",
        "good.img",
        "--key",
        "a.pub",
        "--min-version",
        "3",
    ]));
    assert_eq!(v.status.code(), Some(1), "{v:?}");
    assert!(String::from_utf8_lossy(&v.stderr).contains("below the minimum version 3"));
}

/// The sidecar form: the same trailer in its own file; the ignored fields change nothing, the
/// DETACHED flag cleared is refused.
#[test]
fn forged_sidecars_are_refused_or_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    make_tree(&src);
    let img = d.join("plain.img");
    let side = d.join("good.seal");
    let out = build_ok(
        &src,
        &img,
        &["-q", "-T", "0", "--sidecar", side.to_str().unwrap()],
    );
    let digest = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        run(Command::new(sealfs_bin()).arg("keygen").arg(d.join("a")))
            .status
            .success()
    );
    let out = run(Command::new(sealfs_bin())
        .args(["sign", "--sidecar", "good.seal", "--key", "a", "plain.img"])
        .current_dir(d));
    assert!(out.status.success(), "{out:?}");
    let case = Case {
        dir: d.to_path_buf(),
        digest,
        key: d.join("a.pub"),
        files: vec!["/hello.txt".into(), "/d/big".into()],
    };
    let good = fs::read(&side).unwrap();
    fs::write(d.join("forged.seal"), &good).unwrap();
    let base = case.see("plain.img", Some("forged.seal"));
    assert_eq!(base.verify.0, 0, "{base:?}");
    let h = header_at(&good);
    let footer = good.len() - FOOTER;
    type Forge = Box<dyn Fn(&mut Vec<u8>)>;
    let rows: Vec<(&str, Want, Forge)> = vec![
        (
            "sidecar footer reserved",
            Want::Same,
            Box::new(move |f| f[footer + 36] = 1),
        ),
        (
            "sidecar header reserved",
            Want::Same,
            Box::new(move |f| f[h + 500] = 1),
        ),
        (
            "sidecar DETACHED cleared",
            Want::Refused,
            Box::new(move |f| f[h + 19] &= !1),
        ),
        (
            "sidecar root_hash",
            Want::Refused,
            Box::new(move |f| f[h + 80] ^= 1),
        ),
        ("sidecar tree byte", Want::Refused, Box::new(|f| f[10] ^= 1)),
    ];
    for (name, want, forge) in &rows {
        let mut f = good.clone();
        forge(&mut f);
        refix(&mut f);
        fs::write(d.join("forged.seal"), &f).unwrap();
        let got = case.see("plain.img", Some("forged.seal"));
        check(&case, &base, name, &got, *want);
    }
}

/// A seal written by the release before per-file digests moved into the image
/// (tests/fixtures/seal-v1): its trailer section is the one forgeable thing a reader still shows.
/// A forged entry (CRCs refixed), or the section moved to crafted bytes, changes what `digest
/// --files` prints; it must then say UNAUTHENTICATED and exit 4, `--from-content` must print the
/// true digests, and `verify --digest` must report the lie.
#[test]
fn old_trailer_digests_are_flagged_when_forged() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seal-v1");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = fs::read(fixtures.join("attached.img")).unwrap();
    let digest = String::from_utf8(
        run(Command::new(sealfs_bin())
            .arg("digest")
            .arg(fixtures.join("attached.img")))
        .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let h = header_at(&good);
    let fo = le64(&good, h + 48) as usize;
    let files = |img: &Path, extra: &[&str]| {
        run(Command::new(sealfs_bin())
            .args(["digest", "--files", "--digest", &digest])
            .args(extra)
            .arg(img))
    };
    let true_files = files(&fixtures.join("attached.img"), &["--from-content"]);
    assert_eq!(true_files.status.code(), Some(0));

    // One entry's digest changed (the first entry's digest starts 8 bytes after the 16-byte header).
    let mut forged = good.clone();
    forged[fo + 16 + 8] ^= 0xff;
    refix(&mut forged);
    let img = d.join("forged.img");
    fs::write(&img, &forged).unwrap();
    let out = files(&img, &[]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_ne!(
        out.stdout, true_files.stdout,
        "the forged entry is printed, flagged"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNAUTHENTICATED"));
    let json = files(&img, &["--json"]);
    assert_eq!(json.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&json.stdout).contains(r#""file_digests_authenticated":false"#));
    assert_eq!(files(&img, &["--from-content"]).stdout, true_files.stdout);
    let v = run(Command::new(sealfs_bin())
        .args(["verify", "--digest", &digest])
        .arg(&img));
    assert_eq!(
        v.status.code(),
        Some(1),
        "verify must report the lie: {v:?}"
    );
}
