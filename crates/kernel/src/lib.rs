//! Kernel-verified mounts of sealed images: the kernel mounts the EROFS image and checks every block
//! it reads against the seal's Merkle tree, set up from an image the reader has authenticated.
//!
//! Two ways, both ending in a read-only `erofs` mount:
//!
//! - **dm-verity** ([`Method::DmVerity`]): a read-only loop device over the image file, a dm-verity
//!   mapping whose data are the EROFS blocks and whose hash tree is the seal's own tree where it lies
//!   (inside the image file, or in the sidecar through a second loop device), with the root hash and
//!   salt of the authenticated descriptor ([`VerityTable`]); EROFS is mounted on the mapping.
//! - **fs-verity** ([`Method::FsVerity`], detached images only): turn fs-verity on for the image file
//!   with the seal's parameters if it is not on yet, check that the kernel's digest of the file is
//!   the authenticated digest, and mount the file (through a read-only loop device bound to the file
//!   that was measured, so no other file can be slipped in between).
//!
//! [`Method::Auto`] takes fs-verity for a detached image whose file system supports it, dm-verity
//! otherwise. Device-mapper and loop devices are set up with the `devicemapper` and `loopdev-3`
//! crates. Every device is named after the mount point ([`dm_name`]) and loop devices clear
//! themselves when released, so [`unmount`] finds and removes what a mount left behind even after a
//! crash between setting up and mounting. [`chain`] reports the devices under a mount.

pub mod sysfs;
mod table;

pub use table::{dm_name, dm_uuid, OnCorruption, VerityTable, NAME_PREFIX, UUID_PREFIX};

use devicemapper::{DevId, DmFlags, DmName, DmOptions, DmUuid, DM};
use loopdev::{LoopControl, LoopDevice};
use rustix::mount::{MountFlags, UnmountFlags};
use sealfs_reader::{OpenedImage, Seal, Trust};
use sealfs_verity::Digest;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a kernel-verified mount could not be set up, inspected or taken down.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image is not authenticated: the kernel would be handed a root nobody vouched for.
    #[error(
        "a kernel-verified mount needs an authenticated image (--digest or --key); this one is {0}"
    )]
    NotAuthenticated(&'static str),
    /// This image, or this kernel, cannot be verified this way.
    #[error("{0}")]
    Unsupported(String),
    /// The kernel's fs-verity digest of the image file is not the authenticated digest.
    #[error(
        "{path}: the kernel's fs-verity digest of the file is {got}, not the authenticated {want}"
    )]
    KernelDigest {
        /// The image file.
        path: PathBuf,
        /// What the kernel measured.
        got: Box<Digest>,
        /// What was authenticated.
        want: Box<Digest>,
    },
    /// The mount point already has a sealfs mapping (mounted, or left behind).
    #[error("{mountpoint}: device-mapper device {name} already exists for this mount point; run `sealfs umount {mountpoint}` first")]
    Busy {
        /// The mount point.
        mountpoint: String,
        /// The mapping's name.
        name: String,
    },
    /// Nothing is mounted there and nothing sealfs set up for it is left.
    #[error("{0}: not mounted, and no sealfs mapping is left behind for it")]
    NotMounted(PathBuf),
    /// Something else is mounted there.
    #[error("{0}")]
    Foreign(String),
    /// A system call failed.
    #[error("{what}")]
    Sys {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A device-mapper request failed.
    #[error("{what}")]
    Dm {
        /// What was being done.
        what: String,
        /// The error.
        source: devicemapper::DmError,
    },
}

impl Error {
    /// Whether the image is at fault (it is not what was authenticated), rather than the system.
    pub fn is_image_fault(&self) -> bool {
        matches!(self, Error::KernelDigest { .. })
    }
}

fn sys(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Sys { what, source }
}

fn dm_err(what: impl Into<String>) -> impl FnOnce(devicemapper::DmError) -> Error {
    let what = what.into();
    move |source| Error::Dm { what, source }
}

/// Which kernel mechanism verifies the mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Method {
    /// fs-verity for a detached image on a file system that has it, dm-verity otherwise.
    #[default]
    Auto,
    /// dm-verity over loop devices.
    DmVerity,
    /// fs-verity on the image file (detached images only).
    FsVerity,
}

/// What to mount, where, and how.
pub struct MountRequest<'a> {
    /// The image file.
    pub image: &'a Path,
    /// Its sidecar, when the seal is detached.
    pub sidecar: Option<&'a Path>,
    /// The image as [`sealfs_reader::open()`] opened it; it must be authenticated.
    pub opened: &'a OpenedImage,
    /// Where to mount it (an existing directory).
    pub mountpoint: &'a Path,
    /// Which mechanism.
    pub method: Method,
    /// What dm-verity does on a mismatch (fs-verity always fails the read with EIO).
    pub on_corruption: OnCorruption,
}

/// Mounts an authenticated image read-only with the kernel's EROFS, every block verified by the
/// kernel against the authenticated digest; returns the devices set up. Nothing is left set up
/// when it fails.
pub fn mount(req: &MountRequest<'_>) -> Result<Chain, Error> {
    let digest = match &req.opened.trust {
        Trust::Authenticated { digest, .. } => *digest,
        Trust::SelfConsistent { .. } => {
            return Err(Error::NotAuthenticated("only self-consistent"))
        }
        Trust::Unverified => return Err(Error::NotAuthenticated("not verified at all")),
    };
    let seal = req
        .opened
        .seal
        .as_deref()
        .ok_or(Error::NotAuthenticated("unsealed"))?;
    let mountpoint = std::fs::canonicalize(req.mountpoint)
        .map_err(sys(format!("mount point {}", shown(&req.mountpoint))))?;
    if !mountpoint.is_dir() {
        return Err(Error::Unsupported(format!(
            "{}: not a directory",
            shown(&mountpoint)
        )));
    }
    match req.method {
        Method::Auto if seal.is_detached() => {
            match mount_fs_verity(req.image, seal, &digest, &mountpoint) {
                // No fs-verity here: dm-verity with the sidecar's tree, or say why neither works.
                Err(FsVerityError::NotSupported(why)) => {
                    mount_dm_verity(req, seal, &digest, &mountpoint).map_err(|e| match e {
                        Error::Unsupported(dm) => {
                            Error::Unsupported(format!("neither way is available: {why}; and {dm}"))
                        }
                        e => e,
                    })
                }
                other => other.map_err(FsVerityError::into_error),
            }
        }
        Method::FsVerity => mount_fs_verity(req.image, seal, &digest, &mountpoint)
            .map_err(FsVerityError::into_error),
        Method::Auto | Method::DmVerity => mount_dm_verity(req, seal, &digest, &mountpoint),
    }
}

/// dm-verity: loop devices, the mapping, the mount; undone in reverse order on failure.
fn mount_dm_verity(
    req: &MountRequest<'_>,
    seal: &Seal,
    digest: &Digest,
    mountpoint: &Path,
) -> Result<Chain, Error> {
    let table = VerityTable::for_seal(seal, req.on_corruption)?;
    let hash_file = match (seal.is_detached(), req.sidecar) {
        (false, _) => None,
        (true, Some(sidecar)) => Some(sidecar),
        (true, None) => {
            return Err(Error::Unsupported(
                "a detached seal needs its sidecar for dm-verity".into(),
            ))
        }
    };
    let dm = DM::new().map_err(|e| {
        Error::Unsupported(format!(
            "device-mapper is not available ({e}): the kernel needs dm-mod (CONFIG_BLK_DEV_DM) and /dev/mapper/control"
        ))
    })?;
    let name = dm_name(mountpoint);
    let dm_name_ = DmName::new(&name).map_err(dm_err("device-mapper name"))?;
    let id = DevId::Name(dm_name_);
    if dm.device_info(&id).is_ok() {
        return Err(Error::Busy {
            mountpoint: shown(&mountpoint),
            name,
        });
    }

    let data = File::open(req.image).map_err(sys(shown(&req.image)))?;
    let data_loop = attach_loop(&data, req.image)?;
    let hash_loop = match hash_file {
        Some(path) => {
            let f = File::open(path).map_err(sys(shown(&path)));
            match f.and_then(|f| attach_loop(&f, path)) {
                Ok(l) => Some(l),
                Err(e) => {
                    let _ = data_loop.detach();
                    return Err(e);
                }
            }
        }
        None => None,
    };
    let loops: Vec<&LoopDevice> = std::iter::once(&data_loop).chain(&hash_loop).collect();
    let result = (|| {
        let data_dev = loop_devno(&data_loop)?;
        let hash_dev = match &hash_loop {
            Some(l) => loop_devno(l)?,
            None => data_dev.clone(),
        };
        let uuid = dm_uuid(&name, digest);
        let uuid = DmUuid::new(&uuid).map_err(dm_err("device-mapper UUID"))?;
        let info = dm
            .device_create(dm_name_, Some(uuid), DmOptions::default())
            .map_err(dm_err(format!("creating device-mapper device {name}")))?;
        let mapped = (|| {
            let targets = [(
                0,
                table.sectors(),
                "verity".to_string(),
                table.target_params(&data_dev, &hash_dev),
            )];
            dm.table_load(
                &id,
                &targets,
                DmOptions::default().set_flags(DmFlags::DM_READONLY),
            )
            .map_err(|e| {
                if has_verity_target(&dm) {
                    dm_err(format!("loading the dm-verity table of {name}"))(e)
                } else {
                    Error::Unsupported(format!(
                        "the kernel has no dm-verity target (CONFIG_DM_VERITY; modprobe dm-verity): {e}"
                    ))
                }
            })?;
            dm.device_suspend(&id, DmOptions::default())
                .map_err(dm_err(format!("activating {name}")))?;
            let node = wait_devnode(info.device().major, info.device().minor)?;
            rustix::mount::mount(&node, mountpoint, "erofs", MountFlags::RDONLY, None).map_err(
                |e| Error::Sys {
                    what: format!(
                        "mounting {} (dm-verity over {}) on {}",
                        shown(&node),
                        shown(&req.image),
                        shown(&mountpoint)
                    ),
                    source: e.into(),
                },
            )
        })();
        if mapped.is_err() {
            let _ = dm.device_remove(&id, DmOptions::default());
        }
        mapped
    })();
    if let Err(e) = result {
        for l in loops {
            let _ = l.detach();
        }
        return Err(e);
    }
    // The mapping holds the loop devices now; they clear themselves when it lets them go.
    drop((data_loop, hash_loop));
    chain(mountpoint)?.ok_or_else(|| Error::NotMounted(mountpoint.to_path_buf()))
}

/// Whether the kernel has the dm-verity target loaded.
fn has_verity_target(dm: &DM) -> bool {
    dm.list_versions()
        .map(|v| v.iter().any(|(name, ..)| name == "verity"))
        .unwrap_or(false)
}

/// Why the fs-verity way did not mount.
enum FsVerityError {
    /// The file system has no fs-verity (the caller may fall back to dm-verity).
    NotSupported(Error),
    /// Anything else.
    Failed(Error),
}

impl FsVerityError {
    fn into_error(self) -> Error {
        match self {
            FsVerityError::NotSupported(e) | FsVerityError::Failed(e) => e,
        }
    }
}

impl From<Error> for FsVerityError {
    fn from(e: Error) -> Self {
        FsVerityError::Failed(e)
    }
}

/// fs-verity: turn it on if needed, compare the kernel's digest, mount the measured file.
fn mount_fs_verity(
    image: &Path,
    seal: &Seal,
    digest: &Digest,
    mountpoint: &Path,
) -> Result<Chain, FsVerityError> {
    if !seal.is_detached() {
        return Err(Error::Unsupported(format!(
            "{}: the seal is attached, so the kernel's fs-verity of the file would cover the seal too; \
             use dm-verity, or a detached image (--sidecar)",
            shown(&image)
        ))
        .into());
    }
    let file = File::open(image).map_err(sys(shown(&image)))?;
    let len = file.metadata().map_err(sys(shown(&image)))?.len();
    if len != seal.erofs_length() {
        return Err(Error::Unsupported(format!(
            "{}: the file is {len} bytes, the seal covers {}",
            shown(&image),
            seal.erofs_length()
        ))
        .into());
    }
    let measured = match sealfs_reader::kernel_verity_digest(&file) {
        Some(d) => d,
        None => {
            match sealfs_reader::enable_kernel_verity(&file, &seal.params) {
                Ok(()) => {}
                // Someone else turned it on meanwhile: measure what they made.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::ENOSYS)
                    ) =>
                {
                    return Err(FsVerityError::NotSupported(Error::Unsupported(format!(
                        "{}: the file system has no fs-verity ({e})",
                        shown(&image)
                    ))))
                }
                Err(e) => {
                    return Err(Error::Sys {
                        what: format!("enabling fs-verity on {}", shown(&image)),
                        source: e,
                    }
                    .into())
                }
            }
            sealfs_reader::kernel_verity_digest(&file).ok_or_else(|| {
                Error::Unsupported(format!(
                    "{}: fs-verity was turned on but the kernel reports no digest",
                    shown(&image)
                ))
            })?
        }
    };
    if measured != *digest {
        return Err(Error::KernelDigest {
            path: image.to_path_buf(),
            got: Box::new(measured),
            want: Box::new(*digest),
        }
        .into());
    }
    let lo = attach_loop(&file, image)?;
    let node = match lo.path() {
        Some(p) => p,
        None => {
            let _ = lo.detach();
            return Err(Error::Unsupported("the loop device has no path".into()).into());
        }
    };
    if let Err(e) = rustix::mount::mount(&node, mountpoint, "erofs", MountFlags::RDONLY, None) {
        let _ = lo.detach();
        return Err(Error::Sys {
            what: format!(
                "mounting {} (fs-verity file {}) on {}",
                shown(&node),
                shown(&image),
                shown(&mountpoint)
            ),
            source: e.into(),
        }
        .into());
    }
    drop(lo);
    Ok(chain(mountpoint)?.ok_or_else(|| Error::NotMounted(mountpoint.to_path_buf()))?)
}

/// Binds a free loop device to `file`, read-only, clearing itself when its last user lets go.
fn attach_loop(file: &File, path: &Path) -> Result<LoopDevice, Error> {
    let what = || format!("setting up a loop device for {}", shown(&path));
    let control = LoopControl::open().map_err(sys(format!("{}: /dev/loop-control", what())))?;
    let mut last = None;
    // Another process may take the free device between asking and binding: ask again.
    for _ in 0..16 {
        let dev = control.next_free().map_err(sys(what()))?;
        match dev
            .with()
            .read_only(true)
            .autoclear(true)
            .attach_fd(file.as_raw_fd())
        {
            Ok(()) => return Ok(dev),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last = Some(e),
            Err(e) => return Err(sys(what())(e)),
        }
    }
    Err(sys(what())(last.unwrap_or_else(|| {
        io::Error::from_raw_os_error(libc::EBUSY)
    })))
}

/// `major:minor` of a loop device, as a dm table names it.
fn loop_devno(dev: &LoopDevice) -> Result<String, Error> {
    let major = dev.major().map_err(sys("loop device number"))?;
    let minor = dev.minor().map_err(sys("loop device number"))?;
    Ok(format!("{major}:{minor}"))
}

/// The device node of a block device, once it exists (devtmpfs or udev makes it).
fn wait_devnode(major: u32, minor: u32) -> Result<PathBuf, Error> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(name) = sysfs::block_name((major, minor)) {
            let node = Path::new("/dev").join(name);
            if node.exists() {
                return Ok(node);
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Unsupported(format!(
                "no device node for block device {major}:{minor} in /dev after 5 s (is devtmpfs mounted?)"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The devices under a kernel mount, from the mount down to the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// The mount point.
    pub mountpoint: PathBuf,
    /// The mount source as the kernel shows it.
    pub source: PathBuf,
    /// The mounted device's number.
    pub device: (u32, u32),
    /// The dm-verity mapping, when the mount is on one.
    pub verity: Option<VerityLayer>,
    /// The loop devices under the mount or the mapping (data first).
    pub loops: Vec<LoopLayer>,
}

impl Chain {
    /// Whether the kernel checks every block: a dm-verity mapping, or a file with fs-verity.
    pub fn kernel_verified(&self) -> bool {
        self.verity.is_some() || self.loops.iter().any(|l| l.fs_verity.is_some())
    }
}

/// A dm-verity mapping, as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityLayer {
    /// Its device node (`/dev/dm-N`).
    pub device: PathBuf,
    /// Its device-mapper name.
    pub name: String,
    /// Its device-mapper UUID.
    pub uuid: String,
    /// The target's table line (`dmsetup table`).
    pub table: String,
    /// The target's status (`V`: no corruption seen, `C`: a block failed its check).
    pub status: String,
    /// The hash algorithm in the table.
    pub alg: String,
    /// The root hash in the table (hex).
    pub root: String,
    /// The salt in the table (hex, `-` for none).
    pub salt: String,
    /// Data blocks mapped.
    pub data_blocks: u64,
    /// What a mismatch does (`eio`, `panic`, `restart`).
    pub on_corruption: String,
}

impl VerityLayer {
    /// Whether dm-verity has seen a block that failed its check.
    pub fn corrupted(&self) -> bool {
        self.status.starts_with('C')
    }
}

/// A loop device, as the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopLayer {
    /// Its device node (`/dev/loopN`).
    pub device: PathBuf,
    /// The file behind it.
    pub backing_file: PathBuf,
    /// Read-only.
    pub read_only: bool,
    /// Clears itself when released.
    pub autoclear: bool,
    /// The kernel's fs-verity digest of the backing file, when it has fs-verity.
    pub fs_verity: Option<Digest>,
}

/// The devices under the EROFS mount at `mountpoint`; `None` when no EROFS is mounted there.
pub fn chain(mountpoint: &Path) -> Result<Option<Chain>, Error> {
    let Some(m) = sysfs::mount_at(mountpoint).map_err(sys("reading /proc/self/mountinfo"))? else {
        return Ok(None);
    };
    if m.fstype != "erofs" {
        return Ok(None);
    }
    let mut chain = Chain {
        mountpoint: m.mountpoint,
        source: m.source,
        device: m.dev,
        verity: None,
        loops: Vec::new(),
    };
    let Some(name) = sysfs::block_name(m.dev) else {
        return Ok(Some(chain)); // file-backed: no block device
    };
    if name.starts_with("dm-") {
        chain.verity = verity_layer(m.dev, &name)?;
        for (slave, _) in sysfs::slaves(m.dev) {
            chain.loops.extend(loop_layer(&slave));
        }
        // Data device first, as the table names them.
        if let Some(v) = &chain.verity {
            let data = v.table.split_whitespace().nth(1).unwrap_or("").to_string();
            chain.loops.sort_by_key(|l| {
                let dev = l
                    .device
                    .file_name()
                    .and_then(|n| sysfs::attr(&Path::new("/sys/block").join(n), "dev"));
                dev.as_deref() != Some(data.as_str())
            });
        }
    } else if name.starts_with("loop") {
        chain.loops.extend(loop_layer(&name));
    }
    Ok(Some(chain))
}

/// A dm device's name, UUID, table and status, when it is a dm-verity mapping.
fn verity_layer(dev: (u32, u32), node: &str) -> Result<Option<VerityLayer>, Error> {
    let dm = DM::new().map_err(dm_err("opening /dev/mapper/control"))?;
    let dir = sysfs::block_dir(dev).join("dm");
    let name = sysfs::attr(&dir, "name").unwrap_or_default();
    let uuid = sysfs::attr(&dir, "uuid").unwrap_or_default();
    let dm_name_ = DmName::new(&name).map_err(dm_err("device-mapper name"))?;
    let id = DevId::Name(dm_name_);
    let (_, table) = dm
        .table_status(
            &id,
            DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE),
        )
        .map_err(dm_err(format!("dm table of {name}")))?;
    let (_, status) = dm
        .table_status(&id, DmOptions::default())
        .map_err(dm_err(format!("dm status of {name}")))?;
    let [(_, _, target, params)] = &table[..] else {
        return Ok(None);
    };
    if target != "verity" {
        return Ok(None);
    }
    let f: Vec<&str> = params.split_whitespace().collect();
    let field = |i: usize| f.get(i).copied().unwrap_or("").to_string();
    let on_corruption = if params.contains("panic_on_corruption") {
        "panic"
    } else if params.contains("restart_on_corruption") {
        "restart"
    } else if params.contains("ignore_corruption") {
        "ignore"
    } else {
        "eio"
    };
    Ok(Some(VerityLayer {
        device: Path::new("/dev").join(node),
        name,
        uuid,
        table: params.clone(),
        status: status
            .first()
            .map(|(_, _, _, s)| s.trim().to_string())
            .unwrap_or_default(),
        alg: field(7),
        root: field(8),
        salt: field(9),
        data_blocks: field(5).parse().unwrap_or(0),
        on_corruption: on_corruption.to_string(),
    }))
}

/// A loop device's backing file and flags, when it is bound.
fn loop_layer(name: &str) -> Option<LoopLayer> {
    let backing_file = sysfs::loop_backing_file(name)?;
    let dir = Path::new("/sys/block").join(name);
    let fs_verity = File::open(&backing_file)
        .ok()
        .and_then(|f| sealfs_reader::kernel_verity_digest(&f));
    Some(LoopLayer {
        device: Path::new("/dev").join(name),
        backing_file,
        read_only: sysfs::attr(&dir, "ro").as_deref() == Some("1"),
        autoclear: sysfs::attr(&dir.join("loop"), "autoclear").as_deref() == Some("1"),
        fs_verity,
    })
}

/// What [`unmount`] took down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Teardown {
    /// The mount was there and is gone.
    pub unmounted: bool,
    /// The dm-verity mapping removed, by name.
    pub mapping: Option<String>,
    /// Loop devices that were under the mount and are now free.
    pub loops: Vec<PathBuf>,
    /// Loop devices still bound (a lazy unmount whose files are still open: they clear themselves
    /// when released).
    pub pending: Vec<PathBuf>,
}

/// Takes down a kernel mount sealfs made at `mountpoint`: the mount, its dm-verity mapping and its
/// loop devices; also what a mount left behind without being mounted (a crash between setting up
/// and mounting, or an unmount by hand). `lazy` detaches the mount at once and lets the kernel
/// finish when its last file is closed.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<Teardown, Error> {
    let mountpoint = std::fs::canonicalize(mountpoint)
        .map_err(sys(format!("mount point {}", shown(&mountpoint))))?;
    let mut down = Teardown::default();
    let mut mapping: Option<(u32, u32)> = None;
    let mut loops: Vec<String> = Vec::new();
    match sysfs::mount_at(&mountpoint).map_err(sys("reading /proc/self/mountinfo"))? {
        Some(m) if m.fstype == "erofs" => {
            let node = sysfs::block_name(m.dev).unwrap_or_default();
            if node.starts_with("dm-") {
                let uuid = sysfs::attr(&sysfs::block_dir(m.dev).join("dm"), "uuid");
                if !uuid.is_some_and(|u| u.starts_with(UUID_PREFIX)) {
                    return Err(Error::Foreign(format!(
                        "{}: an EROFS mount on /dev/{node}, a device sealfs did not set up; use umount(8)",
                        shown(&mountpoint)
                    )));
                }
                mapping = Some(m.dev);
                loops.extend(sysfs::slaves(m.dev).into_iter().map(|(n, _)| n));
            } else if node.starts_with("loop") {
                loops.push(node);
            }
            let flags = if lazy {
                UnmountFlags::DETACH
            } else {
                UnmountFlags::empty()
            };
            rustix::mount::unmount(&mountpoint, flags).map_err(|e| Error::Sys {
                what: format!("unmounting {}", shown(&mountpoint)),
                source: e.into(),
            })?;
            down.unmounted = true;
        }
        Some(m) => {
            return Err(Error::Foreign(format!(
                "{}: a {} mount, not a sealfs kernel mount",
                shown(&mountpoint),
                m.fstype
            )))
        }
        None => {}
    }

    // The mapping: the mount's, or one left behind for this mount point.
    let name = match mapping {
        Some(dev) => sysfs::attr(&sysfs::block_dir(dev).join("dm"), "name"),
        None => leftover_mapping(&mountpoint, &mut loops)?,
    };
    if let Some(name) = name {
        let dm = DM::new().map_err(dm_err("opening /dev/mapper/control"))?;
        let dm_name_ = DmName::new(&name).map_err(dm_err("device-mapper name"))?;
        let options = if lazy {
            DmOptions::default().set_flags(DmFlags::DM_DEFERRED_REMOVE)
        } else {
            DmOptions::default()
        };
        dm.device_remove(&DevId::Name(dm_name_), options)
            .map_err(dm_err(format!("removing device-mapper device {name}")))?;
        down.mapping = Some(name);
    }
    if !down.unmounted && down.mapping.is_none() {
        return Err(Error::NotMounted(mountpoint));
    }

    // Loop devices clear themselves once released; make sure, unless files are still open.
    let deadline = Instant::now() + Duration::from_secs(2);
    for name in loops {
        let dev = Path::new("/dev").join(&name);
        while sysfs::loop_backing_file(&name).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if sysfs::loop_backing_file(&name).is_some() && !lazy {
            if let Ok(lo) = LoopDevice::open(&dev) {
                let _ = lo.detach();
            }
        }
        if sysfs::loop_backing_file(&name).is_some() {
            down.pending.push(dev);
        } else {
            down.loops.push(dev);
        }
    }
    Ok(down)
}

/// The sealfs mapping named for `mountpoint`, if one exists though nothing is mounted; its loop
/// devices go into `loops`.
fn leftover_mapping(mountpoint: &Path, loops: &mut Vec<String>) -> Result<Option<String>, Error> {
    let Ok(dm) = DM::new() else {
        return Ok(None); // no device-mapper: nothing can be left in it
    };
    let name = dm_name(mountpoint);
    let dm_name_ = DmName::new(&name).map_err(dm_err("device-mapper name"))?;
    let Ok(info) = dm.device_info(&DevId::Name(dm_name_)) else {
        return Ok(None);
    };
    let dev = (info.device().major, info.device().minor);
    let ours = info
        .uuid()
        .is_some_and(|u| u.to_string().starts_with(UUID_PREFIX));
    if !ours {
        return Ok(None);
    }
    loops.extend(sysfs::slaves(dev).into_iter().map(|(n, _)| n));
    Ok(Some(name))
}

/// A path as messages show it: escaped by the one rule ([`sealfs_reader::show_path`]).
fn shown(path: &(impl AsRef<Path> + ?Sized)) -> String {
    sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(
        path.as_ref().as_os_str(),
    ))
}
