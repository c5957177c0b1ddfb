//! The snapshotter: each call of containerd's snapshots API a short translation into the store
//! ([`crate::store`]), the builder (commit) and layer mounts ([`crate::layer`]), modelled on
//! containerd's `snapshots/overlay`.
//!
//! Under the root directory:
//!
//! ```text
//! metadata.redb          the store
//! snapshots/ID/fs        an active snapshot's upper directory (a view's empty one)
//! snapshots/ID/work      its overlayfs work directory
//! layers/ID.sealfs       a committed snapshot's sealed EROFS layer image
//! mnt/ID                 where that layer is mounted (read-only, kernel or FUSE: crate::layer)
//! cache/                 the verified blocks of lazy layers ([`crate::lazy`])
//! ```
//!
//! A layer committed lazily has no image under `layers/`: it is read from its registry.
//!
//! Anything there the store does not name (a crash between a step on disk and the transaction
//! that records it, a removal) is deleted by [`Snapshotter::cleanup`], which also runs at start.
//!
//! A commit goes in this order, so that a crash at any point (`SIGKILL` of the snapshotter, of
//! containerd, a power cut) leaves the snapshot either active with its directory, or committed
//! with a complete layer image, never a record naming a partial one:
//!
//! 1. the builder writes the image into an unnamed file (`O_TMPFILE`; a named `.sealfs-*.tmp`
//!    where the file system has none) and renames it to `layers/ID.sealfs` only when complete;
//! 2. the image and the `layers` directory are synced to disk;
//! 3. one store transaction turns the active record into the committed one, with the digest;
//! 4. the active snapshot's directory is freed.
//!
//! A crash before 3 leaves an image (or temporary file) no committed record names, and one after
//! it a directory no active record names: both are deleted at the next start. A commit whose
//! caller went away before 3 (containerd killed, or its request cancelled) is not recorded
//! ([`Snapshotter::commit_unless`]): containerd records a commit in its own database only once
//! the snapshotter answered, so a layer recorded here for a caller that is gone would be one
//! containerd does not know of, and its active snapshot one that no longer exists here.

use crate::error::{Error, Result};
use crate::filter::{Filters, SnapshotFields};
use crate::layer::{self, LayerMount};
use crate::lazy::{self, LazyConfig};
use crate::status::{self, Layout, MountStatus, Status};
use crate::store::{Applied, Kind, Record, Store};
use containerd_snapshots::api::types::Mount;
use containerd_snapshots::{Info, Usage};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

/// The name, in an active snapshot's directory, of the layer image the differ built for it
/// ([`Snapshotter::apply`]).
pub const APPLIED_IMAGE: &str = "layer.sealfs";

/// A containerd snapshotter over one root directory.
pub struct Snapshotter {
    root: PathBuf,
    store: Store,
    /// Committed layers mounted now, by id.
    mounts: Mutex<HashMap<u64, LayerMount>>,
    /// Held shared by the calls that put files under the root before or after their
    /// transaction (create, commit, remove), exclusively by [`Snapshotter::cleanup`], which
    /// would otherwise delete a layer image being committed, or a directory being made, as
    /// named by no record yet.
    changing: RwLock<()>,
    /// The ids of the active snapshots being committed now: a second commit of one (containerd
    /// retrying after a restart while the first, abandoned, still builds) waits for the first,
    /// which would otherwise remove the image they both write.
    committing: Mutex<HashSet<u64>>,
    /// Signalled when an id leaves `committing`.
    commit_done: Condvar,
    /// Why a committed layer could not be mounted, by id (for the status).
    mount_failures: Mutex<HashMap<u64, String>>,
    /// Which layers are used lazily, and how they are read.
    lazy: LazyConfig,
    /// The converted-layers referrers read lately.
    referrers: lazy::Referrers,
    /// How committed layers are mounted.
    layer_mount: layer::Policy,
}

/// A claim on committing one snapshot, released when dropped.
struct CommitClaim<'a> {
    snapshotter: &'a Snapshotter,
    id: u64,
}

impl Drop for CommitClaim<'_> {
    fn drop(&mut self) {
        let s = self.snapshotter;
        s.committing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        s.commit_done.notify_all();
    }
}

fn to_info(name: &str, r: &Record) -> Info {
    Info {
        kind: match r.kind {
            Kind::Active => containerd_snapshots::Kind::Active,
            Kind::View => containerd_snapshots::Kind::View,
            Kind::Committed => containerd_snapshots::Kind::Committed,
        },
        name: name.to_string(),
        parent: r.parent.clone(),
        labels: r.labels.clone(),
        created_at: r.created,
        updated_at: r.updated,
    }
}

/// Bytes on disk (allocated blocks) and inodes under `dir`, each hard-linked inode once, as
/// containerd's `fs.DiskUsage` (and `du`) count them.
fn disk_usage(dir: &Path) -> Result<Usage> {
    let mut seen = HashSet::new();
    let mut usage = Usage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let md = std::fs::symlink_metadata(&path).map_err(Error::io(&path))?;
        if seen.insert((md.dev(), md.ino())) {
            usage.inodes += 1;
            usage.size += i64::try_from(md.blocks() * 512).unwrap_or(i64::MAX);
        }
        if md.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(Error::io(&path))? {
                stack.push(entry.map_err(Error::io(&path))?.path());
            }
        }
    }
    Ok(usage)
}

/// How a layer is built: [`sealfs_builder::BuildOptions::sealed_layer`], the options `sealfs
/// convert` builds a converted layer with too.
pub fn layer_build_options() -> sealfs_builder::BuildOptions {
    sealfs_builder::BuildOptions::sealed_layer()
}

fn mount(kind: &str, source: &Path, options: Vec<String>) -> Mount {
    Mount {
        r#type: kind.to_string(),
        source: source.to_string_lossy().into_owned(),
        target: String::new(),
        options,
    }
}

fn path_option(name: &str, path: &Path) -> String {
    format!("{name}={}", path.to_string_lossy())
}

impl Snapshotter {
    /// Opens the snapshotter's state under `root` (created if missing), taking down mounts a
    /// previous run left and deleting what no record names; layers are mounted the
    /// [`layer::Policy::Auto`] way.
    pub fn open(root: &Path) -> Result<Snapshotter> {
        Snapshotter::open_with(root, layer::Policy::default(), LazyConfig::default())
    }

    /// [`Snapshotter::open`], committed layers mounted the way `layer_mount` says, layers with a
    /// sealed counterpart used lazily as `lazy` says.
    pub fn open_with(
        root: &Path,
        layer_mount: layer::Policy,
        lazy: LazyConfig,
    ) -> Result<Snapshotter> {
        for dir in ["snapshots", "layers", "mnt"] {
            let d = root.join(dir);
            std::fs::create_dir_all(&d).map_err(Error::io(&d))?;
        }
        let root = std::fs::canonicalize(root).map_err(Error::io(root))?;
        let store = Store::open(&root.join("metadata.redb"))?;
        let s = Snapshotter {
            root,
            store,
            mounts: Mutex::new(HashMap::new()),
            changing: RwLock::new(()),
            committing: Mutex::new(HashSet::new()),
            commit_done: Condvar::new(),
            mount_failures: Mutex::new(HashMap::new()),
            lazy,
            referrers: lazy::Referrers::default(),
            layer_mount,
        };
        // The FUSE layers of a previous run died with it; its kernel mounts and their
        // device-mapper devices are taken down (lazily, where a container still reads them).
        let mnt = s.root.join("mnt");
        for entry in std::fs::read_dir(&mnt).map_err(Error::io(&mnt))? {
            layer::detach(&entry.map_err(Error::io(&mnt))?.path());
        }
        s.cleanup()?;
        Ok(s)
    }

    /// The root directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn layout(&self) -> Layout<'_> {
        Layout { root: &self.root }
    }

    fn snapshot_dir(&self, id: u64) -> PathBuf {
        self.layout().snapshot_dir(id)
    }

    fn layer_image(&self, id: u64) -> PathBuf {
        self.layout().layer_image(id)
    }

    fn layer_mountpoint(&self, id: u64) -> PathBuf {
        self.layout().layer_mountpoint(id)
    }

    /// The committed layers under `parent`, nearest first, with their names.
    fn ancestors(&self, parent: &str) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        let mut key = parent.to_string();
        while !key.is_empty() {
            let r = self.store.get(&key)?;
            let next = r.parent.clone();
            out.push((key, r));
            key = next;
        }
        Ok(out)
    }

    /// Mounts the committed layer `r`, named `name`, unless it is mounted; returns where.
    fn ensure_layer(&self, name: &str, r: &Record) -> Result<PathBuf> {
        let mp = self.layer_mountpoint(r.id);
        let mut mounts = self.mounts.lock().unwrap_or_else(|e| e.into_inner());
        if let std::collections::hash_map::Entry::Vacant(slot) = mounts.entry(r.id) {
            let image = self.layer_image(r.id);
            let digest = r.digest.as_deref().ok_or_else(|| Error::Mount {
                image: image.clone(),
                reason: "no digest recorded for the layer".into(),
            })?;
            let label = format!("{} ({})", r.id, sealfs_text::Escaped(name.as_bytes()));
            let mounted = match &r.lazy {
                Some(remote) => {
                    lazy::mount(&self.lazy, &self.cache_dir(), remote, digest, &mp, &label)
                }
                None => layer::mount(&image, digest, &mp, &label, self.layer_mount),
            };
            let mut failures = self
                .mount_failures
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let mounted = match mounted {
                Ok(m) => {
                    failures.remove(&r.id);
                    m
                }
                Err(e) => {
                    failures.insert(r.id, e.to_string());
                    return Err(e);
                }
            };
            // Which mode each layer is served in is visible: here, in /proc/mounts (the
            // mount's source) and in `sealfs snapshotter status`.
            let mode = mounted.mode();
            eprintln!(
                "sealfs snapshotter: layer {label} mounted on {} (mode {mode}): {} {digest} (mount source {})",
                sealfs_text::escape_path(&mp),
                mode.describe(),
                sealfs_text::Escaped(mounted.source().as_bytes()),
            );
            slot.insert(mounted);
        }
        Ok(mp)
    }

    /// The mounts of the active snapshot or view `r`, its layers mounted first: a bind mount of
    /// its directory without parents (of its one parent's layer, for a view), else overlayfs.
    fn mounts_of(&self, r: &Record) -> Result<Vec<Mount>> {
        let dir = self.snapshot_dir(r.id);
        let parents = self.ancestors(&r.parent)?;
        if parents.is_empty() {
            let rw = if r.kind == Kind::View { "ro" } else { "rw" };
            return Ok(vec![mount(
                "bind",
                &dir.join("fs"),
                vec![rw.into(), "rbind".into()],
            )]);
        }
        let mut lower = Vec::with_capacity(parents.len());
        for (name, p) in &parents {
            lower.push(self.ensure_layer(name, p)?.to_string_lossy().into_owned());
        }
        if r.kind == Kind::View && parents.len() == 1 {
            return Ok(vec![mount(
                "bind",
                Path::new(&lower[0]),
                vec!["ro".into(), "rbind".into()],
            )]);
        }
        let mut options = Vec::new();
        if r.kind == Kind::Active {
            options.push(path_option("workdir", &dir.join("work")));
            options.push(path_option("upperdir", &dir.join("fs")));
        }
        options.push(format!("lowerdir={}", lower.join(":")));
        Ok(vec![mount("overlay", Path::new("overlay"), options)])
    }

    /// `Prepare` and `View`: records the snapshot, makes its directories, returns its mounts.
    pub fn create(
        &self,
        key: &str,
        parent: &str,
        kind: Kind,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Mount>> {
        let _changing = self.changing.read().unwrap_or_else(|e| e.into_inner());
        let r = self.store.create(key, parent, kind, labels)?;
        let dir = self.snapshot_dir(r.id);
        let made = [dir.join("fs"), dir.join("work")]
            .iter()
            .try_for_each(|d| std::fs::create_dir_all(d).map_err(Error::io(d)))
            .and_then(|()| self.mounts_of(&r));
        if made.is_err() {
            // Undone whole: the next Prepare of this key starts afresh.
            let _ = self.store.remove(key);
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// `Prepare`: as [`Snapshotter::create`] an active snapshot, unless the labels of
    /// containerd's remote-snapshotter protocol name a layer whose sealed counterpart is found
    /// and trusted ([`lazy::find`]): then the snapshot containerd wants is committed at once,
    /// read lazily, mounted (its background fetches start), and the answer is
    /// [`Error::AlreadyExists`] (containerd then fetches nothing of the layer). A layer that cannot be used lazily takes the tar path; the log says why.
    pub fn prepare(
        &self,
        key: &str,
        parent: &str,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Mount>> {
        if let Some(wanted) = lazy::wanted(&labels).filter(|_| self.lazy.enabled()) {
            if self.store.get(&wanted.target).is_ok() {
                return Err(Error::AlreadyExists(wanted.target));
            }
            let layer = format!(
                "layer {} of {}",
                sealfs_text::Escaped(wanted.layer.as_bytes()),
                sealfs_text::Escaped(wanted.image.as_bytes())
            );
            match lazy::find(&self.lazy, &self.cache_dir(), &self.referrers, &wanted) {
                Ok(found) => {
                    let mut labels = labels.clone();
                    labels.insert(lazy::LABEL_REMOTE.into(), "sealfs lazy".into());
                    let recorded = self.store.create_lazy(
                        &wanted.target,
                        parent,
                        labels,
                        found.digest.clone(),
                        found.remote.clone(),
                    );
                    match recorded {
                        Ok(r) => {
                            eprintln!(
                                "sealfs snapshotter: {layer}: committed lazily as {} (layer {}): \
                                 {} {}, trusted by {}",
                                sealfs_text::Escaped(wanted.target.as_bytes()),
                                r.id,
                                sealfs_text::Escaped(found.remote.reference.as_bytes()),
                                found.digest,
                                found.remote.authority
                            );
                            // Mounted now, not when a container is first prepared on it:
                            // its metadata warm-up (and fill) run while containerd pulls the
                            // rest and creates the sandbox, ahead of the container's reads
                            // (bench/lazy.py: 3.65 s to the first output against 4.42 s).
                            // A failure here is tried again at first use.
                            if let Err(e) = self.ensure_layer(&wanted.target, &r) {
                                eprintln!(
                                    "sealfs snapshotter: {layer}: not mounted at its commit: {}",
                                    sealfs_text::escape_prose(e.to_string().as_bytes())
                                );
                            }
                            return Err(Error::AlreadyExists(wanted.target));
                        }
                        Err(e @ Error::AlreadyExists(_)) => return Err(e),
                        Err(e) => eprintln!(
                            "sealfs snapshotter: {layer}: pulled (not lazily): recording it: {e}"
                        ),
                    }
                }
                Err(why) => eprintln!(
                    "sealfs snapshotter: {layer}: pulled (not lazily): {}",
                    sealfs_text::escape_prose(why.as_bytes())
                ),
            }
        }
        self.create(key, parent, Kind::Active, labels)
    }

    /// The persistent cache of lazy layers' verified blocks.
    fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// `Mounts`: the mounts of an active snapshot or view.
    pub fn mounts(&self, key: &str) -> Result<Vec<Mount>> {
        let r = self.store.get(key)?;
        if r.kind == Kind::Committed {
            return Err(Error::FailedPrecondition(format!(
                "snapshot {} is committed: only active snapshots and views have mounts",
                sealfs_text::Escaped(key.as_bytes())
            )));
        }
        self.mounts_of(&r)
    }

    /// `Commit`: seals the active snapshot `key`'s upper directory into a layer image (overlay
    /// whiteouts and opaque directories kept as they are), records it as `name` with its digest,
    /// frees the directory. On any error `key` stays active and no image is left.
    pub fn commit(&self, name: &str, key: &str, labels: HashMap<String, String>) -> Result<()> {
        self.commit_unless(name, key, labels, &|| false)
    }

    /// [`Snapshotter::commit`], abandoned (`key` left active, no image left) when `gone()` says
    /// the caller went away before the commit is recorded. The steps and their order are the
    /// module's (a crash at any of them leaves no half layer).
    pub fn commit_unless(
        &self,
        name: &str,
        key: &str,
        labels: HashMap<String, String>,
        gone: &dyn Fn() -> bool,
    ) -> Result<()> {
        let _changing = self.changing.read().unwrap_or_else(|e| e.into_inner());
        let active = |r: &Record| {
            if r.kind == Kind::Active {
                Ok(())
            } else {
                Err(Error::FailedPrecondition(format!(
                    "snapshot {} is not active: only active snapshots are committed",
                    sealfs_text::Escaped(key.as_bytes())
                )))
            }
        };
        let r = self.store.get(key)?;
        active(&r)?;
        let _claim = self.claim_commit(r.id);
        // What a commit of the same snapshot that ran meanwhile left.
        let r = self.store.get(key)?;
        active(&r)?;
        let dir = self.snapshot_dir(r.id);
        let image = self.layer_image(r.id);
        // 1. The image, complete, or nothing: the builder renames it into place when done; a
        //    layer the differ built is linked there (its own name stays until step 4, so a
        //    crash before step 3 leaves it to a commit after the restart).
        let built = match &r.applied {
            Some(applied) => self
                .link_applied(key, &dir, &image)
                .map(|()| (applied.digest.clone(), applied.inodes)),
            None => sealfs_builder::build(
                &dir.join("fs"),
                &image,
                &layer_build_options(),
                &sealfs_builder::NoProgress,
            )
            .map_err(|source| Error::Build {
                key: key.to_string(),
                source,
            })
            .and_then(|summary| {
                let digest = summary.seal.map(|s| s.digest.to_string()).ok_or_else(|| {
                    Error::FailedPrecondition("the layer image was built unsealed".into())
                })?;
                Ok((digest, summary.inodes))
            }),
        };
        let (digest, inodes) = built?;
        let record = || -> Result<()> {
            // 2. On disk before the record that names it.
            let size = sync_file(&image)?.blocks() * 512;
            let layers = self.root.join("layers");
            std::fs::File::open(&layers)
                .and_then(|d| d.sync_all())
                .map_err(Error::io(&layers))?;
            if gone() {
                // Logged here: nobody awaits the call's answer any more.
                let e = Error::Abandoned(key.to_string());
                eprintln!("sealfs snapshotter: commit: {e}");
                return Err(e);
            }
            // 3. One transaction.
            let r = self
                .store
                .commit(key, name, labels, digest.clone(), size, inodes)?;
            eprintln!(
                "sealfs snapshotter: committed {} as {}: layer {}, {size} bytes, {digest}",
                sealfs_text::Escaped(key.as_bytes()),
                sealfs_text::Escaped(name.as_bytes()),
                r.id
            );
            Ok(())
        };
        if let Err(e) = record() {
            let _ = std::fs::remove_file(&image);
            return Err(e);
        }
        // 4. Freed; what a crash leaves here is deleted at the next start.
        std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))
    }

    /// The key of the active snapshot whose upper directory is `upper` (as `Prepare` returned
    /// it in the mounts), if it is one of this snapshotter's.
    pub fn active_with_upper(&self, upper: &Path) -> Result<Option<String>> {
        let snapshots = self.root.join("snapshots");
        let id = upper.strip_prefix(&snapshots).ok().and_then(|rest| {
            let mut parts = rest.components();
            match (parts.next(), parts.next(), parts.next()) {
                (Some(id), Some(fs), None) if fs.as_os_str() == "fs" => {
                    id.as_os_str().to_str()?.parse::<u64>().ok()
                }
                _ => None,
            }
        });
        let Some(id) = id else { return Ok(None) };
        Ok(self
            .store
            .list()?
            .into_iter()
            .find(|(_, r)| r.id == id && r.kind == Kind::Active)
            .map(|(key, _)| key))
    }

    /// The committed layers below the active snapshot `key`, nearest first, each opened with
    /// the digest recorded at its commit (every block read from them verified).
    pub fn lower_images(&self, key: &str) -> Result<Vec<sealfs_reader::Image>> {
        let r = self.store.get(key)?;
        let mut out = Vec::new();
        for (_, p) in self.ancestors(&r.parent)? {
            if let (Some(remote), Some(digest)) = (&p.lazy, &p.digest) {
                let opened = lazy::open(&self.lazy, &self.cache_dir(), remote, digest)?;
                out.push(opened.image);
                continue;
            }
            let image = self.layer_image(p.id);
            let fail = |reason: String| Error::Mount {
                image: image.clone(),
                reason,
            };
            let digest: sealfs_reader::Digest = p
                .digest
                .as_deref()
                .ok_or_else(|| fail("no digest recorded for the layer".into()))?
                .parse()
                .map_err(|e| fail(format!("recorded digest: {e}")))?;
            let opened = sealfs_reader::open(
                image.clone(),
                &sealfs_reader::OpenOptions::new().digest(digest),
            )
            .map_err(|e| fail(e.to_string()))?;
            out.push(opened.image);
        }
        Ok(out)
    }

    /// Builds the sealed layer image of the active snapshot `key` from `source` (its layer's
    /// tar, whiteouts kept as overlayfs reads them), in the snapshot's directory, and records it:
    /// its commit then takes that image as it is. `diff_id` is asked once the source has been
    /// read whole (it names what was read). Refused when the snapshot's upper directory is not
    /// empty (a layer was applied into it as files). On any error no image is left and nothing
    /// is recorded.
    pub fn apply(
        &self,
        key: &str,
        source: &mut dyn sealfs_builder::Source,
        diff_id: &mut dyn FnMut() -> Result<String>,
    ) -> Result<Applied> {
        let _changing = self.changing.read().unwrap_or_else(|e| e.into_inner());
        let r = self.store.get(key)?;
        let _claim = self.claim_commit(r.id);
        let r = self.store.get(key)?;
        if r.kind != Kind::Active {
            return Err(Error::FailedPrecondition(format!(
                "snapshot {} is not active: a layer is applied only to an active snapshot",
                sealfs_text::Escaped(key.as_bytes())
            )));
        }
        let dir = self.snapshot_dir(r.id);
        let upper = dir.join("fs");
        if std::fs::read_dir(&upper)
            .map_err(Error::io(&upper))?
            .next()
            .is_some()
        {
            return Err(Error::FailedPrecondition(format!(
                "snapshot {}: its directory is not empty: a layer is applied as a sealed image \
                 only to an empty snapshot",
                sealfs_text::Escaped(key.as_bytes())
            )));
        }
        let image = dir.join(APPLIED_IMAGE);
        let summary = sealfs_builder::build_from(
            source,
            &image,
            &layer_build_options(),
            &sealfs_builder::NoProgress,
        )
        .map_err(|source| Error::Build {
            key: key.to_string(),
            source,
        })?;
        let mut record = || -> Result<Applied> {
            let digest = summary
                .seal
                .as_ref()
                .map(|s| s.digest.to_string())
                .ok_or_else(|| {
                    Error::FailedPrecondition("the layer image was built unsealed".into())
                })?;
            let applied = Applied {
                digest,
                inodes: summary.inodes,
                diff_id: diff_id()?,
            };
            sync_file(&image)?;
            std::fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(Error::io(&dir))?;
            self.store.set_applied(key, Some(applied.clone()))?;
            Ok(applied)
        };
        let applied = record().inspect_err(|_| {
            let _ = std::fs::remove_file(&image);
        })?;
        eprintln!(
            "sealfs snapshotter: applied {} to {} as a sealed layer: {} inodes, {}",
            sealfs_text::Escaped(applied.diff_id.as_bytes()),
            sealfs_text::Escaped(key.as_bytes()),
            applied.inodes,
            applied.digest
        );
        Ok(applied)
    }

    /// Links the layer image the differ built for the active snapshot `key` (in its directory
    /// `dir`) at `image`. Refused when anything was written to the snapshot's upper directory
    /// besides: the image holds the layer alone, and what was written would be lost.
    fn link_applied(&self, key: &str, dir: &Path, image: &Path) -> Result<()> {
        let upper = dir.join("fs");
        let written = std::fs::read_dir(&upper)
            .map_err(Error::io(&upper))?
            .next()
            .is_some();
        if written {
            return Err(Error::FailedPrecondition(format!(
                "snapshot {}: its layer was applied as a sealed image, and files were written \
                 to its directory besides: committing would lose them",
                sealfs_text::Escaped(key.as_bytes())
            )));
        }
        let applied = dir.join(APPLIED_IMAGE);
        match std::fs::remove_file(image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(image)(e)),
            _ => {}
        }
        std::fs::hard_link(&applied, image).map_err(Error::io(&applied))
    }

    /// Waits until no other commit of snapshot `id` runs, then claims it.
    fn claim_commit(&self, id: u64) -> CommitClaim<'_> {
        let mut committing = self.committing.lock().unwrap_or_else(|e| e.into_inner());
        while committing.contains(&id) {
            committing = self
                .commit_done
                .wait(committing)
                .unwrap_or_else(|e| e.into_inner());
        }
        committing.insert(id);
        CommitClaim {
            snapshotter: self,
            id,
        }
    }

    /// `Remove`: forgets `key` (refused while it is a parent) and frees what it held.
    pub fn remove(&self, key: &str) -> Result<()> {
        let _changing = self.changing.read().unwrap_or_else(|e| e.into_inner());
        let r = self.store.remove(key)?;
        match r.kind {
            Kind::Committed => {
                let mounted = self
                    .mounts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&r.id);
                drop(mounted);
                let mp = self.layer_mountpoint(r.id);
                layer::detach(&mp);
                let _ = std::fs::remove_dir(&mp);
                if r.lazy.is_some() {
                    // Nothing of it on disk but its blocks in the shared cache.
                    return Ok(());
                }
                let image = self.layer_image(r.id);
                std::fs::remove_file(&image).map_err(Error::io(&image))
            }
            Kind::Active | Kind::View => {
                let dir = self.snapshot_dir(r.id);
                std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))
            }
        }
    }

    /// `Stat`.
    pub fn stat(&self, key: &str) -> Result<Info> {
        Ok(to_info(key, &self.store.get(key)?))
    }

    /// `Update`: only labels change (all of them, or those `fieldpaths` name).
    pub fn update(&self, info: Info, fieldpaths: &[String]) -> Result<Info> {
        let r = self
            .store
            .update_labels(&info.name, info.labels, fieldpaths)?;
        Ok(to_info(&info.name, &r))
    }

    /// `Usage`: an active snapshot's directory as `du` counts it; a committed layer's image.
    pub fn usage(&self, key: &str) -> Result<Usage> {
        let r = self.store.get(key)?;
        match r.kind {
            Kind::Committed => Ok(Usage {
                inodes: i64::try_from(r.inodes).unwrap_or(i64::MAX),
                size: i64::try_from(r.size).unwrap_or(i64::MAX),
            }),
            Kind::Active | Kind::View => disk_usage(&self.snapshot_dir(r.id).join("fs")),
        }
    }

    /// `Walk` (`List`): the snapshots that match any of `filters` (containerd's filter syntax,
    /// [`crate::filter`]; none: every snapshot). A filter that does not parse is an
    /// [`Error::InvalidArgument`] naming it.
    pub fn list(&self, filters: &[String]) -> Result<Vec<Info>> {
        let filters = Filters::parse_all(filters)?;
        Ok(self
            .store
            .list()?
            .iter()
            .filter(|(k, r)| {
                filters.matches(&SnapshotFields {
                    kind: status::kind_name(r.kind),
                    name: k,
                    parent: &r.parent,
                    labels: &r.labels,
                })
            })
            .map(|(k, r)| to_info(k, r))
            .collect())
    }

    /// What the snapshotter holds now: every snapshot, and for each committed layer its image,
    /// how it is mounted with the mount's counters, and whether it was found damaged. A store
    /// that cannot be read gives a status with no snapshots and that reason as the one problem.
    pub fn status(&self) -> Status {
        let records = self.store.list();
        let mounted: HashMap<u64, (layer::Mode, String, PathBuf)> = self
            .mounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(id, m)| {
                (
                    *id,
                    (m.mode(), m.source().to_string(), self.layer_mountpoint(*id)),
                )
            })
            .collect();
        let failures = self
            .mount_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // The counters are asked of the mounts outside the lock: each is a request to a FUSE
        // mount this process serves, or to the kernel.
        let mount_status = |id: u64| {
            let (mode, source, mp) = mounted.get(&id)?;
            let (mut verified, mut failed, mut requests) = (None, None, None);
            let mut kernel_corruption = None;
            if *mode == layer::Mode::FuseVerified {
                (verified, failed, requests) = sealfs_fuse::mount::query_stats(mp)
                    .map(|v| status::mount_counters(&v))
                    .unwrap_or_default();
            } else if let Some((_, corrupted)) = layer::kernel_state(mp) {
                kernel_corruption = Some(corrupted);
            }
            let (mountpoint, mountpoint_hex) = status::path_fields(mp);
            Some(MountStatus {
                mode: *mode,
                source: Some(source.clone()),
                mountpoint,
                mountpoint_hex,
                blocks_verified: verified,
                verification_failures: failed,
                failed_requests: requests,
                kernel_corruption,
            })
        };
        match records {
            Ok(records) => {
                status::build(&self.root, "snapshotter", records, &mount_status, &|id| {
                    failures.get(&id).cloned()
                })
            }
            Err(e) => {
                let mut s =
                    status::build(&self.root, "snapshotter", Vec::new(), &|_| None, &|_| None);
                s.problems.push(e.to_string());
                s
            }
        }
    }

    /// `Cleanup`: deletes directories, layer images (and the builder's temporary files) and mount
    /// points no record names (left by a crash, or by a commit's last step). Waits for the calls
    /// changing the root to end.
    pub fn cleanup(&self) -> Result<()> {
        let _changing = self.changing.write().unwrap_or_else(|e| e.into_inner());
        let records = self.store.list()?;
        let dirs: HashSet<String> = records
            .iter()
            .filter(|(_, r)| r.kind != Kind::Committed)
            .map(|(_, r)| r.id.to_string())
            .collect();
        let layers: HashSet<String> = records
            .iter()
            .filter(|(_, r)| r.kind == Kind::Committed)
            .map(|(_, r)| r.id.to_string())
            .collect();
        let images: HashSet<String> = layers.iter().map(|id| format!("{id}.sealfs")).collect();
        for (sub, keep) in [("snapshots", &dirs), ("layers", &images), ("mnt", &layers)] {
            let d = self.root.join(sub);
            for entry in std::fs::read_dir(&d).map_err(Error::io(&d))? {
                let entry = entry.map_err(Error::io(&d))?;
                if keep.contains(&*entry.file_name().to_string_lossy()) {
                    continue;
                }
                let path = entry.path();
                let gone = if sub == "snapshots" {
                    std::fs::remove_dir_all(&path)
                } else if sub == "mnt" {
                    layer::detach(&path);
                    std::fs::remove_dir(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                gone.map_err(Error::io(&path))?;
            }
        }
        Ok(())
    }

    /// Detaches every layer this process mounted (at shutdown; containers still running on them
    /// lose them, as the process serving them ends).
    pub fn unmount_all(&self) {
        self.mounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Opens `path` and syncs it to disk; its metadata.
fn sync_file(path: &Path) -> Result<std::fs::Metadata> {
    let file = std::fs::File::open(path).map_err(Error::io(path))?;
    file.sync_all().map_err(Error::io(path))?;
    file.metadata().map_err(Error::io(path))
}

/// Sets its flag when dropped: a call's future dropped before it completed (the client
/// cancelled the request or its connection closed) is a caller gone.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The gRPC service's view of [`Snapshotter`]: each call run on the blocking pool (commits build
/// images, the store writes synchronously). Failures other than containerd's ordinary answers
/// (not found, already exists) are logged to stderr, with the call and its key, as containerd
/// logs them on its side.
pub struct Service(pub Arc<Snapshotter>);

impl Service {
    async fn run<T: Send + 'static>(
        &self,
        call: &'static str,
        key: &str,
        f: impl FnOnce(&Snapshotter) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let s = self.0.clone();
        let result = match tokio::task::spawn_blocking(move || f(&s)).await {
            Ok(r) => r,
            Err(e) => Err(Error::Task(e.to_string())),
        };
        if let Err(e) = &result {
            if !matches!(e, Error::NotFound(_) | Error::AlreadyExists(_)) {
                eprintln!(
                    "sealfs snapshotter: {call} {}: {e}",
                    sealfs_text::Escaped(key.as_bytes())
                );
            }
        }
        result
    }
}

#[containerd_snapshots::tonic::async_trait]
impl containerd_snapshots::Snapshotter for Service {
    type Error = Error;

    async fn stat(&self, key: String) -> Result<Info> {
        self.run("stat", &key.clone(), move |s| s.stat(&key)).await
    }

    async fn update(&self, info: Info, fieldpaths: Option<Vec<String>>) -> Result<Info> {
        let key = info.name.clone();
        self.run("update", &key, move |s| {
            s.update(info, &fieldpaths.unwrap_or_default())
        })
        .await
    }

    async fn usage(&self, key: String) -> Result<Usage> {
        self.run("usage", &key.clone(), move |s| s.usage(&key))
            .await
    }

    async fn mounts(&self, key: String) -> Result<Vec<Mount>> {
        self.run("mounts", &key.clone(), move |s| s.mounts(&key))
            .await
    }

    async fn prepare(
        &self,
        key: String,
        parent: String,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Mount>> {
        self.run("prepare", &key.clone(), move |s| {
            s.prepare(&key, &parent, labels)
        })
        .await
    }

    async fn view(
        &self,
        key: String,
        parent: String,
        labels: HashMap<String, String>,
    ) -> Result<Vec<Mount>> {
        self.run("view", &key.clone(), move |s| {
            s.create(&key, &parent, Kind::View, labels)
        })
        .await
    }

    async fn commit(
        &self,
        name: String,
        key: String,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let gone = Arc::new(AtomicBool::new(false));
        let _set_when_dropped = SetOnDrop(gone.clone());
        self.run("commit", &key.clone(), move |s| {
            s.commit_unless(&name, &key, labels, &|| gone.load(Ordering::SeqCst))
        })
        .await
    }

    async fn remove(&self, key: String) -> Result<()> {
        self.run("remove", &key.clone(), move |s| s.remove(&key))
            .await
    }

    async fn clear(&self) -> Result<()> {
        self.run("cleanup", "", |s| s.cleanup()).await
    }

    type InfoStream = futures::stream::Iter<std::vec::IntoIter<Result<Info>>>;

    async fn list(&self, _snapshotter: String, filters: Vec<String>) -> Result<Self::InfoStream> {
        let infos = self.run("list", "", move |s| s.list(&filters)).await?;
        Ok(futures::stream::iter(
            infos.into_iter().map(Ok).collect::<Vec<_>>(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// `du -s --block-size=1 PATH`'s bytes and `find PATH | wc -l`'s count (GNU coreutils and
    /// findutils: the oracle of disk usage).
    fn du(path: &Path) -> (i64, i64) {
        let out = Command::new("du")
            .args(["-s", "--block-size=1"])
            .arg(path)
            .output()
            .unwrap();
        let bytes = String::from_utf8(out.stdout).unwrap();
        let bytes = bytes.split_whitespace().next().unwrap().parse().unwrap();
        let out = Command::new("find").arg(path).output().unwrap();
        (
            bytes,
            out.stdout.iter().filter(|&&b| b == b'\n').count() as i64,
        )
    }

    #[test]
    fn usage_agrees_with_du() {
        let root = tempfile::tempdir().unwrap();
        let s = Snapshotter::open(root.path()).unwrap();
        s.create("a", "", Kind::Active, HashMap::new()).unwrap();
        let fs_dir = s.snapshot_dir(s.store.get("a").unwrap().id).join("fs");
        std::fs::create_dir(fs_dir.join("d")).unwrap();
        std::fs::write(fs_dir.join("d/big"), vec![7u8; 300_000]).unwrap();
        std::fs::write(fs_dir.join("small"), b"x").unwrap();
        std::fs::hard_link(fs_dir.join("small"), fs_dir.join("link")).unwrap();
        let u = s.usage("a").unwrap();
        let (bytes, _) = du(&fs_dir);
        assert_eq!(u.size, bytes);
        // The hard link is one inode; `find` lists both names.
        assert_eq!(u.inodes, 4);
        s.commit("l", "a", HashMap::new()).unwrap();
        let id = s.store.get("l").unwrap().id;
        let u = s.usage("l").unwrap();
        assert_eq!(u.size, du(&s.layer_image(id)).0);
        assert!(!fs_dir.exists(), "the committed directory is freed");
    }

    #[test]
    fn a_crash_before_the_commit_is_recorded_leaves_no_layer() {
        let root = tempfile::tempdir().unwrap();
        let id = {
            let s = Snapshotter::open(root.path()).unwrap();
            s.create("a", "", Kind::Active, HashMap::new()).unwrap();
            let id = s.store.get("a").unwrap().id;
            std::fs::write(s.snapshot_dir(id).join("fs/f"), b"kept").unwrap();
            // What a SIGKILL after the image was written, before the transaction, leaves; and
            // the directory of a snapshot whose removal was recorded.
            std::fs::write(s.layer_image(id), b"half a layer").unwrap();
            std::fs::create_dir_all(s.snapshot_dir(id + 100).join("fs")).unwrap();
            std::fs::create_dir_all(s.layer_mountpoint(id + 100)).unwrap();
            id
        };
        let s = Snapshotter::open(root.path()).unwrap();
        assert!(!s.layer_image(id).exists());
        assert!(!s.snapshot_dir(id + 100).exists());
        assert!(!s.layer_mountpoint(id + 100).exists());
        assert_eq!(
            s.stat("a").unwrap().kind,
            containerd_snapshots::Kind::Active
        );
        assert_eq!(
            std::fs::read(s.snapshot_dir(id).join("fs/f")).unwrap(),
            b"kept"
        );
        // The commit containerd retries goes through.
        s.commit("l", "a", HashMap::new()).unwrap();
        assert!(s.layer_image(id).exists());
    }
}
