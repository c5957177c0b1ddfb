//! Extended attributes: the xattr id table (`struct squashfs_xattr_id`: where an inode's
//! name/value pairs are and how many) and the pairs themselves (`struct squashfs_xattr_entry`,
//! `struct squashfs_xattr_val`), values stored inline or out of line (shared).

use super::format::{SQUASHFS_METADATA_SIZE, SQUASHFS_XATTR_VALUE_OOL, XATTR_PREFIXES};
use super::meta::{Cursor, Indexed, Meta, Table};
use crate::error::{At, SquashfsError};

/// Largest xattr value Linux stores.
const XATTR_SIZE_MAX: u32 = 65536;

/// Xattrs by full name.
pub type XattrList = Vec<(Vec<u8>, Vec<u8>)>;

/// The xattr tables of an image.
pub struct Xattrs {
    ids: Indexed,
    table: Table,
}

impl Xattrs {
    /// Reads the xattr id table's header and index (at the superblock's `xattr_id_table_start`).
    pub fn load(meta: &mut Meta<'_>) -> Result<Xattrs, SquashfsError> {
        let img = meta.img;
        let start = img.sb.xattr_id_table_start;
        let mut h = [0u8; 16];
        img.read(&mut h, start, "the xattr id table")?;
        let table_start = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if table_start >= start {
            return Err(img.err(
                format!("the xattr table (byte {table_start}) does not come before its id table"),
                Some(At::Byte(start)),
            ));
        }
        let ids = Indexed::load(img, "xattr id table", start + 16, u64::from(count), 16)?;
        Ok(Xattrs {
            ids,
            table: Table {
                name: "xattr table",
                start: table_start,
                end: start,
            },
        })
    }

    /// The xattrs (full names, values) of xattr id `index`.
    pub fn read(&self, meta: &mut Meta<'_>, index: u32) -> Result<XattrList, SquashfsError> {
        let img = meta.img;
        let mut cur = self
            .ids
            .cursor(u64::from(index))
            .map_err(|w| img.err(w, None))?;
        let reference = meta.u64(&mut cur)?;
        let count = meta.u32(&mut cur)?;
        let _size = meta.u32(&mut cur)?;
        let mut cur = self.at(meta, reference, cur.at())?;
        let mut out = Vec::new();
        for _ in 0..count {
            let at = cur.at();
            let ty = meta.u16(&mut cur)?;
            let name_len = meta.u16(&mut cur)?;
            let name = meta.bytes(&mut cur, usize::from(name_len))?;
            let prefix = XATTR_PREFIXES
                .get(usize::from(ty & 0xff))
                .filter(|_| ty & !(0xff | SQUASHFS_XATTR_VALUE_OOL) == 0)
                .ok_or_else(|| img.err(format!("xattr of unknown type {ty:#x}"), Some(at)))?;
            let full = [*prefix, name.as_slice()].concat();
            let value = if ty & SQUASHFS_XATTR_VALUE_OOL != 0 {
                let size = meta.u32(&mut cur)?;
                if size != 8 {
                    return Err(img.err(
                        format!("out-of-line xattr value reference of {size} bytes (8)"),
                        Some(at),
                    ));
                }
                let r = meta.u64(&mut cur)?;
                let mut vcur = self.at(meta, r, at)?;
                Self::value(meta, &mut vcur)?
            } else {
                Self::value(meta, &mut cur)?
            };
            out.push((full, value));
        }
        Ok(out)
    }

    /// A cursor at `reference` (block relative to the xattr table << 16 | offset).
    fn at(&self, meta: &Meta<'_>, reference: u64, from: At) -> Result<Cursor, SquashfsError> {
        let offset = (reference & 0xffff) as usize;
        let block = self.table.start.checked_add(reference >> 16);
        match block {
            Some(block) if block < self.table.end && offset < SQUASHFS_METADATA_SIZE => {
                Ok(Cursor {
                    table: self.table,
                    block,
                    offset,
                })
            }
            _ => Err(meta.img.err(
                format!("xattr reference {reference:#x} outside the xattr table"),
                Some(from),
            )),
        }
    }

    fn value(meta: &mut Meta<'_>, cur: &mut Cursor) -> Result<Vec<u8>, SquashfsError> {
        let at = cur.at();
        let size = meta.u32(cur)?;
        if size > XATTR_SIZE_MAX {
            return Err(meta.img.err(
                format!("xattr value of {size} bytes (at most {XATTR_SIZE_MAX})"),
                Some(at),
            ));
        }
        meta.bytes(cur, size as usize)
    }
}
