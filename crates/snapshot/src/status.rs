//! What the snapshotter holds, for `sealfs snapshotter status`: every snapshot (key, kind,
//! parent, labels) and for each committed layer its image, size on disk, the digest recorded at
//! commit, how it is mounted now ([`Mode`]) and whether it was found damaged.
//!
//! The store cannot be read while the snapshotter runs: redb 2 takes an exclusive `flock` on
//! the database file for as long as it is open, and has no read-only open (a second
//! `Database::open` fails with `DatabaseAlreadyOpen`). containerd's `List` would give the
//! snapshots but not the layers' files, mounts or counters. So the running snapshotter answers
//! on a second unix socket, `DIR/status.sock` (owner only, like the main one): a client connects
//! and reads one JSON document ([`Status`]) until the snapshotter closes the connection. When no
//! snapshotter runs (nothing listens there), [`query`] reads the store itself; no layer is
//! mounted then.

use crate::error::{Error, Result};
use crate::layer::Mode;
use crate::store::{Kind, Record};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The status socket's name in the root directory.
pub const SOCKET: &str = "status.sock";

/// How long a client waits for the answer, and the snapshotter for the client to take it.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Everything the snapshotter holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// The root directory.
    pub root: String,
    /// The root's exact bytes in hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_hex: Option<String>,
    /// `snapshotter`: answered by the running snapshotter; `store`: read from the store, no
    /// snapshotter running (so nothing is mounted).
    pub source: String,
    /// Every snapshot, by key.
    pub snapshots: Vec<SnapshotStatus>,
    /// What kept the snapshotter from reading its store, if anything did.
    pub problems: Vec<String>,
}

/// One snapshot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SnapshotStatus {
    /// The key (a committed snapshot's name) the snapshotter knows it by. containerd's metadata
    /// layer makes it `NAMESPACE/ID/NAME` of the key or name its clients use.
    pub key: String,
    /// containerd's namespace, when the key has containerd's form.
    pub namespace: Option<String>,
    /// The key or name containerd's clients use (`ctr snapshots ls`): the key without
    /// containerd's `NAMESPACE/ID/` prefix.
    pub name: String,
    /// `active`, `view` or `committed`.
    pub kind: String,
    /// The parent's key, "" for none.
    pub parent: String,
    /// The number naming its directory or layer image.
    pub id: u64,
    /// containerd's labels.
    pub labels: BTreeMap<String, String>,
    /// Active snapshots and views: the upper directory.
    pub dir: Option<String>,
    /// Its exact bytes in hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir_hex: Option<String>,
    /// Committed snapshots: the layer.
    pub layer: Option<LayerStatus>,
}

/// A committed layer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerStatus {
    /// The sealed layer image.
    pub image: String,
    /// Its exact bytes in hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_hex: Option<String>,
    /// Bytes the image file takes on disk now (allocated blocks, as `du` counts them); `None`
    /// when it cannot be read.
    pub size_on_disk: Option<u64>,
    /// Bytes on disk recorded at commit.
    pub size_at_commit: u64,
    /// Inodes in the image.
    pub inodes: u64,
    /// The image digest recorded at commit, which every mount of it verifies against.
    pub digest: String,
    /// How it is mounted now; `None`: not mounted (no container or view uses it since the
    /// snapshotter started, or none runs).
    pub mount: Option<MountStatus>,
    /// Whether the layer was found damaged: blocks failed verification, or it could not be
    /// opened or mounted, or its image is gone.
    pub damaged: bool,
    /// What was found wrong, one line each.
    pub problems: Vec<String>,
}

/// A mounted layer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MountStatus {
    /// How: `fuse-verified`, `kernel-dm-verity`, `kernel-fs-verity`.
    pub mode: Mode,
    /// The mount's source: `sealfs:DIGEST:fuse-verified` for FUSE, the device-mapper device's
    /// name for dm-verity (`dmsetup table NAME`), the loop device for fs-verity.
    #[serde(default)]
    pub source: Option<String>,
    /// Where.
    pub mountpoint: String,
    /// Its exact bytes in hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mountpoint_hex: Option<String>,
    /// Blocks verified since it was mounted (FUSE: the mount's counter).
    pub blocks_verified: Option<u64>,
    /// Blocks that failed verification since it was mounted.
    pub verification_failures: Option<u64>,
    /// Requests that failed because of a verification failure (reads, file checks).
    pub failed_requests: Option<u64>,
    /// A dm-verity mount: whether the kernel has seen a block of it fail its check (its
    /// status `C`; the kernel counts no blocks).
    #[serde(default)]
    pub kernel_corruption: Option<bool>,
}

/// A path as a JSON string and, when it is not UTF-8, its exact bytes in hex.
pub(crate) fn path_fields(p: &Path) -> (String, Option<String>) {
    let bytes = p.as_os_str().as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(sealfs_text::hex(bytes)),
        ),
    }
}

/// The exact bytes of a field written by [`path_fields`], escaped for text output.
fn shown(text: &str, hex: Option<&str>) -> String {
    let exact = hex.and_then(|h| {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()
    });
    sealfs_text::escape(exact.as_deref().unwrap_or(text.as_bytes()))
}

/// `NAMESPACE/ID/NAME` (containerd's metadata layer's keys): the namespace and the name.
fn containerd_name(key: &str) -> Option<(&str, &str)> {
    let (ns, rest) = key.split_once('/')?;
    let (id, name) = rest.split_once('/')?;
    (!ns.is_empty() && !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .then_some((ns, name))
}

/// The kind's name, as containerd's filters and `ctr` spell it (lowercase).
pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Active => "active",
        Kind::View => "view",
        Kind::Committed => "committed",
    }
}

/// What a layer mount's counters (`sealfs stats --json`) say: blocks verified, blocks failed,
/// requests failed.
pub fn mount_counters(stats: &serde_json::Value) -> (Option<u64>, Option<u64>, Option<u64>) {
    let verified = stats["verify"]["blocks_verified"].as_u64();
    let failed = stats["verify"]["failures"].as_u64();
    let requests = match (
        stats["fuse"]["verification_errors"].as_u64(),
        stats["fuse"]["file_check_failures"].as_u64(),
    ) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    (verified, failed, requests)
}

/// The paths of a root's parts (as [`crate::service`] lays them out).
pub(crate) struct Layout<'a> {
    pub(crate) root: &'a Path,
}

impl Layout<'_> {
    pub(crate) fn snapshot_dir(&self, id: u64) -> PathBuf {
        self.root.join("snapshots").join(id.to_string())
    }

    pub(crate) fn layer_image(&self, id: u64) -> PathBuf {
        self.root.join("layers").join(format!("{id}.sealfs"))
    }

    pub(crate) fn layer_mountpoint(&self, id: u64) -> PathBuf {
        self.root.join("mnt").join(id.to_string())
    }
}

/// The status of the snapshots `records` under `root`; `mounted(id)` says how a layer is
/// mounted now (with its counters) and `problem(id)` what went wrong mounting it.
pub(crate) fn build(
    root: &Path,
    source: &str,
    records: Vec<(String, Record)>,
    mounted: &dyn Fn(u64) -> Option<MountStatus>,
    problem: &dyn Fn(u64) -> Option<String>,
) -> Status {
    let layout = Layout { root };
    let (root_text, root_hex) = path_fields(root);
    let snapshots = records
        .into_iter()
        .map(|(key, r)| {
            let (namespace, name) = match containerd_name(&key) {
                Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
                None => (None, key.clone()),
            };
            let mut s = SnapshotStatus {
                namespace,
                name,
                kind: kind_name(r.kind).to_string(),
                parent: r.parent.clone(),
                id: r.id,
                labels: r
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                dir: None,
                dir_hex: None,
                layer: None,
                key,
            };
            if r.kind == Kind::Committed {
                s.layer = Some(layer_status(&layout, &r, mounted, problem));
            } else {
                let (d, h) = path_fields(&layout.snapshot_dir(r.id).join("fs"));
                s.dir = Some(d);
                s.dir_hex = h;
            }
            s
        })
        .collect();
    Status {
        root: root_text,
        root_hex,
        source: source.to_string(),
        snapshots,
        problems: Vec::new(),
    }
}

fn layer_status(
    layout: &Layout<'_>,
    r: &Record,
    mounted: &dyn Fn(u64) -> Option<MountStatus>,
    problem: &dyn Fn(u64) -> Option<String>,
) -> LayerStatus {
    let image = match &r.lazy {
        // Read from its registry: its image is the sealed artifact's reference.
        Some(remote) => PathBuf::from(&remote.reference),
        None => layout.layer_image(r.id),
    };
    let mut problems = Vec::new();
    let size_on_disk = match std::fs::metadata(&image) {
        Ok(md) => Some(md.blocks() * 512),
        Err(_) if r.lazy.is_some() => None,
        Err(e) => {
            problems.push(format!(
                "the layer image {} cannot be read: {e}",
                sealfs_text::escape_path(&image)
            ));
            None
        }
    };
    if r.digest.is_none() {
        problems.push("no digest was recorded at commit".into());
    }
    problems.extend(problem(r.id));
    let mount = mounted(r.id);
    if let Some(m) = &mount {
        if m.kernel_corruption == Some(true) {
            problems.push(
                "dm-verity has seen a block fail its check since it was mounted (the kernel log \
                 names it)"
                    .into(),
            );
        }
        if m.verification_failures.unwrap_or(0) > 0 || m.failed_requests.unwrap_or(0) > 0 {
            problems.push(format!(
                "{} blocks failed verification ({} requests failed) since it was mounted",
                m.verification_failures.unwrap_or(0),
                m.failed_requests.unwrap_or(0)
            ));
        }
    }
    let (image_text, image_hex) = path_fields(&image);
    LayerStatus {
        image: image_text,
        image_hex,
        size_on_disk,
        size_at_commit: r.size,
        inodes: r.inodes,
        digest: r.digest.clone().unwrap_or_default(),
        mount,
        damaged: !problems.is_empty(),
        problems,
    }
}

/// The status socket of the snapshotter with state under `root`.
pub fn socket_path(root: &Path) -> PathBuf {
    root.join(SOCKET)
}

/// Answers one status client on `conn` with `status` (as JSON); a client gone is no error.
pub(crate) fn answer(mut conn: std::os::unix::net::UnixStream, status: &Status) {
    let _ = conn.set_write_timeout(Some(TIMEOUT));
    let mut json = serde_json::to_vec(status).expect("a status always serializes");
    json.push(b'\n');
    let _ = conn.write_all(&json);
}

/// The status of the snapshotter with state under `root`: asked of the running snapshotter on
/// its status socket, or read from the store when none runs.
pub fn query(root: &Path) -> Result<Status> {
    let socket = socket_path(root);
    match std::os::unix::net::UnixStream::connect(&socket) {
        Ok(mut conn) => {
            conn.set_read_timeout(Some(TIMEOUT))
                .map_err(Error::io(&socket))?;
            let mut answer = Vec::new();
            conn.read_to_end(&mut answer).map_err(Error::io(&socket))?;
            serde_json::from_slice(&answer).map_err(|e| Error::Status {
                socket,
                reason: e.to_string(),
            })
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            let root_abs = std::fs::canonicalize(root).map_err(Error::io(root))?;
            let path = root_abs.join("metadata.redb");
            if !path.exists() {
                return Err(Error::io(&path)(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no snapshotter state here (no metadata store)",
                )));
            }
            let store = crate::store::Store::open_existing(&path).map_err(|e| match e {
                Error::Store { source, .. }
                    if matches!(
                        *source,
                        redb::Error::DatabaseAlreadyOpen
                    ) =>
                {
                    Error::Status {
                        socket: socket.clone(),
                        reason: "a running snapshotter holds the store and does not answer on its status socket".into(),
                    }
                }
                e => e,
            })?;
            Ok(build(&root_abs, "store", store.list()?, &|_| None, &|_| {
                None
            }))
        }
        Err(e) => Err(Error::io(&socket)(e)),
    }
}

/// Writes `status` as text: one block per snapshot, every name and path escaped.
pub fn write_text(out: &mut dyn Write, status: &Status) -> std::io::Result<()> {
    let from = match status.source.as_str() {
        "snapshotter" => "answered by the running snapshotter",
        _ => "read from the store: no snapshotter runs, no layer is mounted",
    };
    writeln!(
        out,
        "root {} ({from}): {} snapshots",
        shown(&status.root, status.root_hex.as_deref()),
        status.snapshots.len()
    )?;
    for p in &status.problems {
        writeln!(out, "PROBLEM: {p}")?;
    }
    for s in &status.snapshots {
        writeln!(out)?;
        writeln!(out, "{} {}", s.kind, sealfs_text::escape(s.key.as_bytes()))?;
        if let Some(ns) = &s.namespace {
            writeln!(
                out,
                "  name {} in namespace {}",
                sealfs_text::escape(s.name.as_bytes()),
                sealfs_text::escape(ns.as_bytes())
            )?;
        }
        if !s.parent.is_empty() {
            writeln!(out, "  parent {}", sealfs_text::escape(s.parent.as_bytes()))?;
        }
        for (k, v) in &s.labels {
            writeln!(
                out,
                "  label {}={}",
                sealfs_text::escape(k.as_bytes()),
                sealfs_text::escape(v.as_bytes())
            )?;
        }
        if let Some(d) = &s.dir {
            writeln!(out, "  directory {}", shown(d, s.dir_hex.as_deref()))?;
        }
        let Some(l) = &s.layer else { continue };
        let size = l
            .size_on_disk
            .map_or("unknown".to_string(), |b| format!("{b} bytes"));
        writeln!(
            out,
            "  layer {}: {size} on disk, {} inodes",
            shown(&l.image, l.image_hex.as_deref()),
            l.inodes
        )?;
        writeln!(out, "  digest {}", sealfs_text::escape(l.digest.as_bytes()))?;
        match &l.mount {
            Some(m) => {
                let counted = match (m.blocks_verified, m.verification_failures) {
                    (Some(v), Some(f)) => format!(": {v} blocks verified, {f} failed"),
                    _ => String::new(),
                };
                let source = m
                    .source
                    .as_deref()
                    .map(|s| format!(" from {}", sealfs_text::escape(s.as_bytes())))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  mounted {} on {}{source}{counted}",
                    m.mode,
                    shown(&m.mountpoint, m.mountpoint_hex.as_deref())
                )?;
            }
            None => writeln!(out, "  not mounted")?,
        }
        if l.damaged {
            for p in &l.problems {
                // Written by the snapshotter with every name in it escaped already.
                writeln!(out, "  DAMAGED: {p}")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_keys_split_into_namespace_and_name() {
        assert_eq!(
            containerd_name("default/12/sha256:ab/c"),
            Some(("default", "sha256:ab/c"))
        );
        assert_eq!(containerd_name("a1"), None);
        assert_eq!(containerd_name("ns/x/y"), None);
        assert_eq!(containerd_name("/1/y"), None);
    }

    #[test]
    fn exact_bytes_come_back_for_text() {
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/r/\xff x"));
        let (t, h) = path_fields(p);
        assert_eq!(h.as_deref(), Some("2f722fff2078"));
        assert_eq!(shown(&t, h.as_deref()), "/r/\\377\\ x");
        assert_eq!(shown("a\nb", None), "a\\nb");
    }
}
