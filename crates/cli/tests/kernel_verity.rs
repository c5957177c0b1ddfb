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

/// Boots the guest with `staging` as its file system and `script` as /mnt/guest.sh; returns what it
/// printed, after checking that it ran to its end.
fn run_guest(staging: &Path, script_text: &str) -> String {
    fs::write(staging.join("guest.sh"), script_text).unwrap();
    let out = run(Command::new("timeout")
        .arg("600")
        .arg(script())
        .arg(staging)
        .env("SEALFS", sealfs_bin()));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(
        out.status.success() && text.contains("GUEST-EXIT"),
        "the virtual machine did not run to its end ({:?}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
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
    let text = run_guest(&staging, &guest);
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

/// A guest command whose output (stdout and stderr) lands in section `name`, followed by the line
/// `RC name <exit status>`.
fn step(name: &str, cmd: &str) -> String {
    format!(
        "echo 'BEGIN {name}'; {{ {cmd} ; }} 2>&1; r=$?; echo 'END {name}'; echo \"RC {name} $r\"\n"
    )
}

/// The exit status the guest recorded for step `name`.
fn rc(out: &str, name: &str) -> i32 {
    let prefix = format!("RC {name} ");
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no exit status of {name} in the guest output:\n{out}"))
}

/// Section `name` of the guest output, after checking its step exited with `want`.
fn step_out<'a>(out: &'a str, name: &str, want: i32) -> &'a str {
    let text = section(out, name);
    assert_eq!(
        rc(out, name),
        want,
        "guest step {name} exited {} (want {want}):\n{text}",
        rc(out, name)
    );
    text
}

/// No sealfs device left: no device-mapper device (`dmsetup ls`) and no loop device but the one the
/// guest's own ext4 is on (`losetup -a`), in the sections `dm-<tag>` and `loops-<tag>`.
fn nothing_left(out: &str, tag: &str) {
    let dm = step_out(out, &format!("dm-{tag}"), 0);
    assert!(
        dm.contains("No devices found"),
        "{tag}: device-mapper devices left behind:\n{dm}"
    );
    let loops = step_out(out, &format!("loops-{tag}"), 0);
    let extra: Vec<&str> = loops
        .lines()
        .filter(|l| l.starts_with("/dev/loop") && !l.contains("/fs.ext4"))
        .collect();
    assert!(
        extra.is_empty(),
        "{tag}: loop devices left behind: {extra:?}\n{loops}"
    );
}

fn check_nothing_left(tag: &str) -> String {
    step(&format!("dm-{tag}"), "dmsetup ls") + &step(&format!("loops-{tag}"), "losetup -a")
}

/// `sha256sum` of every file under a mount in the guest, as section `name`.
fn guest_hashes(name: &str, mnt: &str) -> String {
    step(
        name,
        &format!("cd {mnt} && find . -type f | sort | xargs sha256sum; cd /mnt"),
    )
}

/// Where `needle` (unique) is in `hay`.
fn find_unique(hay: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .take(2)
        .collect();
    assert_eq!(hits.len(), 1, "the probe bytes are not unique in the image");
    hits[0]
}

#[test]
fn kernel_verified_mounts_in_a_guest() {
    if !oracle_guard(vm_env().and_then(|()| {
        for tool in ["dmsetup", "losetup", "objcopy", "openssl"] {
            if !have_tool(tool) {
                return Err(format!("{tool} not found (scripts/test.sh installs it)"));
            }
        }
        Ok(())
    })) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let want = host_hashes(&src);
    let staging = dir.path().join("staging");
    fs::create_dir(&staging).unwrap();
    let st = |name: &str| staging.join(name);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let openssl = |args: &[&str]| {
        let out = run(Command::new("openssl").args(args));
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let sealfs_ok = |args: &[&str]| {
        let out = run(Command::new(sealfs_bin()).args(args));
        assert!(out.status.success(), "sealfs {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    // Keys made by openssl; the image signed by the first.
    for k in ["key", "other"] {
        openssl(&[
            "genpkey",
            "-algorithm",
            "ed25519",
            "-out",
            &s(&st(&format!("{k}.pem"))),
        ]);
        openssl(&[
            "pkey",
            "-in",
            &s(&st(&format!("{k}.pem"))),
            "-pubout",
            "-out",
            &s(&st(&format!("{k}.pub"))),
        ]);
    }
    // a.img: attached, plain, signed. b.img: attached, SHA-512, salted, lz4hc. c.erofs: detached.
    build_ok(&src, &st("a.img"), &["-q", "-T", "0"]);
    sealfs_ok(&["sign", &s(&st("a.img")), "--key", &s(&st("key.pem"))]);
    let b_digest = String::from_utf8(
        build_ok(
            &src,
            &st("b.img"),
            &[
                "-q",
                "-T",
                "0",
                "--hash-alg",
                "sha512",
                "--salt",
                "5ea1f5",
                "-z",
                "lz4hc",
                "-C",
                "65536",
            ],
        )
        .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let c_digest = String::from_utf8(
        build_ok(
            &src,
            &st("c.erofs"),
            &["-q", "-T", "0", "--sidecar", &s(&st("c.seal"))],
        )
        .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    // The byte to damage: inside noise5's data (random, so a 64-byte probe is unique in the image).
    let image = fs::read(st("a.img")).unwrap();
    let noise = fs::read(src.join("noise5")).unwrap();
    let at = find_unique(&image, &noise[40_000..40_064]) + 17;
    fs::write(st("flip.bin"), [image[at] ^ 0x01]).unwrap();

    let key = "--key key.pub";
    let mut g = String::from("cd /mnt\nmkdir -p /m/a /m/b /m/c\n");
    // 1. Signed image, dm-verity: every file equals the source; the chain is reported; nothing left.
    g += &step(
        "mount-a",
        &format!("sealfs mount --kernel {key} a.img /m/a"),
    );
    g += &guest_hashes("hashes-a", "/m/a");
    g += &step("inspect-a", "sealfs inspect /m/a");
    g += &step("inspect-json-a", "sealfs inspect --json /m/a");
    g += &step("table-a", "dmsetup table");
    g += &step("status-a", "dmsetup status");
    g += &step("losetup-a", "losetup -a");
    g += &step("umount-a", "sealfs umount /m/a");
    g += &check_nothing_left("a");
    // 2. Refused before anything is set up: another key, another digest, no authentication.
    g += &step(
        "wrong-key",
        "sealfs mount --kernel --key other.pub a.img /m/a",
    );
    g += &step(
        "wrong-digest",
        &format!("sealfs mount --kernel --digest {b_digest} a.img /m/a"),
    );
    g += &step("no-auth", "sealfs mount --kernel a.img /m/a");
    g += &step("mounts-refused", "grep -c ' /m/' /proc/mounts");
    g += &check_nothing_left("refused");
    // 3. One byte of noise5's data flipped in a copy: EIO for that file only, dm-verity says C.
    g += &step(
        "damage",
        &format!("cp a.img bad.img && dd if=flip.bin of=bad.img bs=1 seek={at} conv=notrunc"),
    );
    g += &step(
        "mount-bad",
        &format!("sealfs mount --kernel {key} bad.img /m/a"),
    );
    g += &step("cat-bad", "cat /m/a/noise5 >/dev/null");
    g += &step(
        "hashes-bad",
        "cd /m/a && find . -type f ! -name noise5 | sort | xargs sha256sum; cd /mnt",
    );
    g += &step("status-bad", "dmsetup status");
    g += &step("inspect-bad", "sealfs inspect /m/a");
    g += &step("umount-bad", "sealfs umount /m/a");
    g += &check_nothing_left("bad");
    // 4. Left behind: unmounted by hand (as after a crash), `sealfs umount` removes the rest.
    g += &step(
        "mount-crash",
        &format!("sealfs mount --kernel {key} a.img /m/a"),
    );
    g += &step("hand-umount", "umount /m/a && dmsetup ls");
    g += &step("umount-crash", "sealfs umount /m/a");
    g += &check_nothing_left("crash");
    // 5. --on-corruption reaches the table.
    for action in ["panic", "restart"] {
        g += &step(
            &format!("mount-{action}"),
            &format!("sealfs mount --kernel {key} --on-corruption={action} a.img /m/a"),
        );
        g += &step(&format!("table-{action}"), "dmsetup table");
        g += &step(&format!("umount-{action}"), "sealfs umount /m/a");
    }
    g += &check_nothing_left("options");
    // 6. SHA-512, salted, compressed: the padded salt makes dm-verity's hashes fs-verity's.
    g += &step(
        "mount-b",
        &format!("sealfs mount --kernel --digest {b_digest} b.img /m/b"),
    );
    g += &guest_hashes("hashes-b", "/m/b");
    g += &step("table-b", "dmsetup table");
    g += &step("umount-b", "sealfs umount /m/b");
    g += &check_nothing_left("b");
    // 7. Detached: a refused mount turns nothing on; fs-verity is turned on, measured, mounted.
    g += &step(
        "wrong-digest-c",
        &format!("sealfs mount --kernel --digest {b_digest} --sidecar c.seal c.erofs /m/c"),
    );
    g += &step("measure-before-c", "fsverity measure c.erofs");
    g += &step(
        "mount-c",
        &format!("sealfs mount --kernel --digest {c_digest} --sidecar c.seal c.erofs /m/c"),
    );
    g += &step("measure-c", "fsverity measure c.erofs");
    g += &guest_hashes("hashes-c", "/m/c");
    g += &step("inspect-c", "sealfs inspect /m/c");
    g += &step("umount-c", "sealfs umount /m/c");
    g += &check_nothing_left("c");
    // 8. The same detached image through dm-verity, its tree read from the sidecar.
    g += &step(
        "mount-c-dm",
        &format!(
            "sealfs mount --kernel=dm-verity --digest {c_digest} --sidecar c.seal c.erofs /m/c"
        ),
    );
    g += &guest_hashes("hashes-c-dm", "/m/c");
    g += &step("inspect-c-dm", "sealfs inspect /m/c");
    g += &step("umount-c-dm", "sealfs umount /m/c");
    g += &check_nothing_left("c-dm");
    let text = run_guest(&staging, &g);
    assert!(
        !text.contains("GUEST: insmod"),
        "a module did not load:\n{text}"
    );

    // 1.
    step_out(&text, "mount-a", 0);
    assert_eq!(
        parse_hashes(step_out(&text, "hashes-a", 0), ""),
        want,
        "dm-verity mount of a.img differs from the source"
    );
    let inspect = step_out(&text, "inspect-a", 0);
    for wanted in [
        "verified by            kernel dm-verity",
        "loop device (data)",
        "/mnt/a.img (read-only, autoclear)",
        "status               V",
    ] {
        assert!(
            inspect.contains(wanted),
            "inspect lacks {wanted:?}:\n{inspect}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(step_out(&text, "inspect-json-a", 0)).expect("inspect --json");
    let km = &json["kernel_mount"];
    assert_eq!(km["kernel_verified"], true, "{json}");
    assert_eq!(km["dm_verity"]["hash_algorithm"], "sha256", "{json}");
    assert_eq!(km["loops"][0]["backing_file"], "/mnt/a.img", "{json}");
    // dmsetup's view: a verity target over the loop device, the root the seal records, no salt.
    let seal_root = {
        let out = run(Command::new(sealfs_bin())
            .args(["inspect", "--json"])
            .arg(st("a.img")));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["seal"]["root_hash"].as_str().unwrap().to_string()
    };
    let table = step_out(&text, "table-a", 0);
    assert!(
        table.contains(" verity 1 7:") && table.contains(&format!(" sha256 {seal_root} -")),
        "dmsetup table:\n{table}"
    );
    assert_eq!(
        km["dm_verity"]["root_hash"], seal_root,
        "inspect's root is not the table's"
    );
    assert!(step_out(&text, "status-a", 0).contains(" verity V"));
    assert!(step_out(&text, "losetup-a", 0).contains("/dev/loop"));
    step_out(&text, "umount-a", 0);
    nothing_left(&text, "a");

    // 2.
    let out = step_out(&text, "wrong-key", 1);
    assert!(
        out.contains("signed only by unknown keys"),
        "wrong key: {out}"
    );
    step_out(&text, "wrong-digest", 1);
    let out = step_out(&text, "no-auth", 2);
    assert!(out.contains("--digest or --key"), "{out}");
    assert_eq!(
        step_out(&text, "mounts-refused", 1).trim(),
        "0",
        "a refused mount mounted something"
    );
    nothing_left(&text, "refused");

    // 3.
    step_out(&text, "damage", 0);
    step_out(&text, "mount-bad", 0);
    let out = step_out(&text, "cat-bad", 1);
    assert!(
        out.contains("I/O error") || out.contains("Input/output error"),
        "reading the damaged file: {out}"
    );
    let mut others = want.clone();
    others.remove("noise5");
    assert_eq!(
        parse_hashes(step_out(&text, "hashes-bad", 0), ""),
        others,
        "the undamaged files of bad.img do not read correctly"
    );
    assert!(
        step_out(&text, "status-bad", 0).contains(" verity C"),
        "dm-verity did not record the corruption"
    );
    assert!(step_out(&text, "inspect-bad", 0).contains("status               C"));
    step_out(&text, "umount-bad", 0);
    nothing_left(&text, "bad");

    // 4.
    step_out(&text, "mount-crash", 0);
    assert!(
        step_out(&text, "hand-umount", 0).contains("sealfs-"),
        "the mapping should outlive a hand unmount"
    );
    let out = step_out(&text, "umount-crash", 0);
    assert!(out.contains("left behind"), "{out}");
    nothing_left(&text, "crash");

    // 5.
    for action in ["panic", "restart"] {
        step_out(&text, &format!("mount-{action}"), 0);
        let table = step_out(&text, &format!("table-{action}"), 0);
        assert!(
            table.contains(&format!(" 1 {action}_on_corruption")),
            "{action}: {table}"
        );
        step_out(&text, &format!("umount-{action}"), 0);
    }
    nothing_left(&text, "options");

    // 6.
    step_out(&text, "mount-b", 0);
    assert_eq!(parse_hashes(step_out(&text, "hashes-b", 0), ""), want);
    let table = step_out(&text, "table-b", 0);
    let padded = format!("5ea1f5{}", "00".repeat(128 - 3));
    assert!(
        table.contains(" sha512 ") && table.contains(&padded),
        "table of the SHA-512 salted image:\n{table}"
    );
    step_out(&text, "umount-b", 0);
    nothing_left(&text, "b");

    // 7.
    step_out(&text, "wrong-digest-c", 1);
    let before = section(&text, "measure-before-c");
    assert_ne!(
        rc(&text, "measure-before-c"),
        0,
        "a refused mount turned fs-verity on: {before}"
    );
    step_out(&text, "mount-c", 0);
    assert!(
        step_out(&text, "measure-c", 0).starts_with(&c_digest),
        "the kernel's digest of c.erofs is not {c_digest}"
    );
    assert_eq!(parse_hashes(step_out(&text, "hashes-c", 0), ""), want);
    let inspect = step_out(&text, "inspect-c", 0);
    assert!(
        inspect.contains(&format!("kernel fs-verity on the image file ({c_digest})")),
        "{inspect}"
    );
    step_out(&text, "umount-c", 0);
    nothing_left(&text, "c");

    // 8.
    step_out(&text, "mount-c-dm", 0);
    assert_eq!(parse_hashes(step_out(&text, "hashes-c-dm", 0), ""), want);
    let inspect = step_out(&text, "inspect-c-dm", 0);
    assert!(
        inspect.contains("loop device (hash)") && inspect.contains("/mnt/c.seal"),
        "{inspect}"
    );
    step_out(&text, "umount-c-dm", 0);
    nothing_left(&text, "c-dm");
}

/// The same command on this machine's own kernel. Where it has device-mapper with dm-verity, the
/// mount is made and checked and taken down; where it has not (this project's machines: no
/// `CONFIG_BLK_DEV_DM`), the refusal must say why, exit 2, and leave no loop device or mount behind.
#[test]
fn kernel_mount_on_this_host() {
    if !oracle_guard(if is_root() {
        Ok(())
    } else {
        Err("needs root (loop devices, device-mapper, mount)".into())
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let img = dir.path().join("a.img");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let digest = String::from_utf8(build_ok(&src, &img, &["-q"]).stdout).unwrap();
    let out = run(Command::new(sealfs_bin())
        .args(["mount", "--kernel", "--digest", digest.trim()])
        .arg(&img)
        .arg(&mnt));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let has_dm = Path::new("/dev/mapper/control").exists();
    if out.status.success() {
        assert!(has_dm, "mounted without device-mapper? {stderr}");
        let got = host_hashes(&mnt);
        let down = run(Command::new(sealfs_bin()).arg("umount").arg(&mnt));
        assert!(down.status.success(), "umount: {down:?}");
        assert_eq!(
            got,
            host_hashes(&src),
            "the dm-verity mount differs from the source"
        );
        println!("mounted with dm-verity on this host, contents equal");
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        if !has_dm {
            assert!(
                stderr.contains("device-mapper is not available"),
                "the refusal does not say why: {stderr}"
            );
        }
        println!("refused on this host, as it should be: {stderr}");
    }
    // Only this image's: other tests may use loop devices at the same time.
    let loops = run(Command::new("losetup").arg("-j").arg(&img)).stdout;
    assert!(
        loops.is_empty(),
        "loop devices left behind: {}",
        String::from_utf8_lossy(&loops)
    );
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(mnt.to_str().unwrap()),
        "still mounted: {mounts}"
    );
}

/// `fsverity measure` lines (`sha256:<hex> ./path`) into path -> digest.
fn parse_measure(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (digest, path) = l.split_once(' ')?;
            digest.starts_with("sha").then(|| {
                (
                    path.trim_start_matches("./").to_string(),
                    digest.to_string(),
                )
            })
        })
        .collect()
}

/// `sealfs digest --files` (or any `DIGEST PATH` lines) into path -> digest.
fn parse_digest_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(d, p)| (p.to_string(), d.to_string()))
        .collect()
}

/// `sealfs extract --fsverity` in the guest, on ext4 with the `verity` feature: every extracted
/// file has the kernel's fs-verity on, and `fsverity measure` of each (the kernel's own digest)
/// equals what `sealfs digest --files` prints for the image (and `fsverity digest` for the source
/// file): SHA-256 and SHA-512 images, an image sealed by an earlier release (its trailer digests
/// vouch for nothing: the digests are computed from the content), one sealed by `sealfs seal`
/// (no table). A self-consistent image whose table lies about a file, and a destination without
/// fs-verity (the guest's tmpfs root), give exit 3 with the counts in the summary.
#[test]
fn extract_fsverity_leaves_files_the_kernel_verifies() {
    if !oracle_guard(vm_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    fs::hard_link(src.join("noise3"), src.join("sub/noise3-link")).unwrap();
    let staging = dir.path().join("staging");
    fs::create_dir(&staging).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seal-v1");

    build_ok(&src, &staging.join("sha256.img"), &["-q", "-T", "0"]);
    build_ok(
        &src,
        &staging.join("sha512.img"),
        &["-q", "-T", "0", "-z", "lz4hc", "--hash-alg", "sha512"],
    );
    build_ok(
        &src,
        &staging.join("resealed.img"),
        &["-q", "-T", "0", "--no-seal"],
    );
    let sealed = run(Command::new(sealfs_bin())
        .arg("seal")
        .arg(staging.join("resealed.img")));
    assert!(sealed.status.success(), "seal: {sealed:?}");
    fs::copy(fixtures.join("attached.img"), staging.join("old.img")).unwrap();

    // A table that lies about one file: the EROFS bytes of a sealed build with one digest byte
    // changed, sealed again (self-consistent: whoever changes an image can reseal it).
    let mut forged = fs::read(staging.join("sha256.img")).unwrap();
    let blocks = u32::from_le_bytes(forged[1024 + 36..1024 + 40].try_into().unwrap()) as usize;
    forged.truncate(blocks * 4096);
    let table = u64::from_le_bytes(forged[24..32].try_into().unwrap()) as usize;
    // The first entry: a one-byte LEB128 nid difference or more, then the digest; flip its last byte.
    let first_digest_end =
        table + forged[table..].iter().position(|b| b & 0x80 == 0).unwrap() + 1 + 32;
    forged[first_digest_end - 1] ^= 0xff;
    fs::write(staging.join("forged.img"), &forged).unwrap();
    let sealed = run(Command::new(sealfs_bin())
        .arg("seal")
        .arg(staging.join("forged.img")));
    assert!(sealed.status.success(), "seal: {sealed:?}");

    // What each image's files must measure: `sealfs digest --files`, here on the host (for the old
    // image, computed from the content), and `fsverity digest` of the source files.
    let oracle = run(Command::new("sh")
        .arg("-c")
        .arg("find . -type f -printf '%P\\0' | sort -z | xargs -0 fsverity digest --")
        .current_dir(&src));
    let source_digests = parse_digest_lines(&String::from_utf8_lossy(&oracle.stdout));
    assert_eq!(source_digests.len(), 10);

    let mut guest = String::from("cd /mnt\n");
    for name in ["sha256", "sha512", "resealed", "old"] {
        guest += &step(
            &format!("extract-{name}"),
            &format!("sealfs extract --fsverity {name}.img out-{name}"),
        );
        guest += &step(
            &format!("measure-{name}"),
            &format!("cd out-{name} && find . -type f | sort | xargs fsverity measure; cd /mnt"),
        );
    }
    guest += &step(
        "extract-forged",
        "sealfs extract --fsverity forged.img out-forged",
    );
    guest += &step(
        "extract-tmpfs",
        "mkdir -p /tmp/x && sealfs extract --fsverity sha256.img /tmp/x/out",
    );
    let text = run_guest(&staging, &guest);

    for name in ["sha256", "sha512", "resealed", "old"] {
        let summary = step_out(&text, &format!("extract-{name}"), 0);
        let files = if name == "old" { 4 } else { 9 };
        assert!(
            summary.contains(&format!(
                "fs-verity on {files} files, every digest as the image vouches"
            )),
            "{name}: {summary}"
        );
        let measured = parse_measure(step_out(&text, &format!("measure-{name}"), 0));
        let img = staging.join(format!("{name}.img"));
        let mut cmd = Command::new(sealfs_bin());
        cmd.args(["digest", "--files"]);
        if name == "old" {
            cmd.arg("--from-content");
        }
        let ours = run(cmd.arg(&img));
        assert!(ours.status.success(), "{name}: digest --files: {ours:?}");
        let ours = parse_digest_lines(&String::from_utf8_lossy(&ours.stdout));
        assert_eq!(
            measured, ours,
            "{name}: kernel measurements vs digest --files"
        );
        if name != "old" {
            let sha512 = name == "sha512";
            for (path, digest) in &source_digests {
                if !sha512 {
                    assert_eq!(&measured[path], digest, "{name}: {path} vs fsverity digest");
                } else {
                    assert!(measured[path].starts_with("sha512:"), "{name}: {path}");
                }
            }
        }
    }
    let forged = step_out(&text, "extract-forged", 3);
    assert!(
        forged.contains("0 (refused), 1 with another digest than the image vouches for")
            && forged.contains("the kernel measures fs-verity digest"),
        "forged table: {forged}"
    );
    let tmpfs = step_out(&text, "extract-tmpfs", 3);
    assert!(
        tmpfs.contains("fs-verity on 0 files, NOT on 9 (refused)")
            && tmpfs.contains("fs-verity not turned on"),
        "tmpfs destination: {tmpfs}"
    );
}
