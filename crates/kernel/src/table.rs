//! The dm-verity mapping of a sealed image, from its seal alone: the seal's Merkle tree is the tree
//! `veritysetup format --no-superblock` writes (same levels, root level first, same hashes once the
//! salt is padded: [`Params::dm_verity_salt`]), so dm-verity can check the EROFS blocks against it
//! where it lies, inside the image file or in the sidecar.

use crate::Error;
use sealfs_reader::Seal;
use sealfs_verity::{Digest, HashAlg, Params};
use sha2::{Digest as _, Sha256};
use std::path::Path;

/// Bytes per device-mapper sector.
const SECTOR: u64 = 512;

/// What dm-verity does when a block does not match the tree (its optional table arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCorruption {
    /// The read fails with EIO (dm-verity's default); the block is logged.
    #[default]
    Eio,
    /// The kernel panics (`panic_on_corruption`).
    Panic,
    /// The machine restarts (`restart_on_corruption`).
    Restart,
}

impl OnCorruption {
    /// The dm-verity table argument, if any.
    pub fn table_arg(self) -> Option<&'static str> {
        match self {
            OnCorruption::Eio => None,
            OnCorruption::Panic => Some("panic_on_corruption"),
            OnCorruption::Restart => Some("restart_on_corruption"),
        }
    }

    /// The name `--on-corruption` takes.
    pub fn name(self) -> &'static str {
        match self {
            OnCorruption::Eio => "eio",
            OnCorruption::Panic => "panic",
            OnCorruption::Restart => "restart",
        }
    }
}

impl std::str::FromStr for OnCorruption {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "eio" => Ok(OnCorruption::Eio),
            "panic" => Ok(OnCorruption::Panic),
            "restart" => Ok(OnCorruption::Restart),
            _ => Err(format!("{s:?}: expected eio, panic or restart")),
        }
    }
}

/// A dm-verity target for a sealed image: everything but the two devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityTable {
    /// Hash algorithm, block size (data and hash blocks alike) and salt of the seal.
    pub params: Params,
    /// EROFS blocks dm-verity maps and checks (the seal's `erofs_length` / block size).
    pub data_blocks: u64,
    /// Where the tree starts on the hash device, in blocks.
    pub hash_start_block: u64,
    /// The Merkle root (the seal's, which the authenticated descriptor names).
    pub root: Digest,
    /// What a mismatch does.
    pub on_corruption: OnCorruption,
}

impl VerityTable {
    /// The mapping of `seal`; refuses seals dm-verity cannot check as they are (a length or tree
    /// offset that is not a whole number of blocks, or an image of one block, which has no tree).
    pub fn for_seal(seal: &Seal, on_corruption: OnCorruption) -> Result<VerityTable, Error> {
        let params = seal.params;
        let bs = params.block_size() as u64;
        let len = seal.erofs_length();
        let tree = seal.header.tree_offset.get();
        let unsupported = |why: String| Err(Error::Unsupported(why));
        if !len.is_multiple_of(bs) {
            return unsupported(format!(
                "the seal covers {len} bytes, not a whole number of {bs}-byte blocks: dm-verity maps whole blocks"
            ));
        }
        if len <= bs {
            return unsupported(format!(
                "the image is {len} bytes, one block: its seal has no tree for dm-verity to check"
            ));
        }
        if !tree.is_multiple_of(bs) {
            return unsupported(format!(
                "the tree starts at byte {tree}, not on a {bs}-byte block boundary"
            ));
        }
        Ok(VerityTable {
            params,
            data_blocks: len / bs,
            hash_start_block: tree / bs,
            root: seal.root(),
            on_corruption,
        })
    }

    /// Length of the mapping in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.data_blocks * self.params.block_size() as u64 / SECTOR
    }

    /// The target's parameters (`dmsetup table` shows them), with the data and hash devices given
    /// as `major:minor`: format 1, the block sizes, the counts, the algorithm, the root and the salt
    /// (`-` for none), then the optional arguments.
    pub fn target_params(&self, data_dev: &str, hash_dev: &str) -> String {
        let bs = self.params.block_size();
        let salt = self.params.dm_verity_salt();
        let salt = if salt.is_empty() {
            "-".to_string()
        } else {
            salt.iter().map(|b| format!("{b:02x}")).collect()
        };
        let mut line = format!(
            "1 {data_dev} {hash_dev} {bs} {bs} {} {} {} {} {salt}",
            self.data_blocks,
            self.hash_start_block,
            dm_alg(self.params.alg()),
            self.root.to_hex(),
        );
        if let Some(arg) = self.on_corruption.table_arg() {
            line += &format!(" 1 {arg}");
        }
        line
    }
}

/// The kernel crypto name dm-verity takes.
fn dm_alg(alg: HashAlg) -> &'static str {
    match alg {
        HashAlg::Sha256 => "sha256",
        HashAlg::Sha512 => "sha512",
    }
}

/// Prefix of the names of the device-mapper devices sealfs creates.
pub const NAME_PREFIX: &str = "sealfs-";
/// Prefix of their UUIDs: only devices with it are ever removed by [`crate::unmount`].
pub const UUID_PREFIX: &str = "SEALFS-";

/// The device-mapper name for a mount at `mountpoint` (absolute): one per mount point, so that
/// `sealfs umount MNT` finds what a mount at MNT left behind even when the mount itself is gone.
pub fn dm_name(mountpoint: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let h = Sha256::digest(mountpoint.as_os_str().as_bytes());
    let hex: String = h[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{NAME_PREFIX}{hex}")
}

/// The device-mapper UUID: the prefix, the name's hash part and the image digest (shortened to the
/// 128 bytes a UUID may have).
pub fn dm_uuid(name: &str, digest: &Digest) -> String {
    let id = name.strip_prefix(NAME_PREFIX).unwrap_or(name);
    let mut uuid = format!("{UUID_PREFIX}{id}-{}-{}", digest.alg(), digest.to_hex());
    uuid.truncate(127);
    uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_corruption_names_round_trip() {
        for o in [
            OnCorruption::Eio,
            OnCorruption::Panic,
            OnCorruption::Restart,
        ] {
            assert_eq!(o.name().parse::<OnCorruption>().unwrap(), o);
        }
        assert!("ignore".parse::<OnCorruption>().is_err());
    }

    #[test]
    fn names_fit_device_mapper_limits() {
        let name = dm_name(Path::new("/mnt/a b"));
        assert!(name.len() < 128 && name.starts_with(NAME_PREFIX));
        assert_ne!(name, dm_name(Path::new("/mnt/a")));
        let d = HashAlg::Sha512.hash(b"x");
        let uuid = dm_uuid(&name, &d);
        assert!(uuid.len() <= 127 && uuid.starts_with(UUID_PREFIX), "{uuid}");
    }
}
