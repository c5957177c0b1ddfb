//! Framing of a tar stream: 512-byte headers and what extends them (GNU long names `L`/`K`, PAX
//! `x`/`g` records, GNU sparse extension blocks and PAX 1.0 sparse maps), folded into one
//! [`Member`] per archived file, in one pass.
//!
//! Headers are read with the `tar` crate's [`tar::Header`] (field layouts, ustar prefixes and
//! names, link names, type flags, the stored checksum, the GNU sparse header structs); the rest
//! is ours: the crate's own iterator expands GNU sparse files into their zeros (a 10 GB hole
//! would be read as 10 GB), does not know the PAX sparse formats, cuts PAX records at newlines
//! (binary xattr values hold them), reads no PAX times, xattrs or ACLs and names no byte offset
//! in its errors; and its number accessors refuse empty fields (which GNU tar and bsdtar read as
//! 0) and drop the sign of GNU base-256 times, so numbers are read here too.

use super::input::Input;
use super::pax;
use tar::{GnuExtSparseHeader, Header};

/// Size of a tar block.
pub(crate) const BLOCK: u64 = 512;

/// A GNU sparse file: its logical size and the `(offset, length)` of each stretch of data, in
/// the order they are stored after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sparse {
    pub real_size: u64,
    pub map: Vec<(u64, u64)>,
}

/// One archived file, with every extension folded in.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// Offset in the tar stream of its first header (extension headers included).
    pub offset: u64,
    /// Its name as archived (not yet made relative).
    pub name: Vec<u8>,
    /// The link target of a symlink or hard link.
    pub link: Vec<u8>,
    /// The type flag (`0`, `5`, `2`, ...).
    pub typeflag: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: (i64, u32),
    pub devmajor: u32,
    pub devminor: u32,
    /// Bytes of data stored after the header(s) (for sparse files: the data stretches only).
    pub size: u64,
    pub sparse: Option<Sparse>,
    /// Extended attributes (`SCHILY.xattr.*`, else `LIBARCHIVE.xattr.*`), in record order.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// `SCHILY.acl.access` / `SCHILY.acl.default` (text).
    pub acl_access: Option<Vec<u8>>,
    pub acl_default: Option<Vec<u8>>,
}

/// What is wrong, and at which byte of the tar stream.
#[derive(Debug)]
pub(crate) struct FrameError {
    pub offset: u64,
    pub name: Option<Vec<u8>>,
    pub what: String,
    pub io: Option<std::io::Error>,
}

impl FrameError {
    fn at(offset: u64, what: impl Into<String>) -> Self {
        FrameError {
            offset,
            name: None,
            what: what.into(),
            io: None,
        }
    }
}

/// Reads members one after the other.
pub(crate) struct Reader {
    pub input: Input,
    /// `g` records: defaults for every later member.
    global: Vec<(Vec<u8>, Vec<u8>)>,
    /// Data of the current member not yet read, and the padding after it.
    left: u64,
    pad: u64,
    ended: bool,
    /// Whether a stream may end inside the padding after a member's complete data (an OCI
    /// layer, [`Reader::padding_may_end`]).
    short_padding_ok: bool,
}

/// Longest extension (long name, PAX records, sparse map) read into memory.
const MAX_EXTENSION: u64 = 16 << 20;

impl Reader {
    pub fn new(input: Input) -> Self {
        Reader {
            input,
            global: Vec::new(),
            left: 0,
            pad: 0,
            ended: false,
            short_padding_ok: false,
        }
    }

    /// Lets the stream end inside the padding after a member's complete data, as Go's
    /// archive/tar reads it (the reader of containerd and umoci, and `umoci insert` 0.4.7
    /// writes such layers). Off for tar archives: GNU tar and bsdtar refuse them
    /// ("Unexpected EOF in archive"), and a cut there may have dropped later members.
    pub fn padding_may_end(mut self) -> Self {
        self.short_padding_ok = true;
        self
    }

    fn io(&self, what: &str, e: std::io::Error) -> FrameError {
        FrameError {
            offset: self.input.pos(),
            name: None,
            what: format!("{what}: {e}"),
            io: Some(e),
        }
    }

    /// Reads one 512-byte block; `Ok(false)` at the clean end of the stream.
    fn block(&mut self, buf: &mut [u8; 512]) -> Result<bool, FrameError> {
        let at = self.input.pos();
        let n = self
            .input
            .read(buf)
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        match n {
            0 => Ok(false),
            512 => Ok(true),
            _ => Err(FrameError::at(
                at,
                format!("truncated: the stream ends {n} bytes into a header"),
            )),
        }
    }

    /// Reads the stream's first block, which must be a tar header (or the end-of-archive
    /// block): anything else is "not a tar archive", as GNU tar says ("This does not look like
    /// a tar archive"), rather than what its bytes would make of a header's fields. An empty
    /// input is refused too (GNU tar: exit 2; a failed download piped in is no archive), but
    /// not an empty decompressed stream (GNU tar and bsdtar take one for an empty archive) nor
    /// an empty OCI layer (Go's archive/tar, umoci's reader, takes it).
    fn first_block(&mut self, buf: &mut [u8; 512]) -> Result<(), FrameError> {
        let n = self
            .input
            .read(buf)
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        let compressed = self.input.compression() != super::Compression::None;
        let not_tar = |why: String| {
            FrameError::at(
                0,
                format!(
                    "not a tar archive{}: {why}",
                    if compressed {
                        ""
                    } else {
                        " (nor one compressed by gzip, zstd, xz, bzip2 or lz4)"
                    }
                ),
            )
        };
        let decompressed = if compressed { " (decompressed)" } else { "" };
        if n == 0 {
            if compressed || self.short_padding_ok {
                self.ended = true;
                return Ok(());
            }
            return Err(not_tar("the input is empty".into()));
        }
        if n < 512 {
            return Err(not_tar(format!(
                "{n} bytes{decompressed}, less than one 512-byte header"
            )));
        }
        // The checksum's own complaint is not shown: it would quote the input's bytes.
        if !buf.iter().all(|&b| b == 0) && check_sum(Header::from_byte_slice(buf)).is_err() {
            return Err(not_tar(format!(
                "its first 512 bytes{decompressed} are not a tar header (no valid checksum)"
            )));
        }
        Ok(())
    }

    fn kind(&self) -> &'static str {
        self.input.compression().name()
    }

    /// Reads `len` bytes of data and the padding after them (an extension's body).
    fn body(&mut self, len: u64, what: &str) -> Result<Vec<u8>, FrameError> {
        let at = self.input.pos();
        if len > MAX_EXTENSION {
            return Err(FrameError::at(
                at,
                format!("{what} of {len} bytes (more than {MAX_EXTENSION})"),
            ));
        }
        let padded = len.div_ceil(BLOCK) * BLOCK;
        let mut buf = vec![0u8; padded as usize];
        let n = self
            .input
            .read(&mut buf)
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        if (n as u64) < padded {
            return Err(FrameError::at(
                at,
                format!("truncated: the stream ends inside a {what}"),
            ));
        }
        buf.truncate(len as usize);
        Ok(buf)
    }

    /// Skips what is left of the current member's data, and the padding after it (which the
    /// stream may end inside only if [`Reader::padding_may_end`] said so).
    fn skip_rest(&mut self) -> Result<(), FrameError> {
        let at = self.input.pos();
        let (left, pad) = (self.left, self.pad);
        (self.left, self.pad) = (0, 0);
        let full = self
            .input
            .skip(left)
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        if !full {
            return Err(FrameError::at(
                at,
                "truncated: the stream ends inside a file's data",
            ));
        }
        let at = self.input.pos();
        let full = self
            .input
            .skip(pad)
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        if !full && !self.short_padding_ok {
            return Err(FrameError::at(
                at,
                "truncated: the stream ends inside the padding after a file's data",
            ));
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes of the current member's data; an error if the stream ends
    /// before the member's data does.
    pub fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, FrameError> {
        let want = (buf.len() as u64).min(self.left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let at = self.input.pos();
        let n = self
            .input
            .read(&mut buf[..want])
            .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
        if n < want {
            return Err(FrameError::at(
                at + n as u64,
                "truncated: the stream ends inside a file's data",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }

    /// Leaves the current member's data where it is (in-place reading) and moves past it.
    pub fn skip_data(&mut self) -> Result<(), FrameError> {
        self.skip_rest()
    }

    /// The next member, `None` after the end-of-archive block (or at the clean end of the
    /// stream). Whatever the previous member's data the caller left unread is skipped.
    pub fn next(&mut self) -> Result<Option<Member>, FrameError> {
        if self.ended {
            return Ok(None);
        }
        self.skip_rest()?;
        let first = self.input.pos();
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut local: Option<Vec<u8>> = None;
        let mut buf = [0u8; 512];
        loop {
            let at = self.input.pos();
            if at == 0 {
                self.first_block(&mut buf)?;
                if self.ended {
                    return Ok(None);
                }
            } else if !self.block(&mut buf)? {
                if at != first {
                    return Err(FrameError::at(
                        at,
                        "truncated: extension headers with no member after them",
                    ));
                }
                self.ended = true;
                return Ok(None);
            }
            if buf.iter().all(|&b| b == 0) {
                if at != first {
                    return Err(FrameError::at(
                        at,
                        "end-of-archive block after extension headers",
                    ));
                }
                self.ended = true;
                self.input
                    .drain()
                    .map_err(|e| self.io(&format!("reading the {} stream", self.kind()), e))?;
                return Ok(None);
            }
            let header = Header::from_byte_slice(&buf);
            check_sum(header).map_err(|what| FrameError {
                name: Some(cstr(&header.path_bytes()).to_vec()),
                ..FrameError::at(at, what)
            })?;
            let size =
                unsigned_field("size", &header.as_old().size).map_err(|e| FrameError::at(at, e))?;
            match header.entry_type().as_byte() {
                b'L' => {
                    if long_name.is_some() {
                        return Err(FrameError::at(at, "two GNU long names for one member"));
                    }
                    long_name = Some(cstr(&self.body(size, "GNU long name")?).to_vec());
                }
                b'K' => {
                    if long_link.is_some() {
                        return Err(FrameError::at(at, "two GNU long link names for one member"));
                    }
                    long_link = Some(cstr(&self.body(size, "GNU long link name")?).to_vec());
                }
                b'x' | b'X' => {
                    if local.is_some() {
                        return Err(FrameError::at(at, "two PAX headers for one member"));
                    }
                    let body = self.body(size, "PAX header")?;
                    pax::records(&body).map_err(|e| FrameError::at(at, e))?;
                    local = Some(body);
                }
                b'g' => {
                    let body = self.body(size, "PAX global header")?;
                    for (k, v) in pax::records(&body).map_err(|e| FrameError::at(at, e))? {
                        self.global.retain(|(gk, _)| gk != k);
                        if !v.is_empty() {
                            self.global.push((k.to_vec(), v.to_vec()));
                        }
                    }
                }
                _ => {
                    let m = self
                        .member(first, at, header, size, long_name, long_link, local)
                        .map_err(|mut e| {
                            if e.name.is_none() {
                                e.name = Some(cstr(&header.path_bytes()).to_vec());
                            }
                            e
                        })?;
                    return Ok(Some(m));
                }
            }
        }
    }

    /// Folds a header and its extensions into a member, reading sparse extension blocks and a
    /// PAX 1.0 sparse map; leaves the data to be read.
    #[allow(clippy::too_many_arguments, reason = "the parts of one member")]
    fn member(
        &mut self,
        first: u64,
        at: u64,
        header: &Header,
        mut size: u64,
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        local: Option<Vec<u8>>,
    ) -> Result<Member, FrameError> {
        let bad = |what: String| FrameError::at(at, what);
        let old = header.as_old();
        let num = |name: &str, field: &[u8]| unsigned_field(name, field).map_err(&bad);
        let typeflag = header.entry_type().as_byte();
        let mut m = Member {
            offset: first,
            name: long_name.unwrap_or_else(|| header.path_bytes().into_owned()),
            link: long_link.unwrap_or_else(|| {
                header
                    .link_name_bytes()
                    .map_or(Vec::new(), |l| l.into_owned())
            }),
            typeflag,
            mode: num("mode", &old.mode)? as u32 & 0o7777,
            uid: num("uid", &old.uid)?,
            gid: num("gid", &old.gid)?,
            mtime: (signed_field("mtime", &old.mtime).map_err(bad)?, 0),
            devmajor: 0,
            devminor: 0,
            size,
            sparse: None,
            xattrs: Vec::new(),
            acl_access: None,
            acl_default: None,
        };
        if matches!(typeflag, b'3' | b'4') {
            let (major, minor) = match (header.as_ustar(), header.as_gnu()) {
                (Some(u), _) => (u.dev_major, u.dev_minor),
                (None, Some(g)) => (g.dev_major, g.dev_minor),
                (None, None) => ([0; 8], [0; 8]),
            };
            let dev = |name: &str, field: &[u8]| {
                u32::try_from(num(name, field)?)
                    .map_err(|_| bad(format!("{name} does not fit 32 bits")))
            };
            m.devmajor = dev("devmajor", &major)?;
            m.devminor = dev("devminor", &minor)?;
        }
        // PAX records: the global ones, then this member's (which win).
        let local_records = match &local {
            Some(body) => pax::records(body).map_err(|e| FrameError::at(at, e))?,
            None => Vec::new(),
        };
        let global = std::mem::take(&mut self.global);
        let all = global
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .chain(local_records.iter().copied());
        let mut sparse_name = None;
        let mut sparse_size = None;
        let mut sparse_major_minor = (None, None);
        let mut map0: Vec<u64> = Vec::new();
        let mut map1: Option<Vec<u64>> = None;
        let mut libarchive_xattrs = Vec::new();
        let mut result = Ok(());
        for (k, v) in all {
            let r: Result<(), String> = (|| {
                match k {
                    b"path" => m.name = v.to_vec(),
                    b"linkpath" => m.link = v.to_vec(),
                    b"size" => {
                        size = pax::unsigned(k, v)?;
                        m.size = size;
                    }
                    b"uid" => m.uid = pax::unsigned(k, v)?,
                    b"gid" => m.gid = pax::unsigned(k, v)?,
                    b"mtime" => m.mtime = pax::time(k, v)?,
                    b"SCHILY.devmajor" => m.devmajor = u32_of(k, pax::unsigned(k, v)?)?,
                    b"SCHILY.devminor" => m.devminor = u32_of(k, pax::unsigned(k, v)?)?,
                    b"SCHILY.acl.access" => m.acl_access = Some(v.to_vec()),
                    b"SCHILY.acl.default" => m.acl_default = Some(v.to_vec()),
                    b"GNU.sparse.name" => sparse_name = Some(v.to_vec()),
                    b"GNU.sparse.size" | b"GNU.sparse.realsize" => {
                        sparse_size = Some(pax::unsigned(k, v)?)
                    }
                    b"GNU.sparse.major" => sparse_major_minor.0 = Some(pax::unsigned(k, v)?),
                    b"GNU.sparse.minor" => sparse_major_minor.1 = Some(pax::unsigned(k, v)?),
                    b"GNU.sparse.offset" | b"GNU.sparse.numbytes" => {
                        // 0.0: pairs of repeated records, offset first.
                        let expect_offset = map0.len().is_multiple_of(2);
                        if expect_offset != (k == b"GNU.sparse.offset") {
                            return Err("GNU.sparse.offset and numbytes out of order".into());
                        }
                        map0.push(pax::unsigned(k, v)?);
                    }
                    b"GNU.sparse.map" => {
                        let nums = v
                            .split(|&b| b == b',')
                            .filter(|s| !s.is_empty())
                            .map(|s| pax::unsigned(k, s))
                            .collect::<Result<Vec<u64>, String>>()?;
                        map1 = Some(nums);
                    }
                    _ => {
                        if let Some(name) = k.strip_prefix(b"SCHILY.xattr.") {
                            m.xattrs.retain(|(n, _)| n != name);
                            m.xattrs.push((name.to_vec(), v.to_vec()));
                        } else if let Some(name) = k.strip_prefix(b"LIBARCHIVE.xattr.") {
                            use base64::engine::{general_purpose, DecodePaddingMode};
                            use base64::Engine;
                            let name = pax::url_decode(name)?;
                            let engine = general_purpose::GeneralPurpose::new(
                                &base64::alphabet::STANDARD,
                                general_purpose::GeneralPurposeConfig::new()
                                    .with_decode_padding_mode(DecodePaddingMode::Indifferent),
                            );
                            let value = engine.decode(v).map_err(|e| {
                                format!(
                                    "LIBARCHIVE.xattr.{}: bad base64: {e}",
                                    sealfs_text::escape(&name)
                                )
                            })?;
                            libarchive_xattrs.push((name, value));
                        }
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        self.global = global;
        result.map_err(bad)?;
        // LIBARCHIVE.xattr.* where no SCHILY.xattr.* names the same attribute (GNU tar reads only
        // the latter).
        for (name, value) in libarchive_xattrs {
            if !m.xattrs.iter().any(|(n, _)| *n == name) {
                m.xattrs.retain(|(n, _)| *n != name);
                m.xattrs.push((name, value));
            }
        }
        // Set up reading the data, then the sparse maps that come before it.
        self.left = size;
        self.pad = size.div_ceil(BLOCK) * BLOCK - size;
        if typeflag == b'S' {
            let gnu = header
                .as_gnu()
                .ok_or_else(|| bad("GNU sparse member without a GNU header".into()))?;
            let mut map = Vec::new();
            for s in gnu.sparse.iter().filter(|s| !s.is_empty()) {
                map.push(sparse_pair(s).map_err(&bad)?);
            }
            let mut extended = gnu.is_extended();
            // The extension blocks come before the data, after the header.
            let save = (self.left, self.pad);
            (self.left, self.pad) = (0, 0);
            while extended {
                let mut block = [0u8; 512];
                let bat = self.input.pos();
                if !self.block(&mut block)? {
                    return Err(FrameError::at(
                        bat,
                        "truncated: the stream ends before a sparse extension block",
                    ));
                }
                let mut ext = GnuExtSparseHeader::new();
                ext.as_mut_bytes().copy_from_slice(&block);
                for s in ext.sparse.iter().filter(|s| !s.is_empty()) {
                    map.push(sparse_pair(s).map_err(|e| FrameError::at(bat, e))?);
                }
                extended = ext.is_extended();
            }
            (self.left, self.pad) = save;
            let real_size = num("realsize", &gnu.realsize)?;
            m.sparse = Some(Sparse { real_size, map });
        } else if let Some(real_size) = sparse_size {
            match sparse_major_minor {
                (Some(1), Some(0)) => {
                    // 1.0: the map is at the start of the data, in decimal lines, padded to a
                    // block.
                    let (map, used) = self.sparse_map_1_0(at)?;
                    m.size = size - used;
                    m.sparse = Some(Sparse { real_size, map });
                }
                (None, None) | (Some(0), _) => {
                    let nums = match map1 {
                        Some(n) => n,
                        None => map0,
                    };
                    if nums.len() % 2 != 0 {
                        return Err(bad("GNU sparse map with an odd count of numbers".into()));
                    }
                    m.sparse = Some(Sparse {
                        real_size,
                        map: nums.chunks(2).map(|p| (p[0], p[1])).collect(),
                    });
                }
                (major, minor) => {
                    return Err(bad(format!(
                        "GNU sparse format {}.{} (0.0, 0.1 and 1.0 are read)",
                        major.unwrap_or(0),
                        minor.unwrap_or(0)
                    )))
                }
            }
            if let Some(name) = sparse_name {
                m.name = name;
            }
        }
        if let Some(s) = &m.sparse {
            check_sparse(s, m.size).map_err(bad)?;
        }
        Ok(m)
    }

    /// Reads a PAX 1.0 sparse map from the start of the member's data; the map and the bytes
    /// it took (whole blocks).
    fn sparse_map_1_0(&mut self, at: u64) -> Result<(Vec<(u64, u64)>, u64), FrameError> {
        let mut text = Vec::new();
        let mut used = 0u64;
        let mut numbers = Vec::new();
        let mut want: Option<u64> = None;
        loop {
            if want.is_some_and(|w| numbers.len() as u64 == 1 + 2 * w) {
                break;
            }
            if used + BLOCK > self.left + used || used > MAX_EXTENSION {
                return Err(FrameError::at(
                    at,
                    "GNU sparse 1.0 map longer than the data",
                ));
            }
            let mut block = [0u8; 512];
            let n = self.read_data(&mut block)?;
            debug_assert_eq!(n, 512);
            used += BLOCK;
            text.extend_from_slice(&block);
            // Take the complete lines so far.
            while let Some(nl) = text.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = text.drain(..=nl).collect();
                let v = pax::unsigned(b"GNU.sparse map", &line[..line.len() - 1])
                    .map_err(|e| FrameError::at(at, e))?;
                numbers.push(v);
                if want.is_none() {
                    want = Some(v);
                }
                if want.is_some_and(|w| numbers.len() as u64 == 1 + 2 * w) {
                    break;
                }
            }
        }
        let map = numbers[1..].chunks(2).map(|p| (p[0], p[1])).collect();
        Ok((map, used))
    }
}

fn sparse_pair(s: &tar::GnuSparseHeader) -> Result<(u64, u64), String> {
    Ok((
        unsigned_field("sparse offset", &s.offset)?,
        unsigned_field("sparse length", &s.numbytes)?,
    ))
}

/// Checks a sparse map against the file's size and the data stored.
fn check_sparse(s: &Sparse, stored: u64) -> Result<(), String> {
    let mut end = 0u64;
    let mut total = 0u64;
    for &(off, len) in &s.map {
        if off < end {
            return Err(format!(
                "sparse map out of order or overlapping at offset {off}"
            ));
        }
        end = off
            .checked_add(len)
            .filter(|&e| e <= s.real_size)
            .ok_or_else(|| {
                format!(
                    "sparse map stretch {off}+{len} past the size {}",
                    s.real_size
                )
            })?;
        total += len;
    }
    if total != stored {
        return Err(format!(
            "sparse map holds {total} bytes of data but {stored} are stored"
        ));
    }
    Ok(())
}

fn u32_of(key: &[u8], v: u64) -> Result<u32, String> {
    u32::try_from(v)
        .map_err(|_| format!("PAX {}={v} does not fit 32 bits", sealfs_text::escape(key)))
}

/// The bytes before the first NUL.
fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    }
}

/// Checks a header's checksum: the sum of its bytes with the checksum field as spaces, as
/// unsigned bytes or (old writers) signed ones.
fn check_sum(header: &Header) -> Result<(), String> {
    let bytes = header.as_bytes();
    let stored = header
        .cksum()
        .map_err(|e| format!("bad header checksum field: {e}"))?;
    let mut unsigned = 8 * 32u32;
    let mut signed = 8 * 32i64;
    for (i, &b) in bytes.iter().enumerate() {
        if (148..156).contains(&i) {
            continue;
        }
        unsigned += b as u32;
        signed += b as i8 as i64;
    }
    if stored == unsigned || stored as i64 == signed {
        Ok(())
    } else {
        Err(format!(
            "header checksum mismatch (stored {stored}, computed {unsigned})"
        ))
    }
}

/// A signed numeric field: octal (NULs and spaces around it; an empty field is 0, as GNU tar and
/// bsdtar read it), or GNU base-256 (two's complement, first byte's top bit set; `0xff` first
/// for negative numbers).
fn signed_field(name: &str, field: &[u8]) -> Result<i64, String> {
    match field.first() {
        Some(&b) if b & 0x80 != 0 => {
            let negative = b & 0x40 != 0;
            let mut v: i128 = if negative { -1 } else { 0 };
            for (i, &c) in field.iter().enumerate() {
                let c = if i == 0 {
                    (c & 0x7f) | if negative { 0x80 } else { 0 }
                } else {
                    c
                };
                v = (v << 8) | c as i128;
                if v > i64::MAX as i128 || v < i64::MIN as i128 {
                    return Err(format!("base-256 {name} field out of range"));
                }
            }
            Ok(v as i64)
        }
        _ => {
            let text = cstr(field);
            let s = std::str::from_utf8(text)
                .map_err(|_| format!("{name} field is not text"))?
                .trim_matches(|c: char| c == ' ' || c == '\0');
            if s.is_empty() {
                return Ok(0);
            }
            i64::from_str_radix(s, 8).map_err(|_| format!("{name} field {s:?} is not octal"))
        }
    }
}

/// An unsigned numeric field (see [`signed_field`]).
fn unsigned_field(name: &str, field: &[u8]) -> Result<u64, String> {
    let v = signed_field(name, field)?;
    u64::try_from(v).map_err(|_| format!("{name} field is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_fields() {
        assert_eq!(signed_field("t", b"00000000012\0").unwrap(), 10);
        assert_eq!(signed_field("t", b"\0\0\0\0").unwrap(), 0, "empty is 0");
        assert_eq!(signed_field("t", b"  755 \0").unwrap(), 0o755);
        let mut neg = [0xffu8; 12];
        neg[11] = 0xfe;
        assert_eq!(signed_field("t", &neg).unwrap(), -2);
        let mut big = [0u8; 8];
        big[0] = 0x80;
        big[4..].copy_from_slice(&3_000_000_000u32.to_be_bytes());
        assert_eq!(unsigned_field("uid", &big).unwrap(), 3_000_000_000);
        assert!(unsigned_field("uid", &neg).is_err());
        assert!(signed_field("t", b"0009\0").is_err());
    }
}
