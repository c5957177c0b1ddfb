//! Images in OCI registries: `sealfs push` to Debian's `docker-registry` (the CNCF distribution
//! registry, started here on loopback with filesystem storage; plain HTTP, and HTTPS with an
//! openssl-made CA and htpasswd credentials), read back by `skopeo inspect --raw` and `oras`
//! (outside oracles of the manifest and its referrers); every reading command on the reference
//! equals the same command on the local file, a FUSE mount of it equals the source tree, `pull`
//! writes the pushed bytes; a tampered blob in the registry's storage fails only the files whose
//! blocks changed; and the bad registries of the issue (401 without a token endpoint, 404 tag, a
//! manifest that is not what its digest says, wrong blob bytes, a tag moved during a mount, a
//! registry that ignores Range, a connection dropped mid-upload) give clear errors, never
//! unverified bytes.

mod common;

use common::compare::{compare_trees, Expect};
use common::servers::{
    docker_registry, oras_bin, tls_certificates, versitygw, FaultProxy, RegistrySetup, Server,
};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIG: usize = 2 << 20;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A cache directory for this test process (under the temp dir).
fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sealfs-registry-test-cache-{}", std::process::id()))
}

/// `sealfs ARGS` with `env`, its own persistent cache, no credentials from the user's files.
fn sealfs_env(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(sealfs_bin());
    c.env("TZ", "UTC")
        .env("LC_ALL", "C")
        .env("SEALFS_CACHE_DIR", cache_dir())
        .env("DOCKER_CONFIG", "/nonexistent")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("SEALFS_REGISTRY_USERNAME")
        .env_remove("SEALFS_REGISTRY_PASSWORD")
        .stdin(Stdio::null())
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

fn sealfs(args: &[&str]) -> Output {
    sealfs_env(args, &[])
}

fn ok(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The oracles and servers every test here needs, or a skip.
fn need() -> bool {
    oracle_guard(
        common::servers::docker_registry_bin()
            .map(|_| ())
            .and_then(|()| {
                need_tool("skopeo")
                    .map_err(|_| "skopeo not installed (Debian package skopeo)".into())
            })
            .and_then(|()| {
                need_tool("htpasswd")
                    .map_err(|_| "htpasswd not installed (Debian package apache2-utils)".into())
            })
            .and_then(|()| need_tool("openssl"))
            .and_then(|()| oras_bin().map(|_| ())),
    )
}

/// A source tree (the small fixture and a 2 MiB random file), and images of it: plain and lz4,
/// signed with an openssl-made Ed25519 key.
struct Fixture {
    dir: tempfile::TempDir,
    src: PathBuf,
    public_key: PathBuf,
    files: Vec<String>,
}

impl Fixture {
    fn new(seed: u64) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let src = d.join("src");
        fs::create_dir_all(&src).unwrap();
        small_fixture::build(&src, seed, false);
        fs::write(src.join("big"), pseudo_random(BIG, seed)).unwrap();
        let (key, public_key) = (d.join("key.pem"), d.join("key.pub"));
        for args in [
            &["genpkey", "-algorithm", "ed25519", "-out", s(&key)][..],
            &["pkey", "-in", s(&key), "-pubout", "-out", s(&public_key)][..],
        ] {
            assert!(run(Command::new("openssl").args(args)).status.success());
        }
        for (name, args) in [("plain", &[][..]), ("z", &["-z", "lz4", "-C", "65536"][..])] {
            let img = d.join(name);
            build_ok(&src, &img, args);
            ok(sealfs(&["sign", s(&img), "--key", s(&key)]), "sign");
        }
        let o = run(Command::new("find")
            .args([".", "-type", "f"])
            .current_dir(&src));
        let mut files: Vec<String> = text(&o.stdout)
            .lines()
            .filter(|l| !l.contains('\u{fffd}'))
            .map(|l| l.trim_start_matches('.').to_string())
            .collect();
        files.sort();
        Fixture {
            dir,
            src,
            public_key,
            files,
        }
    }

    fn image(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A registry started for a test, and how to name images in it.
struct Registry {
    work: tempfile::TempDir,
    server: Server,
    scheme: &'static str,
}

impl Registry {
    fn start(setup: &RegistrySetup) -> Registry {
        let work = tempfile::tempdir().unwrap();
        let server = docker_registry(work.path(), setup).expect("docker-registry starts");
        Registry {
            work,
            server,
            scheme: if setup.tls.is_some() {
                "oci"
            } else {
                "oci+http"
            },
        }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    /// `SCHEME://HOST/REPO_TAG`.
    fn reference(&self, repo_tag: &str) -> String {
        format!("{}://{}/{repo_tag}", self.scheme, self.host())
    }

    fn blob(&self, digest: &str) -> PathBuf {
        Server::registry_blob(self.work.path(), digest)
    }
}

/// `sha256:<hex>` of `bytes`, by `sha256sum`.
/// [`need`], and root with `/dev/fuse` for the tests that mount (`SKIP` without, a failure in CI).
fn need_fuse() -> bool {
    need()
        && oracle_guard(mount::root_env().and_then(|()| {
            Path::new("/dev/fuse")
                .exists()
                .then_some(())
                .ok_or_else(|| "/dev/fuse missing".to_string())
        }))
}

fn sha256sum(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "sha256:{}",
        text(&out.stdout).split_whitespace().next().unwrap()
    )
}

/// `push` printed `REF@DIGEST IMAGE_DIGEST`: the manifest digest.
fn pushed(o: &Output) -> (String, String) {
    let line = text(&o.stdout);
    let mut w = line.split_whitespace();
    let reference = w.next().unwrap().to_string();
    let digest = reference.rsplit_once('@').unwrap().1.to_string();
    (reference, digest)
}

fn skopeo_raw(reference: &str, extra: &[&str]) -> Vec<u8> {
    let o = run(Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .args(extra)
        .arg(format!("docker://{reference}")));
    assert!(o.status.success(), "skopeo: {}", text(&o.stderr));
    o.stdout
}

/// What a command printed, the image's name replaced.
fn shown(o: &Output, name: &str) -> (Option<i32>, String, String) {
    let clean = |b: &[u8]| text(b).replace(name, "IMAGE");
    (o.status.code(), clean(&o.stdout), clean(&o.stderr))
}

/// `sealfs CMD AUTH IMAGE ARGS` on the local file and on the reference: the same exit code and
/// output.
fn same(
    cmd: &str,
    local: &Path,
    reference: &str,
    auth: &[&str],
    args: &[&str],
    env: &[(&str, String)],
) -> Output {
    let with = |image: &str| -> Vec<String> {
        let mut a = vec![cmd.to_string()];
        a.extend(auth.iter().map(|x| x.to_string()));
        a.push(image.to_string());
        a.extend(args.iter().map(|x| x.to_string()));
        a
    };
    let a = with(s(local));
    let b = with(reference);
    let ours = sealfs(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let theirs = sealfs_env(&b.iter().map(String::as_str).collect::<Vec<_>>(), env);
    assert_eq!(
        shown(&ours, s(local)),
        shown(&theirs, reference),
        "sealfs {cmd} {args:?}: the registry's image differs from the local file"
    );
    ours
}

/// The reading commands on a reference equal them on the local file.
fn reads_equal(fx: &Fixture, local: &Path, reference: &str, auth: &[&str], env: &[(&str, String)]) {
    let o = same("ls", local, reference, auth, &["-lAR", "/"], env);
    assert!(
        o.status.success() && o.stdout.len() > 500,
        "{}",
        text(&o.stderr)
    );
    let files: Vec<&str> = fx.files.iter().map(String::as_str).collect();
    let o = same("cat", local, reference, auth, &files, env);
    assert!(o.status.success() && o.stdout.len() > BIG);
    let o = same("stat", local, reference, auth, &["/big"], env);
    assert!(o.status.success());
    let o = same("getfattr", local, reference, auth, &["-R", "-h", "/"], env);
    assert!(o.status.success());
    // extract: the same tree.
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (out.path().join("local"), out.path().join("registry"));
    let mut args = vec!["extract"];
    args.extend(auth);
    ok(
        sealfs(&[&args[..], &[s(local), s(&a)]].concat()),
        "extract local",
    );
    ok(
        sealfs_env(&[&args[..], &[reference, s(&b)]].concat(), env),
        "extract from the registry",
    );
    // GNU findutils and coreutils: every regular file's sha256, every other entry's type and
    // link target, then `ls -lnR` for modes, owners, sizes and times.
    let describe = |d: &Path| {
        let o = run(Command::new("sh")
            .arg("-c")
            .arg(
                "find . -type f -print0 | sort -z | xargs -0 -r sha256sum; \
                 find . ! -type f -printf '%y %p %l\\n' | sort",
            )
            .current_dir(d));
        assert!(o.status.success());
        o.stdout
    };
    assert!(describe(&a) == describe(&b), "extracted trees differ");
    let listing = |d: &Path| {
        let o = run(Command::new("ls")
            .args(["-lnR", "--time-style=+%s.%N"])
            .current_dir(d));
        text(&o.stdout)
            .lines()
            .filter(|l| !l.starts_with("total ") && !l.starts_with('d'))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(listing(&a), listing(&b));
    assert!(!fx.files.is_empty());
}

/// What a pushed artifact looks like to skopeo and oras, the reads through it, and `pull`.
#[test]
fn pushed_images_are_read_by_skopeo_and_oras_and_read_back_equal() {
    if !need() {
        return;
    }
    let fx = Fixture::new(11);
    let reg = Registry::start(&RegistrySetup::default());
    let oras = oras_bin().unwrap();
    for name in ["plain", "z"] {
        let local = fx.image(name);
        let image_digest = text(&ok(sealfs(&["digest", s(&local)]), "digest").stdout)
            .trim()
            .to_string();
        let target = reg.reference(&format!("sealfs/{name}:v1"));
        let o = ok(sealfs(&["push", s(&local), &target]), "push");
        let (pinned, manifest_digest) = pushed(&o);
        assert!(
            text(&o.stdout).contains(&image_digest),
            "{}",
            text(&o.stdout)
        );

        // The outside view: skopeo's and oras's manifest are the same bytes, whose sha256 is the
        // digest push printed, describing the image file as its one layer.
        let raw = skopeo_raw(&format!("{}/sealfs/{name}:v1", reg.host()), &[]);
        assert_eq!(sha256sum(&raw), manifest_digest);
        let fetched = run(Command::new(&oras)
            .args(["manifest", "fetch", "--plain-http"])
            .arg(format!("{}/sealfs/{name}:v1", reg.host())));
        assert!(fetched.status.success(), "oras: {}", text(&fetched.stderr));
        assert_eq!(
            fetched.stdout, raw,
            "oras and skopeo fetch the same manifest"
        );
        let m: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        assert_eq!(m["artifactType"], "application/vnd.sealfs.image.v1");
        assert_eq!(
            m["config"]["mediaType"],
            "application/vnd.oci.empty.v1+json"
        );
        let layers = m["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(
            layers[0]["mediaType"],
            "application/vnd.sealfs.image.v1.sealed"
        );
        assert_eq!(layers[0]["digest"], sha256sum(&fs::read(&local).unwrap()));
        assert_eq!(layers[0]["size"], fs::metadata(&local).unwrap().len());
        assert_eq!(m["annotations"]["org.sealfs.image.digest"], image_digest);
        assert_eq!(
            m["annotations"]["org.sealfs.image.hash-algorithm"],
            "sha256"
        );
        assert_eq!(m["annotations"]["org.sealfs.image.block-size"], "4096");
        // The blob in the registry's storage is the image file.
        assert!(
            fs::read(reg.blob(layers[0]["digest"].as_str().unwrap())).unwrap()
                == fs::read(&local).unwrap()
        );

        // The signatures, as oras finds them: one referrer of the signatures type (this registry
        // has no referrers API: through the sha256-<hex> tag).
        let discovered = run(Command::new(&oras)
            .args(["discover", "--plain-http", "--format", "json"])
            .arg(format!("{}/sealfs/{name}@{manifest_digest}", reg.host())));
        assert!(
            discovered.status.success(),
            "oras discover: {}",
            text(&discovered.stderr)
        );
        let d: serde_json::Value = serde_json::from_slice(&discovered.stdout).unwrap();
        let referrers = d["referrers"]
            .as_array()
            .or(d["manifests"].as_array())
            .cloned()
            .unwrap_or_default();
        assert_eq!(referrers.len(), 1, "{d}");
        assert_eq!(
            referrers[0]["artifactType"],
            "application/vnd.sealfs.signatures.v1"
        );
        let tag = manifest_digest.replace(':', "-");
        let index = skopeo_raw(&format!("{}/sealfs/{name}:{tag}", reg.host()), &[]);
        let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
        assert_eq!(
            index["mediaType"],
            "application/vnd.oci.image.index.v1+json"
        );
        let sig_manifest = skopeo_raw(
            &format!(
                "{}/sealfs/{name}@{}",
                reg.host(),
                index["manifests"][0]["digest"].as_str().unwrap()
            ),
            &[],
        );
        let sig: serde_json::Value = serde_json::from_slice(&sig_manifest).unwrap();
        assert_eq!(sig["subject"]["digest"], manifest_digest);

        // Reads: by key (signatures from the referrers), by digest, and pinned by manifest digest
        // (which brings its own expected digest).
        reads_equal(&fx, &local, &target, &["--key", s(&fx.public_key)], &[]);
        reads_equal(&fx, &local, &target, &["--digest", &image_digest], &[]);
        let o = ok(sealfs(&["inspect", &pinned]), "inspect pinned");
        let out = text(&o.stdout);
        assert!(
            out.contains(&manifest_digest) && out.contains("named by digest"),
            "{out}"
        );
        assert!(
            out.contains(&format!("authenticated: digest {image_digest}"))
                || out.contains("authenticated"),
            "{out}"
        );
        let o = ok(sealfs(&["digest", &target]), "digest of the reference");
        assert_eq!(
            text(&o.stdout).trim(),
            image_digest,
            "computed from the blob's bytes"
        );
        let o = ok(sealfs(&["verify", &pinned]), "verify pinned");
        assert!(
            text(&o.stdout).contains("authenticated"),
            "{}",
            text(&o.stdout)
        );
        let o = ok(
            sealfs(&["verify", "--key", s(&fx.public_key), &target]),
            "verify by key",
        );
        assert!(text(&o.stdout).contains("signed by"), "{}", text(&o.stdout));

        // A tag alone, without a digest or key: refused unless asked for by name.
        let o = sealfs(&["ls", &target]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            text(&o.stderr).contains("--self-consistent"),
            "{}",
            text(&o.stderr)
        );
        let o = ok(
            sealfs(&["ls", "--self-consistent", &target]),
            "self-consistent",
        );
        assert!(text(&o.stderr).contains("self-consistent"));

        // pull: the pushed bytes, and nothing left behind; the blocks the reads above left in
        // the persistent cache are not fetched again.
        let out = fx.dir.path().join(format!("{name}.pulled"));
        let before = reg.server.registry_blob_bytes();
        ok(
            sealfs(&["pull", "--key", s(&fx.public_key), &target, s(&out)]),
            "pull",
        );
        let fetched = reg.server.registry_blob_bytes() - before;
        let size = fs::metadata(&local).unwrap().len();
        println!("{name}: pull after reads fetched {fetched} of {size} bytes");
        assert!(
            fetched * 4 < size,
            "{fetched} of {size} bytes fetched again"
        );
        assert!(
            fs::read(&out).unwrap() == fs::read(&local).unwrap(),
            "pull is byte-identical"
        );
        let leftovers: Vec<_> = fs::read_dir(fx.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".sealfs-pull"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
    // What one command asks of the registry: one manifest request (no `GET /v2/` first), then
    // ranges of the blob, never the whole blob.
    let before = reg.server.registry_requests().len();
    let digest = text(&sealfs(&["digest", s(&fx.image("z"))]).stdout)
        .trim()
        .to_string();
    let target = reg.reference("sealfs/z:v1");
    ok(
        sealfs(&["ls", "--no-cache", "--digest", &digest, &target, "/"]),
        "ls",
    );
    let log: Vec<String> = reg.server.registry_requests().split_off(before);
    let manifests = log.iter().filter(|l| l.contains("/manifests/")).count();
    assert_eq!(manifests, 1, "{log:?}");
    assert!(!log.iter().any(|l| l.starts_with("GET /v2/ ")), "{log:?}");
    assert!(log.len() > 1, "{log:?}");
    assert!(
        log.iter()
            .filter(|l| l.contains("/blobs/"))
            .all(|l| l.ends_with(" 206")),
        "{log:?}"
    );
}

/// The same over HTTPS with a private CA and htpasswd credentials: refused without the CA or
/// without credentials (clearly, exit 2), read with them from the environment or from a docker
/// `config.json`.
#[test]
fn https_and_basic_credentials_from_the_environment_or_a_docker_config() {
    if !need() {
        return;
    }
    let fx = Fixture::new(12);
    let certs = fx.dir.path().join("certs");
    let (ca, cert, key) = tls_certificates(&certs).unwrap();
    let reg = Registry::start(&RegistrySetup {
        tls: Some((cert, key)),
        htpasswd: Some(("alice".into(), "s3cret".into())),
        ..Default::default()
    });
    let local = fx.image("z");
    let target = reg.reference("secure/z:v1");
    let creds = [
        ("SEALFS_REGISTRY_USERNAME", "alice".to_string()),
        ("SEALFS_REGISTRY_PASSWORD", "s3cret".to_string()),
    ];
    // No credentials: said before anything is sent.
    let o = sealfs(&["push", "--ca-cert", s(&ca), s(&local), &target]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("asks for credentials"),
        "{}",
        text(&o.stderr)
    );
    // No CA: the certificate is refused.
    let o = sealfs_env(&["push", s(&local), &target], &creds);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).to_lowercase().contains("certificate"),
        "{}",
        text(&o.stderr)
    );
    // A wrong password: the registry's 401, named.
    let o = sealfs_env(
        &["push", "--ca-cert", s(&ca), s(&local), &target],
        &[
            creds[0].clone(),
            ("SEALFS_REGISTRY_PASSWORD", "wrong".into()),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("401"), "{}", text(&o.stderr));
    let o = ok(
        sealfs_env(&["push", "--ca-cert", s(&ca), s(&local), &target], &creds),
        "push over https",
    );
    let (_, manifest_digest) = pushed(&o);
    let raw = skopeo_raw(
        &format!("{}/secure/z:v1", reg.host()),
        &["--creds", "alice:s3cret"],
    );
    assert_eq!(sha256sum(&raw), manifest_digest);
    // Reads with the environment's credentials, and with a docker config.json's.
    let auth = ["--key", s(&fx.public_key), "--ca-cert", s(&ca)];
    reads_equal(&fx, &local, &target, &auth, &creds);
    let docker = fx.dir.path().join("docker");
    fs::create_dir_all(&docker).unwrap();
    let b64 = text(
        &run(Command::new("sh")
            .arg("-c")
            .arg("printf alice:s3cret | base64"))
        .stdout,
    );
    fs::write(
        docker.join("config.json"),
        format!(
            r#"{{"auths":{{"{}":{{"auth":"{}"}}}}}}"#,
            reg.host(),
            b64.trim()
        ),
    )
    .unwrap();
    reads_equal(
        &fx,
        &local,
        &target,
        &auth,
        &[("DOCKER_CONFIG", s(&docker).to_string())],
    );
    // A credentials file that is not one: an error naming it, not anonymous access.
    fs::write(docker.join("config.json"), "{ not json").unwrap();
    let o = sealfs_env(
        &["ls", auth[0], auth[1], auth[2], auth[3], &target],
        &[("DOCKER_CONFIG", s(&docker).to_string())],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("config.json"),
        "{}",
        text(&o.stderr)
    );
}

/// A FUSE mount of a reference equals the source tree; the tag moved to another image during the
/// mount changes nothing the mount serves (its manifest was pinned at open), while a new command
/// sees the new image.
#[test]
fn a_mount_equals_the_source_and_keeps_its_image_when_the_tag_moves() {
    if !need_fuse() {
        return;
    }
    let fx = Fixture::new(13);
    let other = Fixture::new(14);
    let reg = Registry::start(&RegistrySetup::default());
    let target = reg.reference("mnt/img:latest");
    ok(sealfs(&["push", s(&fx.image("z")), &target]), "push");
    let mnt = fx.dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let key = s(&fx.public_key).to_string();
    ok(sealfs(&["mount", "--key", &key, &target, s(&mnt)]), "mount");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    // Half the files read before the tag moves, all of them after.
    let first: Vec<&String> = fx.files.iter().step_by(2).collect();
    for f in &first {
        let _ = fs::read(mnt.join(f.trim_start_matches('/')));
    }
    let o = ok(
        sealfs(&["push", "--no-signatures", s(&other.image("z")), &target]),
        "push another image to the tag",
    );
    let (_, moved_to) = pushed(&o);
    let diffs = compare_trees(&fx.src, &mnt, &Expect::default());
    assert!(
        diffs.is_empty(),
        "the mount after the tag moved:\n{}",
        diffs.join("\n")
    );
    let daemons = processes_naming(&mnt);
    assert_eq!(daemons.len(), 1, "one mount daemon: {daemons:?}");
    ok(sealfs(&["umount", s(&mnt)]), "umount");
    let left = still_running_after(&daemons, std::time::Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "mount daemon {left:?} runs on 20 s after its unmount"
    );
    let o = ok(
        sealfs(&["inspect", "--self-consistent", &target]),
        "inspect",
    );
    assert!(
        text(&o.stdout).contains(&moved_to),
        "a new command reads the new image"
    );
}

/// A byte changed in the blob in the registry's storage: the file whose block holds it fails
/// (exit 1, EIO-like), every other file reads equal, `verify` names it, and `pull` leaves nothing.
/// A wrong key is refused.
#[test]
fn a_tampered_blob_fails_only_the_files_whose_blocks_changed_and_a_wrong_key_is_refused() {
    if !need() {
        return;
    }
    let fx = Fixture::new(15);
    let reg = Registry::start(&RegistrySetup::default());
    let local = fx.image("plain");
    let target = reg.reference("tamper/plain:v1");
    ok(sealfs(&["push", s(&local), &target]), "push");
    let image = fs::read(&local).unwrap();
    let blob = reg.blob(&sha256sum(&image));
    // Where the big file's data lies in the (uncompressed) image: its first 4 KiB, found.
    let big = pseudo_random(BIG, 15);
    let at = image
        .windows(4096)
        .position(|w| w == &big[..4096])
        .expect("the big file's data in the image");
    let mut spoiled = fs::read(&blob).unwrap();
    spoiled[at + 5000] ^= 0x01;
    fs::write(&blob, &spoiled).unwrap();
    let key = s(&fx.public_key).to_string();
    // Every other file, in one command: each reads equal.
    let others: Vec<&str> = fx
        .files
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "/big")
        .collect();
    let mut args = vec!["cat", "--no-cache", "--key", &key, &target];
    args.extend(&others);
    let o = ok(sealfs(&args), "cat of the files the change does not touch");
    let expected: Vec<u8> = others
        .iter()
        .flat_map(|f| fs::read(fx.src.join(f.trim_start_matches('/'))).unwrap())
        .collect();
    assert!(o.stdout == expected, "the other files read equal");
    let o = sealfs(&["cat", "--no-cache", "--key", &key, &target, "/big"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("verif"), "{}", text(&o.stderr));
    assert!(o.stdout.len() < BIG, "no byte past the damaged block");
    let o = sealfs(&["verify", "--key", &key, &target]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/big"), "{}", text(&o.stderr));
    let out = fx.dir.path().join("pulled");
    let o = sealfs(&["pull", "--no-cache", "--key", &key, &target, s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(!out.exists(), "a failed pull leaves nothing");
    // Another key: refused.
    let other = fx.dir.path().join("other");
    assert!(run(Command::new("openssl").args([
        "genpkey",
        "-algorithm",
        "ed25519",
        "-out",
        s(&other)
    ]))
    .status
    .success());
    let other_pub = fx.dir.path().join("other.pub");
    assert!(run(Command::new("openssl").args([
        "pkey",
        "-in",
        s(&other),
        "-pubout",
        "-out",
        s(&other_pub)
    ]))
    .status
    .success());
    let o = sealfs(&["ls", "--key", s(&other_pub), &target]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("signed only by unknown keys"),
        "{}",
        text(&o.stderr)
    );
}

/// The bad registries: a 404 tag, a 401 without a token endpoint, a manifest whose bytes are not
/// what names them (pinned, or as the registry states), wrong blob bytes on the way (one read
/// fails, the next is right), and a registry that ignores Range.
#[test]
fn bad_registries_give_clear_errors_never_unverified_bytes() {
    if !need() {
        return;
    }
    let fx = Fixture::new(16);
    let reg = Registry::start(&RegistrySetup::default());
    let local = fx.image("plain");
    let target = reg.reference("bad/plain:v1");
    let o = ok(sealfs(&["push", s(&local), &target]), "push");
    let (pinned, manifest_digest) = pushed(&o);
    let key = s(&fx.public_key).to_string();

    let o = sealfs(&["ls", "--key", &key, &reg.reference("bad/plain:nope")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no such tag"),
        "{}",
        text(&o.stderr)
    );
    let o = sealfs(&["ls", "--key", &key, &reg.reference("bad/none:v1")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("not found"), "{}", text(&o.stderr));

    let proxy = FaultProxy::start(&reg.server, fx.dir.path()).unwrap();
    let via = |repo_tag: &str| format!("oci+http://127.0.0.1:{}/{repo_tag}", proxy.port);
    // Every answer a 401 without WWW-Authenticate.
    proxy.set(r#"{"fail": 1000, "status": 401}"#);
    let o = sealfs(&["ls", "--key", &key, &via("bad/plain:v1")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("401 without a token endpoint"),
        "{}",
        text(&o.stderr)
    );
    // A flipped byte in every blob answer: the reads fail verification (exit 1) and return
    // nothing of the file; once the answers are right again, so is the file.
    proxy.set(r#"{"flip": 1000, "only_ranges": true}"#);
    let o = sealfs(&[
        "cat",
        "--no-cache",
        "--key",
        &key,
        &via("bad/plain:v1"),
        "/big",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(o.stdout.len() < BIG);
    proxy.set("{}");
    let o = ok(
        sealfs(&[
            "cat",
            "--no-cache",
            "--key",
            &key,
            &via("bad/plain:v1"),
            "/big",
        ]),
        "cat after",
    );
    assert!(o.stdout == pseudo_random(BIG, 16));
    // A registry that ignores Range: a clear error, not the whole image fetched.
    proxy.set(r#"{"strip_range": true}"#);
    let o = sealfs(&["ls", "--key", &key, &via("bad/plain:v1")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("does not serve ranges"),
        "{}",
        text(&o.stderr)
    );
    proxy.set("{}");

    // The manifest's bytes changed in the registry's storage: refused by digest (exit 1), pinned
    // or by tag (the digest the registry states).
    let stored = reg.blob(&manifest_digest);
    let mut m = fs::read(&stored).unwrap();
    m.push(b' ');
    fs::write(&stored, &m).unwrap();
    for r in [&pinned, &target] {
        let o = sealfs(&["ls", "--key", &key, r]);
        assert_eq!(o.status.code(), Some(1), "{r}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("the manifest served hashes to"),
            "{}",
            text(&o.stderr)
        );
    }
}

/// Push: blobs uploaded in chunks resume after dropped connections; a second push sends no blob
/// (HEAD first); a push to another repository mounts the blobs from the first when asked.
#[test]
fn uploads_resume_after_dropped_connections_and_known_blobs_are_not_sent_again() {
    if !need() {
        return;
    }
    let fx = Fixture::new(17);
    let reg = Registry::start(&RegistrySetup::default());
    let proxy = FaultProxy::start(&reg.server, fx.dir.path()).unwrap();
    let local = fx.image("z");
    let target = format!("oci+http://127.0.0.1:{}/up/z:v1", proxy.port);
    proxy.set(r#"{"drop": 2, "methods": ["PATCH"]}"#);
    let o = ok(
        sealfs(&[
            "push",
            "--json",
            "--chunk-size",
            "65536",
            s(&local),
            &target,
        ]),
        "push through drops",
    );
    assert_eq!(proxy.left()["drop"], 0, "both drops were met");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let image_blob = &v["blobs"][1];
    assert!(
        image_blob["outcome"]
            .as_str()
            .unwrap()
            .contains("2 resumed"),
        "{v}"
    );
    let manifest_digest = v["manifest_digest"].as_str().unwrap().to_string();
    assert_eq!(
        sha256sum(&skopeo_raw(&format!("{}/up/z:v1", reg.host()), &[])),
        manifest_digest
    );
    let out = fx.dir.path().join("pulled");
    ok(
        sealfs(&["pull", "--key", s(&fx.public_key), &target, s(&out)]),
        "pull",
    );
    assert!(fs::read(&out).unwrap() == fs::read(&local).unwrap());

    // Again: every blob is there already.
    proxy.set("{}");
    let o = ok(
        sealfs(&["push", "--json", s(&local), &target]),
        "push again",
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for b in v["blobs"].as_array().unwrap() {
        assert_eq!(b["outcome"], "present", "{v}");
    }
    // Another repository, mounting from the first.
    let other = format!("oci+http://127.0.0.1:{}/elsewhere/z:v1", proxy.port);
    let o = ok(
        sealfs(&["push", "--json", "--mount-from", "up/z", s(&local), &other]),
        "push with mount",
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["blobs"][1]["outcome"], "mounted from up/z", "{v}");
    assert!(proxy.log().contains("mount=sha256"), "{}", proxy.log());
    let o = ok(
        sealfs(&["cat", "--key", s(&fx.public_key), &other, "/big"]),
        "read the mounted blob",
    );
    assert!(o.stdout == pseudo_random(BIG, 17));
}

/// A detached image (plain EROFS and its seal) travels as two layers and is read and pulled as
/// two files.
#[test]
fn a_detached_image_is_pushed_as_two_layers_and_pulled_as_two_files() {
    if !need() {
        return;
    }
    let fx = Fixture::new(18);
    let reg = Registry::start(&RegistrySetup::default());
    let plain = fx.dir.path().join("detached.erofs");
    build_ok(&fx.src, &plain, &["--no-seal"]);
    let seal = fx.dir.path().join("detached.seal");
    ok(sealfs(&["seal", s(&plain), "--sidecar", s(&seal)]), "seal");
    let digest = text(&ok(sealfs(&["digest", s(&plain)]), "digest").stdout)
        .trim()
        .to_string();
    let target = reg.reference("detached/img:v1");
    ok(
        sealfs(&["push", "--sidecar", s(&seal), s(&plain), &target]),
        "push",
    );
    let raw = skopeo_raw(&format!("{}/detached/img:v1", reg.host()), &[]);
    let m: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(
        m["layers"][0]["mediaType"],
        "application/vnd.sealfs.image.v1.erofs"
    );
    assert_eq!(
        m["layers"][1]["mediaType"],
        "application/vnd.sealfs.image.v1.seal"
    );
    assert_eq!(
        m["layers"][1]["digest"],
        sha256sum(&fs::read(&seal).unwrap())
    );
    let o = ok(
        sealfs(&["cat", "--digest", &digest, &target, "/big"]),
        "cat",
    );
    let d = ok(sealfs(&["digest", &target]), "digest");
    assert_eq!(
        text(&d.stdout).trim(),
        digest,
        "the sidecar comes from the artifact"
    );
    assert!(o.stdout == pseudo_random(BIG, 18));
    let (out, out_seal) = (fx.dir.path().join("p.erofs"), fx.dir.path().join("p.seal"));
    let o = sealfs(&["pull", "--digest", &digest, &target, s(&out)]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a detached image needs --sidecar-out"
    );
    ok(
        sealfs(&[
            "pull",
            "--digest",
            &digest,
            &target,
            s(&out),
            "--sidecar-out",
            s(&out_seal),
        ]),
        "pull",
    );
    assert!(fs::read(&out).unwrap() == fs::read(&plain).unwrap());
    assert!(fs::read(&out_seal).unwrap() == fs::read(&seal).unwrap());
}

/// The bearer-token flow against the registry's own token checks (`scripts/tokenserver.py` issues
/// the tokens): anonymous reads get a pull token, a push without credentials is refused by the
/// registry, a push with them gets a push token.
#[test]
fn bearer_tokens_anonymous_for_reads_and_with_credentials_for_pushes() {
    if !need() || !oracle_guard(need_tool("python3")) {
        return;
    }
    let fx = Fixture::new(19);
    let reg = Registry::start(&RegistrySetup {
        token: Some(("bob".into(), "t0ken".into())),
        ..Default::default()
    });
    let local = fx.image("z");
    let target = reg.reference("tok/z:v1");
    let o = sealfs(&["push", s(&local), &target]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("not authorized"),
        "{}",
        text(&o.stderr)
    );
    let creds = [
        ("SEALFS_REGISTRY_USERNAME", "bob".to_string()),
        ("SEALFS_REGISTRY_PASSWORD", "t0ken".to_string()),
    ];
    let o = ok(
        sealfs_env(&["push", s(&local), &target], &creds),
        "push with a token",
    );
    let (_, manifest_digest) = pushed(&o);
    assert_eq!(
        sha256sum(&skopeo_raw(
            &format!("{}/tok/z:v1", reg.host()),
            &["--creds", "bob:t0ken"]
        )),
        manifest_digest
    );
    // Anonymous reads: a pull token for anyone.
    reads_equal(&fx, &local, &target, &["--key", s(&fx.public_key)], &[]);
    let log = fs::read_to_string(reg.work.path().join("token.log")).unwrap();
    assert!(
        log.contains("bob repository:tok/z:pull,push -> pull,push"),
        "{log}"
    );
    assert!(log.contains("- repository:tok/z:pull -> pull"), "{log}");
    // Wrong credentials: the token endpoint's refusal, named.
    let o = sealfs_env(
        &["ls", "--key", s(&fx.public_key), &target],
        &[
            creds[0].clone(),
            ("SEALFS_REGISTRY_PASSWORD", "nope".into()),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("token endpoint"),
        "{}",
        text(&o.stderr)
    );
}

/// A registry storing in S3 (versitygw, behind the fault proxy, which logs each request's
/// Authorization scheme) with redirects on: blob reads are answered `307` to a presigned URL,
/// which is followed with the range and without the registry's basic credentials.
#[test]
fn redirects_to_presigned_storage_urls_are_followed() {
    if !need() {
        return;
    }
    let fx = Fixture::new(20);
    let s3_root = fx.dir.path().join("s3");
    fs::create_dir_all(s3_root.join("registry")).unwrap();
    let s3 = match versitygw(&s3_root, fx.dir.path()) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let proxy = FaultProxy::start(&s3, fx.dir.path()).unwrap();
    let reg = Registry::start(&RegistrySetup {
        htpasswd: Some(("carol".into(), "pw".into())),
        s3: Some(proxy.port),
        ..Default::default()
    });
    let creds = [
        ("SEALFS_REGISTRY_USERNAME", "carol".to_string()),
        ("SEALFS_REGISTRY_PASSWORD", "pw".to_string()),
    ];
    let local = fx.image("z");
    let target = reg.reference("s3/z:v1");
    ok(
        sealfs_env(&["push", s(&local), &target], &creds),
        "push to S3 storage",
    );
    reads_equal(&fx, &local, &target, &["--key", s(&fx.public_key)], &creds);
    let out = fx.dir.path().join("pulled");
    ok(
        sealfs_env(
            &["pull", "--key", s(&fx.public_key), &target, s(&out)],
            &creds,
        ),
        "pull through redirects",
    );
    assert!(fs::read(&out).unwrap() == fs::read(&local).unwrap());
    let log = reg.server.registry_requests();
    let redirected = log
        .iter()
        .filter(|l| l.starts_with("GET ") && l.contains("/blobs/") && l.ends_with(" 307"))
        .count();
    assert!(redirected > 3, "blob reads were redirected: {log:?}");
    assert!(
        !log.iter()
            .any(|l| l.contains("/blobs/sha256") && l.ends_with(" 206")),
        "no blob bytes came from the registry itself: {log:?}"
    );
}

/// The fill is the verifying source's, whatever it reads from: a mount of a reference with
/// `--fill=on` brings the whole blob into the cache (the registry's own log counts the bytes it
/// sent), reports the fill done, and then serves a tree equal to the source.
#[test]
fn a_mount_of_a_reference_is_filled_like_a_url() {
    if !need_fuse() {
        return;
    }
    let fx = Fixture::new(21);
    let reg = Registry::start(&RegistrySetup::default());
    let target = reg.reference("fill/img:latest");
    ok(sealfs(&["push", s(&fx.image("z")), &target]), "push");
    let size = fs::metadata(fx.image("z")).unwrap().len();
    let (mnt, cache) = (fx.dir.path().join("mnt"), fx.dir.path().join("cache"));
    fs::create_dir(&mnt).unwrap();
    let key = s(&fx.public_key).to_string();
    let sent_before = reg.server.registry_blob_bytes();
    ok(
        sealfs(&[
            "mount",
            "--key",
            &key,
            "--fill=on",
            "--cache-dir",
            s(&cache),
            &target,
            s(&mnt),
        ]),
        "mount",
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let fill = || {
        let o = sealfs(&["stats", "--json", s(&mnt)]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["verify"]["fill"].as_str().unwrap_or_default().to_string()
    };
    let t = std::time::Instant::now();
    while fill() != "done" && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (state, sent) = (fill(), reg.server.registry_blob_bytes() - sent_before);
    println!("--fill=on from a registry: fill {state}, {sent} blob bytes sent for {size}");
    assert_eq!(state, "done");
    assert!(sent >= size * 9 / 10, "{sent} of {size}");
    let diffs = compare_trees(&fx.src, &mnt, &Expect::default());
    let daemons = processes_naming(&mnt);
    assert_eq!(daemons.len(), 1, "one mount daemon: {daemons:?}");
    ok(sealfs(&["umount", s(&mnt)]), "umount");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    let left = still_running_after(&daemons, std::time::Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "mount daemon {left:?} runs on 20 s after its unmount"
    );
}

/// A mount daemon whose reads all came from the persistent cache (filled by an earlier command,
/// so the daemon never needed the network) exits when unmounted: it ends with its parent's
/// registry client, whose runtime's threads it does not have, and must not wait for them.
#[test]
fn a_mount_daemon_of_a_reference_read_from_the_cache_exits_when_unmounted() {
    if !need_fuse() {
        return;
    }
    let fx = Fixture::new(22);
    let reg = Registry::start(&RegistrySetup::default());
    let target = reg.reference("cached/img:latest");
    ok(sealfs(&["push", s(&fx.image("z")), &target]), "push");
    let (mnt, cache) = (fx.dir.path().join("mnt"), fx.dir.path().join("cache"));
    fs::create_dir(&mnt).unwrap();
    let key = s(&fx.public_key).to_string();
    let out = fx.dir.path().join("pulled");
    ok(
        sealfs(&[
            "extract",
            "--key",
            &key,
            "--cache-dir",
            s(&cache),
            &target,
            s(&out),
        ]),
        "extract (fills the cache)",
    );
    ok(
        sealfs(&[
            "mount",
            "--key",
            &key,
            "--fill=off",
            "--cache-dir",
            s(&cache),
            &target,
            s(&mnt),
        ]),
        "mount",
    );
    let daemons = processes_naming(&mnt);
    assert_eq!(daemons.len(), 1, "one mount daemon: {daemons:?}");
    let sent_before = reg.server.registry_blob_bytes();
    let diffs = compare_trees(&fx.src, &mnt, &Expect::default());
    let sent = reg.server.registry_blob_bytes() - sent_before;
    ok(sealfs(&["umount", s(&mnt)]), "umount");
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    assert_eq!(sent, 0, "the mount read everything from the cache");
    let left = still_running_after(&daemons, std::time::Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "mount daemon {left:?} runs on 20 s after its unmount"
    );
}
