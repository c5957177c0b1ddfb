//! erofs-utils (`mkfs.erofs`, `fsck.erofs`, `dump.erofs`) and raw superblock fields.

use crate::{run_ok, show};
use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// `mkfs.erofs ARGS --quiet OUT SRC`.
pub fn mkfs(src: &Path, out: &Path, args: &[&str]) -> Result<(), String> {
    run_ok(
        Command::new("mkfs.erofs")
            .args(args)
            .arg("--quiet")
            .arg(out)
            .arg(src),
    )
    .map(drop)
}

/// `fsck.erofs --extract=DIR IMAGE`.
pub fn fsck_extract(image: &Path, dir: &Path) -> Result<(), String> {
    run_ok(
        Command::new("fsck.erofs")
            .arg(format!("--extract={}", dir.display()))
            .arg(image),
    )
    .map(drop)
}

/// `fsck.erofs IMAGE` must exit 0. Returns its output for logging.
pub fn fsck(image: &Path) -> Result<String, String> {
    let out = Command::new("fsck.erofs")
        .arg(image)
        .output()
        .map_err(|e| format!("running fsck.erofs: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "fsck.erofs {} failed ({:?}): {}",
            image.display(),
            out.status,
            text.trim()
        ))
    }
}

/// One line of `dump.erofs --ls`: (nid, dirent file type, name).
pub type DumpEntry = (u64, u8, Vec<u8>);

/// The directory listing of `dir` (an absolute path inside the image, e.g. `/` or `/sub`) as
/// printed by `dump.erofs --ls --path=DIR` (erofs-utils 1.5 prints the nid right-aligned, the
/// file type right-aligned, two spaces, then the raw name, one dirent per line).
/// "." and ".." are left out. Names must not contain a newline.
pub fn dump_ls(image: &Path, dir: &str) -> Result<Vec<DumpEntry>, String> {
    let out = Command::new("dump.erofs")
        .arg("--ls")
        .arg(format!("--path={dir}"))
        .arg(image)
        .output()
        .map_err(|e| format!("running dump.erofs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dump.erofs --ls --path={dir} failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let stdout = out.stdout;
    let mut lines = stdout.split(|&b| b == b'\n');
    // Skip the inode summary up to the table header.
    for line in lines.by_ref() {
        if line.windows(8).any(|w| w == b"FILENAME") {
            break;
        }
    }
    let mut entries = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let start = line.iter().position(|&b| b != b' ').unwrap_or(line.len());
        let rest = &line[start..];
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad_line(line))?;
        let nid: u64 = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_line(line))?;
        let rest = &rest[sp..];
        let rest = &rest[rest
            .iter()
            .position(|&b| b != b' ')
            .ok_or_else(|| bad_line(line))?..];
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| bad_line(line))?;
        let ft: u8 = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad_line(line))?;
        let name = rest.get(sp + 2..).ok_or_else(|| bad_line(line))?.to_vec();
        if name != b"." && name != b".." {
            entries.push((nid, ft, name));
        }
    }
    Ok(entries)
}

fn bad_line(line: &[u8]) -> String {
    format!("unparsable dump.erofs line: {}", show(line))
}

/// The EROFS dirent file type of an `lstat` result (FT_* values).
pub fn erofs_file_type(md: &fs::Metadata) -> u8 {
    match md.mode() & libc::S_IFMT {
        libc::S_IFREG => 1,
        libc::S_IFDIR => 2,
        libc::S_IFCHR => 3,
        libc::S_IFBLK => 4,
        libc::S_IFIFO => 5,
        libc::S_IFSOCK => 6,
        libc::S_IFLNK => 7,
        _ => 0,
    }
}

/// Compares `dump.erofs --ls` of `rel_dir` (relative, "" for the root) with the source directory
/// `src_root/rel_dir`: the same names with the same file types. `excluded` names source paths
/// (relative to `src_root`) that must be absent. Returns the differences.
pub fn compare_dump_listing(
    image: &Path,
    src_root: &Path,
    rel_dir: &str,
    excluded: &dyn Fn(&[u8]) -> bool,
) -> Vec<String> {
    let mut diffs = Vec::new();
    let dump = match dump_ls(image, &format!("/{rel_dir}")) {
        Ok(d) => d,
        Err(e) => return vec![e],
    };
    let mut expected = BTreeSet::new();
    for e in fs::read_dir(src_root.join(rel_dir)).expect("read source dir") {
        let e = e.unwrap();
        let name = e.file_name().as_bytes().to_vec();
        let rel = if rel_dir.is_empty() {
            name.clone()
        } else {
            [rel_dir.as_bytes(), b"/", &name].concat()
        };
        if excluded(&rel) {
            continue;
        }
        let md = fs::symlink_metadata(e.path()).unwrap();
        expected.insert((erofs_file_type(&md), name));
    }
    let got: BTreeSet<(u8, Vec<u8>)> = dump.iter().map(|(_, ft, n)| (*ft, n.clone())).collect();
    if got.len() != dump.len() {
        diffs.push(format!("dump.erofs /{rel_dir}: duplicate names in listing"));
    }
    for (ft, n) in expected.difference(&got) {
        diffs.push(format!(
            "dump.erofs /{rel_dir}: missing {} (type {ft})",
            show(n)
        ));
    }
    for (ft, n) in got.difference(&expected) {
        diffs.push(format!(
            "dump.erofs /{rel_dir}: unexpected {} (type {ft})",
            show(n)
        ));
    }
    diffs
}

/// The 128-byte superblock at byte 1024 of `image`.
pub fn superblock(image: &Path) -> [u8; 128] {
    let mut f = fs::File::open(image).expect("open image");
    let mut buf = [0u8; 1024 + 128];
    f.read_exact(&mut buf)
        .expect("image shorter than 1152 bytes");
    assert_eq!(
        u32::from_le_bytes(buf[1024..1028].try_into().unwrap()),
        0xE0F5_E1E2,
        "EROFS magic missing at byte 1024 of {}",
        image.display()
    );
    buf[1024..].try_into().unwrap()
}

/// Superblock `uuid` (bytes 48..64).
pub fn sb_uuid(sb: &[u8; 128]) -> [u8; 16] {
    sb[48..64].try_into().unwrap()
}

/// Superblock `volume_name` (bytes 64..80).
pub fn sb_label(sb: &[u8; 128]) -> [u8; 16] {
    sb[64..80].try_into().unwrap()
}

/// Superblock `feature_compat`.
pub fn sb_feature_compat(sb: &[u8; 128]) -> u32 {
    u32::from_le_bytes(sb[8..12].try_into().unwrap())
}

/// Superblock block count (`blocks_lo`; images here stay below 2^32 blocks).
pub fn sb_blocks(sb: &[u8; 128]) -> u64 {
    u32::from_le_bytes(sb[36..40].try_into().unwrap()) as u64
}

/// `EROFS_FEATURE_COMPAT_XATTR_FILTER`.
pub const COMPAT_XATTR_FILTER: u32 = 0x4;

/// Bytes the file occupies on its filesystem (`st_blocks * 512`).
pub fn allocated_bytes(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

/// The erofs-utils 1.9 `mkfs.erofs` (LZMA, DEFLATE, fragments, dedupe, 48-bit layouts: what the
/// installed 1.5 cannot make): `$MKFS_EROFS`, else `target/oracles/erofs-utils-1.9/bin/mkfs.erofs`
/// in the workspace (built by `scripts/build-oracles.sh`). `Err` (the reason) when neither runs
/// and says it is 1.9.
pub fn mkfs_erofs_1_9() -> Result<std::path::PathBuf, String> {
    erofs_utils_1_9("mkfs.erofs")
}

/// A program of erofs-utils 1.9 (`mkfs.erofs`, `fsck.erofs`, `dump.erofs`): beside `$MKFS_EROFS`
/// when that is set, else in `target/oracles/erofs-utils-1.9/bin` of the workspace. `Err` (the
/// reason) when it does not run or is not 1.9.
pub fn erofs_utils_1_9(tool: &str) -> Result<std::path::PathBuf, String> {
    let path = match std::env::var_os("MKFS_EROFS") {
        Some(p) => std::path::PathBuf::from(p).with_file_name(tool),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/oracles/erofs-utils-1.9/bin")
            .join(tool),
    };
    let out = Command::new(&path).arg("--version").output().map_err(|e| {
        format!(
            "{tool} 1.9 not found at {} ({e}): run scripts/build-oracles.sh or set MKFS_EROFS",
            path.display()
        )
    })?;
    let version =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !version.contains(" 1.9") {
        return Err(format!(
            "{} is not erofs-utils 1.9: {}",
            path.display(),
            version.trim()
        ));
    }
    Ok(path)
}

/// `fsck.erofs IMAGE` with erofs-utils 1.9 (every block of data decoded and checked): exit 0, or
/// the reason.
pub fn fsck_1_9(image: &Path) -> Result<(), String> {
    let fsck = erofs_utils_1_9("fsck.erofs")?;
    run_ok(Command::new(fsck).arg(image)).map(drop)
}

/// `fsck.erofs --extract=DIR IMAGE` with erofs-utils 1.9 (which knows every feature the builder
/// writes: zstd, LZMA, DEFLATE, fragments): exit 0 and the extracted tree, or the reason.
pub fn fsck_1_9_extract(image: &Path, dir: &Path) -> Result<(), String> {
    let fsck = erofs_utils_1_9("fsck.erofs")?;
    run_ok(
        Command::new(fsck)
            .arg(format!("--extract={}", dir.display()))
            .arg(image),
    )
    .map(drop)
}

/// `MKFS ARGS --quiet OUT SRC` with the given `mkfs.erofs` binary.
pub fn mkfs_with(mkfs: &Path, src: &Path, out: &Path, args: &[&str]) -> Result<(), String> {
    run_ok(
        Command::new(mkfs)
            .args(args)
            .arg("--quiet")
            .arg(out)
            .arg(src),
    )
    .map(drop)
}
