//! Phase 0, the plan: walk the image (nothing is written yet), check every name, find hard links.

use crate::error::ExtractError;
use crate::{join, show};
use sealfs_reader::{Image, Inode, Visit, WalkEvent};
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

/// The directory a walk is in: its node, and the names met in it so far.
struct Frame {
    node: usize,
    names: HashSet<Vec<u8>>,
}

/// Walks the image below `top` ([`Image::walk_read_ahead`]: depth first, directory order, listings
/// and inodes read ahead in parallel) and checks every name: unsafe names, a name twice in one
/// directory, "." or ".." naming another inode, a directory reached twice, too deep a nesting.
/// Problems skip the entry (and its subtree) and are pushed to `errors`.
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
        });
        return Ok(nodes);
    }
    let top_path = if top_path.is_empty() { b"/" } else { top_path };
    let ahead = img.read_ahead(&top, max_depth as usize);
    // What ".." must name in the extraction root: for the image root, the root itself; for the top
    // of a subtree, unknown (not checked).
    let top_parent = (top.nid() == img.root_nid()).then_some(top.nid());
    nodes.push(Node {
        parent: None,
        name: Vec::new(),
        path: top_path.to_vec(),
        inode: top.clone(),
        link_of: None,
    });
    let mut frames: Vec<Frame> = Vec::new();
    // The directory node whose listing the walk reports next.
    let mut entering = Some(0usize);
    let mut seen_dirs: HashMap<u64, usize> = HashMap::from([(top.nid(), 0)]);
    let mut first_link: HashMap<u64, usize> = HashMap::new();

    // Checks an entry's name where it stands: `Err` says why it is skipped.
    let check_name = |frames: &mut Vec<Frame>,
                      depth: usize,
                      path: &[u8],
                      name: &[u8],
                      nid: u64|
     -> Result<usize, ExtractError> {
        frames.truncate(depth);
        let frame = frames
            .last_mut()
            .expect("an entry lies in a directory being walked");
        if !frame.names.insert(name.to_vec()) {
            return Err(ExtractError::Refused(format!(
                "{}: skipped: a second entry of this name in its directory (nid {nid})",
                show(path)
            )));
        }
        if let Some(why) = unsafe_name(name) {
            return Err(ExtractError::Refused(format!(
                "{}: skipped: the image holds {why} (nid {nid})",
                show(path)
            )));
        }
        if depth as u32 > max_depth {
            return Err(ExtractError::Refused(format!(
                "{}: skipped: nested deeper than {max_depth} directories",
                show(path)
            )));
        }
        Ok(frame.node)
    };

    img.walk_read_ahead(&top, top_path, ahead, &mut |event| {
        match event {
            WalkEvent::Dir {
                path,
                inode,
                entries,
                depth,
            } => {
                let node = entering.take().expect("a directory is entered after its entry");
                frames.truncate(depth);
                let parent_nid = match frames.last() {
                    Some(f) => Some(nodes[f.node].inode.nid()),
                    None => top_parent,
                };
                let mut names = HashSet::new();
                // "." and ".." are never created; but one that does not name its directory (or
                // the parent) is a sign of a forged image, and is reported.
                for e in entries.iter().filter(|e| e.name == b"." || e.name == b"..") {
                    let p = join(path, &e.name);
                    if !names.insert(e.name.clone()) {
                        errors.push(ExtractError::Refused(format!(
                            "{}: skipped: a second entry of this name in its directory (nid {})",
                            show(&p),
                            e.nid
                        )));
                        continue;
                    }
                    let want = if e.name == b"." {
                        Some(inode.nid())
                    } else {
                        parent_nid
                    };
                    if want.is_some_and(|w| w != e.nid) {
                        errors.push(ExtractError::Refused(format!(
                            "{}: the entry names nid {}, not nid {}: ignored",
                            show(&p),
                            e.nid,
                            want.unwrap_or_default()
                        )));
                    }
                }
                frames.push(Frame { node, names });
                Ok(Visit::Continue)
            }
            WalkEvent::Error {
                path,
                entry: None,
                error,
                ..
            } => {
                if frames.is_empty() && entering == Some(0) {
                    // The extraction root itself cannot be listed.
                    return Err(ExtractError::image(show(top_path), error));
                }
                entering = None;
                errors.push(ExtractError::image(
                    format!("its contents are not extracted: {}", show(path)),
                    error,
                ));
                Ok(Visit::Continue)
            }
            WalkEvent::Error {
                path,
                entry: Some(e),
                depth,
                error,
            } => {
                match check_name(&mut frames, depth, path, &e.name, e.nid) {
                    Err(skip) => errors.push(skip),
                    Ok(_) => errors.push(ExtractError::image(show(path), error)),
                }
                Ok(Visit::Skip)
            }
            WalkEvent::Entry(w) => {
                let e = w.entry;
                let di = match check_name(&mut frames, w.depth, w.path, &e.name, e.nid) {
                    Ok(di) => di,
                    Err(skip) => {
                        errors.push(skip);
                        return Ok(Visit::Skip);
                    }
                };
                let idx = nodes.len();
                let node = Node {
                    parent: Some(di),
                    name: e.name.clone(),
                    path: w.path.to_vec(),
                    inode: w.inode.clone(),
                    link_of: None,
                };
                if w.inode.is_dir() {
                    if let Some(&other) = seen_dirs.get(&e.nid) {
                        errors.push(ExtractError::Refused(format!(
                            "{}: skipped: directory nid {} was already reached as {} (a directory cycle or a directory with two names)",
                            show(w.path),
                            e.nid,
                            show(&nodes[other].path)
                        )));
                        return Ok(Visit::Skip);
                    }
                    seen_dirs.insert(e.nid, idx);
                    nodes.push(node);
                    entering = Some(idx);
                    Ok(Visit::Continue)
                } else {
                    let link_of = first_link.get(&e.nid).copied();
                    if link_of.is_none() {
                        first_link.insert(e.nid, idx);
                    }
                    nodes.push(Node { link_of, ..node });
                    Ok(Visit::Continue)
                }
            }
        }
    })?;
    Ok(nodes)
}
