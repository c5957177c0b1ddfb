//! `sealfs keygen`, `sign`, `statement` and `--key` on the reading commands, with `openssl` as the
//! oracle for Ed25519 and the key files: openssl verifies our signatures, we accept openssl's, and
//! tampering with the statement, the signature or the key, or moving a signature to another image,
//! is refused with exit 1 and the reason. Signing never changes the EROFS bytes or the digest, and
//! the kernel still mounts a signed image.

mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `program args`, printing what it said (for the test log).
fn logged(program: &str, cmd: &mut Command, args: &[&str]) -> Output {
    let out = cmd.args(args).stdin(Stdio::null()).output().unwrap();
    println!(
        "{program} {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sealfs(args: &[&str]) -> Output {
    logged("sealfs", &mut Command::new(sealfs_bin()), args)
}

fn ok(args: &[&str]) -> String {
    let out = sealfs(args);
    assert!(out.status.success(), "failed: sealfs {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `sealfs ARGS` expecting exit 1 with `why` in stderr.
fn refused(args: &[&str], why: &str) {
    let out = sealfs(args);
    assert_eq!(out.status.code(), Some(1), "sealfs {args:?}");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(why),
        "sealfs {args:?}: {text:?} does not say {why:?}"
    );
}

fn openssl(args: &[&str]) -> Output {
    logged("openssl", &mut Command::new("openssl"), args)
}

fn openssl_ok(args: &[&str]) {
    assert!(openssl(args).status.success(), "openssl {args:?}");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small tree and its sealed image (`extra` changes the content, so the digest).
fn image(dir: &Path, name: &str, extra: &[u8], build_args: &[&str]) -> PathBuf {
    let src = dir.join(format!("src-{name}"));
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::write(src.join("etc/hostname"), b"signed\n").unwrap();
    fs::write(src.join("extra"), extra).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + i / 4096) as u8).collect();
    fs::write(src.join("big"), big).unwrap();
    let img = dir.join(name);
    build_ok(&src, &img, build_args);
    img
}

/// An openssl-made key pair: (private PEM, public PEM).
fn openssl_key(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(name);
    let public = dir.join(format!("{name}.pub"));
    openssl_ok(&["genpkey", "-algorithm", "ed25519", "-out", s(&key)]);
    openssl_ok(&["pkey", "-in", s(&key), "-pubout", "-out", s(&public)]);
    (key, public)
}

fn digest_of(img: &Path, extra: &[&str]) -> String {
    let mut args = vec!["digest", s(img)];
    args.extend_from_slice(extra);
    ok(&args).trim().to_string()
}

fn erofs_length(img: &Path) -> usize {
    let v: serde_json::Value = serde_json::from_str(&ok(&["inspect", "--json", s(img)])).unwrap();
    v["erofs_length"].as_u64().unwrap() as usize
}

#[test]
fn openssl_verifies_our_signatures_and_we_accept_openssls() {
    if !oracle_guard(need_tool("openssl")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = image(d, "a.img", b"a", &[]);
    let (key, public) = openssl_key(d, "k1");

    // Ours, checked by openssl.
    let (st, sig) = (d.join("statement"), d.join("sig"));
    let out = ok(&[
        "sign",
        s(&img),
        "--key",
        s(&key),
        "--name",
        "base",
        "--version",
        "1.0",
        "--created",
        "1764000000",
        "--statement-out",
        s(&st),
        "--signature-out",
        s(&sig),
    ]);
    let digest = digest_of(&img, &[]);
    let fingerprint = ok(&["keygen", s(&d.join("unused"))]); // a fingerprint's shape
    assert!(
        out.starts_with(&format!("{digest} signed by ed25519:")),
        "{out}"
    );
    assert_eq!(
        out.trim().len(),
        digest.len() + " signed by ".len() + fingerprint.trim().len()
    );
    let text = fs::read_to_string(&st).unwrap();
    assert_eq!(
        text,
        format!("sealfs-statement 1\ndigest {digest}\nhash-algorithm sha256\nblock-size 4096\nsalt -\nerofs-length {}\nname base\nversion 1.0\ncreated 1764000000\n", erofs_length(&img))
    );
    assert_eq!(fs::read(&sig).unwrap().len(), 64);
    openssl_ok(&[
        "pkeyutl",
        "-verify",
        "-rawin",
        "-pubin",
        "-inkey",
        s(&public),
        "-sigfile",
        s(&sig),
        "-in",
        s(&st),
    ]);
    // The statement `sealfs statement` prints is the one `sign` signs.
    assert_eq!(
        ok(&[
            "statement",
            s(&img),
            "--name",
            "base",
            "--version",
            "1.0",
            "--created",
            "1764000000"
        ]),
        text
    );
    let v = ok(&["verify", s(&img), "--key", s(&public)]);
    assert!(
        v.contains(&format!(
            "verified {digest}: authenticated: signed by ed25519:"
        )),
        "{v}"
    );

    // Openssl's signature over our statement, stored detached, accepted by verify and ls.
    let img2 = image(d, "b.img", b"b", &[]);
    let (key2, public2) = openssl_key(d, "k2");
    let st2 = d.join("statement2");
    fs::write(&st2, ok(&["statement", s(&img2), "--name", "other"])).unwrap();
    let sig2 = d.join("sig2");
    openssl_ok(&[
        "pkeyutl",
        "-sign",
        "-rawin",
        "-inkey",
        s(&key2),
        "-in",
        s(&st2),
        "-out",
        s(&sig2),
    ]);
    ok(&[
        "sign",
        s(&img2),
        "--signature-in",
        s(&sig2),
        "--pubkey",
        s(&public2),
        "--name",
        "other",
        "--detached",
    ]);
    assert!(Path::new(&format!("{}.sig", s(&img2))).exists());
    let v = ok(&["verify", s(&img2), "--key", s(&public2)]);
    assert!(v.contains("authenticated: signed by ed25519:"), "{v}");
    assert_eq!(
        ok(&["ls", s(&img2), "--key", s(&public2)]),
        "big\netc\nextra\n"
    );
    // A signature over a different statement (other fields) is not stored.
    refused(
        &[
            "sign",
            s(&img2),
            "--signature-in",
            s(&sig2),
            "--pubkey",
            s(&public2),
            "--detached",
        ],
        "does not verify",
    );

    // Our keygen's files are what openssl reads and writes.
    let ours = d.join("ours");
    let fp = ok(&["keygen", s(&ours)]);
    let mode = fs::metadata(&ours).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let derived = d.join("derived.pub");
    openssl_ok(&["pkey", "-in", s(&ours), "-pubout", "-out", s(&derived)]);
    assert_eq!(
        fs::read(&derived).unwrap(),
        fs::read(d.join("ours.pub")).unwrap()
    );
    let out = ok(&["sign", s(&img2), "--key", s(&ours), "--detached"]);
    assert!(out.trim().ends_with(fp.trim()), "{out} {fp}");
    // Two signatures in IMAGE.sig now: either key reads.
    for p in [&public2, &d.join("ours.pub")] {
        ok(&["cat", s(&img2), "/etc/hostname", "--key", s(p)]);
    }
}

/// Offset and length of the signature section of an attached seal (from the footer and header).
fn sig_section(img: &Path) -> (usize, usize) {
    let b = fs::read(img).unwrap();
    let f = b.len() - 64;
    let le = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let h = le(f + 16);
    (le(h + 64), le(h + 72))
}

fn flip(path: &Path, at: usize) {
    let mut b = fs::read(path).unwrap();
    b[at] ^= 0x10;
    fs::write(path, b).unwrap();
}

#[test]
fn tampering_rotation_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = image(d, "a.img", b"a", &[]);
    let original = fs::read(&img).unwrap();
    let digest = digest_of(&img, &[]);
    let (k1, k2, k3) = (d.join("k1"), d.join("k2"), d.join("k3"));
    for k in [&k1, &k2, &k3] {
        ok(&["keygen", s(k)]);
    }
    let pubs: Vec<String> = [&k1, &k2, &k3]
        .iter()
        .map(|k| format!("{}.pub", s(k)))
        .collect();

    // Unsigned: refused with --key, fine without.
    refused(&["verify", s(&img), "--key", &pubs[0]], "not signed");
    refused(&["ls", s(&img), "--key", &pubs[0]], "not signed");
    refused(
        &["cat", s(&img), "/etc/hostname", "--key", &pubs[0]],
        "not signed",
    );

    // Two keys sign (rotation): either reads; the third (revoked, not given) is refused.
    ok(&["sign", s(&img), "--key", s(&k1), "--name", "a"]);
    ok(&["sign", s(&img), "--key", s(&k2)]);
    ok(&[
        "sign",
        s(&img),
        "--key",
        s(&k1),
        "--name",
        "a",
        "--version",
        "2",
    ]); // replaces k1's
    let signed = fs::read(&img).unwrap();
    let len = erofs_length(&img);
    assert_eq!(
        signed[..len],
        original[..len],
        "signing changed the EROFS bytes"
    );
    assert_eq!(digest_of(&img, &[]), digest);
    for p in &pubs[..2] {
        assert!(ok(&["verify", s(&img), "--key", p]).contains("authenticated: signed by"));
        assert_eq!(
            ok(&["cat", s(&img), "/etc/hostname", "--key", p]),
            "signed\n"
        );
        let inspect = ok(&["inspect", s(&img), "--key", p]);
        assert!(
            inspect.contains("authenticated: signed by ed25519:"),
            "{inspect}"
        );
    }
    refused(
        &["verify", s(&img), "--key", &pubs[2]],
        "signed only by unknown keys (fingerprints ed25519:",
    );
    refused(
        &["ls", s(&img), "--key", &pubs[2]],
        "signed only by unknown keys",
    );
    // Without keys everything reads as before, and verify says self-consistent.
    assert!(ok(&["verify", s(&img)]).contains("self-consistent"));
    // --digest and --key together: both must hold.
    ok(&["verify", s(&img), "--key", &pubs[0], "--digest", &digest]);
    let wrong = format!("sha256:{}", "0".repeat(64));
    refused(
        &["ls", s(&img), "--key", &pubs[0], "--digest", &wrong],
        "not the expected",
    );
    // A keyring directory.
    let ring = d.join("ring");
    fs::create_dir(&ring).unwrap();
    fs::copy(&pubs[1], ring.join("second.pub")).unwrap();
    assert!(ok(&["verify", s(&img), "--keyring", s(&ring)]).contains("signed by"));
    // inspect --json lists both signatures with their statements.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["inspect", "--json", s(&img), "--key", &pubs[0]])).unwrap();
    let sigs = v["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 2, "{v}");
    assert_eq!(sigs[0]["statement"]["version"], "2");
    assert_eq!(sigs[0]["statement"]["digest"], digest.as_str());
    assert_eq!(sigs[0]["key_given"], true);
    assert_eq!(sigs[1]["key_given"], false);
    assert!(sigs
        .iter()
        .all(|s| s["valid"] == true && s["binds_this_image"] == true));
    assert_eq!(v["trust"], "authenticated");

    // Flipped bits in the attached section: the key (first entry), the statement, the signature.
    let (off, sig_len) = sig_section(&img);
    assert!(off >= len && sig_len > 0);
    let entry = off + 16; // after the section header: key (32), length (4), statement, signature (64)
    let st_len = u32::from_le_bytes(signed[entry + 32..entry + 36].try_into().unwrap()) as usize;
    for (what, at, why) in [
        ("key", entry + 5, "signed only by unknown keys"),
        ("statement", entry + 36 + 30, "damaged signature by key"),
        (
            "signature",
            entry + 36 + st_len + 10,
            "damaged signature by key",
        ),
    ] {
        let t = d.join(format!("tampered-{what}.img"));
        fs::write(&t, &signed).unwrap();
        flip(&t, at);
        println!("flipped a bit in the {what}");
        refused(&["verify", s(&t), "--key", &pubs[0]], why);
        refused(&["ls", s(&t), "--key", &pubs[0]], why);
        // The other key's signature is intact and still authenticates.
        ok(&["ls", s(&t), "--key", &pubs[1]]);
    }

    // Detached signatures moved to another image.
    let other = image(d, "b.img", b"b", &[]);
    ok(&["sign", s(&img), "--key", s(&k3), "--detached"]);
    fs::rename(format!("{}.sig", s(&img)), format!("{}.sig", s(&other))).unwrap();
    refused(
        &["verify", s(&other), "--key", &pubs[2]],
        &format!("names another image (digest {digest}"),
    );
    refused(
        &["cat", s(&other), "/etc/hostname", "--key", &pubs[2]],
        "names another image",
    );
    // The whole attached section copied into another image's seal is refused the same way.
    let other_sig = d.join("moved.sig");
    fs::write(&other_sig, &signed[off..off + sig_len]).unwrap();
    refused(
        &[
            "verify",
            s(&other),
            "--key",
            &pubs[0],
            "--signatures",
            s(&other_sig),
        ],
        "names another image",
    );

    // Sidecar seals: the sidecar is rewritten, the image file not at all.
    let side = d.join("c.seal");
    let img_c = image(d, "c.img", b"c", &["--sidecar", s(&side)]);
    let before = fs::read(&img_c).unwrap();
    ok(&["sign", s(&img_c), "--sidecar", s(&side), "--key", s(&k1)]);
    assert_eq!(fs::read(&img_c).unwrap(), before);
    assert!(ok(&[
        "verify",
        s(&img_c),
        "--sidecar",
        s(&side),
        "--key",
        &pubs[0]
    ])
    .contains("signed by"));
    ok(&[
        "extract",
        s(&img_c),
        s(&d.join("out")),
        "--sidecar",
        s(&side),
        "--key",
        &pubs[0],
    ]);
    assert_eq!(fs::read(d.join("out/etc/hostname")).unwrap(), b"signed\n");
    assert!(temp_leftovers(d).is_empty());

    // A damaged image is not signed (sign checks every block first).
    let damaged = d.join("damaged.img");
    fs::copy(&other, &damaged).unwrap();
    flip(&damaged, 4096 + 100);
    refused(&["sign", s(&damaged), "--key", s(&k1)], "not signed");
    assert!(!Path::new(&format!("{}.sig", s(&damaged))).exists());

    // Not sealed: nothing to sign.
    let plain = image(d, "plain.img", b"p", &["--no-seal"]);
    refused(&["sign", s(&plain), "--key", s(&k1)], "not sealed");
}

#[test]
fn the_kernel_mounts_a_signed_image() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = image(d, "a.img", b"a", &[]);
    ok(&["keygen", s(&d.join("k"))]);
    ok(&[
        "sign",
        s(&img),
        "--key",
        s(&d.join("k")),
        "--name",
        "mounted",
    ]);
    ok(&["verify", s(&img), "--key", s(&d.join("k.pub"))]);
    let mnt = mount_erofs(&img).unwrap();
    assert_eq!(
        fs::read(mnt.path().join("etc/hostname")).unwrap(),
        b"signed\n"
    );
    assert_eq!(
        fs::read(mnt.path().join("big")).unwrap(),
        fs::read(d.join("src-a.img/big")).unwrap()
    );
    drop(mnt);
    fsck(&img).unwrap();
}

/// Rollback protection with two signed versions of an image (keys made by openssl): with
/// `--min-version 2` the version 2 image reads and the version 1 one, validly signed by the same
/// key, is refused (exit 1, naming both versions); a statement without a version, or with text that
/// is not a version, never satisfies a floor; a second signature at or above the floor (key
/// rotation: another trusted key re-signed the image) lets it through; without keys the floor is
/// a usage error (exit 2).
#[test]
fn min_version_refuses_an_older_signed_image() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, public) = openssl_key(d, "release");
    let (key2, public2) = openssl_key(d, "second");
    let v1 = image(d, "v1.img", b"one", &["-q"]);
    let v2 = image(d, "v2.img", b"two", &["-q"]);
    let unversioned = image(d, "nover.img", b"none", &["-q"]);
    let texty = image(d, "text.img", b"text", &["-q"]);
    ok(&["sign", "--key", s(&key), "--version", "1", s(&v1)]);
    ok(&["sign", "--key", s(&key), "--version", "2", s(&v2)]);
    ok(&["sign", "--key", s(&key), s(&unversioned)]);
    ok(&["sign", "--key", s(&key), "--version", "2-beta", s(&texty)]);
    for (img, floor) in [(&v2, "2"), (&v2, "1.9"), (&v2, "2.0.0"), (&v1, "1")] {
        ok(&[
            "ls",
            s(img),
            "--key",
            s(&public),
            "--min-version",
            floor,
            "/",
        ]);
        ok(&[
            "verify",
            s(img),
            "--key",
            s(&public),
            "--min-version",
            floor,
        ]);
    }
    refused(
        &["ls", s(&v1), "--key", s(&public), "--min-version", "2", "/"],
        "as version 1, below the minimum version 2",
    );
    refused(
        &[
            "verify",
            s(&v1),
            "--key",
            s(&public),
            "--min-version",
            "1.0.1",
        ],
        "below the minimum version 1.0.1",
    );
    refused(
        &[
            "cat",
            s(&unversioned),
            "--key",
            s(&public),
            "--min-version",
            "1",
            "/extra",
        ],
        "without a version, below the minimum version 1",
    );
    refused(
        &[
            "cat",
            s(&texty),
            "--key",
            s(&public),
            "--min-version",
            "1",
            "/extra",
        ],
        "with a version that cannot be compared with the minimum version 1: \"2-beta\" is not a version",
    );
    // Another trusted key re-signs the old image as version 3: the floor is met by that one.
    ok(&["sign", "--key", s(&key2), "--version", "3", s(&v1)]);
    ok(&[
        "ls",
        s(&v1),
        "--key",
        s(&public),
        "--key",
        s(&public2),
        "--min-version",
        "2",
        "/",
    ]);
    refused(
        &["ls", s(&v1), "--key", s(&public), "--min-version", "2", "/"],
        "below the minimum version 2",
    );
    let out = sealfs(&["ls", s(&v2), "--min-version", "1", "/"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a floor without keys is a usage error"
    );
    let out = sealfs(&[
        "ls",
        s(&v2),
        "--key",
        s(&public),
        "--min-version",
        "v2",
        "/",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a floor that is no version is a usage error"
    );
}
