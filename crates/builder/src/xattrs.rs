//! Extended attributes: choosing what goes to the shared area, and encoding each inode's xattr body
//! with its name bloom filter.

use crate::error::{BuildError, Result};
use crate::tree::{Inode, Tree, Xattr};
use sealfs_format::{self as fmt, IntoBytes, XattrEntry, XattrIbodyHeader};
use std::collections::HashMap;

/// The shared xattr area: entries used by several inodes, stored once and referenced by 4-byte ids.
#[derive(Debug, Default)]
pub(crate) struct SharedXattrs {
    /// The encoded area (entries back to back, each padded to 4 bytes).
    pub bytes: Vec<u8>,
    /// Offset of each shared xattr inside `bytes`.
    offsets: HashMap<Xattr, u32>,
}

impl SharedXattrs {
    /// Picks the xattrs worth sharing: those whose inline copies would cost more than one shared copy
    /// plus a 4-byte id per inode. The area is sorted, so it does not depend on scan order.
    pub fn plan(tree: &Tree) -> Self {
        let mut count: HashMap<&Xattr, u64> = HashMap::new();
        for inode in &tree.inodes {
            for x in &inode.xattrs {
                *count.entry(x).or_default() += 1;
            }
        }
        let mut shared: Vec<&Xattr> = count
            .into_iter()
            .filter(|(x, k)| {
                let e = entry_size(x);
                *k >= 2 && (k - 1) * e > 4 * k
            })
            .map(|(x, _)| x)
            .collect();
        shared.sort();
        let mut area = SharedXattrs::default();
        for x in shared {
            area.offsets.insert(x.clone(), area.bytes.len() as u32);
            encode_entry(&mut area.bytes, x);
        }
        area
    }

    fn offset(&self, x: &Xattr) -> Option<u32> {
        self.offsets.get(x).copied()
    }
}

fn entry_size(x: &Xattr) -> u64 {
    fmt::xattr_entry_size(x.suffix.len(), x.value.len())
}

fn encode_entry(out: &mut Vec<u8>, x: &Xattr) {
    let start = out.len();
    let header = XattrEntry {
        e_name_len: x.suffix.len() as u8,
        e_name_index: x.index,
        e_value_size: (x.value.len() as u16).into(),
    };
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&x.suffix);
    out.extend_from_slice(&x.value);
    out.resize(start + entry_size(x) as usize, 0);
}

/// Which of an inode's xattrs are shared (at most 255 ids fit the header) and which are inline.
fn split<'a>(inode: &'a Inode, shared: &SharedXattrs) -> (Vec<u32>, Vec<&'a Xattr>) {
    let mut ids = Vec::new();
    let mut inline = Vec::new();
    for x in &inode.xattrs {
        match shared.offset(x) {
            Some(off) if ids.len() < u8::MAX as usize => ids.push(off),
            _ => inline.push(x),
        }
    }
    (ids, inline)
}

/// Size of an inode's xattr body (0 without xattrs); fails where `i_xattr_icount` would overflow.
pub(crate) fn ibody_size(tree: &Tree, inode: &Inode, shared: &SharedXattrs) -> Result<u64> {
    if inode.xattrs.is_empty() {
        return Ok(0);
    }
    let (ids, inline) = split(inode, shared);
    let size = fmt::EROFS_XATTR_IBODY_HEADER_SIZE
        + fmt::EROFS_XATTR_SHARED_ID_SIZE * ids.len() as u64
        + inline.iter().map(|x| entry_size(x)).sum::<u64>();
    if fmt::xattr_icount(size) > u16::MAX as u64 {
        return Err(BuildError::Unsupported {
            path: tree.path(inode),
            what: format!("xattrs take {size} bytes; an inode holds at most 262148"),
        });
    }
    Ok(size)
}

/// `i_xattr_icount` for a body of `size` bytes.
pub(crate) fn icount(size: u64) -> u16 {
    fmt::xattr_icount(size) as u16
}

/// Encodes an inode's xattr body. `shared_base_id` is the id of the shared area's first byte.
pub(crate) fn encode_ibody(
    inode: &Inode,
    shared: &SharedXattrs,
    shared_base_id: u32,
    filter: bool,
) -> Vec<u8> {
    if inode.xattrs.is_empty() {
        return Vec::new();
    }
    let (ids, inline) = split(inode, shared);
    let name_filter = if filter {
        fmt::xattr_name_filter(inode.xattrs.iter().map(|x| (x.index, x.suffix.as_slice())))
    } else {
        0
    };
    let header = XattrIbodyHeader {
        h_name_filter: name_filter.into(),
        h_shared_count: ids.len() as u8,
        h_reserved2: [0; 7],
    };
    let mut out = header.as_bytes().to_vec();
    for off in ids {
        out.extend_from_slice(&(shared_base_id + off / 4).to_le_bytes());
    }
    for x in inline {
        encode_entry(&mut out, x);
    }
    out
}
