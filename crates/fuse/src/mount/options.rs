//! How a mount is made: the FUSE options (`-o`), the threads serving it and the kernel's readahead.

use super::MountError;
use std::path::Path;

/// The kernel readahead a mount asks for by default: a sequential read reaches the daemon in
/// requests of up to 1 MiB instead of the 128 KiB every FUSE mount starts with (`cat` of a
/// 1.36 GB file: 1.18 s instead of 1.55).
pub const DEFAULT_READ_AHEAD: u64 = 1 << 20;

/// How the daemon exchanges requests with the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Reading and writing `/dev/fuse` (every kernel).
    #[default]
    Dev,
    /// FUSE over io_uring (Linux 6.14+, when the `fuse` module's `enable_uring` parameter is
    /// `Y`): the mount fails where the kernel does not offer it.
    Uring,
    /// io_uring where the kernel offers it, `/dev/fuse` otherwise.
    Auto,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "dev" => Ok(Transport::Dev),
            "uring" => Ok(Transport::Uring),
            "auto" => Ok(Transport::Auto),
            o => Err(format!("{o}: not a transport (auto, uring or dev)")),
        }
    }
}

/// Whether the running kernel offers FUSE over io_uring to new mounts.
pub fn uring_available() -> bool {
    fuser::kernel_offers_uring()
}

/// Who may use the mount besides the user who made it (root always may with
/// [`Access::RootAndOwner`] or [`Access::All`]). Permissions are always checked by the kernel
/// (`default_permissions`) against the image's modes and ACLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Only the user who mounted it (FUSE's default).
    #[default]
    Owner,
    /// That user and root (`allow_root`).
    RootAndOwner,
    /// Every user (`allow_other`): what an overlayfs lower directory used by containers needs.
    All,
}

/// A mount flag that `-o` may set (each has the meaning `mount(8)` gives it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountFlag {
    /// `nodev`: device files are not opened as devices.
    NoDev,
    /// `dev`: they are.
    Dev,
    /// `nosuid`: set-user-ID and set-group-ID bits take no effect.
    NoSuid,
    /// `suid`: they do.
    Suid,
    /// `noexec`: files are not executed.
    NoExec,
    /// `exec`: they are.
    Exec,
    /// `noatime`.
    NoAtime,
    /// `atime`.
    Atime,
}

/// The options of a FUSE mount of an image: the same, and with the same defaults, as `sealfs
/// mount` has. The mount is always read-only, with `default_permissions` and the subtype
/// `sealfs` (`fuse.sealfs` in `/proc/mounts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// Who may use the mount.
    pub access: Access,
    /// Flags, in the order given (a later one wins over an earlier opposite one).
    pub flags: Vec<MountFlag>,
    /// The source the mount shows in `/proc/mounts` (`fsname=`); `None`: `sealfs`. See
    /// [`source_name`] for the image's path made fit for it.
    pub fsname: Option<String>,
    /// Threads serving requests (`None`: one per CPU, at least 2; 0 is taken as 1).
    pub threads: Option<usize>,
    /// The kernel's readahead for the mount in bytes (its `/sys/class/bdi/…/read_ahead_kb`,
    /// rounded up to KiB); 0 leaves the kernel's. Setting it needs root; other users' mounts keep
    /// the kernel's (best effort, not an error).
    pub read_ahead: u64,
    /// How requests travel between the kernel and the daemon.
    pub transport: Transport,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            access: Access::Owner,
            flags: Vec::new(),
            fsname: None,
            threads: None,
            read_ahead: DEFAULT_READ_AHEAD,
            transport: Transport::Dev,
        }
    }
}

impl MountOptions {
    /// Adds the options of one comma-separated `-o` list: `allow_other`, `allow_root`, `nodev`,
    /// `nosuid`, `noexec`, `dev`, `suid`, `exec`, `noatime`, `atime`, `fsname=NAME`, and `ro` and
    /// `default_permissions` (always on). `rw` and anything else are errors.
    pub fn add_options(&mut self, list: &str) -> Result<(), MountError> {
        for opt in list.split(',') {
            let flag = match opt {
                "" | "ro" | "default_permissions" => continue,
                "allow_other" => {
                    self.access = Access::All;
                    continue;
                }
                "allow_root" => {
                    self.access = Access::RootAndOwner;
                    continue;
                }
                "nodev" => MountFlag::NoDev,
                "dev" => MountFlag::Dev,
                "nosuid" => MountFlag::NoSuid,
                "suid" => MountFlag::Suid,
                "noexec" => MountFlag::NoExec,
                "exec" => MountFlag::Exec,
                "noatime" => MountFlag::NoAtime,
                "atime" => MountFlag::Atime,
                "rw" => return Err(MountError::ReadWrite),
                o => match o.strip_prefix("fsname=") {
                    Some(name) => {
                        self.fsname = Some(name.to_string());
                        continue;
                    }
                    None => return Err(MountError::UnknownOption(o.to_string())),
                },
            };
            self.flags.push(flag);
        }
        Ok(())
    }

    /// The configuration fuser mounts and serves with.
    pub(crate) fn fuse_config(&self) -> fuser::Config {
        use fuser::MountOption as M;
        let mut config = fuser::Config::default();
        config.acl = match self.access {
            Access::Owner => fuser::SessionACL::Owner,
            Access::RootAndOwner => fuser::SessionACL::RootAndOwner,
            Access::All => fuser::SessionACL::All,
        };
        let mut options = vec![
            M::RO,
            M::DefaultPermissions,
            M::CUSTOM("subtype=sealfs".into()),
        ];
        options.extend(self.flags.iter().map(|f| match f {
            MountFlag::NoDev => M::NoDev,
            MountFlag::Dev => M::Dev,
            MountFlag::NoSuid => M::NoSuid,
            MountFlag::Suid => M::Suid,
            MountFlag::NoExec => M::NoExec,
            MountFlag::Exec => M::Exec,
            MountFlag::NoAtime => M::NoAtime,
            MountFlag::Atime => M::Atime,
        }));
        options.push(M::FSName(
            self.fsname.clone().unwrap_or_else(|| "sealfs".to_string()),
        ));
        config.mount_options = options;
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        config.n_threads = Some(self.threads.unwrap_or(cpus.max(2)).max(1));
        config.clone_fd = true;
        config.uring = match self.transport {
            Transport::Dev => None,
            Transport::Auto if !fuser::kernel_offers_uring() => None,
            t => Some(fuser::UringConfig {
                required: t == Transport::Uring,
                ..fuser::UringConfig::default()
            }),
        };
        config
    }
}

/// The name a mount of `image` shows as its source in /proc/mounts ([`MountOptions::fsname`]):
/// the image's full path, unless it has characters the mount option string cannot carry
/// (`sealfs` then).
pub fn source_name(image: &Path) -> String {
    let full = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    match full.to_str() {
        Some(s) if !s.contains([',', ' ', '\t', '\n', '\\']) => s.to_string(),
        _ => "sealfs".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn os_str_names_pass_through() {
        let p = Path::new(OsStr::from_bytes(b"/tmp/\xff"));
        assert_eq!(source_name(p), "sealfs");
    }

    #[test]
    fn options_parse_as_mount_8_names_them() {
        let mut o = MountOptions::default();
        o.add_options("allow_other,nodev,,ro,fsname=x").unwrap();
        assert_eq!(o.access, Access::All);
        assert_eq!(o.flags, vec![MountFlag::NoDev]);
        assert_eq!(o.fsname.as_deref(), Some("x"));
        assert!(matches!(o.add_options("rw"), Err(MountError::ReadWrite)));
        assert!(matches!(
            o.add_options("nodev,bogus"),
            Err(MountError::UnknownOption(s)) if s == "bogus"
        ));
    }
}
