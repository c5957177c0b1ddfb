//! Opening with keys (`OpenOptions::keys`): a signature by a given key over a statement binding the
//! seal authenticates the image once at open; everything else is refused with the reason.

use sealfs_reader::check::{self, CheckOptions, Problem};
use sealfs_reader::{open, Authority, Checker, Follow, OpenError, OpenOptions, Trust};
use sealfs_trust::{Refusal, SignTarget, SigningKey, Statement};
use sealfs_verity::Digest;
use std::path::{Path, PathBuf};

fn build(dir: &Path, name: &str, content: &[u8], sidecar: Option<&Path>) -> (PathBuf, Digest) {
    let src = dir.join(format!("src-{name}"));
    std::fs::create_dir_all(src.join("etc")).unwrap();
    std::fs::write(src.join("etc/hostname"), content).unwrap();
    std::fs::write(src.join("big"), vec![7u8; 100_000]).unwrap();
    let out = dir.join(name);
    let mut opts = sealfs_builder::BuildOptions::default();
    if let Some(s) = sidecar {
        opts.seal.as_mut().unwrap().sidecar = Some(s.to_path_buf());
    }
    let summary =
        sealfs_builder::build(&src, &out, &opts, &sealfs_builder::NoProgress).expect("build");
    (out, summary.seal.expect("sealed").digest)
}

fn sign(image: &Path, sidecar: Option<&Path>, key: &SigningKey, detached: bool) {
    let mut st = sealfs_trust::seal_statement(image, sidecar).unwrap();
    st.name = Some("test".into());
    let target = SignTarget {
        image: image.to_path_buf(),
        sidecar: sidecar.map(Path::to_path_buf),
        detached,
    };
    sealfs_trust::sign_image(&target, key, &st).unwrap();
}

fn refusal(r: Result<sealfs_reader::OpenedImage, OpenError>) -> Refusal {
    match r {
        Err(e @ OpenError::Signature { .. }) => {
            assert!(e.is_image_fault());
            let OpenError::Signature { refusal, .. } = e else {
                unreachable!()
            };
            *refusal
        }
        Err(e) => panic!("not a signature refusal: {e}"),
        Ok(o) => panic!("opened: {:?}", o.trust),
    }
}

#[test]
fn keys_authenticate_at_open_and_refuse_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let (img, digest) = build(dir.path(), "a.img", b"a\n", None);
    let before = std::fs::read(&img).unwrap();
    let (k1, k2, k3) = (
        SigningKey::generate(),
        SigningKey::generate(),
        SigningKey::generate(),
    );

    // Unsigned.
    let r = refusal(open(&img, &OpenOptions::new().keys([k1.public()])));
    assert_eq!(r, Refusal::NotSigned);

    sign(&img, None, &k1, false);
    sign(&img, None, &k2, false);
    let after = std::fs::read(&img).unwrap();
    let erofs = open(&img, &OpenOptions::new()).unwrap().erofs_length as usize;
    assert_eq!(before[..erofs], after[..erofs], "EROFS bytes unchanged");

    for key in [&k1, &k2] {
        let opened = open(&img, &OpenOptions::new().keys([key.public()])).unwrap();
        assert_eq!(
            opened.trust,
            Trust::Authenticated {
                digest,
                authority: Authority::Key {
                    fingerprint: key.public().fingerprint()
                },
                checker: Checker::Reader
            }
        );
        let ino = opened.image.resolve("/etc/hostname", Follow::All).unwrap();
        assert_eq!(opened.image.read_vec(&ino, 0, 100).unwrap(), b"a\n");
        assert!(opened.trust.to_string().contains("signed by ed25519:"));
    }
    // Digest and key both: both must hold.
    let both = OpenOptions::new().digest(digest).keys([k1.public()]);
    assert!(open(&img, &both).unwrap().trust.is_authenticated());
    let wrong = Digest::new(digest.alg(), &[0; 32]).unwrap();
    assert!(matches!(
        open(&img, &OpenOptions::new().digest(wrong).keys([k1.public()])),
        Err(OpenError::DigestMismatch { .. })
    ));

    // An unknown (revoked) key.
    let r = refusal(open(&img, &OpenOptions::new().keys([k3.public()])));
    assert!(
        matches!(&r, Refusal::UnknownKeys(f) if f.len() == 2 && f.contains(&k1.public().fingerprint())),
        "{r}"
    );
    assert!(r.to_string().starts_with("signed only by unknown keys"));

    // The same signatures for another image: detached, moved.
    let (other, _) = build(dir.path(), "b.img", b"b\n", None);
    sign(&img, None, &k3, true);
    std::fs::rename(
        sealfs_trust::detached_path(&img),
        sealfs_trust::detached_path(&other),
    )
    .unwrap();
    let r = refusal(open(&other, &OpenOptions::new().keys([k3.public()])));
    assert!(
        matches!(r, Refusal::OtherImage { field: "digest", digest: d, .. } if d == digest),
        "{r}"
    );

    // Verify (the whole-image check) agrees.
    let report = check::check(
        &img,
        &CheckOptions {
            keys: vec![k2.public()],
            ..CheckOptions::default()
        },
        &check::NoProgress,
    )
    .unwrap();
    assert!(report.is_verified() && report.authenticated);
    assert_eq!(report.signed_by, Some(k2.public().fingerprint()));
    let report = check::check(
        &other,
        &CheckOptions {
            keys: vec![k3.public()],
            ..CheckOptions::default()
        },
        &check::NoProgress,
    )
    .unwrap();
    assert!(matches!(
        report.problems.as_slice(),
        [Problem::Signature(Refusal::OtherImage { .. })]
    ));
}

#[test]
fn sidecar_and_explicit_detached_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let side = dir.path().join("a.seal");
    let (img, digest) = build(dir.path(), "a.img", b"a\n", Some(&side));
    let image_before = std::fs::read(&img).unwrap();
    let k = SigningKey::generate();
    sign(&img, Some(&side), &k, false);
    assert_eq!(
        std::fs::read(&img).unwrap(),
        image_before,
        "image untouched"
    );
    let opened = open(&img, &OpenOptions::new().sidecar(&side).keys([k.public()])).unwrap();
    assert_eq!(opened.trust.digest(), Some(&digest));

    // A detached signature file somewhere else, given explicitly.
    let k2 = SigningKey::generate();
    sign(&img, Some(&side), &k2, true);
    let elsewhere = dir.path().join("sigs");
    std::fs::rename(sealfs_trust::detached_path(&img), &elsewhere).unwrap();
    let opts = OpenOptions::new().sidecar(&side).keys([k2.public()]);
    assert!(matches!(
        open(&img, &opts),
        Err(OpenError::Signature { .. })
    ));
    let opened = open(&img, &opts.signatures(&elsewhere)).unwrap();
    assert!(matches!(
        opened.trust,
        Trust::Authenticated {
            authority: Authority::Key { .. },
            ..
        }
    ));
}

#[test]
fn a_statement_for_other_parameters_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = build(dir.path(), "a.img", b"a\n", None);
    let k = SigningKey::generate();
    let mut st: Statement = sealfs_trust::seal_statement(&img, None).unwrap();
    st.erofs_length += 4096;
    let bytes = st.encode();
    let sig = sealfs_trust::Signature {
        public_key: k.public().to_bytes(),
        signature: k.sign(&bytes),
        statement: bytes,
    };
    // The signer refuses it...
    let target = SignTarget {
        image: img.clone(),
        sidecar: None,
        detached: true,
    };
    assert!(sealfs_trust::add_signature(&target, sig.clone()).is_err());
    // ...and a reader given it anyway refuses it too.
    std::fs::write(
        sealfs_trust::detached_path(&img),
        sealfs_trust::encode_section(&[sig]),
    )
    .unwrap();
    let r = refusal(open(&img, &OpenOptions::new().keys([k.public()])));
    assert!(
        matches!(
            r,
            Refusal::OtherImage {
                field: "erofs-length",
                ..
            }
        ),
        "{r}"
    );
}

/// Signs `image` (attached) with `key`, the statement naming `version`.
fn sign_version(image: &Path, key: &SigningKey, version: Option<&str>) {
    let mut st = sealfs_trust::seal_statement(image, None).unwrap();
    st.version = version.map(String::from);
    let target = SignTarget {
        image: image.to_path_buf(),
        sidecar: None,
        detached: false,
    };
    sealfs_trust::sign_image(&target, key, &st).unwrap();
}

/// `OpenOptions::min_version` and `CheckOptions::min_version`: two images signed by one key as
/// versions 1 and 2; a floor of 2 opens the second and refuses the first with
/// `Refusal::Rollback` (naming the version and the floor); a floor without keys is refused.
#[test]
fn min_version_refuses_older_statements() {
    let dir = tempfile::tempdir().unwrap();
    let (old, _) = build(dir.path(), "v1.img", b"one\n", None);
    let (new, digest) = build(dir.path(), "v2.img", b"two\n", None);
    let key = SigningKey::generate();
    sign_version(&old, &key, Some("1"));
    sign_version(&new, &key, Some("2"));
    let floor: sealfs_trust::Version = "2".parse().unwrap();
    let opts = OpenOptions::new()
        .keys([key.public()])
        .min_version(floor.clone());
    let opened = open(&new, &opts).expect("version 2 meets the floor");
    assert!(matches!(opened.trust, Trust::Authenticated { digest: d, .. } if d == digest));
    match refusal(open(&old, &opts)) {
        Refusal::Rollback {
            version, minimum, ..
        } => {
            assert_eq!(version.as_deref(), Some("1"));
            assert_eq!(minimum, floor);
        }
        other => panic!("not a rollback refusal: {other}"),
    }
    let check_opts = CheckOptions {
        keys: vec![key.public()],
        min_version: Some(floor.clone()),
        ..CheckOptions::default()
    };
    let report = check::check(&old, &check_opts, &check::NoProgress).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Signature(Refusal::Rollback { .. }))),
        "{:?}",
        report.problems
    );
    assert!(check::check(&new, &check_opts, &check::NoProgress)
        .unwrap()
        .is_verified());
    match open(&new, &OpenOptions::new().min_version(floor)) {
        Err(OpenError::Refused(why)) => assert!(why.contains("needs a key"), "{why}"),
        other => panic!("a floor without keys opened: {other:?}"),
    }
}
