//! Which files an update changes: the two images' trees walked, each regular file compared by the
//! fs-verity digest its image records for it (the per-file digest table the image digest covers),
//! each symlink by its target, devices by their numbers; as `diff -rq --no-dereference` reports
//! them, a directory only in one image is reported, not what it holds.

use sealfs_reader::{FileType, OpenedImage, Visit, WalkEvent};
use std::collections::BTreeMap;

/// What an image holds at a path, as compared.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Held {
    Dir,
    File(Option<Vec<u8>>),
    Symlink(Vec<u8>),
    Other(FileType, (u32, u32)),
}

/// The paths whose content differs between two images.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileChanges {
    /// In both, with other content (or of another type).
    pub changed: Vec<Vec<u8>>,
    /// Only in the new image (a directory: not what it holds).
    pub added: Vec<Vec<u8>>,
    /// Only in the old image (a directory: not what it holds).
    pub removed: Vec<Vec<u8>>,
}

/// Every path of `image` (relative, no leading '/') and what it holds; regular files by their
/// recorded fs-verity digest.
fn survey(image: &OpenedImage) -> Result<BTreeMap<Vec<u8>, Held>, String> {
    let digests = image
        .recorded_file_digests()
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{}: the image records no per-file digests", image.name))?;
    let root = image.image.root().map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    image
        .image
        .walk(&root, b"", &mut |event| -> Result<Visit, String> {
            match event {
                WalkEvent::Entry(e) => {
                    let held = match e.inode.file_type() {
                        FileType::Directory => Held::Dir,
                        FileType::Regular => {
                            Held::File(digests.get(e.inode.nid()).map(|d| d.as_bytes().to_vec()))
                        }
                        FileType::Symlink => {
                            Held::Symlink(image.image.readlink(e.inode).map_err(|x| x.to_string())?)
                        }
                        t => Held::Other(t, e.inode.rdev()),
                    };
                    out.insert(e.path.to_vec(), held);
                    Ok(Visit::Continue)
                }
                WalkEvent::Error { error, .. } => Err(error.to_string()),
                WalkEvent::Dir { .. } => Ok(Visit::Continue),
            }
        })?;
    Ok(out)
}

/// Whether `path` lies below one of `tops` (sorted), as `a/b` lies below `a`.
fn below(tops: &[Vec<u8>], path: &[u8]) -> bool {
    path.iter()
        .enumerate()
        .filter(|(_, &c)| c == b'/')
        .any(|(i, _)| {
            tops.binary_search_by(|t| t.as_slice().cmp(&path[..i]))
                .is_ok()
        })
}

/// The files `new` changes, adds and removes against `old`, each list sorted by path.
pub fn file_changes(old: &OpenedImage, new: &OpenedImage) -> Result<FileChanges, String> {
    let (a, b) = (survey(old)?, survey(new)?);
    let mut c = FileChanges::default();
    for (path, held) in &b {
        match a.get(path) {
            Some(h) if h == held => {}
            Some(_) => c.changed.push(path.clone()),
            None => c.added.push(path.clone()),
        }
    }
    c.removed = a.keys().filter(|p| !b.contains_key(*p)).cloned().collect();
    // A directory only on one side, or in the place of something else, is reported alone.
    let only = |list: &mut Vec<Vec<u8>>, changed: &[Vec<u8>], side: &BTreeMap<Vec<u8>, Held>| {
        let mut dirs: Vec<Vec<u8>> = list
            .iter()
            .chain(changed)
            .filter(|p| side.get(*p) == Some(&Held::Dir))
            .cloned()
            .collect();
        dirs.sort();
        list.retain(|p| !below(&dirs, p));
    };
    let changed = c.changed.clone();
    only(&mut c.added, &changed, &b);
    only(&mut c.removed, &changed, &a);
    Ok(c)
}
