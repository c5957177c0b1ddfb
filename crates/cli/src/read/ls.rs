//! `sealfs ls`: list a directory of the image, like coreutils `ls -n` (numeric owners).
//!
//! Entries are sorted by name bytes (`LC_ALL=C ls`; EROFS directories are stored in that order, `-U`
//! keeps the stored order). Names are always written with the C-style escapes of `LC_ALL=C ls -b`
//! (`sealfs_text::escape`), so no name can end a line or reach the terminal as a control sequence.
//! Times are local (`TZ`), in `--time-style=long-iso` form, or in full with `--full-time`.
//! The long format is `LC_ALL=C ls -n --time-style=long-iso`'s, byte for byte: column widths, the
//! `total` line, and the `+`/`.` mark for ACLs and security labels.

use super::{format_time, join, mode_string, resolve, show, Status, TimeStyle};
use crate::open::ImageArgs;
use anyhow::{Context, Result};
use clap::Args;
use sealfs_reader::{DirEntry, FileType, Follow, Image, Inode, Visit, WalkEvent};
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// Arguments of `sealfs ls`.
#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Path in the image (default: the root).
    path: Option<OsString>,
    /// Long listing: mode, links, uid, gid, size (major, minor for devices), mtime, name, symlink target.
    #[arg(short = 'l')]
    long: bool,
    /// List subdirectories recursively, each under a `PATH:` header.
    #[arg(short = 'R', long)]
    recursive: bool,
    /// Show every entry, "." and ".." included.
    #[arg(short = 'a', long)]
    all: bool,
    /// Show every entry but "." and "..".
    #[arg(short = 'A', long)]
    almost_all: bool,
    /// List a directory itself, not its contents.
    #[arg(short = 'd', long)]
    directory: bool,
    /// Show each entry's inode number (its nid, as the kernel shows it).
    #[arg(short = 'i', long)]
    inode: bool,
    /// Keep the stored directory order instead of sorting by name bytes.
    #[arg(short = 'U')]
    unsorted: bool,
    /// Accepted for `ls` compatibility: names are always written with the C-style escapes of
    /// `LC_ALL=C ls -b` (`\n`, `\ `, `\377`).
    #[arg(short = 'b', long)]
    escape: bool,
    /// Long listing with full times: seconds, nanoseconds and UTC offset.
    #[arg(long)]
    full_time: bool,
}

/// One line of a listing.
struct Row {
    /// The inode number the kernel shows.
    ino: u64,
    name: Vec<u8>,
    inode: Option<Inode>,
    target: Option<Vec<u8>>,
    /// `ls -l`'s mark after the mode: `+` for a POSIX ACL, `.` for a security context only.
    mark: Option<u8>,
}

/// The mark `ls -l` (coreutils with SELinux and ACL support) puts after the mode: `+` when a
/// non-symlink has an access ACL (or a directory a default ACL), else `.` when it has a
/// `security.selinux` label other than "unlabeled".
fn mark(img: &Image, inode: &Inode) -> sealfs_reader::Result<Option<u8>> {
    let has = |name: &[u8]| -> sealfs_reader::Result<bool> {
        Ok(img.get_xattr(inode, name)?.is_some_and(|v| !v.is_empty()))
    };
    if !inode.is_symlink()
        && (has(b"system.posix_acl_access")?
            || (inode.is_dir() && has(b"system.posix_acl_default")?))
    {
        return Ok(Some(b'+'));
    }
    let label = img.get_xattr(inode, b"security.selinux")?;
    Ok(label
        .filter(|v| v.strip_suffix(b"\0").unwrap_or(v) != b"unlabeled")
        .map(|_| b'.'))
}

struct Lister<'a> {
    args: &'a LsArgs,
    img: &'a Image,
    out: BufWriter<std::io::StdoutLock<'static>>,
    status: Status,
    long: bool,
    style: TimeStyle,
}

impl Lister<'_> {
    /// A name or path as listings write it: escaped by the one rule, `-b` or not.
    fn name(&self, name: &[u8]) -> Vec<u8> {
        show(name).into_bytes()
    }

    /// A row for `name` (nid `nid`); reads the inode (and symlink target) for long listings.
    fn row(&mut self, dir_path: &[u8], name: &[u8], nid: u64) -> Option<Row> {
        let mut row = Row {
            ino: self.img.ino_of(nid),
            name: name.to_vec(),
            inode: None,
            target: None,
            mark: None,
        };
        if self.long {
            let path = join(dir_path, name);
            let got = self
                .img
                .inode(nid)
                .and_then(|i| {
                    let t = if i.is_symlink() {
                        Some(self.img.readlink(&i)?)
                    } else {
                        None
                    };
                    let m = mark(self.img, &i)?;
                    Ok((i, t, m))
                })
                .with_context(|| show(&path));
            match got {
                Ok((i, t, m)) => {
                    row.inode = Some(i);
                    row.target = t;
                    row.mark = m;
                }
                Err(e) => {
                    self.status.error(&e);
                    return None;
                }
            }
        }
        Some(row)
    }

    /// Writes rows, columns aligned as `ls -l` aligns them.
    fn print(&mut self, rows: &[Row], total: bool) -> std::io::Result<()> {
        let w = |f: &dyn Fn(&Row) -> usize| rows.iter().map(f).max().unwrap_or(0);
        let ino_w = w(&|r| r.ino.to_string().len());
        if !self.long {
            for r in rows {
                if self.args.inode {
                    write!(self.out, "{:>ino_w$} ", r.ino)?;
                }
                let name = self.name(&r.name);
                self.out.write_all(&name)?;
                self.out.write_all(b"\n")?;
            }
            return Ok(());
        }
        let st = |r: &Row| r.inode.as_ref().expect("long rows have inodes").stat();
        let is_dev = |r: &Row| {
            matches!(
                r.inode.as_ref().map(Inode::file_type),
                Some(FileType::CharDevice | FileType::BlockDevice)
            )
        };
        let nlink_w = w(&|r| st(r).nlink.to_string().len());
        let uid_w = w(&|r| st(r).uid.to_string().len());
        let gid_w = w(&|r| st(r).gid.to_string().len());
        let major_w = w(&|r| {
            if is_dev(r) {
                st(r).rdev_major.to_string().len()
            } else {
                0
            }
        });
        let minor_w = w(&|r| {
            if is_dev(r) {
                st(r).rdev_minor.to_string().len()
            } else {
                0
            }
        });
        let dev_w = if rows.iter().any(is_dev) {
            major_w + 2 + minor_w
        } else {
            0
        };
        let size_w = w(&|r| {
            if is_dev(r) {
                0
            } else {
                st(r).size.to_string().len()
            }
        })
        .max(dev_w);
        let marks = rows.iter().any(|r| r.mark.is_some());
        if total {
            let blocks: u64 = rows.iter().map(|r| st(r).blocks).sum();
            writeln!(self.out, "total {}", blocks.div_ceil(2))?;
        }
        for r in rows {
            let s = st(r);
            if self.args.inode {
                write!(self.out, "{:>ino_w$} ", r.ino)?;
            }
            let size = if is_dev(r) {
                let dev = format!(
                    "{:>major_w$}, {:>minor_w$}",
                    s.rdev_major,
                    s.rdev_minor,
                    major_w = major_w,
                    minor_w = minor_w
                );
                format!("{dev:>size_w$}")
            } else {
                format!("{:>size_w$}", s.size)
            };
            self.out.write_all(mode_string(s.mode).as_bytes())?;
            if marks {
                self.out.write_all(&[r.mark.unwrap_or(b' ')])?;
            }
            write!(
                self.out,
                " {:>nlink_w$} {:>uid_w$} {:>gid_w$} {size} {} ",
                s.nlink,
                s.uid,
                s.gid,
                format_time(s.mtime, s.mtime_nsec, self.style),
            )?;
            let name = self.name(&r.name);
            self.out.write_all(&name)?;
            if let Some(t) = &r.target {
                self.out.write_all(b" -> ")?;
                let t = self.name(t);
                self.out.write_all(&t)?;
            }
            self.out.write_all(b"\n")?;
        }
        Ok(())
    }

    fn wanted(&self, e: &DirEntry) -> bool {
        let dots = e.name == b"." || e.name == b"..";
        if self.args.all {
            true
        } else if self.args.almost_all {
            !dots
        } else {
            !e.name.starts_with(b".")
        }
    }

    /// Lists directory `dir` at `path`, whose entries are `entries`.
    fn list_dir(
        &mut self,
        path: &[u8],
        entries: &[DirEntry],
        header: bool,
        first: bool,
    ) -> Result<()> {
        if header {
            if !first {
                self.out.write_all(b"\n")?;
            }
            let p = self.name(path);
            self.out.write_all(&p)?;
            self.out.write_all(b":\n")?;
        }
        let mut entries: Vec<&DirEntry> = entries.iter().filter(|e| self.wanted(e)).collect();
        if !self.args.unsorted {
            entries.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut rows = Vec::with_capacity(entries.len());
        for e in &entries {
            if let Some(row) = self.row(path, &e.name, e.nid) {
                rows.push(row);
            }
        }
        Ok(self.print(&rows, true)?)
    }
}

/// Runs `sealfs ls`.
pub fn run(args: LsArgs) -> Result<ExitCode> {
    let opened = args.image.open()?;
    let img = &opened.image;
    let path: Vec<u8> = args
        .path
        .as_deref()
        .map(|p| super::arg_bytes(p).to_vec())
        .unwrap_or_else(|| b"/".to_vec());
    let long = args.long || args.full_time;
    // Like ls: a symlink given on the command line is followed unless it is listed itself.
    let follow = if long || args.directory {
        Follow::Parents
    } else {
        Follow::All
    };
    let top = resolve(img, &path, follow)?;
    let mut l = Lister {
        args: &args,
        img,
        out: BufWriter::with_capacity(1 << 16, std::io::stdout().lock()),
        status: Status::default(),
        long,
        style: if args.full_time {
            TimeStyle::Full
        } else {
            TimeStyle::LongIso
        },
    };
    if !top.is_dir() || args.directory {
        if let Some(row) = l.row(b"", &path, top.nid()) {
            l.print(&[row], false)?;
        }
        l.out.flush()?;
        return Ok(l.status.code());
    }
    // Depth first, each directory listed when it is entered, subdirectories in listing order (the
    // on-disk order, which EROFS keeps sorted by name), as `ls -R` prints them.
    let mut first = true;
    img.walk(&top, &path, &mut |event| -> Result<Visit> {
        match event {
            WalkEvent::Dir { path, entries, .. } => {
                l.list_dir(path, entries, args.recursive, first)?;
                first = false;
                Ok(Visit::Continue)
            }
            WalkEvent::Entry(e) => {
                let descend = args.recursive
                    && e.entry.file_type() == Some(FileType::Directory)
                    && l.wanted(e.entry);
                if descend && e.revisited {
                    l.out.flush()?;
                    l.status.error(&super::fault(format!(
                        "{}: not listing already-listed directory (nid {}): the image has a directory cycle or a directory with two names",
                        show(e.path),
                        e.entry.nid
                    )));
                }
                Ok(if descend { Visit::Continue } else { Visit::Skip })
            }
            // An entry whose inode cannot be loaded is reported by its row.
            WalkEvent::Error { entry: Some(_), .. } => Ok(Visit::Skip),
            WalkEvent::Error { path, error, .. } => {
                l.out.flush()?;
                l.status.error(&anyhow::Error::new(error).context(show(path)));
                Ok(Visit::Continue)
            }
        }
    })
    .or_else(|e| {
        if super::exit_code(&e).is_none() {
            Err(e)
        } else {
            l.status.error(&e);
            Ok(())
        }
    })?;
    l.out.flush()?;
    Ok(l.status.code())
}
