//! Opening an image (`sealfs_open`, `sealfs_close`) and the trust the open established.

use crate::error::{bytes_arg, copy_str, guard, open_failure, path_arg, sealfs_error, Failure};
use sealfs_reader::{Authority, Checker, FillMode, OpenOptions, OpenedImage, Trust, VerifyMode};
use sealfs_remote::{CacheSettings, RemoteObject, RemoteOptions, RemoteTrust};
use std::ffi::{c_char, c_int, c_uint};
use std::sync::Arc;

/// `sealfs_open_options::verify`: every block is checked against the seal before it is used (the
/// default).
pub const SEALFS_VERIFY_FULL: c_int = 0;
/// `sealfs_open_options::verify`: nothing is checked; the image is trusted as it is.
pub const SEALFS_VERIFY_NONE: c_int = 1;
/// `sealfs_open_options::flags`: read a URL without `digest` or `keys`, checked only against the
/// image's own seal (which whoever can change the object can change too).
pub const SEALFS_OPEN_SELF_CONSISTENT: c_uint = 1;
/// `sealfs_open_options::flags`: read a URL without the persistent cache of verified blocks.
pub const SEALFS_OPEN_NO_CACHE: c_uint = 2;
/// `sealfs_open_options::flags`: a URL read through the cache has the rest of the image fetched
/// into the cache in the background once reads scatter (16 reads within 10 s that each had to
/// fetch and continued no sequential stream), if the image takes at most three quarters of the
/// cache's bound: `sealfs mount --fill=auto`. Without it or `SEALFS_OPEN_FILL` (the default),
/// each block is fetched when first read, and sequential reads fetch ahead of themselves only.
pub const SEALFS_OPEN_FILL_AUTO: c_uint = 4;
/// `sealfs_open_options::flags`: a URL read through the cache has the whole image fetched into
/// the cache in the background from the open on (`sealfs mount --fill`): every byte of it is
/// transferred, whatever is read.
pub const SEALFS_OPEN_FILL: c_uint = 8;

/// How `sealfs_open` opens an image. All zeros (`{0}`, or a designated initializer naming only
/// what it sets) means the defaults: every block verified against the image's own seal.
#[repr(C)]
pub struct sealfs_open_options {
    /// The digest the image must have (`"sha256:<64 hex>"`), or NULL. Another image is refused
    /// (`EKEYREJECTED`).
    pub digest: *const c_char,
    /// Public keys (PEM files, as `openssl pkey -pubout` writes them): a NULL-terminated array,
    /// or NULL. The image must carry a signature by one of them (else `EKEYREJECTED`).
    pub keys: *const *const c_char,
    /// A directory whose `*.pub` files are keys as `keys` are, or NULL.
    pub keyring: *const c_char,
    /// The seal is in this sidecar file (or URL), or NULL.
    pub sidecar: *const c_char,
    /// Detached signatures (a file or URL), or NULL: `IMAGE.sig` beside a local image is read
    /// when it exists, `URL.sig` for a URL opened with keys.
    pub signatures: *const c_char,
    /// `SEALFS_VERIFY_FULL` (0) or `SEALFS_VERIFY_NONE`.
    pub verify: c_int,
    /// `SEALFS_OPEN_SELF_CONSISTENT`, `SEALFS_OPEN_NO_CACHE`, and one of `SEALFS_OPEN_FILL_AUTO`
    /// and `SEALFS_OPEN_FILL`, or'ed.
    pub flags: c_uint,
    /// Where a URL's verified blocks are kept across processes, or NULL for the default
    /// (`$SEALFS_CACHE_DIR`, `$XDG_CACHE_HOME/sealfs` or `~/.cache/sealfs`).
    pub cache_dir: *const c_char,
    /// The most that cache may hold, in bytes; 0 for the default (2 GiB).
    pub cache_size: u64,
    /// A certificate authority (PEM) to trust for `https://` besides the system's, or NULL.
    pub ca_cert: *const c_char,
    /// With `keys`: images signed with a lower version (`sealfs sign --version`) are refused, as
    /// rollbacks (`EKEYREJECTED`); NULL for no floor.
    pub min_version: *const c_char,
}

/// An open image: a handle any number of threads may use at once. Close it with
/// `sealfs_close` once no other call uses it.
pub struct sealfs_image {
    pub(crate) inner: Arc<Opened>,
}

/// What an image handle holds; files opened from it hold it too.
pub(crate) struct Opened {
    /// The reader and its trust.
    pub(crate) opened: OpenedImage,
    /// The remote object, for a URL (kept with the image).
    _remote: Option<Arc<RemoteObject>>,
    /// How it was opened (`sealfs_mount` opens it again so).
    pub(crate) spec: Spec,
}

/// The location and the library's options of an open.
pub(crate) struct Spec {
    pub(crate) location: std::path::PathBuf,
    pub(crate) options: OpenOptions,
    pub(crate) trust: RemoteTrust,
    pub(crate) remote: RemoteOptions,
    pub(crate) cache: Option<CacheSettings>,
}

impl Spec {
    /// Opens the image with `options` instead of the spec's own.
    pub(crate) fn open_with(
        &self,
        options: &OpenOptions,
    ) -> Result<(OpenedImage, Option<Arc<RemoteObject>>), Failure> {
        sealfs_remote::open_cached(
            &self.location,
            options,
            self.trust,
            &self.remote,
            self.cache.as_ref(),
        )
        .map_err(open_failure)
    }
}

impl Drop for Opened {
    /// The last handle of an image gone (`sealfs_close`, or the last `sealfs_file_close` or
    /// `sealfs_closedir` after it): the background fetchers of a URL's readahead and fill end and
    /// are joined here, so no thread of this image runs once the call returns. Its runtime's
    /// threads are joined as the reader is dropped, right after.
    fn drop(&mut self) {
        if let Some(v) = &self.opened.verified {
            v.close_readahead();
        }
    }
}

/// The library's options for `o` (NULL: the defaults).
fn options(
    o: *const sealfs_open_options,
) -> Result<
    (
        OpenOptions,
        RemoteTrust,
        RemoteOptions,
        Option<CacheSettings>,
    ),
    Failure,
> {
    // A library's caller reads what it asks for: no background fill unless a flag says so, and
    // sequential reads fetch at most 8 MiB ahead (what readahead holds in memory stays within a
    // few times that; `sealfs mount` goes to 64 MiB).
    let defaults = OpenOptions::default();
    let mut opts = OpenOptions {
        fill: FillMode::Off,
        readahead_blocks: (defaults.readahead_blocks.0, 2048),
        ..defaults
    };
    let mut trust = RemoteTrust::RequireAuthority;
    let mut remote = RemoteOptions::default();
    let mut cache = Some(CacheSettings::default());
    if o.is_null() {
        return Ok((opts, trust, remote, cache));
    }
    // SAFETY: the caller passes NULL or a pointer to options that outlive the call.
    let o = unsafe { &*o };
    if !o.digest.is_null() {
        let text = std::str::from_utf8(bytes_arg(o.digest, "digest")?)
            .map_err(|_| Failure::invalid("digest: not UTF-8"))?;
        opts.digest = Some(
            text.parse()
                .map_err(|e| Failure::invalid(format!("digest: {e}")))?,
        );
    }
    if !o.keys.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: a NULL-terminated array of C strings, as documented.
            let k = unsafe { *o.keys.add(i) };
            if k.is_null() {
                break;
            }
            let p = path_arg(k).expect("not NULL");
            opts.keys.push(
                ::sealfs_trust::PublicKey::read(&p)
                    .map_err(|e| Failure::invalid(format!("key: {e}")))?,
            );
            i += 1;
        }
    }
    if let Some(dir) = path_arg(o.keyring) {
        opts.keys.extend(
            ::sealfs_trust::PublicKey::read_keyring(&dir)
                .map_err(|e| Failure::invalid(format!("keyring: {e}")))?,
        );
    }
    remote.ca_certificates.extend(path_arg(o.ca_cert));
    if !o.min_version.is_null() {
        let text = std::str::from_utf8(bytes_arg(o.min_version, "min_version")?)
            .map_err(|_| Failure::invalid("min_version: not UTF-8"))?;
        opts.min_version = Some(
            text.parse()
                .map_err(|e| Failure::invalid(format!("min_version: {e}")))?,
        );
    }
    let source = |p: std::path::PathBuf| {
        sealfs_remote::source_with(&p, &remote).map_err(|e| {
            let code = match e {
                sealfs_remote::RemoteError::NotFound { .. } => libc::ENOENT,
                _ => libc::EIO,
            };
            Failure::new(code, e.to_string())
        })
    };
    opts.sidecar = path_arg(o.sidecar).map(source).transpose()?;
    opts.signatures = path_arg(o.signatures).map(source).transpose()?;
    opts.verify = match o.verify {
        SEALFS_VERIFY_FULL => VerifyMode::Full,
        SEALFS_VERIFY_NONE => VerifyMode::None,
        v => {
            return Err(Failure::invalid(format!(
                "verify: {v} is not SEALFS_VERIFY_FULL or SEALFS_VERIFY_NONE"
            )))
        }
    };
    let known = SEALFS_OPEN_SELF_CONSISTENT
        | SEALFS_OPEN_NO_CACHE
        | SEALFS_OPEN_FILL_AUTO
        | SEALFS_OPEN_FILL;
    if o.flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "flags: unknown bits {:#x}",
            o.flags & !known
        )));
    }
    opts.fill = match (
        o.flags & SEALFS_OPEN_FILL_AUTO != 0,
        o.flags & SEALFS_OPEN_FILL != 0,
    ) {
        (false, false) => FillMode::Off,
        (true, false) => FillMode::Auto,
        (false, true) => FillMode::On,
        (true, true) => {
            return Err(Failure::invalid(
                "flags: SEALFS_OPEN_FILL_AUTO and SEALFS_OPEN_FILL together",
            ))
        }
    };
    if o.flags & SEALFS_OPEN_SELF_CONSISTENT != 0 {
        trust = RemoteTrust::AllowSelfConsistent;
    }
    if o.flags & SEALFS_OPEN_NO_CACHE != 0 {
        cache = None;
    } else if let Some(c) = cache.as_mut() {
        if let Some(dir) = path_arg(o.cache_dir) {
            c.dir = dir;
        }
        if o.cache_size != 0 {
            c.max_bytes = o.cache_size;
        }
    }
    Ok((opts, trust, remote, cache))
}

/// Opens the image at `location`, a path or an `http://`, `https://` or `s3://` URL (S3 settings
/// from the `AWS_*` environment variables), as `options` say (NULL: every block verified against
/// the image's own seal; a URL then needs `digest`, `keys` or `SEALFS_OPEN_SELF_CONSISTENT`).
///
/// On success stores the handle in `*image` and returns 0; on failure returns -1 with `errno` set
/// and `*error` filled (when not NULL): `ENOENT` for a missing image, `EUCLEAN` for a damaged seal
/// or a file that is not EROFS, `EKEYREJECTED` for another digest or no signature by the keys
/// given, `EACCES` for a URL without either.
#[no_mangle]
pub extern "C" fn sealfs_open(
    location: *const c_char,
    options: *const sealfs_open_options,
    image: *mut *mut sealfs_image,
    error: *mut sealfs_error,
) -> c_int {
    let opened = guard(error, || {
        if image.is_null() {
            return Err(Failure::invalid("image is NULL"));
        }
        let location = path_arg(location).ok_or_else(|| Failure::invalid("location is NULL"))?;
        let (options, trust, remote, cache) = self::options(options)?;
        let spec = Spec {
            location,
            options,
            trust,
            remote,
            cache,
        };
        let (opened, remote) = spec.open_with(&spec.options)?;
        Ok((opened, remote, spec))
    });
    match opened {
        Ok((opened, remote, spec)) => {
            let handle = Box::new(sealfs_image {
                inner: Arc::new(Opened {
                    opened,
                    _remote: remote,
                    spec,
                }),
            });
            // SAFETY: checked not NULL above.
            unsafe { *image = Box::into_raw(handle) };
            0
        }
        Err(rc) => rc,
    }
}

/// Closes an image opened by `sealfs_open` (NULL is ignored). Files and directory streams opened
/// from it stay usable until closed themselves; no other call may be using `image`.
///
/// When this is the image's last handle (no file or directory stream of it is open), every thread
/// the image started (a URL's background fetchers and its I/O threads) has ended when this
/// returns, and the memory they held is freed: a request they had in flight is waited for. With
/// files or directory streams still open, that happens when the last of them is closed.
#[no_mangle]
pub extern "C" fn sealfs_close(image: *mut sealfs_image) {
    if !image.is_null() {
        // SAFETY: a handle sealfs_open made, closed once.
        drop(unsafe { Box::from_raw(image) });
    }
}

/// `sealfs_trust::state`: the digest was vouched for from outside (a digest given, or a
/// signature by a key given).
pub const SEALFS_TRUST_AUTHENTICATED: c_int = 1;
/// `sealfs_trust::state`: every block is checked against the image's own seal, which nobody
/// vouched for.
pub const SEALFS_TRUST_SELF_CONSISTENT: c_int = 2;
/// `sealfs_trust::state`: nothing is checked (a plain image, or `SEALFS_VERIFY_NONE`).
pub const SEALFS_TRUST_UNVERIFIED: c_int = 0;
/// `sealfs_trust::authority`: none (not authenticated).
pub const SEALFS_AUTHORITY_NONE: c_int = 0;
/// `sealfs_trust::authority`: the digest given.
pub const SEALFS_AUTHORITY_DIGEST: c_int = 1;
/// `sealfs_trust::authority`: a signature by one of the keys given.
pub const SEALFS_AUTHORITY_KEY: c_int = 2;
/// `sealfs_trust::checker`: nobody checks (unverified).
pub const SEALFS_CHECKER_NONE: c_int = 0;
/// `sealfs_trust::checker`: this process hashes every block it reads.
pub const SEALFS_CHECKER_READER: c_int = 1;
/// `sealfs_trust::checker`: the kernel's fs-verity checks the image file.
pub const SEALFS_CHECKER_KERNEL: c_int = 2;

/// What opening an image established.
#[repr(C)]
pub struct sealfs_trust {
    /// `SEALFS_TRUST_AUTHENTICATED`, `SEALFS_TRUST_SELF_CONSISTENT` or `SEALFS_TRUST_UNVERIFIED`.
    pub state: c_int,
    /// `SEALFS_AUTHORITY_DIGEST`, `SEALFS_AUTHORITY_KEY` or `SEALFS_AUTHORITY_NONE`.
    pub authority: c_int,
    /// `SEALFS_CHECKER_READER`, `SEALFS_CHECKER_KERNEL` or `SEALFS_CHECKER_NONE`.
    pub checker: c_int,
    /// The digest reads are checked against (`"sha256:<hex>"`), or "" when unverified.
    pub digest: [c_char; 136],
    /// The signer's fingerprint (`"ed25519:<32 hex>"`) when a key vouched, else "".
    pub key_fingerprint: [c_char; 48],
    /// All of it in words, as `sealfs inspect` says it.
    pub description: [c_char; 256],
}

/// Fills `*trust` with what opening `image` established; returns 0 (-1 with `EINVAL` for a NULL
/// argument).
#[no_mangle]
pub extern "C" fn sealfs_get_trust(image: *const sealfs_image, trust: *mut sealfs_trust) -> c_int {
    let r = guard(std::ptr::null_mut(), || {
        if image.is_null() || trust.is_null() {
            return Err(Failure::invalid("NULL argument"));
        }
        // SAFETY: a live handle and the caller's struct.
        let (img, out) = unsafe { (&*image, &mut *trust) };
        let t = &img.inner.opened.trust;
        out.state = match t {
            Trust::Authenticated { .. } => SEALFS_TRUST_AUTHENTICATED,
            Trust::SelfConsistent { .. } => SEALFS_TRUST_SELF_CONSISTENT,
            Trust::Unverified => SEALFS_TRUST_UNVERIFIED,
        };
        out.authority = SEALFS_AUTHORITY_NONE;
        copy_str(&mut out.key_fingerprint, b"");
        if let Trust::Authenticated { authority, .. } = t {
            match authority {
                Authority::Digest => out.authority = SEALFS_AUTHORITY_DIGEST,
                Authority::Key { fingerprint } => {
                    out.authority = SEALFS_AUTHORITY_KEY;
                    copy_str(&mut out.key_fingerprint, fingerprint.to_string().as_bytes());
                }
                _ => {}
            }
        }
        out.checker = match t.checker() {
            Some(Checker::Reader) => SEALFS_CHECKER_READER,
            Some(Checker::Kernel) => SEALFS_CHECKER_KERNEL,
            None => SEALFS_CHECKER_NONE,
        };
        let digest = t.digest().map(|d| d.to_string()).unwrap_or_default();
        copy_str(&mut out.digest, digest.as_bytes());
        copy_str(&mut out.description, t.to_string().as_bytes());
        Ok(())
    });
    match r {
        Ok(()) => 0,
        Err(rc) => rc,
    }
}
