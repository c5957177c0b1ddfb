//! sealfs against the kernel's own fs-verity, in a virtual machine.
//!
//! The host kernel these tests run on may lack fs-verity (`CONFIG_FS_VERITY`), so
//! `scripts/vm-verity.sh` boots a Debian kernel that has it under QEMU, with the images on an ext4 file
//! system made with the `verity` feature. In the guest, `fsverity enable` turns kernel fs-verity on for
//! each detached image file and `fsverity measure` asks the kernel for its digest. The tests check:
//!
//! - the kernel's digest of each image file equals the digest `sealfs build` printed for it (SHA-256,
//!   SHA-512, salted, compressed): the seal is the kernel's fs-verity, byte for byte;
//! - checksum offload: reading an image whose file the kernel verifies with the expected digest, sealfs
//!   says so (`inspect`) and hashes nothing itself (`cat --stats` has no verification counters), and
//!   what it extracts equals the source (busybox `sha256sum` in the guest against `sha256sum` here);
//! - no false offload: a file with kernel fs-verity whose kernel digest is not the image digest (an
//!   attached seal: the kernel covers the trailer too) is still verified block by block in userspace;
//!   and a `--digest` that is not the image's is refused even when the kernel verifies the file.

mod common;

use common::fixture::Rng;
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vm-verity.sh")
}

fn vm_env() -> Result<(), String> {
    for tool in [
        "qemu-system-x86_64",
        "mkfs.ext4",
        "fsverity",
        "apt-get",
        "sha256sum",
    ] {
        if !have_tool(tool) {
            return Err(format!("{tool} not found (scripts/test.sh installs it)"));
        }
    }
    if !Path::new("/bin/busybox").is_file() {
        return Err("/bin/busybox not found (apt-get install busybox-static)".into());
    }
    Ok(())
}

/// Files of assorted sizes (empty, one byte, block boundaries, text that compresses, noise), a symlink.
fn make_tree(dir: &Path) {
    let mut rng = Rng::new(11);
    fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    for (i, size) in [0usize, 1, 4095, 4096, 4097, 70_000, 300_000]
        .into_iter()
        .enumerate()
    {
        fs::write(dir.join(format!("noise{i}")), rng.bytes(size)).unwrap();
    }
    let text: String = (0..20_000)
        .map(|i| format!("line {i}: sealed, verified, compressed\n"))
        .collect();
    fs::write(dir.join("sub/text"), &text).unwrap();
    fs::write(dir.join("sub/deeper/zeros"), vec![0u8; 1 << 20]).unwrap();
    symlink("../noise1", dir.join("sub/link")).unwrap();
}

/// `sha256sum` of every regular file under `dir`, by path relative to it.
fn host_hashes(dir: &Path) -> BTreeMap<String, String> {
    let out = run(Command::new("sh")
        .arg("-c")
        .arg("find . -type f | sort | xargs sha256sum")
        .current_dir(dir));
    assert!(out.status.success(), "sha256sum: {out:?}");
    parse_hashes(&String::from_utf8_lossy(&out.stdout), "")
}

/// Lines `[prefix]<sum>  ./path` into path -> sum.
fn parse_hashes(text: &str, prefix: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|l| {
            let (sum, path) = l.split_once("  ")?;
            Some((path.trim_start_matches("./").to_string(), sum.to_string()))
        })
        .collect()
}

/// The guest's output between `BEGIN name` and `END name`.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let begin = format!("BEGIN {name}\n");
    let end = format!("END {name}");
    let start = out
        .find(&begin)
        .unwrap_or_else(|| panic!("no section {name} in the guest output:\n{out}"))
        + begin.len();
    let len = out[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("section {name} not ended in the guest output:\n{out}"));
    &out[start..start + len]
}

#[test]
fn kernel_fs_verity_agrees_with_the_seal_and_takes_over_verification() {
    if !oracle_guard(vm_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let staging = dir.path().join("staging");
    fs::create_dir(&staging).unwrap();

    // Detached images (plain EROFS file + seal sidecar), as kernel fs-verity can cover the EROFS
    // bytes only when they are the whole file; and one attached image.
    let salt = "5ea1f5";
    let detached: [(&str, &[&str], &str); 4] = [
        ("plain", &[], ""),
        ("lz4hc", &["-z", "lz4hc", "-C", "65536"], ""),
        ("sha512", &["--hash-alg", "sha512"], "--hash-alg=sha512"),
        ("salted", &["--salt", salt], "--salt=5ea1f5"),
    ];
    let mut digests = BTreeMap::new();
    let mut guest = String::from("cd /mnt\n");
    for (name, args, enable) in detached {
        let img = staging.join(format!("{name}.erofs"));
        let seal = format!(
            "--sidecar={}",
            staging.join(format!("{name}.seal")).display()
        );
        let mut all = vec!["-q", "-T", "0", &seal];
        all.extend_from_slice(args);
        let out = build_ok(&src, &img, &all);
        let digest = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(digest.starts_with("sha"), "build printed {digest:?}");
        guest += &format!(
            "fsverity enable {enable} {name}.erofs || echo 'ENABLE-FAILED {name}'\n\
             echo \"MEASURE {name} $(fsverity measure {name}.erofs | cut -d' ' -f1)\"\n"
        );
        digests.insert(name, digest);
    }
    let out = build_ok(&src, &staging.join("attached.img"), &["-q", "-T", "0"]);
    let attached = String::from_utf8(out.stdout).unwrap().trim().to_string();
    guest += "fsverity enable attached.img || echo 'ENABLE-FAILED attached'\n";

    for name in ["plain", "lz4hc"] {
        let d = &digests[name];
        let args = format!("--digest {d} --sidecar {name}.seal {name}.erofs");
        guest += &format!(
            "echo 'BEGIN inspect-{name}'; sealfs inspect {args} 2>&1; echo 'END inspect-{name}'\n\
             echo 'BEGIN stats-{name}'; sealfs cat --stats {args} /sub/text 2>&1 >/dev/null; echo 'END stats-{name}'\n\
             sealfs extract -q {args} /tmp/{name} && echo 'EXTRACTED {name}'\n\
             echo 'BEGIN hashes-{name}'; (cd /tmp/{name} && find . -type f | sort | xargs sha256sum); echo 'END hashes-{name}'\n"
        );
    }
    guest += &format!(
        "echo 'BEGIN inspect-attached'; sealfs inspect --digest {attached} attached.img 2>&1; echo 'END inspect-attached'\n\
         echo 'BEGIN stats-attached'; sealfs cat --stats --digest {attached} attached.img /sub/text 2>&1 >/dev/null; echo 'END stats-attached'\n\
         sealfs cat --digest {wrong} --sidecar plain.seal plain.erofs /sub/text >/dev/null 2>&1; echo \"WRONG-DIGEST $?\"\n",
        wrong = digests["lz4hc"],
    );
    fs::write(staging.join("guest.sh"), guest).unwrap();

    let out = run(Command::new("timeout")
        .arg("600")
        .arg(script())
        .arg(&staging)
        .env("SEALFS", sealfs_bin()));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(
        out.status.success() && text.contains("GUEST-EXIT"),
        "the virtual machine did not run to its end ({:?}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("ENABLE-FAILED"),
        "fsverity enable failed:\n{text}"
    );

    // The kernel's fs-verity digest of each detached image file is the seal's digest.
    for (name, digest) in &digests {
        let line = format!("MEASURE {name} {digest}");
        assert!(
            text.lines().any(|l| l == line),
            "kernel digest of {name} is not {digest}:\n{text}"
        );
    }

    // Offloaded: said so, nothing hashed in userspace, content equal to the source.
    let want = host_hashes(&src);
    assert_eq!(want.len(), 9);
    for name in ["plain", "lz4hc"] {
        let inspect = section(&text, &format!("inspect-{name}"));
        assert!(
            inspect.contains("verified by            kernel fs-verity (offloaded"),
            "{name}: not offloaded:\n{inspect}"
        );
        assert!(inspect.contains("authenticated"), "{name}: {inspect}");
        let stats = section(&text, &format!("stats-{name}"));
        assert!(
            stats.contains("blocks_read"),
            "{name}: no statistics:\n{stats}"
        );
        assert!(
            !stats.contains("verified_blocks"),
            "{name}: hashed in userspace although the kernel verifies the file:\n{stats}"
        );
        assert!(
            text.contains(&format!("EXTRACTED {name}")),
            "{name}: extract failed:\n{text}"
        );
        let got = parse_hashes(section(&text, &format!("hashes-{name}")), "");
        assert_eq!(
            got, want,
            "{name}: extracted content differs from the source"
        );
    }

    // Kernel fs-verity on a file whose kernel digest is not the image digest: verified here.
    let inspect = section(&text, "inspect-attached");
    assert!(
        inspect.contains("verified by            sealfs (userspace"),
        "attached image: {inspect}"
    );
    let stats = section(&text, "stats-attached");
    let verified: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("verified_blocks "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("attached image: no verified_blocks:\n{stats}"));
    assert!(verified > 0, "attached image: nothing verified:\n{stats}");
    // A --digest that is not the image's is refused, kernel fs-verity or not.
    assert!(
        text.lines().any(|l| l == "WRONG-DIGEST 1"),
        "a wrong --digest was not refused with exit 1:\n{text}"
    );
}
