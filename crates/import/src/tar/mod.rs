//! Tar archives (ustar, GNU and PAX, plain or gzip, zstd, xz, bzip2 or lz4 compressed) as a
//! builder [`Source`], read in one streaming pass. Input that is none of these is "not a tar
//! archive", an empty input too (GNU tar refuses both).
//!
//! What the image holds is what `tar -x` would put on disk, as root, keeping owners (by number,
//! as `--numeric-owner`), permissions, xattrs and ACLs (`--xattrs --xattrs-include='*' --acls
//! --same-owner -p`), then `sealfs build` of that directory:
//!
//! - names: a leading `/` is removed (as GNU tar and bsdtar do, with a warning in the build's
//!   summary); `.` components are dropped; a `..` component is an error naming the entry (GNU
//!   tar would cut everything up to it, silently changing where the entry goes). Hard link
//!   targets follow the same rules. Symlink targets are kept as they are: they are data;
//! - duplicates: the last entry wins; an entry over a directory that is not a directory, or the
//!   reverse, is an error (see [`sealfs_builder::Sink::add`]); missing parents are made 0755,
//!   root-owned, with time 0 (`tar -x` would give them the time of extraction); a directory
//!   has the time of its last entry wherever its members are (as `bsdtar -x` sets it; GNU
//!   `tar -x` leaves one whose members are not contiguous at the time of extraction);
//! - xattrs: `SCHILY.xattr.*` (GNU tar, bsdtar), `LIBARCHIVE.xattr.*` (bsdtar; a
//!   `SCHILY.xattr.*` of the same name wins, as GNU tar reads only those); ACLs from
//!   `SCHILY.acl.access`/`default` text (`system.posix_acl_*` xattr records alone are left out
//!   with a warning, as `tar -x` leaves them; they stand in for a text that names users without
//!   their numbers; OCI layers take the records instead, see [`TarSource::with_acl_xattrs`]),
//!   stored in the kernel's binary form, the mode's permission bits set from an access ACL and an ACL equal to
//!   the mode dropped, as the kernel does when `tar -x` sets it;
//! - sparse files (GNU `S` members, PAX formats 0.0, 0.1 and 1.0) stay sparse: their holes are
//!   the holes a file written as `tar -x` writes it has on a file system of 4 KiB blocks;
//! - times: PAX times with fractions and signs, GNU base-256 negative times.
//!
//! **Data.** A plain archive in a regular file is not copied: the scan reads headers and seeks
//! past data, and file data is read in place while the image is written. Anything else (stdin,
//! compressed input) is read once: file data goes to an unnamed temporary file beside the
//! output as the archive is read, and is read back from there; memory holds only metadata.

mod input;
mod pax;
mod reader;

pub use input::Compression;

use crate::acl::Acl;
use crate::error::{OciError, TarError};
use reader::{FrameError, Member, Reader};
use sealfs_builder::{
    BuildError, DataId, Entry, EntryError, EntryKind, FileRef, ScanContext, Sink, Source,
    SourceFile,
};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where one regular file's data is: from `at` in the store, its stretches back to back.
#[derive(Debug)]
struct Stored {
    at: u64,
    /// For a sparse file, `(offset in the file, length)` of each stretch stored.
    map: Option<Box<[(u64, u64)]>>,
}

/// Called with every entry of a [`TarSource`] before it goes to the sink: may change it, drop
/// it (`None`), or act on the sink itself (an OCI importer turns `.wh.NAME` entries into
/// [`Sink::remove`] and `.wh..wh..opq` into [`Sink::make_opaque`]). An error fails the build,
/// named with the entry and its byte offset.
pub type EntryHook =
    Box<dyn FnMut(&mut Sink, Entry) -> Result<Option<Entry>, EntryError> + Send + Sync>;

/// One layer of a layered [`TarSource`] ([`TarSource::lazy_layers`]), opened only when its turn
/// comes (a registry's layers are not all fetched at once) and finished when its tar stream has
/// ended (an OCI layer is read to its last byte and its digest checked).
pub struct Layer {
    /// Names the layer in messages (an OCI layer: its digest).
    pub name: String,
    /// Its size in bytes of input, when known (for progress).
    pub size: Option<u64>,
    /// The compression its description states: the stream must be that (recognised by its
    /// first bytes as usual); `None` takes whatever the bytes say.
    pub compression: Option<Compression>,
    /// Opens the stream.
    pub open: Box<dyn FnOnce() -> std::io::Result<Box<dyn Read + Send>> + Send>,
    /// Called when the tar stream has ended, or failed (then its error wins over the failure:
    /// a layer whose digest does not match is named for that, not for what its bad bytes did
    /// to the tar reader).
    pub finish: Box<dyn FnOnce() -> std::io::Result<()> + Send>,
}

/// An input not yet scanned.
enum Pending {
    Ready(String, Reader),
    Lazy(Layer),
}

/// A tar archive (or several, as the layers of one tree), as a [`Source`].
pub struct TarSource {
    /// For messages: the archive being read (its path, `-` for stdin, or the name given).
    name: String,
    /// The inputs until they are scanned (behind a lock only to be `Sync`: the scan takes
    /// them).
    inputs: std::sync::Mutex<Vec<Pending>>,
    /// Bytes of input in all, when known.
    total: Option<u64>,
    hook: Option<EntryHook>,
    /// Where file data is read back: the archive itself, or the temporary file.
    store: Option<File>,
    store_name: PathBuf,
    /// For data read in place: the archive's (size, modification time, change time) when it
    /// was scanned; a file read after the archive changed fails the build.
    archive_stamp: Option<(u64, i64, i64, i64, i64)>,
    files: Vec<Stored>,
    warned_acl_xattrs: bool,
    /// ACLs from the `system.posix_acl_*` xattr records, as `umoci unpack` sets them
    /// ([`TarSource::with_acl_xattrs`]), rather than from `SCHILY.acl.*` text as `tar -x`.
    acl_xattrs: bool,
}

/// What says an archive read in place did not change.
fn stamp(f: &File) -> std::io::Result<(u64, i64, i64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let md = f.metadata()?;
    Ok((
        md.len(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
    ))
}

impl TarSource {
    /// The archive at `path` (`-` reads stdin).
    pub fn open(path: &Path) -> Result<TarSource, TarError> {
        let name = sealfs_text::escape_path(path);
        let input = if path == Path::new("-") {
            input::Input::from_reader(Box::new(std::io::stdin()))
        } else {
            File::open(path).and_then(input::Input::from_file)
        }
        .map_err(|e| TarError::io(&name, 0, "open", e))?;
        let total = input.raw_len();
        let (name, reader) = named(name, input);
        let mut source = TarSource::with_inputs(vec![Pending::Ready(name, reader)]);
        source.total = total;
        Ok(source)
    }

    /// The archive `reader` gives (read once, from its start); `name` names it in messages.
    pub fn from_reader(reader: Box<dyn Read + Send>, name: &str) -> Result<TarSource, TarError> {
        TarSource::layers(vec![(reader, name.to_string())])
    }

    /// Several archives applied in order as the layers of one tree (each read once; the sink
    /// starts a layer before each after the first, see [`Sink::next_layer`]). Without a hook
    /// that acts on whiteouts, a later layer's entries simply replace earlier ones.
    pub fn layers(streams: Vec<(Box<dyn Read + Send>, String)>) -> Result<TarSource, TarError> {
        let mut inputs = Vec::with_capacity(streams.len());
        for (reader, name) in streams {
            let input =
                input::Input::from_reader(reader).map_err(|e| TarError::io(&name, 0, "read", e))?;
            let (name, reader) = named(name, input);
            inputs.push(Pending::Ready(name, reader));
        }
        Ok(TarSource::with_inputs(inputs))
    }

    /// Layers applied in order as [`TarSource::layers`] applies them, each opened when the
    /// scan comes to it and finished when its tar stream ends.
    pub fn lazy_layers(layers: Vec<Layer>) -> TarSource {
        let total = layers.iter().map(|l| l.size).sum();
        let first = layers.first().map_or(String::new(), |l| l.name.clone());
        let mut source = TarSource::with_inputs(layers.into_iter().map(Pending::Lazy).collect());
        source.name = first;
        source.total = total;
        source
    }

    /// Sets the hook every entry goes through before the sink.
    pub fn with_hook(mut self, hook: EntryHook) -> TarSource {
        self.hook = Some(hook);
        self
    }

    /// Takes POSIX ACLs from the `SCHILY.xattr.system.posix_acl_access`/`_default` records
    /// (the kernel's binary form), as `umoci unpack` and containerd set every `SCHILY.xattr.*`
    /// record with `setxattr`, and ignores `SCHILY.acl.*` text (Go's `archive/tar`, their
    /// reader, does not read it). The kernel's rules apply as for text ACLs: the mode's
    /// permission bits are set from an access ACL, an access ACL equal to the mode is dropped.
    /// OCI layers are read so; a tar archive is read as `tar -x` reads it.
    pub fn with_acl_xattrs(mut self) -> TarSource {
        self.acl_xattrs = true;
        self
    }

    fn with_inputs(inputs: Vec<Pending>) -> TarSource {
        let name = match inputs.first() {
            Some(Pending::Ready(name, _)) => name.clone(),
            Some(Pending::Lazy(l)) => l.name.clone(),
            None => String::new(),
        };
        TarSource {
            store_name: PathBuf::from(&name),
            name,
            inputs: std::sync::Mutex::new(inputs),
            total: None,
            hook: None,
            archive_stamp: None,
            store: None,
            files: Vec::new(),
            warned_acl_xattrs: false,
            acl_xattrs: false,
        }
    }

    /// How the (first) input is compressed (`None` before a lazily opened layer is read).
    pub fn compression(&self) -> Option<Compression> {
        let inputs = self.inputs.lock().unwrap_or_else(|e| e.into_inner());
        match inputs.first() {
            Some(Pending::Ready(_, r)) => Some(r.input.compression()),
            _ => None,
        }
    }

    fn frame_error(&self, e: FrameError) -> TarError {
        TarError::new(&self.name, e.offset, e.name.as_deref(), e.what, e.io)
    }
}

/// An input and its name for messages (which says how it is compressed).
fn named(name: String, input: input::Input) -> (String, Reader) {
    let name = match input.compression() {
        Compression::None => name,
        c => format!(
            "{name} ({} compressed; offsets in the tar stream)",
            c.name()
        ),
    };
    (name, Reader::new(input))
}

/// The temporary file data goes to, written sequentially.
struct SpillWriter {
    out: BufWriter<File>,
    len: u64,
}

impl Source for TarSource {
    fn scan(&mut self, sink: &mut Sink, cx: &ScanContext<'_>) -> sealfs_builder::Result<()> {
        let inputs = std::mem::take(self.inputs.get_mut().unwrap_or_else(|e| e.into_inner()));
        let progress = cx.progress();
        progress.begin_bytes("reading the archive", self.total);
        let in_place = match &inputs[..] {
            [Pending::Ready(_, r)] => r.input.in_place(),
            _ => None,
        };
        let mut spill = match in_place {
            Some(f) => {
                let reopen = |e| BuildError::from_source(TarError::io(&self.name, 0, "reopen", e));
                let f = f.try_clone().map_err(reopen)?;
                self.archive_stamp = Some(stamp(&f).map_err(reopen)?);
                self.store = Some(f);
                None
            }
            None => {
                self.store_name = PathBuf::from("(temporary file of archive data)");
                Some(SpillWriter {
                    out: BufWriter::with_capacity(4 << 20, cx.temp_file()?),
                    len: 0,
                })
            }
        };
        for (layer, pending) in inputs.into_iter().enumerate() {
            if layer > 0 {
                sink.next_layer();
            }
            let mut reported = 0u64;
            let mut report = |raw: u64| {
                progress.advance(raw - reported);
                reported = raw;
            };
            match pending {
                Pending::Ready(name, mut reader) => {
                    self.name = name;
                    self.scan_one(sink, &mut reader, spill.as_mut(), &mut report)?;
                }
                Pending::Lazy(l) => self.scan_lazy(l, sink, spill.as_mut(), &mut report)?,
            }
        }
        if let Some(s) = spill {
            let file = s
                .out
                .into_inner()
                .map_err(|e| BuildError::io_error(&self.store_name, "write", e.into_error()))?;
            self.store = Some(file);
        }
        // Held while the image is written; the vector grew by doubling.
        self.files.shrink_to_fit();
        progress.end();
        Ok(())
    }

    fn open(&self, file: &FileRef<'_>) -> sealfs_builder::Result<Box<dyn SourceFile + '_>> {
        Ok(Box::new(OpenTarFile {
            source: self,
            stored: &self.files[file.data.0 as usize],
            size: file.size,
        }))
    }
}

/// Why a member could not become an entry.
enum EntryProblem {
    Bad(String),
    Frame(FrameError),
    Build(BuildError),
}

impl From<FrameError> for EntryProblem {
    fn from(e: FrameError) -> Self {
        EntryProblem::Frame(e)
    }
}

impl TarSource {
    /// Opens a lazy layer, reads it to its end and finishes it; an error of its `finish` (a
    /// digest that does not match) wins over what the tar reader made of its bytes.
    fn scan_lazy(
        &mut self,
        l: Layer,
        sink: &mut Sink,
        spill: Option<&mut SpillWriter>,
        progress: &mut dyn FnMut(u64),
    ) -> sealfs_builder::Result<()> {
        self.name = l.name.clone();
        let fail = |what: &str, e: std::io::Error| {
            BuildError::from_source(OciError::new(&l.name, format!("{what}: {e}")))
        };
        let opened = (l.open)()
            .and_then(input::Input::from_reader)
            .map_err(|e| fail("open", e));
        let mut reader = match opened {
            Ok(input) => {
                let (name, reader) = named(l.name.clone(), input);
                let reader = reader.padding_may_end();
                self.name = name;
                reader
            }
            Err(e) => return Err((l.finish)().err().map_or(e, |f| fail("read", f))),
        };
        let found = reader.input.compression();
        let result = match l.compression {
            Some(said) if said != found => Err(BuildError::from_source(OciError::new(
                &l.name,
                format!(
                    "its media type says {} but its bytes are {}",
                    said.description(),
                    found.description()
                ),
            ))),
            _ => self.scan_one(sink, &mut reader, spill, progress),
        };
        drop(reader);
        match ((l.finish)(), result) {
            (Err(e), _) => Err(BuildError::from_source(OciError::new(
                &l.name,
                e.to_string(),
            ))),
            (Ok(()), r) => r,
        }
    }

    /// Reads one input to its end, every member to the sink (through the hook); `progress`
    /// gets the bytes of input taken so far.
    fn scan_one(
        &mut self,
        sink: &mut Sink,
        reader: &mut Reader,
        mut spill: Option<&mut SpillWriter>,
        progress: &mut dyn FnMut(u64),
    ) -> sealfs_builder::Result<()> {
        let name = self.name.clone();
        let mut warned_absolute = false;
        loop {
            let m = match reader.next() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => return Err(BuildError::from_source(self.frame_error(e))),
            };
            let err = |what: String| {
                BuildError::from_source(TarError::new(&name, m.offset, Some(&m.name), what, None))
            };
            let (path, absolute) = normalize(&m.name).map_err(err)?;
            if absolute && !warned_absolute {
                warned_absolute = true;
                sink.warn(format!(
                    "{name}: leading '/' removed from member names (first: {})",
                    sealfs_text::escape(&m.name)
                ));
            }
            let entry = self
                .entry(&m, path, reader, spill.as_deref_mut(), sink)
                .map_err(|e| match e {
                    EntryProblem::Bad(what) => err(what),
                    EntryProblem::Frame(f) => err(match f.offset {
                        o if o == m.offset => f.what,
                        o => format!("{} (at byte {o})", f.what),
                    }),
                    EntryProblem::Build(b) => b,
                })?;
            let entry = match (entry, &mut self.hook) {
                (Some(e), Some(hook)) => hook(sink, e).map_err(|e| err(e.what))?,
                (e, _) => e,
            };
            if let Some(entry) = entry {
                sink.add(entry).map_err(|e| err(e.what))?;
            }
            progress(reader.input.raw_bytes());
        }
        Ok(())
    }

    /// The entry member `m` gives (its data stored or left in place), or `None` for members
    /// that are not files (a volume label).
    fn entry(
        &mut self,
        m: &Member,
        path: Vec<u8>,
        reader: &mut Reader,
        spill: Option<&mut SpillWriter>,
        sink: &mut Sink,
    ) -> Result<Option<Entry>, EntryProblem> {
        let bad = EntryProblem::Bad;
        let link_path = || normalize(&m.link).map(|(p, _)| p).map_err(bad);
        let dir_by_name = m.name.ends_with(b"/") && matches!(m.typeflag, b'0' | 0);
        let kind = match m.typeflag {
            _ if dir_by_name => EntryKind::Dir,
            b'5' | b'D' => EntryKind::Dir,
            b'1' => EntryKind::HardLink(link_path()?),
            b'2' => EntryKind::Symlink(m.link.clone()),
            b'3' => EntryKind::CharDevice {
                major: m.devmajor,
                minor: m.devminor,
            },
            b'4' => EntryKind::BlockDevice {
                major: m.devmajor,
                minor: m.devminor,
            },
            b'6' => EntryKind::Fifo,
            b'V' => return Ok(None),
            b'M' | b'N' => {
                return Err(bad(format!(
                    "GNU {} member (not supported)",
                    if m.typeflag == b'M' {
                        "multi-volume continuation"
                    } else {
                        "old long name"
                    }
                )))
            }
            t => {
                if !matches!(t, b'0' | 0 | b'7' | b'S') {
                    sink.warn(format!(
                        "{}: {}: unknown type '{}', taken as a regular file (as tar -x does)",
                        self.name,
                        sealfs_text::escape(&m.name),
                        t.escape_ascii()
                    ));
                }
                let data = self.store_data(m, reader, spill)?;
                let (size, data_ranges) = match &m.sparse {
                    Some(s) => (s.real_size, crate::holes::data_ranges(s.real_size, &s.map)),
                    None => (m.size, None),
                };
                EntryKind::File {
                    size,
                    data,
                    data_ranges,
                }
            }
        };
        let uid =
            u32::try_from(m.uid).map_err(|_| bad(format!("uid {} does not fit 32 bits", m.uid)))?;
        let gid =
            u32::try_from(m.gid).map_err(|_| bad(format!("gid {} does not fit 32 bits", m.gid)))?;
        let mut mode = m.mode;
        if matches!(kind, EntryKind::Symlink(_)) {
            mode = 0o777; // what the kernel gives every symlink
        }
        let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let (mut access_xattr, mut default_xattr) = (None, None);
        for (name, value) in &m.xattrs {
            match name.as_slice() {
                b"system.posix_acl_access" => access_xattr = Some(value),
                b"system.posix_acl_default" => default_xattr = Some(value),
                _ => xattrs.push((name.clone(), value.clone())),
            }
        }
        // ACLs come from SCHILY.acl.* (as GNU tar -x takes them; it ignores the xattr form);
        // the xattr form stands in only for a text naming users without their numbers.
        let acl = |text: Option<&[u8]>, binary: Option<&Vec<u8>>| {
            let text = text?;
            Some(Acl::from_text(text).or_else(|e| match binary {
                Some(b) => Acl::from_xattr(b),
                None => Err(e),
            }))
        };
        let (access, default) = if self.acl_xattrs {
            // As umoci sets them: the xattr records, whatever text there is.
            let binary = |b: Option<&Vec<u8>>| b.map(|b| Acl::from_xattr(b));
            (binary(access_xattr), binary(default_xattr))
        } else {
            (
                acl(m.acl_access.as_deref(), access_xattr),
                acl(m.acl_default.as_deref(), default_xattr),
            )
        };
        let ignored = !self.acl_xattrs
            && ((access_xattr.is_some() && m.acl_access.is_none())
                || (default_xattr.is_some() && m.acl_default.is_none()));
        if ignored && !self.warned_acl_xattrs {
            self.warned_acl_xattrs = true;
            sink.warn(format!(
                "{}: system.posix_acl_* xattrs without SCHILY.acl.* records left out, as \
                 tar -x leaves them (first: {})",
                self.name,
                sealfs_text::escape(&m.name)
            ));
        }
        if let Some(acl) = access {
            let acl = acl.map_err(|e| bad(format!("access ACL: {e}")))?;
            mode = acl.apply_to_mode(mode);
            if !acl.is_mode() {
                xattrs.push((b"system.posix_acl_access".to_vec(), acl.to_xattr()));
            }
        }
        if let Some(acl) = default {
            let acl = acl.map_err(|e| bad(format!("default ACL: {e}")))?;
            if matches!(kind, EntryKind::Dir) {
                xattrs.push((b"system.posix_acl_default".to_vec(), acl.to_xattr()));
            } else {
                sink.warn(format!(
                    "{}: {}: default ACL on a non-directory left out",
                    self.name,
                    sealfs_text::escape(&m.name)
                ));
            }
        }
        Ok(Some(Entry {
            path,
            kind,
            mode,
            uid,
            gid,
            mtime: m.mtime.0,
            mtime_nsec: m.mtime.1,
            xattrs,
        }))
    }

    /// Stores (or leaves in place) the data of regular file `m`; its handle.
    fn store_data(
        &mut self,
        m: &Member,
        reader: &mut Reader,
        spill: Option<&mut SpillWriter>,
    ) -> Result<DataId, EntryProblem> {
        let at = match spill {
            None => {
                let at = reader.input.pos();
                reader.skip_data()?;
                at
            }
            Some(s) => {
                let at = s.len;
                let mut buf = vec![0u8; (m.size.min(1 << 20)) as usize];
                loop {
                    let n = reader.read_data(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    s.out.write_all(&buf[..n]).map_err(|e| {
                        EntryProblem::Build(BuildError::io_error(&self.store_name, "write", e))
                    })?;
                    s.len += n as u64;
                }
                at
            }
        };
        self.files.push(Stored {
            at,
            map: m.sparse.as_ref().map(|s| s.map.clone().into_boxed_slice()),
        });
        Ok(DataId(self.files.len() as u64 - 1))
    }
}

/// A member's name made relative: leading `/` removed (reported), `.` components and empty
/// ones dropped, `..` refused.
fn normalize(name: &[u8]) -> Result<(Vec<u8>, bool), String> {
    let absolute = name.starts_with(b"/");
    let mut out = Vec::with_capacity(name.len());
    for part in name.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                return Err(format!(
                    "the name {} has a '..' component (refused: it would leave the tree)",
                    sealfs_text::escape(name)
                ))
            }
            p => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(p);
            }
        }
    }
    Ok((out, absolute))
}

/// One regular file's data, read back from the store.
struct OpenTarFile<'a> {
    source: &'a TarSource,
    stored: &'a Stored,
    size: u64,
}

impl OpenTarFile<'_> {
    fn pread(&self, buf: &mut [u8], at: u64) -> sealfs_builder::Result<()> {
        let store = self
            .source
            .store
            .as_ref()
            .expect("data is read after the scan");
        store
            .read_exact_at(buf, at)
            .map_err(|e| BuildError::io_error(&self.source.store_name, "read archive data", e))
    }
}

impl SourceFile for OpenTarFile<'_> {
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> sealfs_builder::Result<()> {
        let end = offset + buf.len() as u64;
        assert!(end <= self.size, "reads stay inside the file");
        let Some(map) = &self.stored.map else {
            return self.pread(buf, self.stored.at + offset);
        };
        buf.fill(0);
        let mut stored_at = self.stored.at;
        for &(off, len) in map.iter() {
            let (s, e) = (off.max(offset), (off + len).min(end));
            if s < e {
                let into = &mut buf[(s - offset) as usize..(e - offset) as usize];
                self.pread(into, stored_at + (s - off))?;
            }
            stored_at += len;
            if off >= end {
                break;
            }
        }
        Ok(())
    }

    /// Data read in place is the archive's as scanned only if the archive did not change.
    fn finish(self: Box<Self>) -> sealfs_builder::Result<()> {
        let Some(then) = self.source.archive_stamp else {
            return Ok(());
        };
        let store = self
            .source
            .store
            .as_ref()
            .expect("data is read after the scan");
        let now =
            stamp(store).map_err(|e| BuildError::io_error(&self.source.store_name, "stat", e))?;
        if now != then {
            return Err(BuildError::Changed {
                path: self.source.store_name.clone(),
                what: "the archive changed while its data was read".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_made_relative() {
        assert_eq!(
            normalize(b"./a//b/./c/").unwrap(),
            (b"a/b/c".to_vec(), false)
        );
        assert_eq!(normalize(b"/etc/x").unwrap(), (b"etc/x".to_vec(), true));
        assert_eq!(normalize(b"./").unwrap(), (Vec::new(), false));
        assert!(normalize(b"a/../b").is_err());
        assert!(normalize(b"../b").is_err());
    }
}
