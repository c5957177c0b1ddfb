//! Whiteouts: how a layer deletes what the layers below it gave (OCI image spec, "Whiteouts").
//!
//! - `DIR/.wh.NAME` deletes `DIR/NAME` (and what is below it) from the layers below;
//! - `DIR/.wh..wh..opq` makes `DIR` opaque: what the layers below put in it is gone, what this
//!   layer puts there stays;
//! - other names starting `.wh..wh.` are aufs's own metadata (`.wh..wh.plnk`, ...), left out
//!   with a warning, as containerd leaves them out.
//!
//! Two ways to apply them, one hook each:
//!
//! - [`flatten`]: through the sink ([`Sink::remove`], [`Sink::make_opaque`]), for one image of
//!   the whole tree (what `umoci unpack` leaves on disk);
//! - [`overlay`]: kept in the image as the kernel's overlayfs reads them in a lower layer, for
//!   one image per layer stacked by overlayfs (containerd's EROFS snapshotter's model): a
//!   whiteout is a character device 0:0 at `NAME` (permissions 0, as containerd's overlay
//!   applier makes it with `mknod`; the owner and time of the `.wh.` entry), an opaque
//!   directory carries `trusted.overlay.opaque=y` (whether its entry comes before the marker or
//!   after it); a whiteout below a file of the same layer is dropped (nothing is below a
//!   file to hide). A character device 0:0 of the layer itself cannot be told from a whiteout
//!   there: it is kept, with a warning that overlayfs will hide it.

use crate::tar::EntryHook;
use sealfs_builder::{Entry, EntryError, EntryKind, Sink};
use std::collections::HashSet;

/// The opaque marker's name.
const OPAQUE: &[u8] = b".wh..wh..opq";
/// What starts every whiteout name.
const PREFIX: &[u8] = b".wh.";
/// What starts aufs's metadata names.
const META: &[u8] = b".wh..wh.";
/// The xattr overlayfs reads on an opaque directory, and its value.
pub const OVERLAY_OPAQUE: (&[u8], &[u8]) = (b"trusted.overlay.opaque", b"y");

fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// What a name means.
enum Name<'a> {
    Plain,
    Opaque(&'a [u8]),
    Meta,
    Whiteout(Vec<u8>),
}

fn classify(path: &[u8]) -> Result<Name<'_>, EntryError> {
    let (dir, name) = split(path);
    if name == OPAQUE {
        Ok(Name::Opaque(dir))
    } else if name.starts_with(META) {
        Ok(Name::Meta)
    } else if let Some(target) = name.strip_prefix(PREFIX) {
        if target.is_empty() || target == b"." || target == b".." {
            return Err(EntryError {
                path: path.to_vec(),
                what: "a whiteout that names no file".into(),
            });
        }
        Ok(Name::Whiteout(join(dir, target)))
    } else {
        Ok(Name::Plain)
    }
}

fn warn_meta(sink: &mut Sink, warned: &mut bool, path: &[u8]) {
    if !*warned {
        *warned = true;
        sink.warn(format!(
            "aufs metadata entries (.wh..wh.*) left out (first: {})",
            sealfs_text::escape(path)
        ));
    }
}

/// The hook that applies whiteouts to the layers below, for one flattened tree.
pub fn flatten() -> EntryHook {
    let mut warned = false;
    Box::new(move |sink: &mut Sink, entry: Entry| {
        match classify(&entry.path)? {
            Name::Plain => return Ok(Some(entry)),
            Name::Opaque(dir) => sink.make_opaque(dir)?,
            Name::Meta => warn_meta(sink, &mut warned, &entry.path),
            Name::Whiteout(target) => {
                sink.remove(&target)?;
            }
        }
        Ok(None)
    })
}

/// The hook that keeps whiteouts as overlayfs reads them, for one layer's image.
pub fn overlay() -> EntryHook {
    let (mut warned, mut warned_dev) = (false, false);
    let mut opaque: HashSet<Vec<u8>> = HashSet::new();
    Box::new(
        move |sink: &mut Sink, mut entry: Entry| match classify(&entry.path)? {
            Name::Plain => {
                if entry.kind == (EntryKind::CharDevice { major: 0, minor: 0 }) && !warned_dev {
                    warned_dev = true;
                    sink.warn(format!(
                        "{}: a character device 0:0, which overlayfs takes for a whiteout: \
                         stacked, it hides the path instead of showing it",
                        sealfs_text::escape(&entry.path)
                    ));
                }
                if entry.kind == EntryKind::Dir && opaque.contains(&entry.path) {
                    entry.xattrs.retain(|(n, _)| n != OVERLAY_OPAQUE.0);
                    entry
                        .xattrs
                        .push((OVERLAY_OPAQUE.0.to_vec(), OVERLAY_OPAQUE.1.to_vec()));
                }
                Ok(Some(entry))
            }
            Name::Opaque(dir) => {
                sink.set_dir_xattr(dir, OVERLAY_OPAQUE.0, OVERLAY_OPAQUE.1)?;
                opaque.insert(dir.to_vec());
                Ok(None)
            }
            Name::Meta => {
                warn_meta(sink, &mut warned, &entry.path);
                Ok(None)
            }
            // Below a file of this layer (`d`, then `d/.wh.x`): overlayfs shows the file,
            // nothing below it is seen; there is no place for a whiteout either.
            Name::Whiteout(target) if sink.below_non_dir(&target) => Ok(None),
            Name::Whiteout(target) => Ok(Some(Entry {
                path: target,
                kind: EntryKind::CharDevice { major: 0, minor: 0 },
                mode: 0,
                xattrs: Vec::new(),
                ..entry
            })),
        },
    )
}
