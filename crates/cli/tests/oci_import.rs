//! `sealfs build --oci` against umoci and skopeo: a multi-layer image made by `umoci repack`
//! and `umoci insert` (file and directory deletions, a file replaced by a directory and the
//! reverse, an opaque directory, a whiteout of a whole directory), recompressed by `skopeo
//! copy` (zstd, uncompressed). The flattened image must equal, byte for byte, `sealfs build` of
//! the tree `umoci unpack` leaves, for every compression of the layers and plain and
//! compressed builds, and its kernel mount must equal that tree; the per-layer images
//! (`--oci-layer`), mounted by the kernel and stacked by the kernel's overlayfs, must equal it
//! too. Bad images (a layer that does not match its digest, a missing blob, a manifest that
//! does not parse, an unknown media type, no image for the platform, a corrupt layer) fail
//! naming the layer or blob, and leave no image. Layers with POSIX ACL xattrs, with a whiteout
//! below a directory made a file, and with times `umoci unpack` cannot give (unlisted
//! directories, years after 2262) are checked too, the last against docs/usage.md's time rule.
//!
//! Needs root (owners, devices, mounts), umoci and skopeo: prints `SKIP:` otherwise (a failure
//! under CI=true).

mod common;

use common::compare::{compare_trees, Expect};
use common::*;
use sha2::Digest as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn guard() -> bool {
    oracle_guard(mount_env().and(need_tool("umoci")).and(need_tool("skopeo")))
}

/// Runs a shell command line that must succeed.
fn sh(line: &str) {
    let out = run(Command::new("sh").arg("-c").arg(line));
    assert!(
        out.status.success(),
        "{line}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sealfs build ARGS --oci IMAGE OUT`.
fn oci_cmd(image: &str, out: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(sealfs_bin());
    cmd.arg("build").args(args).arg("--oci").arg(image).arg(out);
    cmd.env_remove("SOURCE_DATE_EPOCH");
    cmd.stdin(Stdio::null());
    cmd
}

/// A layout `L:t` of five layers made by umoci from the small fixture, in `dir`; returns the
/// layout's path.
fn make_layout(dir: &Path) -> PathBuf {
    let l = dir.join("L");
    let b = dir.join("bundle");
    let (ls, bs) = (l.display(), b.display());
    sh(&format!(
        "umoci init --layout '{ls}' && umoci new --image '{ls}:t'"
    ));
    let unpack = || {
        sh(&format!(
            "rm -rf '{bs}' && umoci unpack --image '{ls}:t' '{bs}'"
        ))
    };
    let repack = || sh(&format!("umoci repack --image '{ls}:t' '{bs}'"));
    // 1: the fixture, less its socket (tar archives none) and its character device 0:0 (which
    // overlayfs takes for a whiteout in a layer: `--oci-layer` warns of it).
    unpack();
    let rootfs = b.join("rootfs");
    small_fixture::build(&rootfs, 30, true);
    fs::remove_file(rootfs.join("dev/socket")).unwrap();
    fs::remove_file(rootfs.join("dev/whiteout")).unwrap();
    repack();
    // 2: deletions and replacements, as umoci's diff of the tree writes them.
    unpack();
    let r = rootfs.display();
    sh(&format!(
        "cd '{r}' && rm sizes/f100 && rm -r a/b/c && rm -r empty && echo now-a-file > empty \
         && rm sizes/text && mkdir sizes/text && echo inside > sizes/text/in \
         && echo changed > sizes/f1 && chmod 600 sizes/f4096 && echo new > many/new \
         && touch -d @1600000000.5 sizes/text/in sizes/text empty"
    ));
    repack();
    // 3: an opaque directory: many/ holds only what this layer puts there.
    let opq = dir.join("opq");
    fs::create_dir(&opq).unwrap();
    fs::write(opq.join("only"), b"the only file left in many/\n").unwrap();
    sh(&format!(
        "touch -d @1650000000 '{0}/only' '{0}' && umoci insert --image '{ls}:t' --opaque '{0}' /many",
        opq.display()
    ));
    // 4: a whole directory whited out; 5: a file added below a lower layer's directory.
    sh(&format!("umoci insert --image '{ls}:t' --whiteout /links"));
    let added = dir.join("added");
    fs::write(&added, b"added by the last layer\n").unwrap();
    sh(&format!(
        "touch -d @1660000000 '{0}' && umoci insert --image '{ls}:t' '{0}' /a/b/added",
        added.display()
    ));
    sh(&format!("rm -rf '{bs}'"));
    l
}

/// The whiteout and opaque markers of every layer of the layout, as GNU tar lists them: what
/// the test relies on umoci having written.
fn markers(layout: &Path) -> Vec<String> {
    let out = run_ok(Command::new("sh").arg("-c").arg(format!(
        "cd '{}' && for m in $(python3 -c 'import json;i=json.load(open(\"index.json\"));m=json.load(open(\"blobs/sha256/\"+i[\"manifests\"][0][\"digest\"][7:]));print(\" \".join(l[\"digest\"][7:] for l in m[\"layers\"]))'); \
         do tar -tzf blobs/sha256/$m 2>/dev/null | grep '\\.wh\\.' ; done; true",
        layout.display()
    )))
    .unwrap();
    out.lines().map(str::to_string).collect()
}

#[test]
fn layers_flatten_as_umoci_unpacks_them_and_stack_in_overlayfs() {
    if !guard() {
        return;
    }
    let tmp = Tmpfs::new("oci").expect("tmpfs");
    let layout = make_layout(tmp.path());
    let found = markers(&layout);
    for want in [
        "sizes/.wh.f100",
        "a/b/.wh.c",
        "many/.wh..wh..opq",
        ".wh.links",
    ] {
        assert!(
            found.iter().any(|m| m.trim_start_matches("./") == want),
            "umoci wrote no {want}: {found:?}"
        );
    }
    let unpacked = tmp.join("unpacked");
    sh(&format!(
        "umoci unpack --image '{}:t' '{}'",
        layout.display(),
        unpacked.display()
    ));
    let rootfs = unpacked.join("rootfs");
    // The same image recompressed by skopeo: zstd layers, and uncompressed ones.
    // (skopeo 1.9 decompresses only into its dir: transport.)
    let (lz, lu, d) = (tmp.join("Lz"), tmp.join("Lu"), tmp.join("D"));
    sh(&format!(
        "skopeo copy -q --dest-compress --dest-compress-format zstd oci:'{0}':t oci:'{1}':t && \
         skopeo copy -q --dest-decompress oci:'{0}':t dir:'{3}' && \
         skopeo copy -q --dest-oci-accept-uncompressed-layers dir:'{3}' oci:'{2}':t",
        layout.display(),
        lz.display(),
        lu.display(),
        d.display()
    ));
    let layer_types = |l: &Path| {
        run_ok(Command::new("sh").arg("-c").arg(format!(
            "cd '{}' && python3 -c 'import json;i=json.load(open(\"index.json\"));m=json.load(open(\"blobs/sha256/\"+i[\"manifests\"][0][\"digest\"][7:]));print(sorted(set(l[\"mediaType\"] for l in m[\"layers\"])))'",
            l.display()
        )))
        .unwrap()
    };
    assert!(
        layer_types(&lz).contains("tar+zstd"),
        "{}",
        layer_types(&lz)
    );
    assert!(
        layer_types(&lu).contains("layer.v1.tar'"),
        "{}",
        layer_types(&lu)
    );

    let img_dir = tempfile::Builder::new()
        .prefix("sealfs-oci-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (dir_img, oci_img) = (
        img_dir.path().join("dir.img"),
        img_dir.path().join("oci.img"),
    );
    let sets: &[&[&str]] = &[&[], &["-z", "lz4hc", "-E", "fragments", "-C", "65536"]];
    for args in sets {
        build_ok(&rootfs, &dir_img, args);
        for l in [&layout, &lz, &lu] {
            let image = format!("{}:t", l.display());
            build_ok_cmd(&mut oci_cmd(&image, &oci_img, args));
            let same = fs::read(&dir_img).unwrap() == fs::read(&oci_img).unwrap();
            assert!(
                same,
                "{image} {args:?}: --oci differs from umoci unpack + build"
            );
            println!("{image} {args:?}: --oci equals umoci unpack + build, byte for byte");
        }
    }
    // The kernel's view of the flattened image.
    build_ok_cmd(&mut oci_cmd(
        &format!("{}:t", layout.display()),
        &oci_img,
        &[],
    ));
    let mnt = mount_erofs(&oci_img).unwrap();
    assert_no_diffs(
        "kernel mount of the --oci image vs umoci unpack",
        &compare_trees(&rootfs, mnt.path(), &Expect::default()),
    );
    drop(mnt);

    // One image per layer, stacked by overlayfs (the top layer first in lowerdir).
    let mut mounts = Vec::new();
    for n in 1..=5 {
        let img = img_dir.path().join(format!("layer{n}.img"));
        build_ok_cmd(&mut oci_cmd(
            &format!("{}:t", layout.display()),
            &img,
            &["--oci-layer", &n.to_string()],
        ));
        mounts.push(mount_erofs(&img).unwrap());
    }
    let lower: Vec<String> = mounts
        .iter()
        .rev()
        .map(|m| m.path().display().to_string())
        .collect();
    let ov = tmp.join("ov");
    fs::create_dir(&ov).unwrap();
    sh(&format!(
        "mount -t overlay overlay -o ro,lowerdir={} '{}'",
        lower.join(":"),
        ov.display()
    ));
    let diffs = compare_trees(&rootfs, &ov, &Expect::default());
    let _ = mount::unmount(&ov);
    // A layer that puts a file below a directory it has no entry for (umoci insert writes
    // none for a/ and a/b/) makes that directory with default metadata in its own image, and
    // overlayfs shows the upper directory's: what containerd's snapshotters show too.
    let implicit = |d: &String| ["/a:", "/a/b:", "/ ", "/:"].iter().any(|p| d.contains(p));
    // And what overlayfs itself shows otherwise than a single file system (not the images'
    // doing): a merged directory's nlink is 1, a lower file's nlink is its layer's (a name
    // whited out above still counts), readdir's d_ino is the layer's inode number.
    let overlayfs_own = |d: &String| d.contains(": readdir entry ") || d.contains(": nlink ");
    let (expected, unexpected): (Vec<String>, Vec<String>) = diffs
        .into_iter()
        .filter(|d| !overlayfs_own(d))
        .partition(implicit);
    println!("overlayfs differences in directories a layer makes implicitly: {expected:?}");
    assert_no_diffs(
        "overlayfs of the --oci-layer images vs umoci unpack",
        &unexpected,
    );
    drop(mounts);
}

/// `sha256:<hex>` of `bytes`.
fn sha256(bytes: &[u8]) -> String {
    let h = sha2::Sha256::digest(bytes);
    format!("sha256:{}", hex(&h))
}

/// Writes `bytes` as a blob of `layout`; its digest and size.
fn put_blob(layout: &Path, bytes: &[u8]) -> (String, u64) {
    let d = sha256(bytes);
    fs::write(layout.join("blobs/sha256").join(&d[7..]), bytes).unwrap();
    (d, bytes.len() as u64)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

/// The path of the blob `digest` names.
fn blob(layout: &Path, digest: &serde_json::Value) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(&digest.as_str().unwrap()[7..])
}

/// The manifest of the layout's only image.
fn manifest(layout: &Path) -> serde_json::Value {
    let index = read_json(&layout.join("index.json"));
    read_json(&blob(layout, &index["manifests"][0]["digest"]))
}

/// Changes the manifest of the layout's only image with `f` (a new blob, index.json pointing
/// at it).
fn edit_manifest(layout: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut m = manifest(layout);
    f(&mut m);
    let (d, size) = put_blob(layout, &serde_json::to_vec(&m).unwrap());
    let mut index = read_json(&layout.join("index.json"));
    index["manifests"][0]["digest"] = d.into();
    index["manifests"][0]["size"] = size.into();
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
}

/// A copy of `layout` to spoil.
fn copy_of(layout: &Path, name: &str) -> PathBuf {
    let to = layout.with_file_name(name);
    sh(&format!("cp -a '{}' '{}'", layout.display(), to.display()));
    to
}

/// Builds `image` with `args`, which must fail saying every one of `says`, leaving nothing at
/// the output nor beside it.
fn fails(image: &str, args: &[&str], says: &[&str]) {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = dir.path().join("out.img");
    let o = run(&mut oci_cmd(image, &out, args));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "{image} {args:?}: built, expected an error"
    );
    for s in says {
        assert!(
            err.contains(s),
            "{image} {args:?}: the error does not say {s:?}:\n{err}"
        );
    }
    assert!(!out.exists(), "{image}: an image was left behind");
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "{image}: files left behind"
    );
    println!("{image} {args:?}: {}", err.trim());
}

#[test]
fn bad_images_fail_naming_the_layer_or_blob() {
    if !guard() {
        return;
    }
    let tmp = Tmpfs::new("oci-bad").expect("tmpfs");
    let l = tmp.join("L");
    let (ls, bs) = (l.display(), tmp.join("b"));
    let bs = bs.display();
    sh(&format!(
        "umoci init --layout '{ls}' && umoci new --image '{ls}:t' && umoci unpack --image '{ls}:t' '{bs}' \
         && mkdir '{bs}/rootfs/d' && head -c 300000 /dev/urandom > '{bs}/rootfs/d/random' \
         && seq 1 100000 > '{bs}/rootfs/d/text' && umoci repack --image '{ls}:t' '{bs}' \
         && rm -rf '{bs}' && umoci unpack --image '{ls}:t' '{bs}' && rm '{bs}/rootfs/d/text' \
         && echo more > '{bs}/rootfs/d/more' && umoci repack --image '{ls}:t' '{bs}'"
    ));
    let m = manifest(&l);
    let layer = |i: usize| m["layers"][i]["digest"].as_str().unwrap().to_string();
    let (l1, l2) = (layer(0), layer(1));
    let image = |p: &Path| format!("{}:t", p.display());
    // The layout as made builds.
    let ok = tmp.join("ok.img");
    build_ok_cmd(&mut oci_cmd(&image(&l), &ok, &[]));

    // A layer whose bytes are not its digest's: named for that, whatever the bytes did to gzip.
    let bad = copy_of(&l, "flipped");
    let p = blob(&bad, &m["layers"][0]["digest"]);
    let mut bytes = fs::read(&p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    fs::write(&p, &bytes).unwrap();
    fails(
        &image(&bad),
        &[],
        &[
            &format!("layer 1/2 {l1}"),
            "not to the digest its descriptor gives",
        ],
    );
    // The same blob one byte short.
    bytes[mid] ^= 0x55;
    fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
    fails(
        &image(&bad),
        &[],
        &[&format!("layer 1/2 {l1}"), "ends after"],
    );

    // A missing blob.
    let bad = copy_of(&l, "missing");
    fs::remove_file(blob(&bad, &m["layers"][1]["digest"])).unwrap();
    fails(
        &image(&bad),
        &[],
        &[&format!("layer 2/2 {l2}"), "missing from the layout"],
    );

    // A manifest that does not parse; one whose layer has a media type nobody reads; a layer
    // whose media type says another compression than its bytes.
    let bad = copy_of(&l, "garbled");
    let (d, size) = put_blob(&bad, br#"{"schemaVersion":2,"layers":[{"#);
    let mut index = read_json(&bad.join("index.json"));
    index["manifests"][0]["digest"] = d.clone().into();
    index["manifests"][0]["size"] = size.into();
    fs::write(bad.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    fails(&image(&bad), &[], &[&d, "not an OCI manifest or index"]);
    let bad = copy_of(&l, "unknown-type");
    edit_manifest(&bad, |m| {
        m["layers"][1]["mediaType"] = "application/x-example".into()
    });
    fails(
        &image(&bad),
        &[],
        &[
            &format!("layer 2/2 {l2}"),
            "unknown layer media type application/x-example",
        ],
    );
    let bad = copy_of(&l, "wrong-type");
    edit_manifest(&bad, |m| {
        m["layers"][1]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+zstd".into()
    });
    fails(
        &image(&bad),
        &[],
        &[
            &format!("layer 2/2 {l2}"),
            "media type says zstd but its bytes are gzip",
        ],
    );

    // An index whose images are for other platforms; the image's config against --platform.
    let bad = copy_of(&l, "platforms");
    let mut index = read_json(&bad.join("index.json"));
    let entry = index["manifests"][0].clone();
    let mut entries = Vec::new();
    for (os, arch) in [("linux", "arm64"), ("linux", "s390x")] {
        let mut e = entry.clone();
        e["platform"] = serde_json::json!({"os": os, "architecture": arch});
        entries.push(e);
    }
    index["manifests"] = entries.into();
    fs::write(bad.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    fails(
        &image(&bad),
        &[],
        &["no image for linux/amd64 (it has linux/arm64, linux/s390x)"],
    );
    fails(
        &image(&bad),
        &["--platform", "linux/arm64"],
        &["the image is for linux/amd64 (its config says), not linux/arm64"],
    );
    fails(
        &format!("{}:nope", l.display()),
        &[],
        &["no image named nope in the layout (its refs: t)"],
    );

    // Layers whose digests are right but whose bytes are bad: a tar cut inside a file's data,
    // a gzip stream spoiled inside.
    let tar = run_ok(Command::new("sh").arg("-c").arg(format!(
        "gzip -dc '{}' | wc -c",
        blob(&l, &m["layers"][0]["digest"]).display()
    )))
    .unwrap();
    let tar_len: usize = tar.trim().parse().unwrap();
    let bad = copy_of(&l, "truncated");
    let cut = tmp.join("cut.tar.gz");
    sh(&format!(
        "gzip -dc '{}' | head -c {} | gzip -n > '{}'",
        blob(&l, &m["layers"][0]["digest"]).display(),
        tar_len / 2,
        cut.display()
    ));
    let (d, size) = put_blob(&bad, &fs::read(&cut).unwrap());
    edit_manifest(&bad, |m| {
        m["layers"][0]["digest"] = d.clone().into();
        m["layers"][0]["size"] = size.into();
    });
    fails(
        &image(&bad),
        &[],
        &[&format!("layer 1/2 {d}"), "truncated", "header at byte"],
    );
    let bad = copy_of(&l, "corrupt");
    let mut gz = fs::read(blob(&l, &m["layers"][0]["digest"])).unwrap();
    let at = gz.len() / 2;
    for b in &mut gz[at..at + 64] {
        *b = !*b;
    }
    let (d, size) = put_blob(&bad, &gz);
    edit_manifest(&bad, |m| {
        m["layers"][0]["digest"] = d.clone().into();
        m["layers"][0]["size"] = size.into();
    });
    fails(&image(&bad), &[], &[&format!("layer 1/2 {d}"), "gzip"]);
}

/// `sealfs build --oci REFERENCE` from Debian's docker-registry on loopback, filled by `skopeo
/// copy` from a umoci layout: plain HTTP, then HTTPS with basic credentials (from the
/// environment; the CA by `--ca-cert`). The image equals the one built from the layout, byte for
/// byte; a layer spoiled in the registry's storage fails naming its digest, as missing
/// credentials do naming the registry, and neither leaves an image.
#[test]
fn registry_images_equal_layout_images() {
    if !oracle_guard(
        mount_env()
            .and(need_tool("umoci"))
            .and(need_tool("skopeo"))
            .and(need_tool("htpasswd"))
            .and(need_tool("openssl"))
            .and(servers::docker_registry_bin().map(|_| ())),
    ) {
        return;
    }
    let tmp = Tmpfs::new("oci-reg").expect("tmpfs");
    let layout = make_layout(tmp.path());
    let img_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (from_layout, from_registry) = (
        img_dir.path().join("layout.img"),
        img_dir.path().join("registry.img"),
    );
    let args: &[&str] = &["-z", "lz4hc", "-C", "65536"];
    build_ok_cmd(&mut oci_cmd(
        &format!("{}:t", layout.display()),
        &from_layout,
        args,
    ));

    // Plain HTTP, no credentials.
    let work = tempfile::tempdir().unwrap();
    let reg = servers::docker_registry(work.path(), &servers::RegistrySetup::default())
        .expect("docker-registry starts");
    let host = format!("127.0.0.1:{}", reg.port);
    sh(&format!(
        "skopeo copy -q --dest-tls-verify=false oci:'{}':t docker://{host}/umoci/img:v1",
        layout.display()
    ));
    let reference = format!("oci+http://{host}/umoci/img:v1");
    build_ok_cmd(&mut oci_cmd(&reference, &from_registry, args));
    assert_same_bytes(
        &fs::read(&from_registry).unwrap(),
        &fs::read(&from_layout).unwrap(),
        "the image from the registry vs the one from the layout",
    );
    println!("{reference}: equals the layout's image, byte for byte");
    // Per layer too.
    let (a, b) = (
        img_dir.path().join("l2a.img"),
        img_dir.path().join("l2b.img"),
    );
    build_ok_cmd(&mut oci_cmd(&reference, &a, &["--oci-layer", "2"]));
    build_ok_cmd(&mut oci_cmd(
        &format!("{}:t", layout.display()),
        &b,
        &["--oci-layer", "2"],
    ));
    assert_same_bytes(&fs::read(&a).unwrap(), &fs::read(&b).unwrap(), "layer 2");

    // A layer spoiled in the registry's storage.
    let m = manifest(&layout);
    let digest = m["layers"][0]["digest"].as_str().unwrap().to_string();
    let stored = servers::Server::registry_blob(work.path(), &digest);
    let mut bytes = fs::read(&stored).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    fs::write(&stored, &bytes).unwrap();
    fails(&reference, &[], &[&digest]);
    drop(reg);

    // HTTPS and basic credentials.
    let certs = tmp.join("certs");
    let (ca, cert, key) = servers::tls_certificates(&certs).unwrap();
    let work = tempfile::tempdir().unwrap();
    let reg = servers::docker_registry(
        work.path(),
        &servers::RegistrySetup {
            tls: Some((cert, key)),
            htpasswd: Some(("alice".into(), "s3cret".into())),
            ..Default::default()
        },
    )
    .expect("docker-registry starts");
    let host = format!("127.0.0.1:{}", reg.port);
    sh(&format!(
        "skopeo copy -q --dest-tls-verify=false --dest-creds alice:s3cret oci:'{}':t docker://{host}/umoci/img:v1",
        layout.display()
    ));
    let reference = format!("docker://{host}/umoci/img:v1");
    let ca_arg = ["--ca-cert", ca.to_str().unwrap()];
    fails(&reference, &ca_arg, &[&host, "credentials"]);
    let _ = fs::remove_file(&from_registry);
    let mut cmd = oci_cmd(&reference, &from_registry, &[args, &ca_arg[..]].concat());
    cmd.env("SEALFS_REGISTRY_USERNAME", "alice")
        .env("SEALFS_REGISTRY_PASSWORD", "s3cret");
    build_ok_cmd(&mut cmd);
    assert_same_bytes(
        &fs::read(&from_registry).unwrap(),
        &fs::read(&from_layout).unwrap(),
        "the image from the registry (HTTPS, basic auth) vs the one from the layout",
    );
    println!("{reference}: equals the layout's image, byte for byte");
}

/// Writes the OCI layout `dir/NAME` of one image `NAME:t` whose layers (lowest first) are the
/// uncompressed tar archives `tars`, gzipped: for layers in an order no OCI tool writes.
/// Python's hashlib, gzip and json make it (the config's `rootfs.diff_ids` the tars' digests).
fn layout_of_tars(dir: &Path, name: &str, tars: &[&Path]) -> PathBuf {
    const MAKE: &str = r#"
import gzip, hashlib, json, os, sys
lay, tars = sys.argv[1], sys.argv[2:]
os.makedirs(lay + "/blobs/sha256")
def put(b, t):
    d = hashlib.sha256(b).hexdigest()
    open(lay + "/blobs/sha256/" + d, "wb").write(b)
    return {"mediaType": t, "digest": "sha256:" + d, "size": len(b)}
raw = [open(t, "rb").read() for t in tars]
layers = [put(gzip.compress(r, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip") for r in raw]
config = {"architecture": "amd64", "os": "linux", "config": {},
          "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(r).hexdigest() for r in raw]}}
cfg = put(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
man = put(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": cfg, "layers": layers}).encode(), "application/vnd.oci.image.manifest.v1+json")
man["annotations"] = {"org.opencontainers.image.ref.name": "t"}
open(lay + "/oci-layout", "w").write(json.dumps({"imageLayoutVersion": "1.0.0"}))
open(lay + "/index.json", "w").write(json.dumps({"schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [man]}))
"#;
    let l = dir.join(name);
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(MAKE).arg(&l).args(tars);
    run_ok(&mut cmd).unwrap();
    l
}

/// The `[seconds, nanoseconds]` modification time of `path` (not followed).
fn mtime_of(path: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let md = fs::symlink_metadata(path).unwrap();
    (md.mtime(), md.mtime_nsec())
}

/// Issue 38, item 12, for OCI images: the time rule docs/usage.md states, on a layer `umoci
/// unpack` + build cannot reproduce: directories the layers do not list (umoci leaves them, and
/// the root, at the time of extraction; the image has 0), a directory whose members are not
/// contiguous (umoci keeps its time, as the rule does), a time beyond Go's `time.UnixNano`
/// range (year 3058: umoci sets a wrong one; kept) and one before ext4's (year 1684: kept).
/// The reference is the rule's: `umoci unpack`, then the unlisted directories set to 0 and the
/// far time set to the archived one, then `sealfs build`: byte for byte the `--oci` image.
#[test]
fn directory_times_of_unfriendly_layers_follow_the_stated_rule() {
    if !oracle_guard(mount_env().and(need_tool("umoci")).and(need_tool("tar"))) {
        return;
    }
    let tmp = Tmpfs::new("oci-times").expect("tmpfs");
    let t = tmp.join("t");
    let far_future = 34_359_738_368i64; // 3058-10-26
    let far_past = -9_000_000_000i64; // 1684-10-19
    let layer = tmp.join("layer.tar");
    sh(&format!(
        "set -e; mkdir -p '{t}'; cd '{t}'; mkdir -p d/sub e p/q; \
         echo f > d/f; echo g > d/g; echo k > d/sub/k; echo h > e/h; echo deep > p/q/f; \
         touch -d @{far_future} d/g; touch -d @{far_past} e/h; \
         touch -d @1500000000.25 d; touch -d @1500000001 d/sub; touch -d @1500000002.5 e; \
         tar --format=posix --no-recursion -cf '{l}' d d/f e e/h d/sub d/sub/k d/g p/q/f",
        t = t.display(),
        l = layer.display()
    ));
    let l = layout_of_tars(tmp.path(), "L", &[&layer]);
    let unpacked = tmp.join("unpacked");
    sh(&format!(
        "umoci unpack --image '{}:t' '{}'",
        l.display(),
        unpacked.display()
    ));
    let rootfs = unpacked.join("rootfs");
    println!(
        "umoci unpack set d/g (archived {far_future}) to {:?}, p (unlisted) to {:?}",
        mtime_of(&rootfs.join("d/g")),
        mtime_of(&rootfs.join("p"))
    );
    for dir in ["", "p", "p/q"] {
        sh(&format!("touch -h -d @0 '{}'", rootfs.join(dir).display()));
    }
    sh(&format!(
        "touch -h -d @{far_future} '{}'",
        rootfs.join("d/g").display()
    ));
    let img_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (rule_img, oci_img) = (
        img_dir.path().join("rule.img"),
        img_dir.path().join("oci.img"),
    );
    build_ok(&rootfs, &rule_img, &[]);
    build_ok_cmd(&mut oci_cmd(&format!("{}:t", l.display()), &oci_img, &[]));
    assert_same_bytes(
        &fs::read(&oci_img).unwrap(),
        &fs::read(&rule_img).unwrap(),
        "--oci vs the rule (umoci unpack, unlisted directories at 0, far times kept, build)",
    );
    let mnt = mount_erofs(&oci_img).unwrap();
    for rel in ["d", "d/sub", "e", "d/g", "e/h", "d/f"] {
        assert_eq!(
            mtime_of(&mnt.path().join(rel)),
            mtime_of(&t.join(rel)),
            "{rel}: time in the kernel's mount vs the archived one"
        );
    }
    assert_eq!(mtime_of(&mnt.path().join("d/g")).0, far_future);
    assert_eq!(mtime_of(&mnt.path().join("e/h")).0, far_past);
    for dir in ["", "p", "p/q"] {
        assert_eq!(mtime_of(&mnt.path().join(dir)), (0, 0), "unlisted {dir:?}");
    }
}

/// Issue 38, item 11: `umoci repack` of a directory that became a file writes `d`, then
/// `d/.wh.NAME` for what `d` held; `umoci unpack` takes such a whiteout below a non-directory
/// for the no-op it is, and so does `--oci` (before: "not a directory, but an entry below it is
/// in the archive"). The image equals `umoci unpack` + build, byte for byte.
#[test]
fn a_whiteout_below_a_directory_made_a_file_is_a_no_op() {
    if !guard() {
        return;
    }
    let tmp = Tmpfs::new("oci-dir2file").expect("tmpfs");
    let (l, b) = (tmp.join("L"), tmp.join("b"));
    let (ls, bs) = (l.display(), b.display());
    sh(&format!(
        "set -e; umoci init --layout '{ls}'; umoci new --image '{ls}:t'; \
         umoci unpack --image '{ls}:t' '{bs}'; mkdir -p '{bs}/rootfs/d/sub'; \
         echo x > '{bs}/rootfs/d/x'; echo y > '{bs}/rootfs/d/sub/y'; \
         umoci repack --image '{ls}:t' '{bs}'; rm -rf '{bs}'; \
         umoci unpack --image '{ls}:t' '{bs}'; rm -r '{bs}/rootfs/d'; \
         echo now-a-file > '{bs}/rootfs/d'; umoci repack --image '{ls}:t' '{bs}'; rm -rf '{bs}'"
    ));
    let found = markers(&l);
    assert!(
        found
            .iter()
            .any(|m| m.trim_start_matches("./") == "d/.wh.x"),
        "umoci wrote no d/.wh.x: {found:?}"
    );
    let unpacked = tmp.join("unpacked");
    sh(&format!(
        "umoci unpack --image '{ls}:t' '{}'",
        unpacked.display()
    ));
    let rootfs = unpacked.join("rootfs");
    assert_eq!(fs::read(rootfs.join("d")).unwrap(), b"now-a-file\n");
    let img_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (dir_img, oci_img) = (
        img_dir.path().join("dir.img"),
        img_dir.path().join("oci.img"),
    );
    build_ok(&rootfs, &dir_img, &[]);
    build_ok_cmd(&mut oci_cmd(&format!("{ls}:t"), &oci_img, &[]));
    assert_same_bytes(
        &fs::read(&oci_img).unwrap(),
        &fs::read(&dir_img).unwrap(),
        "--oci vs umoci unpack + build",
    );
    // Per layer (`--oci-layer`), the whiteouts below the file are dropped (nothing is below a
    // file): stacked by the kernel's overlayfs, the images show umoci's tree.
    let mut mounts = Vec::new();
    for n in 1..=2 {
        let img = img_dir.path().join(format!("layer{n}.img"));
        build_ok_cmd(&mut oci_cmd(
            &format!("{ls}:t"),
            &img,
            &["--oci-layer", &n.to_string()],
        ));
        mounts.push(mount_erofs(&img).unwrap());
    }
    let ov = tmp.join("ov");
    fs::create_dir(&ov).unwrap();
    sh(&format!(
        "mount -t overlay overlay -o ro,lowerdir={}:{} '{}'",
        mounts[1].path().display(),
        mounts[0].path().display(),
        ov.display()
    ));
    let diffs = compare_trees(&rootfs, &ov, &Expect::default());
    let _ = mount::unmount(&ov);
    // What overlayfs itself shows otherwise than one file system (as in the test above).
    let diffs: Vec<String> = diffs
        .into_iter()
        .filter(|d| !(d.contains(": readdir entry ") || d.contains(": nlink ")))
        .collect();
    assert_no_diffs(
        "overlayfs of the --oci-layer images vs umoci unpack",
        &diffs,
    );
}

/// Issue 38, item 10: POSIX ACLs a layer carries as `SCHILY.xattr.system.posix_acl_access` /
/// `_default` records (what `umoci repack` writes) are kept, as `umoci unpack` restores them
/// (before: left out with a warning, as `tar -x` leaves them). The flattened image equals
/// `umoci unpack` + build byte for byte; `getfacl` reads the same ACLs from the kernel's mount
/// of it, and of the layer's own image (`--oci-layer`), as from the unpacked tree.
#[test]
fn posix_acl_xattrs_of_layers_are_kept_as_umoci_unpack_restores_them() {
    if !oracle_guard(
        mount_env()
            .and(need_tool("umoci"))
            .and(need_tool("skopeo"))
            .and(need_tool("getfacl"))
            .and(need_tool("setfacl")),
    ) {
        return;
    }
    let tmp = Tmpfs::new("oci-acl").expect("tmpfs");
    let (l, b) = (tmp.join("L"), tmp.join("b"));
    let (ls, bs) = (l.display(), b.display());
    sh(&format!(
        "set -e; umoci init --layout '{ls}'; umoci new --image '{ls}:t'; \
         umoci unpack --image '{ls}:t' '{bs}'; cd '{bs}/rootfs'; mkdir -p acl/sub; \
         echo f > acl/f; echo plain > acl/plain; echo m > acl/mode-only; \
         setfacl -m u:1234:rwx,g:77:r acl/f; setfacl -m u:4321:r-x acl; \
         setfacl -d -m u:1234:rx,g:77:rwx acl; setfacl -m u::rwx,g::r-x,o::- acl/mode-only; \
         touch -d @1600000000 acl/f acl/plain acl/mode-only acl/sub acl; \
         umoci repack --image '{ls}:t' '{bs}'; rm -rf '{bs}'"
    ));
    let m = manifest(&l);
    let top = blob(&l, &m["layers"][0]["digest"]);
    let records = run_ok(Command::new("sh").arg("-c").arg(format!(
        "gzip -dc '{}' | grep -a -o 'SCHILY[a-z._]*posix_acl_[a-z]*' | sort | uniq -c",
        top.display()
    )))
    .unwrap();
    println!("ACL records of the layer:\n{records}");
    assert!(
        records.contains("SCHILY.xattr.system.posix_acl_access")
            && records.contains("SCHILY.xattr.system.posix_acl_default"),
        "umoci wrote no ACL xattr records: {records}"
    );
    let unpacked = tmp.join("unpacked");
    sh(&format!(
        "umoci unpack --image '{ls}:t' '{}'",
        unpacked.display()
    ));
    let rootfs = unpacked.join("rootfs");
    let getfacl = |root: &Path| {
        run_ok(
            Command::new("sh")
                .arg("-c")
                .arg("getfacl -n -p acl acl/f acl/plain acl/mode-only acl/sub")
                .current_dir(root),
        )
        .unwrap()
    };
    let want = getfacl(&rootfs);
    assert!(
        want.contains("user:1234:rwx") && want.contains("default:group:77:rwx"),
        "umoci unpack restored no ACL: {want}"
    );
    let img_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let (dir_img, oci_img, layer_img) = (
        img_dir.path().join("dir.img"),
        img_dir.path().join("oci.img"),
        img_dir.path().join("layer.img"),
    );
    for args in [&[][..], &["-q", "-z", "lz4"][..]] {
        build_ok(&rootfs, &dir_img, args);
        let out = build_ok_cmd(&mut oci_cmd(&format!("{ls}:t"), &oci_img, args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("left out"), "{args:?}: {err}");
        assert_same_bytes(
            &fs::read(&oci_img).unwrap(),
            &fs::read(&dir_img).unwrap(),
            &format!("{args:?}: --oci vs umoci unpack + build"),
        );
    }
    build_ok_cmd(&mut oci_cmd(&format!("{ls}:t"), &oci_img, &[]));
    let mnt = mount_erofs(&oci_img).unwrap();
    assert_eq!(getfacl(mnt.path()), want, "getfacl of the --oci image");
    drop(mnt);
    build_ok_cmd(&mut oci_cmd(
        &format!("{ls}:t"),
        &layer_img,
        &["--oci-layer", "1"],
    ));
    let mnt = mount_erofs(&layer_img).unwrap();
    assert_eq!(
        getfacl(mnt.path()),
        want,
        "getfacl of the --oci-layer image"
    );
}
