//! Extended attributes, as Linux 6.18's `fs/erofs/xattr.c` reads them.
//!
//! An inode's inline xattr body (`xattr_isize` bytes after the inode) starts with a 12-byte header:
//! the 32-bit name bloom filter and `h_shared_count`, followed by that many 4-byte ids of entries in
//! the shared area (at `xattr_blkaddr * blksz + id * 4`) and then inline entries that exactly fill the
//! rest. Each entry is `{name_len, name_index, value_size}`, the name suffix and the value, padded to
//! 4 bytes; entries may cross block boundaries. Names use a short prefix (index 1..6; 5 is Lustre,
//! which the kernel does not serve and lists nothing for) or a long prefix (`0x80 | i`) from the
//! table loaded when the image is opened.
//!
//! **Bloom filter fast path.** When the superblock has `COMPAT_XATTR_FILTER` and
//! `xattr_filter_reserved == 0`, a set bit `xxh32(suffix, SEED + index) & 31` of the inode's
//! `h_name_filter` means no xattr of the inode has that name, and [`Image::get_xattr`] answers "absent"
//! without reading any entry (counted in [`crate::StatsSnapshot::filter_skips`]).

use crate::cache::Blocks;
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::Inode;
use crate::superblock::{
    SuperInfo, EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX, EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX,
};
use sealfs_format::{
    split_xattr_name, xattr_filter_bit, xattr_prefix, EROFS_FEATURE_INCOMPAT_FRAGMENTS,
    EROFS_FEATURE_INCOMPAT_METABOX, EROFS_NAME_LEN, EROFS_XATTR_IBODY_HEADER_SIZE,
    EROFS_XATTR_LONG_PREFIX, EROFS_XATTR_SHARED_ID_SIZE,
};

/// One long xattr name prefix: a short prefix (`base_index`) followed by `infix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongPrefix {
    /// Short prefix index (1..6) the prefix extends.
    pub base_index: u8,
    /// Text after the short prefix.
    pub infix: Vec<u8>,
}

/// The long prefix table, or why it cannot be read.
#[derive(Clone, Debug)]
pub(crate) enum LongPrefixes {
    Loaded(Vec<LongPrefix>),
    Unsupported(String),
}

/// Loads the long prefix table (`erofs_xattr_prefixes_init`): `xattr_prefix_count` records from byte
/// `xattr_prefix_start * 4`, each 4-aligned `{le16 len, u8 base_index, infix[len - 1]}` with
/// `1 <= len <= 256`. A table inside the packed inode (no `PLAIN_XATTR_PFX`, `FRAGMENTS` with a packed
/// nid) is not read: using a long prefix then gives [`Error::Unsupported`].
pub(crate) fn load_long_prefixes(blocks: &Blocks, sb: &SuperInfo) -> Result<LongPrefixes> {
    if sb.xattr_prefix_count == 0 {
        return Ok(LongPrefixes::Loaded(Vec::new()));
    }
    let plain = sb.has_compat(EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX)
        || !(sb.has_incompat(EROFS_FEATURE_INCOMPAT_METABOX)
            || (sb.has_incompat(EROFS_FEATURE_INCOMPAT_FRAGMENTS) && sb.packed_nid != 0));
    if !plain {
        return Ok(LongPrefixes::Unsupported(
            "long xattr prefixes stored in the packed inode".into(),
        ));
    }
    let mut pos = (sb.xattr_prefix_start as u64) << 2;
    let mut out = Vec::with_capacity(sb.xattr_prefix_count as usize);
    for i in 0..sb.xattr_prefix_count {
        pos = pos.next_multiple_of(4);
        let at = Location::offset(pos);
        let mut lenb = [0u8; 2];
        blocks.read(pos, &mut lenb, at)?;
        let len = match u16::from_le_bytes(lenb) {
            0 => 65536,
            n => n as usize,
        };
        if !(1..=EROFS_NAME_LEN + 1).contains(&len) {
            return Err(Error::corrupted(
                format!("long xattr prefix {i} has length {len}"),
                at,
            ));
        }
        let rec = blocks.read_vec(pos + 2, len, at)?;
        out.push(LongPrefix {
            base_index: rec[0],
            infix: rec[1..].to_vec(),
        });
        pos += 2 + len as u64;
    }
    Ok(LongPrefixes::Loaded(out))
}

/// The decoded inline xattr body header of an inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrBody {
    /// `h_name_filter`: a 1 bit means no xattr name of the inode hashes to it.
    pub name_filter: u32,
    /// Ids of the shared entries (units of 4 bytes from the shared area's start).
    pub shared: Vec<u32>,
    /// Absolute byte offset of the first inline entry.
    pub inline_start: u64,
    /// Bytes of inline entries.
    pub inline_len: u64,
}

/// The header of one entry, read at `pos`.
struct Entry {
    pos: u64,
    name_len: usize,
    name_index: u8,
    value_size: usize,
}

impl Entry {
    fn size(&self) -> u64 {
        sealfs_format::xattr_entry_size(self.name_len, self.value_size)
    }
}

enum Flow {
    Continue,
    Stop,
}

impl Image {
    /// The long xattr name prefixes of the image.
    pub fn long_prefixes(&self) -> Result<&[LongPrefix]> {
        match &self.prefixes {
            LongPrefixes::Loaded(v) => Ok(v),
            LongPrefixes::Unsupported(why) => {
                Err(Error::unsupported(why.clone(), Location::image()))
            }
        }
    }

    /// Long prefix `0x80 | id`, `Ok(None)` past the table (the kernel skips such entries).
    fn long_prefix(&self, index: u8, at: Location) -> Result<Option<&LongPrefix>> {
        let id = (index & !EROFS_XATTR_LONG_PREFIX) as usize;
        if id >= self.sb.xattr_prefix_count as usize {
            return Ok(None);
        }
        match &self.prefixes {
            LongPrefixes::Loaded(v) => Ok(v.get(id)),
            LongPrefixes::Unsupported(why) => Err(Error::unsupported(why.clone(), at)),
        }
    }

    /// The inline xattr body header of `inode`, `None` when it has no xattrs
    /// (`erofs_init_inode_xattrs`).
    pub fn xattr_body(&self, inode: &Inode) -> Result<Option<XattrBody>> {
        const HEADER: u64 = EROFS_XATTR_IBODY_HEADER_SIZE;
        let isize = inode.xattr_isize();
        if isize == 0 {
            return Ok(None);
        }
        let pos = inode.iloc() + inode.inode_isize();
        let at = Location::nid(inode.nid())
            .with_offset(pos)
            .with_block(pos >> self.sb.blkszbits);
        if isize == HEADER {
            return Err(Error::unsupported("xattr_isize 12 (i_xattr_icount 1)", at));
        }
        let mut head = [0u8; HEADER as usize];
        self.meta_read(pos, &mut head, at)?;
        let name_filter = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
        let count = head[4] as u64;
        let header = HEADER + EROFS_XATTR_SHARED_ID_SIZE * count;
        if header > isize {
            return Err(Error::corrupted(
                format!("h_shared_count {count} does not fit xattr_isize {isize}"),
                at,
            ));
        }
        let ids = self.meta_read_vec(
            pos + HEADER,
            (EROFS_XATTR_SHARED_ID_SIZE * count) as usize,
            at,
        )?;
        let shared = ids
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(Some(XattrBody {
            name_filter,
            shared,
            inline_start: pos + header,
            inline_len: isize - header,
        }))
    }

    fn entry_at(&self, pos: u64, at: Location) -> Result<Entry> {
        let mut h = [0u8; 4];
        self.meta_read(pos, &mut h, at)?;
        Ok(Entry {
            pos,
            name_len: h[0] as usize,
            name_index: h[1],
            value_size: u16::from_le_bytes([h[2], h[3]]) as usize,
        })
    }

    /// Calls `f` for each entry: inline ones first, then shared ones, as the kernel iterates.
    fn for_each_entry(
        &self,
        inode: &Inode,
        body: &XattrBody,
        mut f: impl FnMut(&Entry, Location) -> Result<Flow>,
    ) -> Result<()> {
        let nid_at = Location::nid(inode.nid());
        let mut pos = body.inline_start;
        let mut remaining = body.inline_len;
        while remaining > 0 {
            let at = nid_at.with_offset(pos).with_block(pos >> self.sb.blkszbits);
            let e = self.entry_at(pos, at)?;
            let size = e.size();
            if size > remaining {
                return Err(Error::corrupted(
                    format!("xattr entry of {size} bytes runs past xattr_isize"),
                    at,
                ));
            }
            if let Flow::Stop = f(&e, at)? {
                return Ok(());
            }
            remaining -= size;
            pos += size;
        }
        let mut base = self.blkpos(self.sb.xattr_blkaddr as u64, nid_at)?;
        if base >= crate::image::IN_METABOX {
            return Err(Error::corrupted("xattr_blkaddr out of range", nid_at));
        }
        if self
            .sb
            .has_compat(EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX)
        {
            base |= crate::image::IN_METABOX;
        }
        for &id in &body.shared {
            let pos = base + id as u64 * 4;
            let at = nid_at.with_offset(pos).with_block(pos >> self.sb.blkszbits);
            let e = self.entry_at(pos, at)?;
            if let Flow::Stop = f(&e, at)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// The full name of an entry (prefix, infix, suffix), `None` for entries the kernel does not list.
    fn entry_name(&self, e: &Entry, at: Location) -> Result<Option<Vec<u8>>> {
        let (base_index, infix): (u8, &[u8]) = if e.name_index & EROFS_XATTR_LONG_PREFIX != 0 {
            match self.long_prefix(e.name_index, at)? {
                Some(p) => (p.base_index, &p.infix),
                None => return Ok(None),
            }
        } else {
            (e.name_index, &[])
        };
        let Some(prefix) = xattr_prefix(base_index) else {
            return Ok(None);
        };
        let suffix = self.meta_read_vec(e.pos + 4, e.name_len, at)?;
        Ok(Some([prefix, infix, &suffix].concat()))
    }

    /// The names of `inode`'s xattrs, in the kernel's `listxattr` order (inline, then shared). All
    /// namespaces are listed, including `trusted.*`, which the kernel shows only to
    /// `CAP_SYS_ADMIN`; entries with an unknown prefix index (and Lustre's) are left out.
    pub fn list_xattrs(&self, inode: &Inode) -> Result<Vec<Vec<u8>>> {
        let Some(body) = self.xattr_body(inode)? else {
            return Ok(Vec::new());
        };
        let mut names = Vec::new();
        self.for_each_entry(inode, &body, |e, at| {
            if let Some(name) = self.entry_name(e, at)? {
                names.push(name);
            }
            Ok(Flow::Continue)
        })?;
        Ok(names)
    }

    /// All xattrs of `inode` with their values, in [`Image::list_xattrs`] order.
    pub fn xattrs(&self, inode: &Inode) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let Some(body) = self.xattr_body(inode)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.for_each_entry(inode, &body, |e, at| {
            if let Some(name) = self.entry_name(e, at)? {
                let value = self.meta_read_vec(e.pos + 4 + e.name_len as u64, e.value_size, at)?;
                out.push((name, value));
            }
            Ok(Flow::Continue)
        })?;
        Ok(out)
    }

    /// The value of xattr `name` (full name such as `user.foo`) of `inode`; `Ok(None)` if absent or
    /// in a namespace the kernel does not serve. Uses the name bloom filter when the kernel would.
    pub fn get_xattr(&self, inode: &Inode, name: &[u8]) -> Result<Option<Vec<u8>>> {
        let Some((index, suffix)) = split_xattr_name(name) else {
            return Ok(None);
        };
        let Some(body) = self.xattr_body(inode)? else {
            return Ok(None);
        };
        let stats = self.blocks.stats();
        stats.add_xattr_lookup();
        if self.sb.xattr_filter_enabled()
            && body.name_filter & (1 << xattr_filter_bit(index, suffix)) != 0
        {
            stats.add_filter_skip();
            return Ok(None);
        }
        if suffix.len() > EROFS_NAME_LEN {
            return Ok(None);
        }
        let mut found = None;
        self.for_each_entry(inode, &body, |e, at| {
            // erofs_getxattr_foreach: match the index, the infix, the length, then the name bytes.
            let rest: &[u8] = if e.name_index & EROFS_XATTR_LONG_PREFIX != 0 {
                let Some(p) = self.long_prefix(e.name_index, at)? else {
                    return Ok(Flow::Continue);
                };
                if p.base_index != index || !suffix.starts_with(&p.infix) {
                    return Ok(Flow::Continue);
                }
                &suffix[p.infix.len()..]
            } else {
                if e.name_index != index {
                    return Ok(Flow::Continue);
                }
                suffix
            };
            if rest.len() != e.name_len {
                return Ok(Flow::Continue);
            }
            if self.meta_read_vec(e.pos + 4, e.name_len, at)? != rest {
                return Ok(Flow::Continue);
            }
            found = Some(self.meta_read_vec(e.pos + 4 + e.name_len as u64, e.value_size, at)?);
            Ok(Flow::Stop)
        })?;
        Ok(found)
    }
}
