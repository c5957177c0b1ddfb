//! Inodes (`struct squashfs_*_inode_header`): read from the inode table by reference (metadata
//! block relative to the table << 16 | offset in its decompressed bytes).

use super::format::{ty, SQUASHFS_INVALID_XATTR, SQUASHFS_METADATA_SIZE};
use super::meta::{Cursor, Meta, Table};
use crate::error::{At, SquashfsError};

/// Longest symlink target Linux accepts, plus one.
const PATH_MAX: u32 = 4096;

/// What an inode is, with what each type carries.
#[derive(Debug)]
pub enum Body {
    /// A directory: where its listing is in the directory table and its size (+3).
    Dir {
        /// Metadata block of the listing, relative to the directory table.
        start_block: u32,
        /// Offset of the listing in that block.
        offset: u16,
        /// Listing size plus 3 (for "." and "..").
        file_size: u32,
    },
    /// A regular file; its block list follows the inode (the cursor [`read`] returns is there).
    File {
        /// Image byte of its first data block.
        start: u64,
        /// Its size.
        size: u64,
        /// Its fragment (the tail's block), [`super::format::SQUASHFS_INVALID_FRAG`] for none.
        fragment: u32,
        /// Where its tail is in the fragment block.
        frag_offset: u32,
        /// Whether its sparse blocks are holes: only in an extended inode whose `sparse` count is
        /// not 0 (unsquashfs writes the sparse blocks of other inodes as zeros, and mksquashfs
        /// stores a short file of zeros as a sparse block of a basic inode).
        holes: bool,
    },
    /// A symbolic link and its target.
    Symlink(Vec<u8>),
    /// A block (`true`) or character device and its number.
    Device(bool, u32),
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

/// One inode.
#[derive(Debug)]
pub struct Inode {
    /// Its type ([`ty`]), basic or extended.
    pub ty: u16,
    /// `st_mode` as stored (permissions in its low 12 bits).
    pub mode: u16,
    /// Index of its owner in the uid/gid table.
    pub uid: u16,
    /// Index of its group in the uid/gid table.
    pub gid: u16,
    /// Modification time, seconds since the epoch (unsigned).
    pub mtime: u32,
    /// Its number (1..=inodes), what hard links share.
    pub number: u32,
    /// Link count (1 for inode types that do not store one).
    pub nlink: u32,
    /// Index in the xattr id table, [`SQUASHFS_INVALID_XATTR`] for none.
    pub xattr: u32,
    /// What it is.
    pub body: Body,
    /// Where it is, for messages.
    pub at: At,
}

impl Inode {
    /// The basic type (1..=7) whatever the form.
    pub fn base_type(&self) -> u16 {
        if self.ty > ty::SOCKET {
            self.ty - 7
        } else {
            self.ty
        }
    }
}

/// Reads the inode `reference` points to; with the cursor after its fixed part (where a
/// regular file's block list is).
pub fn read(meta: &mut Meta<'_>, reference: u64) -> Result<(Inode, Cursor), SquashfsError> {
    let img = meta.img;
    let sb = &img.sb;
    let table = Table {
        name: "inode table",
        start: sb.inode_table_start,
        end: sb.directory_table_start,
    };
    let block = sb.inode_table_start.checked_add(reference >> 16);
    let offset = (reference & 0xffff) as usize;
    let bad_ref = |what: &str| {
        img.err(
            format!("inode reference {reference:#x}: {what}"),
            Some(At::Byte(sb.inode_table_start)),
        )
    };
    let Some(block) = block.filter(|b| *b < table.end) else {
        return Err(bad_ref("outside the inode table"));
    };
    if offset >= SQUASHFS_METADATA_SIZE {
        return Err(bad_ref("offset beyond a metadata block"));
    }
    let mut cur = Cursor {
        table,
        block,
        offset,
    };
    let at = cur.at();
    let ty = meta.u16(&mut cur)?;
    let mode = meta.u16(&mut cur)?;
    let uid = meta.u16(&mut cur)?;
    let gid = meta.u16(&mut cur)?;
    let mtime = meta.u32(&mut cur)?;
    let number = meta.u32(&mut cur)?;
    let err = |what: String| img.err(format!("inode {number}: {what}"), Some(at));
    if number == 0 || number > sb.inodes {
        return Err(err(format!(
            "inode number outside 1..={} (the superblock's count)",
            sb.inodes
        )));
    }
    let mut nlink = 1;
    let mut xattr = SQUASHFS_INVALID_XATTR;
    let body = match ty {
        ty::DIR => {
            let start_block = meta.u32(&mut cur)?;
            nlink = meta.u32(&mut cur)?;
            let file_size = u32::from(meta.u16(&mut cur)?);
            let offset = meta.u16(&mut cur)?;
            let _parent = meta.u32(&mut cur)?;
            Body::Dir {
                start_block,
                offset,
                file_size,
            }
        }
        ty::LDIR => {
            nlink = meta.u32(&mut cur)?;
            let file_size = meta.u32(&mut cur)?;
            let start_block = meta.u32(&mut cur)?;
            let _parent = meta.u32(&mut cur)?;
            let _i_count = meta.u16(&mut cur)?;
            let offset = meta.u16(&mut cur)?;
            xattr = meta.u32(&mut cur)?;
            Body::Dir {
                start_block,
                offset,
                file_size,
            }
        }
        ty::REG => {
            let start = u64::from(meta.u32(&mut cur)?);
            let fragment = meta.u32(&mut cur)?;
            let frag_offset = meta.u32(&mut cur)?;
            let size = u64::from(meta.u32(&mut cur)?);
            Body::File {
                start,
                size,
                fragment,
                frag_offset,
                holes: false,
            }
        }
        ty::LREG => {
            let start = meta.u64(&mut cur)?;
            let size = meta.u64(&mut cur)?;
            let sparse = meta.u64(&mut cur)?;
            nlink = meta.u32(&mut cur)?;
            let fragment = meta.u32(&mut cur)?;
            let frag_offset = meta.u32(&mut cur)?;
            xattr = meta.u32(&mut cur)?;
            Body::File {
                start,
                size,
                fragment,
                frag_offset,
                holes: sparse != 0,
            }
        }
        ty::SYMLINK | ty::LSYMLINK => {
            nlink = meta.u32(&mut cur)?;
            let len = meta.u32(&mut cur)?;
            if len == 0 || len >= PATH_MAX {
                return Err(err(format!(
                    "symlink target of {len} bytes (Linux takes 1 to {})",
                    PATH_MAX - 1
                )));
            }
            let target = meta.bytes(&mut cur, len as usize)?;
            if target.contains(&0) {
                return Err(err("symlink target holds a NUL byte".into()));
            }
            if ty == ty::LSYMLINK {
                xattr = meta.u32(&mut cur)?;
            }
            Body::Symlink(target)
        }
        ty::BLKDEV | ty::CHRDEV | ty::LBLKDEV | ty::LCHRDEV => {
            nlink = meta.u32(&mut cur)?;
            let rdev = meta.u32(&mut cur)?;
            if ty > ty::SOCKET {
                xattr = meta.u32(&mut cur)?;
            }
            Body::Device(matches!(ty, ty::BLKDEV | ty::LBLKDEV), rdev)
        }
        ty::FIFO | ty::SOCKET | ty::LFIFO | ty::LSOCKET => {
            nlink = meta.u32(&mut cur)?;
            if ty > ty::SOCKET {
                xattr = meta.u32(&mut cur)?;
            }
            if matches!(ty, ty::FIFO | ty::LFIFO) {
                Body::Fifo
            } else {
                Body::Socket
            }
        }
        t => return Err(err(format!("unknown inode type {t}"))),
    };
    Ok((
        Inode {
            ty,
            mode,
            uid,
            gid,
            mtime,
            number,
            nlink,
            xattr,
            body,
            at,
        },
        cur,
    ))
}
