//! `sealfs convert` against real programs: a four-layer image made by umoci (deletions, an
//! opaque directory, a whole directory whited out), pushed with `skopeo copy` to Debian's
//! `docker-registry` on loopback (which has no referrers API), converted with `--push --key`.
//! Then: `skopeo inspect --raw` of the image's manifest by digest is what it was; the referrer
//! is found through the `sha256-<hex>` tag (read with skopeo) with its subject, artifact type
//! and one entry per layer naming the layer digests the manifest lists and the diffIDs the
//! config lists; each sealed layer, extracted from the registry by its manifest digest, equals
//! GNU tar's extraction of that layer with each `.wh.NAME` made the character device 0:0 at
//! NAME (permissions 0, the marker's owner and time) and each `.wh..wh..opq` the
//! `trusted.overlay.opaque=y` of its directory; `sealfs verify --key` accepts each layer with
//! the public key and refuses another key. A layer blob spoiled in the registry's storage fails
//! the conversion naming its digest, and no referrer is attached. `oras discover` lists the
//! referrer when `oras` is built.
//!
//! Needs root (owners, devices, trusted xattrs), umoci, skopeo, GNU tar and docker-registry:
//! prints `SKIP:` otherwise (a failure under CI=true).

mod common;

use common::compare::{compare_extracted, Expect};
use common::*;
use sha2::Digest as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn guard() -> bool {
    oracle_guard(
        root_env()
            .and(need_tool("umoci"))
            .and(need_tool("skopeo"))
            .and(need_tool("tar"))
            .and(need_tool("openssl"))
            .and(servers::docker_registry_bin().map(|_| ())),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a shell command line that must succeed; its stdout.
fn sh(line: &str) -> String {
    let out = run(Command::new("sh").arg("-c").arg(line));
    assert!(
        out.status.success(),
        "{line}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `sealfs ARGS` with no credentials from the user's files and its own cache.
fn sealfs(args: &[&str], cache: &Path) -> Output {
    run(Command::new(sealfs_bin())
        .env("SEALFS_CACHE_DIR", cache)
        .env("DOCKER_CONFIG", "/nonexistent")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("SEALFS_REGISTRY_USERNAME")
        .env_remove("SEALFS_REGISTRY_PASSWORD")
        .stdin(Stdio::null())
        .args(args))
}

fn ok(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        text(&o.stderr)
    );
    o
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
}

/// A layout `L:t` of four layers made by umoci from the small fixture; returns its path.
fn make_layout(dir: &Path) -> PathBuf {
    let l = dir.join("L");
    let b = dir.join("bundle");
    let (ls, bs) = (l.display(), b.display());
    sh(&format!(
        "umoci init --layout '{ls}' && umoci new --image '{ls}:t'"
    ));
    // 1: the fixture, less its socket (tar archives none) and its character device 0:0 (which
    // a layer cannot hold but as a whiteout).
    sh(&format!("umoci unpack --image '{ls}:t' '{bs}'"));
    let rootfs = b.join("rootfs");
    small_fixture::build(&rootfs, 40, true);
    fs::remove_file(rootfs.join("dev/socket")).unwrap();
    fs::remove_file(rootfs.join("dev/whiteout")).unwrap();
    sh(&format!("umoci repack --image '{ls}:t' '{bs}'"));
    // 2: deletions (whiteouts of a file and a directory), a file made a directory, a change.
    sh(&format!(
        "rm -rf '{bs}' && umoci unpack --image '{ls}:t' '{bs}' && cd '{bs}/rootfs' && \
         rm sizes/f100 && rm -r a/b/c && rm sizes/text && mkdir sizes/text && \
         echo inside > sizes/text/in && echo changed > sizes/f1 && \
         cd / && umoci repack --image '{ls}:t' '{bs}' && rm -rf '{bs}'"
    ));
    // 3: an opaque directory; 4: a whole directory whited out.
    let opq = dir.join("opq");
    fs::create_dir(&opq).unwrap();
    fs::write(opq.join("only"), b"the only file left in many/\n").unwrap();
    sh(&format!(
        "touch -d @1650000000 '{0}/only' '{0}' && umoci insert --image '{ls}:t' --opaque '{0}' /many && \
         umoci insert --image '{ls}:t' --whiteout /links",
        opq.display()
    ));
    l
}

/// GNU tar's extraction of the layer blob `blob` into `out` (as root: owners by number,
/// permissions, xattrs), its whiteouts then made as overlayfs reads them in a lower layer.
/// Returns the paths (relative, `/`-led) of the directories the layer has an entry for.
fn tar_layer(blob: &Path, out: &Path) -> Vec<String> {
    fs::create_dir_all(out).unwrap();
    // `umoci insert` ends its layers without tar's end-of-archive blocks (GNU tar then extracts
    // every entry but exits on "Unexpected EOF" before setting directory times): they are
    // added after the layer's bytes.
    sh(&format!(
        "(gzip -dc '{}' && head -c 10240 /dev/zero) | tar -xf - -C '{}' --numeric-owner \
         --same-owner --same-permissions --xattrs --xattrs-include='*'",
        s(blob),
        s(out)
    ));
    const OVERLAY: &str = r#"
import os, stat, sys
root = sys.argv[1]
for dp, dns, fns in os.walk(root):
    for f in fns:
        if not f.startswith('.wh.'):
            continue
        p = os.path.join(dp, f)
        d = os.lstat(dp)
        w = os.lstat(p)
        os.unlink(p)
        if f == '.wh..wh..opq':
            os.setxattr(dp, 'trusted.overlay.opaque', b'y', follow_symlinks=False)
        else:
            n = os.path.join(dp, f[4:])
            os.mknod(n, stat.S_IFCHR, os.makedev(0, 0))
            os.chmod(n, 0)
            os.lchown(n, w.st_uid, w.st_gid)
            os.utime(n, ns=(w.st_atime_ns, w.st_mtime_ns), follow_symlinks=False)
        os.utime(dp, ns=(d.st_atime_ns, d.st_mtime_ns), follow_symlinks=False)
"#;
    let o = run(Command::new("python3").arg("-c").arg(OVERLAY).arg(out));
    assert!(o.status.success(), "whiteouts: {}", text(&o.stderr));
    sh(&format!(
        "(gzip -dc '{}' && head -c 10240 /dev/zero) | tar -tf -",
        s(blob)
    ))
    .lines()
    .filter(|l| l.ends_with('/'))
    .map(|l| format!("/{}", l.trim_start_matches("./").trim_end_matches('/')))
    .collect()
}

/// `skopeo inspect --raw` of `image` (a docker:// reference on the plain-HTTP registry).
fn raw(image: &str) -> String {
    sh(&format!(
        "skopeo inspect --raw --tls-verify=false '{image}'"
    ))
}

fn json(t: &str) -> serde_json::Value {
    serde_json::from_str(t).unwrap_or_else(|e| panic!("{e}: {t}"))
}

#[test]
fn convert_push_attaches_sealed_layers_that_extract_as_tar_and_verify_by_key() {
    if !guard() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = tmp.path();
    let layout = make_layout(d);
    let cache = d.join("cache");
    let (key, public, other) = (d.join("key.pem"), d.join("key.pub"), d.join("other"));
    ok(sealfs(&["keygen", s(&key)], &cache), "keygen");
    fs::rename(d.join("key.pem.pub"), &public).unwrap();
    ok(sealfs(&["keygen", s(&other)], &cache), "keygen");

    let work = d.join("registry");
    let reg = servers::docker_registry(&work, &servers::RegistrySetup::default())
        .expect("docker-registry starts");
    let host = format!("127.0.0.1:{}", reg.port);
    sh(&format!(
        "skopeo copy -q --dest-tls-verify=false oci:'{}':t docker://{host}/conv/img:v1",
        layout.display()
    ));
    let before = raw(&format!("docker://{host}/conv/img:v1"));
    let manifest_digest = sha256(before.as_bytes());
    let by_digest = format!("docker://{host}/conv/img@{manifest_digest}");
    let manifest = json(&before);
    let layers: Vec<String> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(layers.len(), 4, "{before}");
    let config = json(&sh(&format!(
        "skopeo inspect --config --raw --tls-verify=false '{by_digest}'"
    )));
    let diff_ids: Vec<&str> = config["rootfs"]["diff_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();

    // A layer spoiled in the registry's storage: the conversion fails naming it, and attaches
    // nothing.
    let stored = servers::Server::registry_blob(&work, &layers[2]);
    let good = fs::read(&stored).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    fs::write(&stored, &bad).unwrap();
    let reference = format!("oci+http://{host}/conv/img:v1");
    let out = d.join("out-bad");
    let o = sealfs(&["convert", &reference, "--push", "--out", s(&out)], &cache);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a spoiled layer: {}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stderr).contains(&layers[2]),
        "the error does not name the layer {}: {}",
        layers[2],
        text(&o.stderr)
    );
    let tag = manifest_digest.replacen(':', "-", 1);
    let tags = sh(&format!(
        "skopeo list-tags --tls-verify=false docker://{host}/conv/img"
    ));
    assert!(!tags.contains(&tag), "a referrer was attached: {tags}");
    println!("a spoiled layer: {}", text(&o.stderr).trim());
    fs::write(&stored, &good).unwrap();

    // A prefetch list past its bounds is refused before anything is built.
    let too_many = d.join("too-many");
    let many: String = (0..5000).map(|i| format!("/f{i}\n")).collect();
    fs::write(&too_many, many).unwrap();
    let o = sealfs(
        &["convert", &reference, "--push", "--prefetch", s(&too_many)],
        &cache,
    );
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--prefetch") && text(&o.stderr).contains("4096 paths"),
        "{}",
        text(&o.stderr)
    );

    // The conversion, signed, with a prefetch list (issue 40).
    let prefetch = d.join("prefetch");
    fs::write(
        &prefetch,
        "# what the container reads\n/bin/sh\n/etc/passwd\n\n/usr/lib/x\n",
    )
    .unwrap();
    let out = d.join("out");
    let o = ok(
        sealfs(
            &[
                "convert",
                &reference,
                "--push",
                "--key",
                s(&key),
                "--version",
                "2.1",
                "--out",
                s(&out),
                "--prefetch",
                s(&prefetch),
                "--json",
            ],
            &cache,
        ),
        "convert",
    );
    let report = json(&text(&o.stdout));
    println!("{report:#}");
    let image = &report["images"][0];
    assert_eq!(report["images"].as_array().unwrap().len(), 1);
    assert_eq!(image["manifest_digest"], manifest_digest.as_str());

    // Tags: the image's and the referrer tags only (the sealed layers' manifests have none).
    let tags = json(&sh(&format!(
        "skopeo list-tags --tls-verify=false docker://{host}/conv/img"
    )));
    for t in tags["Tags"].as_array().unwrap() {
        let t = t.as_str().unwrap();
        assert!(t == "v1" || t.starts_with("sha256-"), "a tag {t} was made");
    }
    // The image is as it was, by digest and by tag.
    assert_eq!(raw(&by_digest), before, "the manifest changed");
    assert_eq!(raw(&format!("docker://{host}/conv/img:v1")), before);

    // The referrer, through the tag schema (docker-registry has no referrers API).
    assert_eq!(
        image["referrer"]["referrers"],
        format!("tag {tag}").as_str()
    );
    let index = json(&raw(&format!("docker://{host}/conv/img:{tag}")));
    let entries: Vec<&serde_json::Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["artifactType"] == "application/vnd.sealfs.layers.v1+json")
        .collect();
    assert_eq!(entries.len(), 1, "{index}");
    let referrer_digest = entries[0]["digest"].as_str().unwrap();
    assert_eq!(image["referrer"]["manifest_digest"], referrer_digest);
    let referrer_text = raw(&format!("docker://{host}/conv/img@{referrer_digest}"));
    let referrer = json(&referrer_text);
    assert_eq!(
        referrer["artifactType"],
        "application/vnd.sealfs.layers.v1+json"
    );
    assert_eq!(referrer["subject"]["digest"], manifest_digest.as_str());
    assert_eq!(
        referrer["subject"]["mediaType"],
        manifest["mediaType"]
            .as_str()
            .unwrap_or("application/vnd.oci.image.manifest.v1+json")
    );
    assert_eq!(referrer["subject"]["size"], before.len());
    let entries = referrer["layers"].as_array().unwrap();
    assert_eq!(entries.len(), 4, "{referrer_text}");
    // The prefetch list, an annotation of the referrer as skopeo reads it.
    assert_eq!(
        referrer["annotations"]["org.sealfs.prefetch"], "/bin/sh\n/etc/passwd\n/usr/lib/x",
        "{referrer_text}"
    );

    // The library's reader of the referrer (what the snapshotter will use) finds each layer.
    let repo: sealfs_registry::ImageRef = format!("oci+http://{host}/conv/img").parse().unwrap();
    let client = sealfs_registry::Registry::connect(&repo, &Default::default()).unwrap();
    let found = client.converted_layers(&manifest_digest).unwrap();
    assert_eq!(found.len(), 4);
    for l in &found {
        assert_eq!(l.prefetch, ["/bin/sh", "/etc/passwd", "/usr/lib/x"]);
    }
    for (i, l) in found.iter().enumerate() {
        let a = &entries[i]["annotations"];
        assert_eq!(l.layer_digest, layers[i]);
        assert_eq!(l.diff_id, diff_ids[i]);
        assert_eq!(l.blob.digest, entries[i]["digest"].as_str().unwrap());
        assert_eq!(l.manifest, a["org.sealfs.layer.manifest"].as_str().unwrap());
        assert_eq!(
            l.facts.digest.to_string(),
            a["org.sealfs.image.digest"].as_str().unwrap()
        );
    }
    let third = client
        .converted_layer(&manifest_digest, &layers[2])
        .unwrap()
        .expect("layer 3 found");
    assert_eq!(third, found[2]);
    assert!(client
        .converted_layer(&manifest_digest, diff_ids[2])
        .unwrap()
        .is_none());

    let layer_blobs = layout.join("blobs/sha256");
    for (i, e) in entries.iter().enumerate() {
        let a = &e["annotations"];
        assert_eq!(a["org.sealfs.layer.digest"], layers[i].as_str());
        assert_eq!(a["org.sealfs.layer.diff-id"], diff_ids[i]);
        assert_eq!(e["mediaType"], "application/vnd.sealfs.image.v1.sealed");
        let sealed = a["org.sealfs.image.digest"].as_str().unwrap();
        let layer_manifest = a["org.sealfs.layer.manifest"].as_str().unwrap();
        let j = &image["layers"][i];
        assert_eq!(j["sealed_digest"], sealed);
        assert_eq!(j["layer_digest"], layers[i].as_str());
        assert_eq!(j["pushed"]["manifest_digest"], layer_manifest);
        assert_eq!(j["pushed"]["blob_digest"], e["digest"]);
        // The kept file is the sealed image; `sealfs digest` prints the digest recorded.
        let kept = PathBuf::from(j["path"].as_str().unwrap());
        let printed = ok(sealfs(&["digest", s(&kept)], &cache), "digest");
        assert_eq!(text(&printed.stdout).trim(), sealed);
        // The pushed blob is the kept file.
        let blob = servers::Server::registry_blob(&work, e["digest"].as_str().unwrap());
        assert_same_bytes(
            &fs::read(&blob).unwrap(),
            &fs::read(&kept).unwrap(),
            "the pushed sealed layer vs the kept one",
        );

        // From the registry, by its manifest digest: extracts as GNU tar extracts the layer.
        let sealed_ref = format!("oci+http://{host}/conv/img@{layer_manifest}");
        let extracted = d.join(format!("x{i}"));
        ok(
            sealfs(&["extract", &sealed_ref, s(&extracted)], &cache),
            "extract",
        );
        let oracle = d.join(format!("t{i}"));
        let listed = tar_layer(
            &layer_blobs.join(layers[i].trim_start_matches("sha256:")),
            &oracle,
        );
        // Directories the layer has no entry for (tar makes them with its own metadata, the
        // image with the importer's defaults) and the root are compared by their contents only.
        let implicit = |diff: &String| {
            let path = diff.split(':').next().unwrap_or("");
            let is_dir = oracle.join(path.trim_start_matches('/')).is_dir();
            is_dir
                && !listed.iter().any(|l| l == path)
                && !diff.contains("readdir")
                && !diff.contains("missing")
                && !diff.contains("extra")
        };
        let (skipped, diffs): (Vec<String>, Vec<String>) =
            compare_extracted(&oracle, &extracted, &Expect::default())
                .into_iter()
                .partition(implicit);
        println!(
            "layer {}: implicit directories differ as expected: {skipped:?}",
            i + 1
        );
        assert_no_diffs(
            &format!("layer {} from the registry vs GNU tar", i + 1),
            &diffs,
        );
        let whiteouts = sh(&format!(
            "cd '{}' && find . -type c -exec stat -c '%n %t:%T %a' {{}} + ; \
             getfattr -R -h -m trusted.overlay -d --absolute-names . 2>/dev/null | grep -c opaque || true",
            s(&extracted)
        ));
        println!("layer {} whiteouts: {}", i + 1, whiteouts.trim());

        // Signed: the key is accepted, another refused; the statement carries --version, which
        // a floor at it accepts and one above refuses.
        ok(
            sealfs(&["verify", "--key", s(&public), &sealed_ref], &cache),
            "verify --key",
        );
        ok(
            sealfs(
                &[
                    "verify",
                    "--key",
                    s(&public),
                    "--min-version",
                    "2.1",
                    &sealed_ref,
                ],
                &cache,
            ),
            "verify --min-version 2.1",
        );
        let o = sealfs(
            &[
                "verify",
                "--key",
                s(&public),
                "--min-version",
                "2.2",
                &sealed_ref,
            ],
            &cache,
        );
        assert_eq!(
            o.status.code(),
            Some(1),
            "a floor above the signed version accepted: {}",
            text(&o.stderr)
        );
        let o = sealfs(
            &[
                "verify",
                "--key",
                &format!("{}.pub", s(&other)),
                &sealed_ref,
            ],
            &cache,
        );
        assert_eq!(
            o.status.code(),
            Some(1),
            "another key accepted: {}",
            text(&o.stderr)
        );
    }
    // The layers with whiteouts hold them as overlay reads them.
    let dev = |i: usize, p: &str| {
        let md = fs::symlink_metadata(d.join(format!("x{i}")).join(p)).unwrap();
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        assert!(
            md.file_type().is_char_device() && md.rdev() == 0,
            "x{i}/{p}"
        );
    };
    dev(1, "sizes/f100");
    dev(1, "a/b/c");
    dev(3, "links");
    let opaque = sh(&format!(
        "getfattr -h -n trusted.overlay.opaque --only-values '{}'",
        s(&d.join("x2/many"))
    ));
    assert_eq!(opaque, "y");

    // oras, an OCI client nobody here wrote, lists the referrer.
    match servers::oras_bin() {
        Ok(oras) => {
            let o = run(Command::new(oras).args([
                "discover",
                "--plain-http",
                "--format",
                "json",
                &format!("{host}/conv/img@{manifest_digest}"),
            ]));
            assert!(o.status.success(), "oras discover: {}", text(&o.stderr));
            let listed = text(&o.stdout);
            assert!(
                listed.contains(referrer_digest)
                    && listed.contains("application/vnd.sealfs.layers.v1+json"),
                "oras discover: {listed}"
            );
            println!("oras discover lists the referrer {referrer_digest}");
        }
        Err(why) => println!("oras: {why}; not checked"),
    }
    drop(reg);
}

/// Makes `L:multi` in the layout: an index of the image `L:t` for linux/amd64 and linux/arm64
/// (the same layers, each its own config and manifest) and an attestation-like entry for
/// `unknown/unknown`, with Python's json and hashlib.
fn add_multi_platform_index(layout: &Path) {
    const MAKE: &str = r#"
import hashlib, json, os, sys
L = sys.argv[1]
def blob(d):
    return open(os.path.join(L, 'blobs', 'sha256', d[7:]), 'rb').read()
def put(b):
    h = 'sha256:' + hashlib.sha256(b).hexdigest()
    open(os.path.join(L, 'blobs', 'sha256', h[7:]), 'wb').write(b)
    return h, len(b)
idx = json.load(open(os.path.join(L, 'index.json')))
m = idx['manifests'][0]
man = json.loads(blob(m['digest']))
cfg = json.loads(blob(man['config']['digest']))
entries = []
for arch in ['amd64', 'arm64']:
    c = dict(cfg, architecture=arch)
    cd, cs = put(json.dumps(c).encode())
    mm = dict(man, config=dict(man['config'], digest=cd, size=cs))
    md, ms = put(json.dumps(mm).encode())
    entries.append({'mediaType': 'application/vnd.oci.image.manifest.v1+json', 'digest': md,
                    'size': ms, 'platform': {'os': 'linux', 'architecture': arch}})
entries.append(dict(entries[0], platform={'os': 'unknown', 'architecture': 'unknown'}))
ib = json.dumps({'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.index.v1+json',
                 'manifests': entries}).encode()
idig, isz = put(ib)
idx['manifests'].append({'mediaType': 'application/vnd.oci.image.index.v1+json', 'digest': idig,
                         'size': isz,
                         'annotations': {'org.opencontainers.image.ref.name': 'multi'}})
json.dump(idx, open(os.path.join(L, 'index.json'), 'w'))
"#;
    let o = run(Command::new("python3").arg("-c").arg(MAKE).arg(layout));
    assert!(o.status.success(), "index: {}", text(&o.stderr));
}

#[test]
fn convert_of_an_index_attaches_a_referrer_to_each_platform_manifest() {
    if !guard() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let d = tmp.path();
    let layout = make_layout(d);
    add_multi_platform_index(&layout);
    let cache = d.join("cache");
    let work = d.join("registry");
    let reg = servers::docker_registry(&work, &servers::RegistrySetup::default())
        .expect("docker-registry starts");
    let host = format!("127.0.0.1:{}", reg.port);
    sh(&format!(
        "skopeo copy -q --all --dest-tls-verify=false oci:'{}':multi docker://{host}/multi/img:v1",
        layout.display()
    ));
    let index_before = raw(&format!("docker://{host}/multi/img:v1"));
    let index = json(&index_before);
    let platform_manifests: Vec<(String, String)> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["platform"]["os"] == "linux")
        .map(|m| {
            (
                m["platform"]["architecture"].as_str().unwrap().to_string(),
                m["digest"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(platform_manifests.len(), 2, "{index_before}");
    let manifests_before: Vec<String> = platform_manifests
        .iter()
        .map(|(_, m)| raw(&format!("docker://{host}/multi/img@{m}")))
        .collect();

    let o = ok(
        sealfs(
            &[
                "convert",
                &format!("oci+http://{host}/multi/img:v1"),
                "--push",
                "--json",
            ],
            &cache,
        ),
        "convert",
    );
    let report = json(&text(&o.stdout));
    let images = report["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "{report:#}");
    for ((arch, digest), image) in platform_manifests.iter().zip(images) {
        assert_eq!(image["platform"], format!("linux/{arch}").as_str());
        assert_eq!(image["manifest_digest"], digest.as_str());
        let tag = digest.replacen(':', "-", 1);
        let referrers = json(&raw(&format!("docker://{host}/multi/img:{tag}")));
        let ours: Vec<&serde_json::Value> = referrers["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["artifactType"] == "application/vnd.sealfs.layers.v1+json")
            .collect();
        assert_eq!(ours.len(), 1, "{referrers}");
        let referrer = json(&raw(&format!(
            "docker://{host}/multi/img@{}",
            ours[0]["digest"].as_str().unwrap()
        )));
        assert_eq!(referrer["subject"]["digest"], digest.as_str());
        assert_eq!(referrer["layers"].as_array().unwrap().len(), 4);
    }
    // The same layers in both: built and pushed once.
    let pushed = |im: &serde_json::Value| -> Vec<serde_json::Value> {
        im["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["pushed"]["manifest_digest"].clone())
            .collect()
    };
    assert_eq!(pushed(&images[0]), pushed(&images[1]));
    // Nothing of the image changed.
    assert_eq!(raw(&format!("docker://{host}/multi/img:v1")), index_before);
    for ((_, m), before) in platform_manifests.iter().zip(&manifests_before) {
        assert_eq!(&raw(&format!("docker://{host}/multi/img@{m}")), before);
    }

    // From the layout, one platform: the same sealed layers.
    let out = d.join("out");
    let o = ok(
        sealfs(
            &[
                "convert",
                &format!("{}:multi", layout.display()),
                "--platform",
                "linux/arm64",
                "--out",
                s(&out),
                "--json",
            ],
            &cache,
        ),
        "convert a layout",
    );
    let local = json(&text(&o.stdout));
    let local_images = local["images"].as_array().unwrap();
    assert_eq!(local_images.len(), 1, "{local:#}");
    assert_eq!(local_images[0]["platform"], "linux/arm64");
    for i in 0..4 {
        assert_eq!(
            local_images[0]["layers"][i]["sealed_digest"],
            images[1]["layers"][i]["sealed_digest"]
        );
        assert!(local_images[0]["layers"][i]["pushed"].is_null());
    }
    // A layout's single image, whatever its platform.
    let o = ok(
        sealfs(
            &[
                "convert",
                &format!("{}:t", layout.display()),
                "--out",
                s(&d.join("out-t")),
                "--json",
            ],
            &cache,
        ),
        "convert a layout's image",
    );
    let single = json(&text(&o.stdout));
    assert_eq!(single["images"].as_array().unwrap().len(), 1, "{single:#}");
    assert_eq!(
        single["images"][0]["layers"][3]["sealed_digest"],
        images[0]["layers"][3]["sealed_digest"]
    );
    // A layout has no repository of its own to push to.
    let o = sealfs(
        &["convert", &format!("{}:t", layout.display()), "--push"],
        &cache,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--to"), "{}", text(&o.stderr));
    drop(reg);
}
