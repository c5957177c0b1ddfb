//! The seal against programs nobody here wrote: `fsverity digest` (digests), `veritysetup` (Merkle root
//! and hash area), the kernel and `fsck.erofs` (sealed images still mount and check), plus tamper tests:
//! every flipped byte in data, metadata, tree or trailer makes `verify` fail and name the right place.

mod common;

use common::fixture::Rng;
use common::*;
use sealfs_verity::{HashAlg, Params, TreeGeometry};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small tree with files of assorted sizes, a symlink and a subdirectory (no root needed).
fn make_tree(dir: &Path, seed: u64) {
    let mut rng = Rng::new(seed);
    fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    for (i, size) in [0usize, 1, 4095, 4096, 4097, 70_000, 300_000]
        .into_iter()
        .enumerate()
    {
        fs::write(dir.join(format!("f{i}")), rng.bytes(size)).unwrap();
        fs::write(dir.join(format!("sub/g{i}")), rng.bytes(size / 3)).unwrap();
    }
    for i in 0..200 {
        fs::write(
            dir.join(format!("sub/deeper/small{i:03}")),
            rng.bytes(i * 37),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("f1", dir.join("link")).unwrap();
}

fn stdout_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn fsverity_digest(path: &Path, extra: &[&str]) -> String {
    let out = run(Command::new("fsverity").arg("digest").args(extra).arg(path));
    assert!(
        out.status.success(),
        "fsverity digest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout_line(&out);
    text.split_whitespace().next().unwrap().to_string()
}

/// EROFS length from the superblock (blocks × block size).
fn erofs_len(image: &[u8]) -> usize {
    let blocks = u32::from_le_bytes(image[1024 + 36..1024 + 40].try_into().unwrap()) as usize;
    blocks << image[1024 + 12]
}

struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
fn scratch(tag: &str) -> Scratch {
    let p = std::env::temp_dir().join(format!("sealfs-seal-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

#[test]
fn digest_equals_fsverity_and_seal_equals_build() {
    if !oracle_guard(if have_tool("fsverity") {
        Ok(())
    } else {
        Err("fsverity not installed".into())
    }) {
        return;
    }
    let s = scratch("digest");
    let src = s.0.join("src");
    make_tree(&src, 1);
    let sealed = s.0.join("sealed.img");
    let digest = stdout_line(&build_ok(&src, &sealed, &[]));
    let bytes = fs::read(&sealed).unwrap();
    let cut = s.0.join("cut.img");
    fs::write(&cut, &bytes[..erofs_len(&bytes)]).unwrap();
    assert_eq!(
        digest,
        fsverity_digest(&cut, &[]),
        "build's digest vs fsverity digest of the EROFS bytes"
    );
    let computed = stdout_line(&run(Command::new(sealfs_bin())
        .args(["digest"])
        .arg(&sealed)));
    assert_eq!(computed, digest, "sealfs digest");

    // --no-seal gives the EROFS bytes without the per-file digest table; `sealfs seal` keeps the
    // bytes it is given as they are: its digest is `fsverity digest` of the unsealed image, and
    // the sealed file starts with exactly those bytes.
    let plain = s.0.join("plain.img");
    build_ok(&src, &plain, &["--no-seal"]);
    let plain_bytes = fs::read(&plain).unwrap();
    filetable::check_same_but_table(&plain_bytes, &fs::read(&cut).unwrap(), "--no-seal").unwrap();
    let plain_digest = fsverity_digest(&plain, &[]);
    let out = run(Command::new(sealfs_bin()).arg("seal").arg(&plain));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout_line(&out),
        plain_digest,
        "seal's digest vs fsverity digest"
    );
    let resealed = fs::read(&plain).unwrap();
    assert_eq!(erofs_len(&resealed), plain_bytes.len());
    assert!(
        resealed[..plain_bytes.len()] == plain_bytes[..],
        "sealfs seal changed the EROFS bytes"
    );
    let again = run(Command::new(sealfs_bin()).arg("seal").arg(&plain));
    assert!(!again.status.success(), "sealing twice must be refused");

    // Other parameters: SHA-512 with a salt and 1 KiB Merkle blocks; fsverity digest agrees.
    let p512 = s.0.join("p512.img");
    let d512 = stdout_line(&build_ok(
        &src,
        &p512,
        &[
            "--hash-alg",
            "sha512",
            "--salt",
            "00112233aabb",
            "--verity-block-size",
            "1024",
        ],
    ));
    let b512 = fs::read(&p512).unwrap();
    fs::write(&cut, &b512[..erofs_len(&b512)]).unwrap();
    let oracle = fsverity_digest(
        &cut,
        &[
            "--hash-alg=sha512",
            "--salt=00112233aabb",
            "--block-size=1024",
        ],
    );
    assert_eq!(d512, oracle, "sha512/salt/1K seal vs fsverity digest");
    let v = run(Command::new(sealfs_bin())
        .args(["verify", "--digest", &d512])
        .arg(&p512));
    assert!(
        v.status.success(),
        "verify sha512 image: {}",
        String::from_utf8_lossy(&v.stderr)
    );
    println!("digests agree with fsverity digest: {digest} and {d512}");
}

/// `digest --files` must equal `fsverity digest` run on every file of the source tree.
fn assert_files_match(img: &Path, src: &Path, extra: &[&str]) {
    // `sealfs digest --files ARGS EXTRA IMG`, which must succeed.
    let digest_files = |args: &[&str]| {
        let o = run(Command::new(sealfs_bin())
            .args(["digest", "--files"])
            .args(args)
            .args(extra)
            .arg(img));
        assert!(
            o.status.success(),
            "digest --files {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let ours = digest_files(&[]);
    // `fsverity digest`'s line for each file, but with the name as `LC_ALL=C ls -b` writes it:
    // `digest --files` escapes names by that rule (issue 38: a name holding a newline must not
    // spoof a line).
    let oracle = run(Command::new("bash")
        .arg("-c")
        .arg(
            "find . -type f -printf '%P\\0' | sort -z | while IFS= read -r -d '' f; do \
             printf 'sha256:%s %s\\n' \"$(fsverity digest --compact -- \"$f\")\" \"$(ls -bd -- \"$f\")\"; done",
        )
        // Bytes, not characters: in a UTF-8 locale bash's `read` takes an incomplete sequence
        // at a name's end and the NUL after it for one character.
        .env("LC_ALL", "C")
        .current_dir(src));
    assert!(
        oracle.status.success(),
        "fsverity digest over the tree: {}",
        String::from_utf8_lossy(&oracle.stderr)
    );
    let (a, b) = (
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&oracle.stdout),
    );
    let first = a.lines().zip(b.lines()).find(|(x, y)| x != y);
    assert!(
        a == b,
        "digest --files vs fsverity digest of each source file: first difference {first:?}, {} vs {} lines",
        a.lines().count(),
        b.lines().count()
    );
    assert!(!ours.stdout.is_empty());

    // `--format=ipe`: one IPE rule per distinct digest `fsverity digest` gives, in the syntax of
    // the kernel's IPE documentation (admin-guide/LSM/ipe.rst: `fsverity_digest=ALG:HEX`), and
    // comments. (IPE itself is not run: it came with Linux 6.12, the guest kernel is 6.1.)
    let ipe = digest_files(&["--format=ipe"]);
    // Each line of the oracle starts with a digest.
    let want: std::collections::BTreeSet<String> = String::from_utf8_lossy(&oracle.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(d, _)| d))
        .filter(|d| d.starts_with("sha256:") || d.starts_with("sha512:"))
        .map(str::to_string)
        .collect();
    let mut got = std::collections::BTreeSet::new();
    for line in String::from_utf8_lossy(&ipe.stdout).lines() {
        if line.starts_with('#') {
            continue;
        }
        let digest = line
            .strip_prefix("op=EXECUTE fsverity_digest=")
            .and_then(|r| r.strip_suffix(" action=ALLOW"))
            .unwrap_or_else(|| panic!("not an IPE rule: {line:?}"));
        let (alg, hex) = digest.split_once(':').expect("ALG:HEX");
        assert!(
            ["sha256", "sha512"].contains(&alg) && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{line:?}"
        );
        assert!(got.insert(digest.to_string()), "rule repeated: {line:?}");
    }
    assert_eq!(
        got, want,
        "IPE rules vs fsverity digest of each source file"
    );
}

/// Words drawn at random from a small vocabulary: compressible, and different for each seed.
fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    const WORDS: [&str; 8] = [
        "seal ", "erofs ", "block ", "tree\n", "digest ", "root ", "hash ", "lz4 ",
    ];
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

/// Compressed builds find identical files by their content: a sealed build by the per-file
/// digests it makes anyway, an unsealed one by digests of only the files whose size another file
/// shares. Both must store the same EROFS bytes, the twins once: same-size files of other content,
/// twins among fragments and files of several segments included (checked against the size of the
/// same tree with one copy of each), with the per-file digests `fsverity digest` gives.
#[test]
fn unsealed_compressed_builds_share_identical_files_as_sealed_ones_do() {
    let mounts = oracle_guard(mount_env());
    let s = scratch("twins");
    // `src` has four copies of each twin; `alone` is the same tree with one.
    let (src, alone) = (s.0.join("src"), s.0.join("alone"));
    for d in [&src, &alone] {
        fs::create_dir_all(d.join("a/b")).unwrap();
    }
    let mut rng = Rng::new(7);
    for (i, size) in [300usize, 5_000, 70_000, 200_000, 4_300_000]
        .into_iter()
        .enumerate()
    {
        let body = text(&mut rng, size);
        for copy in 0..4 {
            fs::write(src.join(format!("a/twin{i}-{copy}")), &body).unwrap();
        }
        fs::write(alone.join(format!("a/twin{i}-0")), &body).unwrap();
        // The same size, other content (one byte differs): not a twin.
        let mut near = body.clone();
        near[size / 2] ^= 1;
        let lone = text(&mut rng, size + 1);
        for d in [&src, &alone] {
            fs::write(d.join(format!("a/b/near{i}")), &near).unwrap();
            fs::write(d.join(format!("a/b/lone{i}")), &lone).unwrap();
        }
    }
    for options in [
        &["-z", "lz4hc", "-C", "65536"][..],
        &["-z", "zstd", "-C", "65536", "-E", "fragments"],
        &["-z", "lz4", "-C", "4096"],
        // Every file a fragment, those of several segments included.
        &["-z", "lz4", "-C", "4096", "-E", "all-fragments"],
    ] {
        let sealed = s.0.join("sealed.img");
        let plain = s.0.join("plain.img");
        let single = s.0.join("single.img");
        build_ok(&src, &sealed, options);
        let mut unsealed = options.to_vec();
        unsealed.push("--no-seal");
        build_ok(&src, &plain, &unsealed);
        build_ok(&alone, &single, &unsealed);
        let bytes = fs::read(&sealed).unwrap();
        let plain_len = fs::metadata(&plain).unwrap().len();
        filetable::check_same_but_table(
            &fs::read(&plain).unwrap(),
            &bytes[..erofs_len(&bytes)],
            &format!("{options:?}"),
        )
        .unwrap();
        // The copies cost no data: the image is the size of the tree's without them, give or
        // take their inodes and directory entries.
        let single_len = fs::metadata(&single).unwrap().len();
        assert!(
            plain_len <= single_len + 8 * 4096,
            "{options:?}: {plain_len} bytes with 4 copies of each twin, {single_len} with one"
        );
        if mounts {
            assert_verifies_and_mounts_equal(&src, &sealed, &format!("twins {options:?}"));
        }
        assert_deterministic_with_fsverity_digests(
            &src,
            &s.0,
            options,
            &format!("twins {options:?}"),
        );
    }
}

#[test]
fn per_file_digests_equal_fsverity_digest_of_each_file() {
    if !oracle_guard(if have_tool("fsverity") {
        Ok(())
    } else {
        Err("fsverity not installed".into())
    }) {
        return;
    }
    let s = scratch("files");
    let src = s.0.join("src");
    make_tree(&src, 6);
    fs::write(src.join("-dash"), b"leading dash").unwrap();
    fs::hard_link(src.join("f5"), src.join("sub/hardlink-to-f5")).unwrap();
    // A sparse file: chunk-based with holes, data across a block boundary, and a size that ends
    // inside a block; digests computed from the content hash its holes as runs of zeros.
    let f = fs::File::create(src.join("sparse")).unwrap();
    f.set_len((10 << 20) + 1234).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"middle", (5 << 20) - 3).unwrap();
    drop(f);
    let img = s.0.join("s.img");
    build_ok(&src, &img, &[]);
    assert_files_match(&img, &src, &[]);
    // Computed from the content (read through the reader) rather than taken from the table, and
    // `verify`, which computes them from the seal's level-0 hashes and compares with the table.
    assert_files_match(&img, &src, &["--from-content"]);
    let v = run(Command::new(sealfs_bin()).arg("verify").arg(&img));
    assert!(
        v.status.success(),
        "verify: {}",
        String::from_utf8_lossy(&v.stdout)
    );
    // Sealed with a salt: per-file digests are still the unsalted ones fsverity prints.
    build_ok(&src, &img, &["--salt", "abcdef"]);
    assert_files_match(&img, &src, &[]);
    let v = run(Command::new(sealfs_bin()).arg("verify").arg(&img));
    assert!(
        v.status.success(),
        "verify salted: {}",
        String::from_utf8_lossy(&v.stdout)
    );
    // Sealing a plain image afterwards records the same digests (read through the reader).
    build_ok(&src, &img, &["--no-seal"]);
    let out = run(Command::new(sealfs_bin()).arg("seal").arg(&img));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_files_match(&img, &src, &[]);
    // A random tree.
    let rsrc = s.0.join("rand");
    fs::create_dir_all(&rsrc).unwrap();
    let mut rng = Rng::new(61);
    for i in 0..120 {
        let dir = rsrc.join(format!("d{}", rng.below(7)));
        fs::create_dir_all(&dir).unwrap();
        let size = match rng.below(4) {
            0 => rng.below(16) as usize,
            1 => 4096 * rng.below(4) as usize + rng.below(3) as usize,
            _ => rng.below(200_000) as usize,
        };
        fs::write(dir.join(format!("file{i}")), rng.bytes(size)).unwrap();
    }
    build_ok(&rsrc, &img, &[]);
    assert_files_match(&img, &rsrc, &[]);
    println!(
        "digest --files equals fsverity digest for fixture, salted, resealed and random trees"
    );
}

#[test]
fn per_file_digests_of_the_full_fixture() {
    if !oracle_guard(root_env().and_then(|_| {
        if have_tool("fsverity") {
            Ok(())
        } else {
            Err("fsverity not installed".into())
        }
    })) {
        return;
    }
    let tmp = Tmpfs::new("files-full").expect("tmpfs");
    let src = tmp.join("src");
    common::fixture::make_full_fixture(&src);
    let img_dir = tempfile::Builder::new()
        .prefix("sealfs-files-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let img = img_dir.path().join("full.img");
    build_ok(&src, &img, &[]);
    assert_files_match(&img, &src, &[]);
    // The same computed from the content: the 5 GiB sparse file's holes are hashed unread.
    assert_files_match(&img, &src, &["--from-content"]);
    println!("digest --files (recorded and from the content) equals fsverity digest on every file of the full fixture");
}

#[test]
fn seal_of_mkfs_erofs_image_attached_and_detached() {
    if !oracle_guard(if have_tool("fsverity") && have_tool("mkfs.erofs") {
        Ok(())
    } else {
        Err("fsverity or mkfs.erofs missing".into())
    }) {
        return;
    }
    let s = scratch("mkfs");
    let src = s.0.join("src");
    make_tree(&src, 2);
    let img = s.0.join("m.img");
    let out = run(Command::new("mkfs.erofs").arg("-T0").arg(&img).arg(&src));
    assert!(out.status.success());
    let original = fs::read(&img).unwrap();
    let expected = fsverity_digest(&img, &[]);

    let sidecar = s.0.join("m.seal");
    let out = run(Command::new(sealfs_bin())
        .args(["seal", "--sidecar"])
        .arg(&sidecar)
        .arg(&img));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout_line(&out),
        expected,
        "detached seal digest vs fsverity digest of the mkfs.erofs image"
    );
    assert_eq!(
        fs::read(&img).unwrap(),
        original,
        "detached sealing leaves the image byte-identical"
    );
    let v = run(Command::new(sealfs_bin())
        .args(["verify", "--digest", &expected, "--sidecar"])
        .arg(&sidecar)
        .arg(&img));
    assert!(
        v.status.success(),
        "verify with sidecar: {}",
        String::from_utf8_lossy(&v.stdout)
    );

    let out = run(Command::new(sealfs_bin()).arg("seal").arg(&img));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout_line(&out), expected, "attached seal digest");
    assert_eq!(
        &fs::read(&img).unwrap()[..original.len()],
        &original[..],
        "attached seal keeps the EROFS bytes"
    );
    let v = run(Command::new(sealfs_bin())
        .args(["verify", "--digest", &expected])
        .arg(&img));
    assert!(v.status.success());
    if have_tool("fsck.erofs") {
        assert!(
            run(Command::new("fsck.erofs").arg(&img)).status.success(),
            "fsck.erofs on the sealed mkfs image"
        );
    }
}

#[test]
fn sealed_image_mounts_and_passes_fsck() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let s = scratch("mount");
    let src = s.0.join("src");
    make_tree(&src, 3);
    let img = s.0.join("s.img");
    build_ok(&src, &img, &[]);
    fsck(&img).expect("fsck.erofs passes on the sealed image");
    let mnt = mount_erofs(&img).expect("mount sealed image");
    let diffs = compare::compare_trees(&src, mnt.path(), &compare::Expect::default());
    assert!(
        diffs.is_empty(),
        "sealed image differs from source under the kernel:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn veritysetup_root_and_hash_area_equal_ours() {
    if !oracle_guard(if have_tool("veritysetup") {
        Ok(())
    } else {
        Err("veritysetup not installed".into())
    }) {
        return;
    }
    let s = scratch("dmverity");
    let src = s.0.join("src");
    make_tree(&src, 4);
    let img = s.0.join("s.img");
    build_ok(&src, &img, &[]);
    let bytes = fs::read(&img).unwrap();
    let len = erofs_len(&bytes);
    let data = s.0.join("data.img");
    fs::write(&data, &bytes[..len]).unwrap();
    let hash = s.0.join("hash.img");
    let out = run(Command::new("veritysetup")
        .args([
            "format",
            "--no-superblock",
            "--salt=-",
            "--hash=sha256",
            "--data-block-size=4096",
            "--hash-block-size=4096",
        ])
        .arg(&data)
        .arg(&hash));
    assert!(
        out.status.success(),
        "veritysetup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let root = text
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .expect("Root hash line")
        .trim()
        .to_string();
    // Our trailer: header at file_len - 64 - 512; root at header + 80; tree at erofs length.
    let header = bytes.len() - 64 - 512;
    let ours: String = bytes[header + 80..header + 112]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(root, ours, "dm-verity root hash == our Merkle root");
    let params = Params::new(HashAlg::Sha256, 4096, b"").unwrap();
    let tree_len = TreeGeometry::new(&params, len as u64).tree_size() as usize;
    let hash_area = fs::read(&hash).unwrap();
    assert_eq!(
        &hash_area[..tree_len],
        &bytes[len..len + tree_len],
        "veritysetup hash area == our tree"
    );
    println!("veritysetup root {root} equals ours; {tree_len}-byte hash areas identical");
}

/// The place a flipped byte at `pos` must be reported at.
#[derive(Debug, PartialEq)]
enum Place {
    Data(u64),
    Tree(u64, u64),
    Trailer,
}

fn expected_place(pos: usize, len: usize, g: &TreeGeometry) -> Place {
    if pos < len {
        return Place::Data(pos as u64 / 4096);
    }
    let tree_end = len + g.tree_size() as usize;
    if pos < tree_end {
        let b = ((pos - len) / 4096) as u64;
        for level in 0..g.num_levels() {
            let start = g.level_start(level);
            if (start..start + g.level_blocks(level)).contains(&b) {
                return Place::Tree(level as u64, b - start);
            }
        }
        unreachable!("tree block {b} in no level");
    }
    Place::Trailer
}

fn verify_json(img: &Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = run(Command::new(sealfs_bin())
        .arg("verify")
        .arg("--json")
        .args(extra)
        .arg(img));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "verify panicked: {stderr}");
    let code = out.status.code().expect("exit code");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (code, json, stderr)
}

fn reported(json: &serde_json::Value) -> Vec<Place> {
    json["problems"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| match p["kind"].as_str()? {
                    "data_block" => Some(Place::Data(p["block"].as_u64()?)),
                    "tree_block" => Some(Place::Tree(p["level"].as_u64()?, p["index"].as_u64()?)),
                    "trailer" => Some(Place::Trailer),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn tamper_anywhere_is_found_and_named() {
    let s = scratch("tamper");
    let src = s.0.join("src");
    make_tree(&src, 5);
    // A multi-level tree needs > 128 blocks: add a 2 MiB file.
    fs::write(src.join("big"), Rng::new(9).bytes(2 << 20)).unwrap();
    let img = s.0.join("s.img");
    let digest = stdout_line(&build_ok(&src, &img, &[]));
    let bytes = fs::read(&img).unwrap();
    let len = erofs_len(&bytes);
    let g = TreeGeometry::new(
        &Params::new(HashAlg::Sha256, 4096, b"").unwrap(),
        len as u64,
    );
    assert!(
        g.num_levels() >= 2,
        "want a multi-level tree, got {}",
        g.num_levels()
    );

    let (code, json, _) = verify_json(&img, &["--digest", &digest]);
    assert_eq!(
        (code, json["verified"].as_bool()),
        (0, Some(true)),
        "untouched image verifies"
    );

    let tree_end = len + g.tree_size() as usize;
    let mut rng = Rng::new(77);
    let mut positions: Vec<usize> = Vec::new();
    for _ in 0..150 {
        positions.push(rng.below(len as u64) as usize); // data and metadata
    }
    for _ in 0..100 {
        positions.push(len + rng.below(g.tree_size()) as usize); // tree
    }
    for _ in 0..60 {
        positions.push(tree_end + rng.below((bytes.len() - tree_end) as u64) as usize);
        // trailer
    }
    positions.extend([
        0,
        1024,
        1028,
        4095,
        len - 1,
        len,
        tree_end - 1,
        tree_end,
        bytes.len() - 1,
    ]);
    let bad = s.0.join("bad.img");
    let mut named_big = 0;
    for pos in positions {
        let mut b = bytes.clone();
        b[pos] ^= 1 << (pos % 8);
        fs::write(&bad, &b).unwrap();
        let (code, json, stderr) = verify_json(&bad, &[]);
        assert_eq!(code, 1, "flip at {pos} not detected: {json} {stderr}");
        let want = expected_place(pos, len, &g);
        let got = reported(&json);
        assert!(
            got.contains(&want),
            "flip at {pos}: expected {want:?}, reported {got:?} ({json})"
        );
        // A damaged block of a file's data is named by the file, and that file's recorded digest fails.
        let problems = json["problems"].as_array().unwrap();
        for p in problems {
            if let Some(owner) = p["owner"].as_str().and_then(|o| o.strip_prefix("data of ")) {
                named_big += (owner == "/big") as usize;
                let digest_failed = problems
                    .iter()
                    .any(|q| q["kind"] == "file_digest" && q["path"] == owner);
                assert!(
                    digest_failed,
                    "flip at {pos} in {owner}: its digest did not fail: {json}"
                );
            }
        }
    }
    assert!(named_big > 0, "no flip in /big's data was named after it");

    // A wrong digest, a truncated file and an extended one.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (code, json, _) = verify_json(&img, &["--digest", &wrong]);
    assert_eq!(code, 1);
    assert_eq!(json["problems"][0]["kind"], "digest");
    for cut in [
        1usize,
        63,
        64,
        600,
        bytes.len() - len - 1,
        bytes.len() - len + 4096,
    ] {
        fs::write(&bad, &bytes[..bytes.len() - cut]).unwrap();
        let (code, json, stderr) = verify_json(&bad, &[]);
        assert_eq!(code, 1, "truncated by {cut}: {json} {stderr}");
    }
    for extra in [1usize, 64, 4096] {
        let mut b = bytes.clone();
        b.extend(std::iter::repeat_n(0xA5, extra));
        fs::write(&bad, &b).unwrap();
        let (code, json, stderr) = verify_json(&bad, &[]);
        assert_eq!(code, 1, "extended by {extra}: {json} {stderr}");
    }
    // Not an image at all: exit 2.
    fs::write(&bad, b"hello").unwrap();
    assert_eq!(verify_json(&bad, &[]).0, 2);
    println!(
        "every flip in {} bytes of data+metadata, {} of tree, {} of trailer was found and placed",
        len,
        g.tree_size(),
        bytes.len() - tree_end
    );
}

/// Regression (issue 13): with a Merkle block size other than 4096, `verify` reported damaged data at
/// `index * 4096` and looked the owner up with Merkle-block indices against 4 KiB image blocks, so
/// the damage was pinned on the wrong file. One byte flipped 400 KiB into `f1048576`'s data must be
/// reported in the Merkle block that holds it, owned by `f1048576`, at 1 KiB, 4 KiB and 64 KiB blocks.
#[test]
fn verify_names_damage_at_non_4k_verity_blocks() {
    let s = scratch("verity-bs");
    let src = s.0.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f1048576"), Rng::new(1).bytes(1048576)).unwrap();
    fs::write(src.join("f3145745"), Rng::new(2).bytes(3145745)).unwrap();
    for bs in [1024u64, 4096, 65536] {
        let img = s.0.join(format!("bs{bs}.img"));
        let bs_arg = bs.to_string();
        build_ok(&src, &img, &["--verity-block-size", &bs_arg]);
        // Where f1048576's data starts in the image, from the kernel-independent dump.erofs oracle.
        let start = data_offset_by_dump(&img, "/f1048576");
        let pos = (start + 400 * 1024 + 7) as usize;
        let mut bytes = fs::read(&img).unwrap();
        bytes[pos] ^= 0x20;
        let bad = s.0.join(format!("bad{bs}.img"));
        fs::write(&bad, &bytes).unwrap();
        let (code, json, stderr) = verify_json(&bad, &[]);
        assert_eq!(code, 1, "bs {bs}: flip not detected: {json} {stderr}");
        let problems = json["problems"].as_array().unwrap();
        let block = problems
            .iter()
            .find(|p| p["kind"] == "data_block")
            .unwrap_or_else(|| panic!("bs {bs}: no data block reported: {json}"));
        let want = pos as u64 / bs;
        assert_eq!(block["block"].as_u64(), Some(want), "bs {bs}: {json}");
        assert_eq!(block["offset"].as_u64(), Some(want * bs), "bs {bs}: {json}");
        assert_eq!(block["block_size"].as_u64(), Some(bs), "bs {bs}: {json}");
        let msg = block["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("(bytes {}..{})", want * bs, (want + 1) * bs)),
            "bs {bs}: {msg}"
        );
        assert_eq!(block["owner"], "data of /f1048576", "bs {bs}: {json}");
        assert!(
            problems
                .iter()
                .any(|p| p["kind"] == "file_digest" && p["path"] == "/f1048576"),
            "bs {bs}: the damaged file's digest did not fail: {json}"
        );
        assert!(
            !problems.iter().any(|p| p["path"] == "/f3145745"),
            "bs {bs}: the undamaged file was blamed: {json}"
        );
    }
}

/// The image byte offset of the first data block of `path`, as `dump.erofs --path` prints it
/// (`dump.erofs` is the oracle: erofs-utils, not ours).
fn data_offset_by_dump(img: &Path, path: &str) -> u64 {
    assert!(
        have_tool("dump.erofs"),
        "dump.erofs (erofs-utils) is needed to place the damage; scripts/test.sh installs it"
    );
    let out = run(Command::new("dump.erofs")
        .arg(format!("--path={path}"))
        .arg("-e")
        .arg(img));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dump.erofs: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Extent lines look like "   0:        0.. 1048576 | 1048576 :       4096..   1052672 | 1048576".
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("0:"))
        .unwrap_or_else(|| panic!("no extent line in dump.erofs output: {text}"));
    let physical = line.split('|').nth(1).expect("physical column");
    let start = physical.split(':').nth(1).expect("physical range").trim();
    start
        .split("..")
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("a byte offset")
}
