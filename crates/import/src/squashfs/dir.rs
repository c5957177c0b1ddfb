//! Directory listings (`struct squashfs_dir_header`, `struct squashfs_dir_entry`): runs of
//! entries sharing an inode metadata block, each run after a header naming that block.

use super::format::{SQUASHFS_DIR_COUNT, SQUASHFS_METADATA_SIZE, SQUASHFS_NAME_LEN};
use super::meta::{Cursor, Meta, Table};
use crate::error::{At, SquashfsError};

/// One entry of a directory.
#[derive(Debug)]
pub struct DirEntry {
    /// Its name (checked: not empty, `.` or `..`, no `/` or NUL).
    pub name: Vec<u8>,
    /// Its inode (metadata block relative to the inode table << 16 | offset).
    pub inode: u64,
    /// The basic inode type the entry announces.
    pub ty: u16,
    /// Where the entry is, for messages.
    pub at: At,
}

/// Reads the listing at (`start_block`, `offset`) of the directory table, `file_size` being the
/// directory inode's size (the listing's bytes plus 3). Names must be in strictly increasing
/// byte order, as mksquashfs writes them and the kernel's lookups assume. Each entry takes one
/// of `entries_left`; none left is an error.
pub fn read(
    meta: &mut Meta<'_>,
    (start_block, offset, file_size): (u32, u16, u32),
    entries_left: &mut u64,
) -> Result<Vec<DirEntry>, SquashfsError> {
    let img = meta.img;
    let sb = &img.sb;
    let table = Table {
        name: "directory table",
        start: sb.directory_table_start,
        end: sb.bytes_used,
    };
    let mut cur = Cursor {
        table,
        block: sb.directory_table_start + u64::from(start_block),
        offset: usize::from(offset),
    };
    let err = |what: String, at| img.err(format!("directory listing: {what}"), Some(at));
    if file_size < 3 {
        return Err(err(
            format!("size {file_size} (at least 3)"),
            At::Byte(cur.block),
        ));
    }
    if usize::from(offset) >= SQUASHFS_METADATA_SIZE {
        return Err(err(
            format!("offset {offset} beyond a metadata block"),
            At::Byte(cur.block),
        ));
    }
    let len = u64::from(file_size - 3);
    let mut done = 0u64;
    let mut entries: Vec<DirEntry> = Vec::new();
    while done < len {
        let at = cur.at();
        if len - done < 12 {
            return Err(err("ends inside a header".into(), at));
        }
        let count = meta.u32(&mut cur)?;
        let block = meta.u32(&mut cur)?;
        let _base = meta.u32(&mut cur)?;
        done += 12;
        if count >= SQUASHFS_DIR_COUNT {
            return Err(err(
                format!(
                    "a header announces {} entries (at most 256)",
                    u64::from(count) + 1
                ),
                at,
            ));
        }
        for _ in 0..=count {
            let at = cur.at();
            *entries_left = entries_left
                .checked_sub(1)
                .ok_or_else(|| err("more entries than the limit set".into(), at))?;
            if len - done < 8 {
                return Err(err("ends inside an entry".into(), at));
            }
            let ioff = meta.u16(&mut cur)?;
            let _delta = meta.u16(&mut cur)?;
            let ty = meta.u16(&mut cur)?;
            let name_len = usize::from(meta.u16(&mut cur)?) + 1;
            done += 8;
            if name_len > SQUASHFS_NAME_LEN {
                return Err(err(format!("a name of {name_len} bytes (at most 256)"), at));
            }
            if len - done < name_len as u64 {
                return Err(err("ends inside a name".into(), at));
            }
            let name = meta.bytes(&mut cur, name_len)?;
            done += name_len as u64;
            let shown = sealfs_text::escape(&name);
            if name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
                return Err(err(format!("invalid name {shown}"), at));
            }
            if usize::from(ioff) >= SQUASHFS_METADATA_SIZE {
                return Err(err(
                    format!("entry {shown}: inode offset {ioff} beyond a metadata block"),
                    at,
                ));
            }
            if let Some(prev) = entries.last() {
                if prev.name >= name {
                    return Err(err(
                        format!(
                            "entry {shown} after {}: names repeated or out of order",
                            sealfs_text::escape(&prev.name)
                        ),
                        at,
                    ));
                }
            }
            entries.push(DirEntry {
                name,
                inode: (u64::from(block) << 16) | u64::from(ioff),
                ty,
                at,
            });
        }
    }
    Ok(entries)
}
