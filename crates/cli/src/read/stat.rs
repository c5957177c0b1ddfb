//! `sealfs stat`: what `stat(1)` shows for a path on a kernel mount of the image, and how the inode is
//! stored (inode form, data layout, xattrs).
//!
//! Like `stat`, a symlink is described itself unless `-L` follows it. EROFS keeps one time per inode;
//! the kernel shows it as access, modification and change time alike.

use super::{format_time, layout_name, mode_string, resolve, show, type_key, TimeStyle};
use crate::open::ImageArgs;
use anyhow::{Context, Result};
use clap::Args;
use sealfs_reader::{DataLayout, FileType, Follow, Image, Inode};
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// Arguments of `sealfs stat`.
#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Path in the image.
    path: OsString,
    /// Follow a final symlink.
    #[arg(short = 'L', long)]
    dereference: bool,
    /// Print a JSON object.
    #[arg(long)]
    json: bool,
}

/// How an inode's data is stored, in words (with the chunk size and index form of chunk-based data).
fn layout_text(inode: &Inode) -> String {
    let mut s = layout_name(inode.layout()).to_string();
    if inode.layout() == DataLayout::ChunkBased {
        let indexes = inode.chunkformat() & sealfs_format::EROFS_CHUNK_FORMAT_INDEXES != 0;
        s.push_str(&format!(
            ", {}-byte chunks, {}",
            1u64 << inode.chunkbits(),
            if indexes {
                "chunk indexes"
            } else {
                "block map"
            }
        ));
    }
    s
}

/// Whole blocks a flat inode stores from its start block (the inline tail is not one of them).
fn whole_blocks(inode: &Inode) -> u64 {
    match inode.layout() {
        DataLayout::FlatPlain => inode.nblocks(),
        DataLayout::FlatInline => inode.nblocks().saturating_sub(1),
        _ => 0,
    }
}

fn json(img: &Image, path: &[u8], inode: &Inode, target: Option<&[u8]>, xattrs: usize) -> String {
    let st = inode.stat();
    let dev = matches!(
        inode.file_type(),
        FileType::CharDevice | FileType::BlockDevice
    );
    let v = serde_json::json!({
        "path": String::from_utf8_lossy(path),
        "path_hex": super::hex(path),
        "type": type_key(inode.file_type()),
        "size": st.size,
        "blocks": st.blocks,
        "blksize": st.blksize,
        "ino": st.ino,
        "nid": inode.nid(),
        "mode": st.mode,
        "mode_octal": format!("{:04o}", st.mode & 0o7777),
        "mode_string": mode_string(st.mode),
        "nlink": st.nlink,
        "uid": st.uid,
        "gid": st.gid,
        "mtime": st.mtime,
        "mtime_nsec": st.mtime_nsec,
        "rdev": st.rdev,
        "rdev_major": if dev { Some(st.rdev_major) } else { None },
        "rdev_minor": if dev { Some(st.rdev_minor) } else { None },
        "symlink_target": target.map(String::from_utf8_lossy),
        "symlink_target_hex": target.map(super::hex),
        "inode_form": if inode.is_extended() { "extended" } else { "compact" },
        "inode_size": inode.inode_isize(),
        "inode_offset": inode.iloc(),
        "layout": layout_text(inode),
        "start_block": if whole_blocks(inode) > 0 { inode.startblk() } else { None },
        "xattr_count": xattrs,
        "xattr_ibody_size": inode.xattr_isize(),
        "block_size": img.block_size(),
    });
    v.to_string()
}

fn text(path: &[u8], inode: &Inode, target: Option<&[u8]>, xattrs: usize) -> String {
    let st = inode.stat();
    let mut name = show(path);
    if let Some(t) = target {
        name.push_str(" -> ");
        name.push_str(&show(t));
    }
    let dev = match inode.file_type() {
        FileType::CharDevice | FileType::BlockDevice => {
            format!(" Device type: {},{}", st.rdev_major, st.rdev_minor)
        }
        _ => String::new(),
    };
    let time = format_time(st.mtime, st.mtime_nsec, TimeStyle::Full);
    let data = match (whole_blocks(inode), inode.startblk()) {
        (n, Some(b)) if n > 0 => format!(", {n} data blocks from block {b}"),
        _ => String::new(),
    };
    format!(
        "  File: {name}\n  Size: {:<10}\tBlocks: {:<10} IO Block: {:<6} {}\n Inode: {:<11} Links: {}{dev}\nAccess: ({:04o}/{})  Uid: ({:>5})   Gid: ({:>5})\nAccess: {time}\nModify: {time}\nChange: {time}\n Birth: -\n Store: {} inode ({} bytes at byte {}), {}{data}\nXattrs: {xattrs} ({} bytes inline)\n",
        st.size,
        st.blocks,
        st.blksize,
        inode.file_type().name(),
        st.ino,
        st.nlink,
        st.mode & 0o7777,
        mode_string(st.mode),
        st.uid,
        st.gid,
        if inode.is_extended() { "extended" } else { "compact" },
        inode.inode_isize(),
        inode.iloc(),
        layout_text(inode),
        inode.xattr_isize(),
    )
}

/// Runs `sealfs stat`.
pub fn run(args: StatArgs) -> Result<ExitCode> {
    let opened = args.image.open()?;
    let img = &opened.image;
    let path = super::arg_bytes(&args.path);
    let follow = if args.dereference {
        Follow::All
    } else {
        Follow::Parents
    };
    let inode = resolve(img, path, follow)?;
    let target = if inode.is_symlink() {
        Some(img.readlink(&inode).with_context(|| show(path))?)
    } else {
        None
    };
    let xattrs = img
        .list_xattrs(&inode)
        .with_context(|| format!("{}: xattrs", show(path)))?
        .len();
    let out = if args.json {
        json(img, path, &inode, target.as_deref(), xattrs) + "\n"
    } else {
        text(path, &inode, target.as_deref(), xattrs)
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
