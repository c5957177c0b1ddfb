//! Phase 0, the plan: walk the image (nothing is written yet), check every name, find hard links.

use crate::error::ExtractError;
use crate::{join, show, INODE_BATCH};
use rayon::prelude::*;
use sealfs_reader::{DirEntry, Image, Inode};
use std::collections::{HashMap, HashSet};

/// One path to create.
pub(crate) struct Node {
    /// The directory it goes into; `None`: DEST itself.
    pub(crate) parent: Option<usize>,
    /// Its name there; empty for the extraction root directory, which is DEST itself.
    pub(crate) name: Vec<u8>,
    /// Path in the image, for messages.
    pub(crate) path: Vec<u8>,
    pub(crate) inode: Inode,
    /// An earlier node with the same inode (hard link).
    pub(crate) link_of: Option<usize>,
    pub(crate) depth: u32,
}

impl Node {
    pub(crate) fn is_dest(&self) -> bool {
        self.parent.is_none() && self.name.is_empty()
    }
}

/// Why a dirent name is unsafe to create, if it is.
pub(crate) fn unsafe_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("an empty name")
    } else if name == b"." || name == b".." {
        Some("a name that means a directory itself or its parent")
    } else if name.contains(&b'/') {
        Some("a name containing '/'")
    } else if name.contains(&0) {
        Some("a name containing a NUL byte")
    } else {
        None
    }
}

/// What [`read_tree`] found: each directory's entries, and the inodes they name (`None`: it could
/// not be read; reading it again gives the error).
struct Contents {
    dirs: HashMap<u64, sealfs_reader::Result<Vec<DirEntry>>>,
    inodes: HashMap<u64, Option<Inode>>,
}

impl Contents {
    /// The entries of directory `dir` (read now if [`read_tree`] did not); each directory is asked
    /// for once.
    fn entries(&mut self, img: &Image, dir: &Inode) -> sealfs_reader::Result<Vec<DirEntry>> {
        self.dirs
            .remove(&dir.nid())
            .unwrap_or_else(|| img.read_dir_all(dir))
    }

    /// The inode `nid` names.
    fn inode(&self, img: &Image, nid: u64) -> sealfs_reader::Result<Inode> {
        match self.inodes.get(&nid) {
            Some(Some(inode)) => Ok(inode.clone()),
            _ => img.inode(nid),
        }
    }
}

fn is_dot(e: &DirEntry) -> bool {
    e.name == b"." || e.name == b".."
}

/// Reads the directories below `top` (to `max_depth`) and the inodes their entries name, breadth
/// first: the order the builder stores inodes in, so that the inodes of one level are read in order
/// of their position, [`INODE_BATCH`] at a time with their metadata blocks prefetched (read and
/// verified together), in parallel. Each directory is read once, however often it is named. Nothing
/// is checked here; [`plan`] does that.
fn read_tree(img: &Image, top: &Inode, max_depth: u32) -> Contents {
    let mut c = Contents {
        dirs: HashMap::new(),
        inodes: HashMap::new(),
    };
    let mut level = vec![top.clone()];
    let mut seen = HashSet::from([top.nid()]);
    for depth in 0..=max_depth {
        if level.is_empty() {
            break;
        }
        let listed: Vec<(u64, sealfs_reader::Result<Vec<DirEntry>>)> = level
            .par_iter()
            .map(|d| (d.nid(), img.read_dir_all(d)))
            .collect();
        level.clear();
        if depth < max_depth {
            let mut nids: Vec<u64> = listed
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok())
                .flatten()
                .filter(|e| !is_dot(e) && !c.inodes.contains_key(&e.nid))
                .map(|e| e.nid)
                .collect();
            nids.sort_unstable();
            nids.dedup();
            let decoded: Vec<(u64, Option<Inode>)> = nids
                .par_chunks(INODE_BATCH)
                .flat_map_iter(|chunk| {
                    img.prefetch_inodes(chunk);
                    chunk
                        .iter()
                        .map(|&nid| (nid, img.inode(nid).ok()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (nid, inode) in decoded {
                if let Some(i) = inode.as_ref().filter(|i| i.is_dir()) {
                    if seen.insert(nid) {
                        level.push(i.clone());
                    }
                }
                c.inodes.insert(nid, inode);
            }
        }
        c.dirs.extend(listed);
    }
    c
}

/// Walks the image below `top` (depth first, directory order) and checks every name: unsafe names,
/// a name twice in one directory, "." or ".." naming another inode, a directory reached twice, too
/// deep a nesting. Problems skip the entry (and its subtree) and are pushed to `errors`.
pub(crate) fn plan(
    img: &Image,
    top: Inode,
    top_path: &[u8],
    max_depth: u32,
    errors: &mut Vec<ExtractError>,
) -> Result<Vec<Node>, ExtractError> {
    let mut nodes = Vec::new();
    if !top.is_dir() {
        let name = top_path
            .split(|&b| b == b'/')
            .rfind(|c| !c.is_empty())
            .unwrap_or(b"")
            .to_vec();
        if let Some(why) = unsafe_name(&name) {
            return Err(ExtractError::Invalid(format!(
                "{}: cannot extract {why}",
                show(top_path)
            )));
        }
        nodes.push(Node {
            parent: None,
            name,
            path: top_path.to_vec(),
            inode: top,
            link_of: None,
            depth: 1,
        });
        return Ok(nodes);
    }
    let mut contents = read_tree(img, &top, max_depth);
    let mut seen_dirs: HashMap<u64, usize> = HashMap::from([(top.nid(), 0)]);
    let mut first_link: HashMap<u64, usize> = HashMap::new();
    let entries = contents
        .entries(img, &top)
        .map_err(|e| ExtractError::image(show(top_path), e))?
        .into_iter();
    nodes.push(Node {
        parent: None,
        name: Vec::new(),
        path: top_path.to_vec(),
        inode: top,
        link_of: None,
        depth: 0,
    });
    // What ".." must name in each directory: its parent; for the image root, the root itself; for
    // the top of a subtree, unknown (not checked).
    let top_parent = (nodes[0].inode.nid() == img.root_nid()).then_some(img.root_nid());
    let mut stack = vec![(0usize, top_parent, entries, HashSet::<Vec<u8>>::new())];
    while let Some((di, parent_nid, it, names)) = stack.last_mut() {
        let (di, parent_nid) = (*di, *parent_nid);
        let Some(e) = it.next() else {
            stack.pop();
            continue;
        };
        let path = join(&nodes[di].path, &e.name);
        if !names.insert(e.name.clone()) {
            errors.push(ExtractError::Refused(format!(
                "{}: skipped: a second entry of this name in its directory (nid {})",
                show(&path),
                e.nid
            )));
            continue;
        }
        if e.name == b"." || e.name == b".." {
            // Never created; but one that does not name its directory (or the parent) is a sign of a
            // forged image, and is reported.
            let want = if e.name == b"." {
                Some(nodes[di].inode.nid())
            } else {
                parent_nid
            };
            if want.is_some_and(|w| w != e.nid) {
                errors.push(ExtractError::Refused(format!(
                    "{}: the entry names nid {}, not nid {}: ignored",
                    show(&path),
                    e.nid,
                    want.unwrap_or_default()
                )));
            }
            continue;
        }
        if let Some(why) = unsafe_name(&e.name) {
            errors.push(ExtractError::Refused(format!(
                "{}: skipped: the image holds {why} (nid {})",
                show(&path),
                e.nid
            )));
            continue;
        }
        let depth = nodes[di].depth + 1;
        if depth > max_depth {
            errors.push(ExtractError::Refused(format!(
                "{}: skipped: nested deeper than {max_depth} directories",
                show(&path)
            )));
            continue;
        }
        let inode = match contents.inode(img, e.nid) {
            Ok(i) => i,
            Err(err) => {
                errors.push(ExtractError::image(show(&path), err));
                continue;
            }
        };
        let idx = nodes.len();
        if inode.is_dir() {
            if let Some(&other) = seen_dirs.get(&e.nid) {
                errors.push(ExtractError::Refused(format!(
                    "{}: skipped: directory nid {} was already reached as {} (a directory cycle or a directory with two names)",
                    show(&path),
                    e.nid,
                    show(&nodes[other].path)
                )));
                continue;
            }
            seen_dirs.insert(e.nid, idx);
            let entries = match contents.entries(img, &inode) {
                Ok(v) => v,
                Err(err) => {
                    errors.push(ExtractError::image(
                        format!("its contents are not extracted: {}", show(&path)),
                        err,
                    ));
                    Vec::new()
                }
            };
            nodes.push(Node {
                parent: Some(di),
                name: e.name,
                path,
                inode,
                link_of: None,
                depth,
            });
            stack.push((
                idx,
                Some(nodes[di].inode.nid()),
                entries.into_iter(),
                HashSet::new(),
            ));
        } else {
            let link_of = first_link.get(&e.nid).copied();
            if link_of.is_none() {
                first_link.insert(e.nid, idx);
            }
            nodes.push(Node {
                parent: Some(di),
                name: e.name,
                path,
                inode,
                link_of,
                depth,
            });
        }
    }
    Ok(nodes)
}
