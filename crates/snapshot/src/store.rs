//! The snapshots' metadata in one transactional store (`redb`, as containerd's own snapshotters
//! keep theirs in bbolt): one table from key to record, one counter of ids. Every call that
//! changes the metadata is one transaction, so a crash leaves the state before or after it.

use crate::error::{Error, Result};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

/// Snapshot key → JSON record.
const SNAPSHOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshots");
/// Counters: `next_id`.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// What a snapshot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// Writable, may be committed.
    Active,
    /// Read-only view of its parent.
    View,
    /// A sealed layer image.
    Committed,
}

/// A snapshot's metadata.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Names its directory (active, view) or layer image and mount point (committed).
    pub id: u64,
    /// What it is.
    pub kind: Kind,
    /// The parent's key ("" for none).
    pub parent: String,
    /// containerd's labels, kept as given.
    pub labels: HashMap<String, String>,
    /// When it was made.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
    /// Committed: the sealed layer image's digest, recorded at commit; every mount of the layer
    /// is opened with it (never re-derived from the image).
    pub digest: Option<String>,
    /// Committed: bytes on disk of the layer image.
    pub size: u64,
    /// Committed: inodes in the layer image.
    pub inodes: u64,
    /// Active: the layer image the differ built from the layer's tar ([`crate::differ`]), which
    /// the commit takes as it is (the snapshot's directory stays empty).
    #[serde(default)]
    pub applied: Option<Applied>,
    /// Committed lazily ([`crate::lazy`]): the layer is read from a registry, not from a local
    /// image, and `digest` is the sealed image's, as its signed statement names it.
    #[serde(default)]
    pub lazy: Option<crate::lazy::Remote>,
}

/// A layer image built for an active snapshot from its layer's tar stream, waiting in the
/// snapshot's directory for its commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The sealed image's digest, recorded when it was built.
    pub digest: String,
    /// Inodes in it.
    pub inodes: u64,
    /// The uncompressed layer's digest (its diff ID), as the differ answered it.
    pub diff_id: String,
}

/// The store of snapshot records.
pub struct Store {
    db: redb::Database,
}

fn decode(key: &str, bytes: &[u8]) -> Result<Record> {
    serde_json::from_slice(bytes).map_err(|e| Error::Record {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

fn encode(r: &Record) -> Vec<u8> {
    serde_json::to_vec(r).expect("a record always serializes")
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        let db = redb::Database::create(path).map_err(Error::store("opening"))?;
        let tx = db.begin_write().map_err(Error::store("opening"))?;
        tx.open_table(SNAPSHOTS).map_err(Error::store("opening"))?;
        tx.open_table(META).map_err(Error::store("opening"))?;
        tx.commit().map_err(Error::store("opening"))?;
        Ok(Store { db })
    }

    /// Opens the existing store at `path` to read it, creating nothing (`sealfs snapshotter
    /// status` when no snapshotter runs). While a snapshotter has it open this fails with
    /// [`redb::Error::DatabaseAlreadyOpen`]: redb locks the file exclusively.
    pub fn open_existing(path: &Path) -> Result<Store> {
        let db = redb::Database::open(path).map_err(Error::store("opening"))?;
        Ok(Store { db })
    }

    /// The record of `key`.
    pub fn get(&self, key: &str) -> Result<Record> {
        let tx = self.db.begin_read().map_err(Error::store("reading"))?;
        let t = tx.open_table(SNAPSHOTS).map_err(Error::store("reading"))?;
        match t.get(key).map_err(Error::store("reading"))? {
            Some(v) => decode(key, v.value()),
            None => Err(Error::NotFound(key.to_string())),
        }
    }

    /// Every record, by key.
    pub fn list(&self) -> Result<Vec<(String, Record)>> {
        let tx = self.db.begin_read().map_err(Error::store("listing"))?;
        let t = tx.open_table(SNAPSHOTS).map_err(Error::store("listing"))?;
        let mut out = Vec::new();
        for item in t.iter().map_err(Error::store("listing"))? {
            let (k, v) = item.map_err(Error::store("listing"))?;
            out.push((k.value().to_string(), decode(k.value(), v.value())?));
        }
        Ok(out)
    }

    /// Records a new active snapshot or view `key` over `parent` (committed, or "").
    pub fn create(
        &self,
        key: &str,
        parent: &str,
        kind: Kind,
        labels: HashMap<String, String>,
    ) -> Result<Record> {
        self.insert_new(key, parent, labels, |r| r.kind = kind)
    }

    /// Records a new snapshot `key` over `parent` (committed, or ""), its id the next one, as
    /// `finish` completes it (an active snapshot until changed): one transaction.
    fn insert_new(
        &self,
        key: &str,
        parent: &str,
        labels: HashMap<String, String>,
        finish: impl FnOnce(&mut Record),
    ) -> Result<Record> {
        let tx = self.db.begin_write().map_err(Error::store("creating"))?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS).map_err(Error::store("creating"))?;
            if t.get(key).map_err(Error::store("creating"))?.is_some() {
                return Err(Error::AlreadyExists(key.to_string()));
            }
            if !parent.is_empty() {
                let p = match t.get(parent).map_err(Error::store("creating"))? {
                    Some(v) => decode(parent, v.value())?,
                    None => return Err(Error::NotFound(parent.to_string())),
                };
                if p.kind != Kind::Committed {
                    return Err(Error::FailedPrecondition(format!(
                        "parent {} is not a committed snapshot",
                        sealfs_text::Escaped(parent.as_bytes())
                    )));
                }
            }
            let mut meta = tx.open_table(META).map_err(Error::store("creating"))?;
            let id = meta
                .get("next_id")
                .map_err(Error::store("creating"))?
                .map_or(1, |v| v.value());
            meta.insert("next_id", id + 1)
                .map_err(Error::store("creating"))?;
            let now = SystemTime::now();
            let mut record = Record {
                id,
                kind: Kind::Active,
                parent: parent.to_string(),
                labels,
                created: now,
                updated: now,
                digest: None,
                size: 0,
                inodes: 0,
                applied: None,
                lazy: None,
            };
            finish(&mut record);
            t.insert(key, encode(&record).as_slice())
                .map_err(Error::store("creating"))?;
            record
        };
        tx.commit().map_err(Error::store("creating"))?;
        Ok(record)
    }

    /// Turns the active snapshot `key` into the committed snapshot `name`, with the sealed layer's
    /// digest, size and inode count; `key` is gone afterwards.
    pub fn commit(
        &self,
        key: &str,
        name: &str,
        labels: HashMap<String, String>,
        digest: String,
        size: u64,
        inodes: u64,
    ) -> Result<Record> {
        let tx = self.db.begin_write().map_err(Error::store("committing"))?;
        let record = {
            let mut t = tx
                .open_table(SNAPSHOTS)
                .map_err(Error::store("committing"))?;
            if t.get(name).map_err(Error::store("committing"))?.is_some() {
                return Err(Error::AlreadyExists(name.to_string()));
            }
            let mut r = match t.remove(key).map_err(Error::store("committing"))? {
                Some(v) => decode(key, v.value())?,
                None => return Err(Error::NotFound(key.to_string())),
            };
            if r.kind != Kind::Active {
                return Err(Error::FailedPrecondition(format!(
                    "snapshot {} is not active: only active snapshots are committed",
                    sealfs_text::Escaped(key.as_bytes())
                )));
            }
            r.kind = Kind::Committed;
            r.labels = labels;
            r.updated = SystemTime::now();
            r.digest = Some(digest);
            r.size = size;
            r.inodes = inodes;
            r.applied = None;
            t.insert(name, encode(&r).as_slice())
                .map_err(Error::store("committing"))?;
            r
        };
        tx.commit().map_err(Error::store("committing"))?;
        Ok(record)
    }

    /// Records the committed snapshot `name` over `parent` (committed, or "") whose layer is
    /// read lazily from `remote` ([`crate::lazy`]), checked against `digest`: containerd's
    /// remote-snapshotter protocol, where no active snapshot is ever made for it.
    pub fn create_lazy(
        &self,
        name: &str,
        parent: &str,
        labels: HashMap<String, String>,
        digest: String,
        remote: crate::lazy::Remote,
    ) -> Result<Record> {
        self.insert_new(name, parent, labels, |r| {
            r.kind = Kind::Committed;
            r.digest = Some(digest);
            r.lazy = Some(remote);
        })
    }

    /// Records (or with `None` forgets) the layer image built for the active snapshot `key`.
    pub fn set_applied(&self, key: &str, applied: Option<Applied>) -> Result<Record> {
        let tx = self.db.begin_write().map_err(Error::store("applying"))?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS).map_err(Error::store("applying"))?;
            let mut r = match t.get(key).map_err(Error::store("applying"))? {
                Some(v) => decode(key, v.value())?,
                None => return Err(Error::NotFound(key.to_string())),
            };
            if r.kind != Kind::Active {
                return Err(Error::FailedPrecondition(format!(
                    "snapshot {} is not active: a layer is applied only to an active snapshot",
                    sealfs_text::Escaped(key.as_bytes())
                )));
            }
            r.applied = applied;
            r.updated = SystemTime::now();
            t.insert(key, encode(&r).as_slice())
                .map_err(Error::store("applying"))?;
            r
        };
        tx.commit().map_err(Error::store("applying"))?;
        Ok(record)
    }

    /// Removes `key`, unless another snapshot has it as parent.
    pub fn remove(&self, key: &str) -> Result<Record> {
        let tx = self.db.begin_write().map_err(Error::store("removing"))?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS).map_err(Error::store("removing"))?;
            for item in t.iter().map_err(Error::store("removing"))? {
                let (k, v) = item.map_err(Error::store("removing"))?;
                if decode(k.value(), v.value())?.parent == key {
                    return Err(Error::FailedPrecondition(format!(
                        "snapshot {} is the parent of {}: remove that first",
                        sealfs_text::Escaped(key.as_bytes()),
                        sealfs_text::Escaped(k.value().as_bytes())
                    )));
                }
            }
            let removed = match t.remove(key).map_err(Error::store("removing"))? {
                Some(v) => decode(key, v.value())?,
                None => return Err(Error::NotFound(key.to_string())),
            };
            removed
        };
        tx.commit().map_err(Error::store("removing"))?;
        Ok(record)
    }

    /// Replaces the labels of `key` (all of them, or those `fieldpaths` name: `labels`,
    /// `labels.NAME`), the only mutable field.
    pub fn update_labels(
        &self,
        key: &str,
        labels: HashMap<String, String>,
        fieldpaths: &[String],
    ) -> Result<Record> {
        let tx = self.db.begin_write().map_err(Error::store("updating"))?;
        let record = {
            let mut t = tx.open_table(SNAPSHOTS).map_err(Error::store("updating"))?;
            let mut r = match t.get(key).map_err(Error::store("updating"))? {
                Some(v) => decode(key, v.value())?,
                None => return Err(Error::NotFound(key.to_string())),
            };
            if fieldpaths.is_empty() {
                r.labels = labels;
            } else {
                for path in fieldpaths {
                    if path == "labels" {
                        r.labels = labels.clone();
                    } else if let Some(name) = path.strip_prefix("labels.") {
                        match labels.get(name) {
                            Some(v) => r.labels.insert(name.to_string(), v.clone()),
                            None => r.labels.remove(name),
                        };
                    } else {
                        return Err(Error::InvalidArgument(format!(
                            "cannot update field {} of snapshot {}: only labels change",
                            sealfs_text::Escaped(path.as_bytes()),
                            sealfs_text::Escaped(key.as_bytes())
                        )));
                    }
                }
            }
            r.updated = SystemTime::now();
            t.insert(key, encode(&r).as_slice())
                .map_err(Error::store("updating"))?;
            r
        };
        tx.commit().map_err(Error::store("updating"))?;
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        {
            let s = Store::open(&path).unwrap();
            s.create("a", "", Kind::Active, labels(&[("x", "1")]))
                .unwrap();
            s.commit("a", "l1", labels(&[("y", "2")]), "sha256:00".into(), 10, 3)
                .unwrap();
            s.create("b", "l1", Kind::View, HashMap::new()).unwrap();
        }
        let s = Store::open(&path).unwrap();
        let l1 = s.get("l1").unwrap();
        assert_eq!(l1.kind, Kind::Committed);
        assert_eq!(l1.labels, labels(&[("y", "2")]));
        assert_eq!(l1.digest.as_deref(), Some("sha256:00"));
        assert!(matches!(s.get("a"), Err(Error::NotFound(_))));
        let b = s.get("b").unwrap();
        assert_eq!((b.kind, b.parent.as_str()), (Kind::View, "l1"));
        assert_ne!(b.id, l1.id);
    }

    #[test]
    fn lifecycle_errors_are_containerds() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("m.redb")).unwrap();
        s.create("a", "", Kind::Active, HashMap::new()).unwrap();
        assert!(matches!(
            s.create("a", "", Kind::Active, HashMap::new()),
            Err(Error::AlreadyExists(_))
        ));
        // An active snapshot is no parent.
        assert!(matches!(
            s.create("b", "a", Kind::Active, HashMap::new()),
            Err(Error::FailedPrecondition(_))
        ));
        assert!(matches!(
            s.create("b", "nope", Kind::Active, HashMap::new()),
            Err(Error::NotFound(_))
        ));
        s.commit("a", "l1", HashMap::new(), "d".into(), 0, 0)
            .unwrap();
        s.create("v", "l1", Kind::View, HashMap::new()).unwrap();
        assert!(matches!(
            s.commit("v", "l2", HashMap::new(), "d".into(), 0, 0),
            Err(Error::FailedPrecondition(_))
        ));
        // The failed commit changed nothing.
        assert_eq!(s.get("v").unwrap().kind, Kind::View);
        assert!(matches!(s.remove("l1"), Err(Error::FailedPrecondition(_))));
        s.remove("v").unwrap();
        s.remove("l1").unwrap();
        assert!(s.list().unwrap().is_empty());
    }

    #[test]
    fn update_changes_only_the_labels_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("m.redb")).unwrap();
        s.create("a", "", Kind::Active, labels(&[("x", "1"), ("y", "2")]))
            .unwrap();
        let r = s
            .update_labels("a", labels(&[("y", "3"), ("x", "9")]), &["labels.y".into()])
            .unwrap();
        assert_eq!(r.labels, labels(&[("x", "1"), ("y", "3")]));
        let r = s
            .update_labels("a", HashMap::new(), &["labels.x".into()])
            .unwrap();
        assert_eq!(r.labels, labels(&[("y", "3")]));
        assert!(matches!(
            s.update_labels("a", HashMap::new(), &["parent".into()]),
            Err(Error::InvalidArgument(_))
        ));
    }
}
