//! `sealfs mount --kernel`, `sealfs umount` of such a mount, and the device chain `sealfs inspect
//! MNT` shows: translations of [`sealfs_kernel`].

use crate::open::ImageArgs;
use crate::read::fault;
use anyhow::{bail, Result};
use sealfs_kernel::{Chain, Method, MountRequest, OnCorruption, Teardown};
use serde_json::json;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;

/// The CLI's form of a kernel-mount error: the image's faults exit 1, the rest 2.
fn kernel_error(e: sealfs_kernel::Error) -> anyhow::Error {
    if e.is_image_fault() {
        fault(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// Mounts `image` with the kernel's EROFS, verified by dm-verity or fs-verity; refuses before
/// setting anything up unless the image is authenticated.
pub fn mount(
    image: &ImageArgs,
    mountpoint: &Path,
    method: &str,
    on_corruption: OnCorruption,
) -> Result<ExitCode> {
    if image.verify != "default" {
        bail!(
            "--kernel: the kernel verifies every block; --verify={} does not apply",
            image.verify
        );
    }
    if image.is_remote() {
        bail!("--kernel needs a local image file (the kernel reads it through a loop device); mount a URL over FUSE");
    }
    if image.digest.is_none() && image.keys.key.is_empty() && image.keys.keyring.is_none() {
        bail!("--kernel needs the image authenticated: give --digest or --key (or --keyring)");
    }
    let method = match method {
        "auto" => Method::Auto,
        "dm-verity" => Method::DmVerity,
        "fs-verity" => Method::FsVerity,
        other => bail!("--kernel={other}: expected auto, dm-verity or fs-verity"),
    };
    let opened = image.open()?;
    let chain = sealfs_kernel::mount(&MountRequest {
        image: &image.image,
        sidecar: image.sidecar.as_deref(),
        opened: &opened,
        mountpoint,
        method,
        on_corruption,
    })
    .map_err(kernel_error)?;
    let how = match &chain.verity {
        Some(v) => format!(
            "dm-verity {} ({})",
            sealfs_text::escape_path(&v.device),
            v.name
        ),
        None => "fs-verity on the image file".to_string(),
    };
    eprintln!(
        "sealfs: {} mounted on {}: kernel EROFS over {how}; {}",
        sealfs_text::escape_path(&image.image),
        sealfs_text::escape_path(&chain.mountpoint),
        opened.trust
    );
    Ok(ExitCode::SUCCESS)
}

/// Takes down a kernel mount (or what one left behind) and says what was removed.
pub fn umount(mountpoint: &Path, lazy: bool) -> Result<ExitCode> {
    let down: Teardown = sealfs_kernel::unmount(mountpoint, lazy).map_err(kernel_error)?;
    if !down.unmounted {
        eprintln!(
            "sealfs: {}: nothing was mounted; removed what a mount left behind",
            sealfs_text::escape_path(mountpoint)
        );
    }
    if !down.pending.is_empty() {
        let names: Vec<String> = down
            .pending
            .iter()
            .map(|p| sealfs_text::escape_path(p))
            .collect();
        eprintln!(
            "sealfs: {} still in use; released when the last open file is closed",
            names.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The chain under a kernel mount as `inspect` prints it.
pub fn chain_text(c: &Chain) -> String {
    let mut t = String::new();
    let mut line = |k: &str, v: String| t.push_str(&format!("{k:<23}{v}\n"));
    line("mount point", sealfs_text::escape_path(&c.mountpoint));
    line(
        "mounted",
        format!(
            "kernel EROFS, read-only, from {}",
            sealfs_text::escape_path(&c.source)
        ),
    );
    let verified_by = match (&c.verity, c.loops.iter().find_map(|l| l.fs_verity.as_ref())) {
        (Some(_), _) => {
            "kernel dm-verity (every block read is checked against the root below)".to_string()
        }
        (None, Some(d)) => format!("kernel fs-verity on the image file ({d})"),
        (None, None) => "NOTHING: the kernel does not verify this mount".to_string(),
    };
    line("verified by", verified_by);
    if let Some(v) = &c.verity {
        line(
            "dm-verity device",
            format!(
                "{} ({}, uuid {})",
                sealfs_text::escape_path(&v.device),
                v.name,
                v.uuid
            ),
        );
        line("  hash algorithm", v.alg.clone());
        line("  root hash", v.root.clone());
        line("  salt", v.salt.clone());
        line("  data blocks", v.data_blocks.to_string());
        line("  on corruption", v.on_corruption.clone());
        line(
            "  status",
            if v.corrupted() {
                format!("{} (a block failed its check: reads of it fail)", v.status)
            } else {
                format!("{} (no corruption seen)", v.status)
            },
        );
    }
    for (i, l) in c.loops.iter().enumerate() {
        let role = match (&c.verity, i) {
            (Some(_), 0) => "loop device (data)",
            (Some(_), _) => "loop device (hash)",
            (None, _) => "loop device",
        };
        let mut flags = vec![if l.read_only {
            "read-only"
        } else {
            "READ-WRITE"
        }];
        if l.autoclear {
            flags.push("autoclear");
        }
        line(
            role,
            format!(
                "{} -> {} ({})",
                sealfs_text::escape_path(&l.device),
                sealfs_text::escape_path(&l.backing_file),
                flags.join(", ")
            ),
        );
        if let Some(d) = &l.fs_verity {
            line("  fs-verity", d.to_string());
        }
    }
    t
}

/// The chain as JSON, every path exact by [`sealfs_text::json_bytes`].
pub fn chain_json(c: &Chain) -> serde_json::Value {
    let path = |v: &mut serde_json::Value, key: &str, p: &Path| {
        sealfs_text::json_insert(v, key, p.as_os_str().as_bytes())
    };
    let mut v = json!({
        "device": format!("{}:{}", c.device.0, c.device.1),
        "kernel_verified": c.kernel_verified(),
        "dm_verity": c.verity.as_ref().map(|v| {
            let mut j = json!({
                "name": v.name,
                "uuid": v.uuid,
                "table": v.table,
                "status": v.status,
                "corrupted": v.corrupted(),
                "hash_algorithm": v.alg,
                "root_hash": v.root,
                "salt": v.salt,
                "data_blocks": v.data_blocks,
                "on_corruption": v.on_corruption,
            });
            path(&mut j, "device", &v.device);
            j
        }),
        "loops": c.loops.iter().map(|l| {
            let mut j = json!({
                "read_only": l.read_only,
                "autoclear": l.autoclear,
                "fs_verity_digest": l.fs_verity.as_ref().map(|d| d.to_string()),
            });
            path(&mut j, "device", &l.device);
            path(&mut j, "backing_file", &l.backing_file);
            j
        }).collect::<Vec<_>>(),
    });
    path(&mut v, "mountpoint", &c.mountpoint);
    path(&mut v, "source", &c.source);
    v
}

/// `sealfs inspect MNT`: the device chain of the kernel mount at `dir`.
pub fn inspect(dir: &Path, json: bool) -> Result<ExitCode> {
    let mountpoint = std::fs::canonicalize(dir)?;
    let Some(chain) = sealfs_kernel::chain(&mountpoint).map_err(kernel_error)? else {
        bail!(
            "{}: a directory, neither an image nor a kernel (EROFS) mount of one",
            sealfs_text::escape_path(dir)
        );
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "kernel_mount": chain_json(&chain) }))?
        );
    } else {
        print!("{}", chain_text(&chain));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::path::PathBuf;

    fn path(bytes: &[u8]) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(bytes))
    }

    #[test]
    fn kernel_mount_json_keeps_paths_that_are_not_utf8_exact() {
        let chain = Chain {
            mountpoint: path(b"/mnt/m\xff\n"),
            source: path(b"/dev/loop7"),
            device: (7, 7),
            verity: None,
            loops: vec![sealfs_kernel::LoopLayer {
                device: path(b"/dev/loop7"),
                backing_file: path(b"/var/a\xfe\"\\.img"),
                read_only: true,
                autoclear: true,
                fs_verity: None,
            }],
        };
        let v = chain_json(&chain);
        // Hex written by hand from the bytes above.
        assert_eq!(v["mountpoint_hex"], "2f6d6e742f6dff0a");
        assert_eq!(v["mountpoint"], "/mnt/m\u{fffd}\n");
        assert_eq!(v["source"], "/dev/loop7");
        assert!(v.get("source_hex").is_none(), "{v}");
        let l = &v["loops"][0];
        assert_eq!(l["backing_file_hex"], "2f7661722f61fe225c2e696d67");
        assert_eq!(l["device"], "/dev/loop7");
        assert!(l.get("device_hex").is_none(), "{v}");
    }
}
