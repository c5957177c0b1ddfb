//! POSIX ACLs: the text forms tar archives carry (`SCHILY.acl.access`, `SCHILY.acl.default`) and
//! the binary form (`system.posix_acl_access`/`_default` xattrs) turned into what the kernel
//! keeps after `tar -x` sets them.
//!
//! The binary form is the kernel's (`include/uapi/linux/posix_acl_xattr.h`): a little-endian
//! version 2, then 8-byte entries (tag u16, permissions u16, id u32), sorted by tag then id, the
//! id `ACL_UNDEFINED_ID` (u32::MAX) for owner, owning group, mask and other. Setting an access
//! ACL also sets the mode's permission bits (owner from the owner entry, group from the mask, or
//! the owning group without one, other from other), and an access ACL that says no more than
//! the mode is not kept at all (`posix_acl_update_mode`); a default ACL is kept as given.

/// Owner of the file.
const USER_OBJ: u16 = 0x01;
/// A named user.
const USER: u16 = 0x02;
/// Owning group.
const GROUP_OBJ: u16 = 0x04;
/// A named group.
const GROUP: u16 = 0x08;
/// The most a named entry or the owning group may grant.
const MASK: u16 = 0x10;
/// Everyone else.
const OTHER: u16 = 0x20;
/// The id of entries that name nobody.
const UNDEFINED_ID: u32 = u32::MAX;
/// `POSIX_ACL_XATTR_VERSION`.
const VERSION: u32 = 2;

/// One entry: tag, permissions (rwx as 4, 2, 1), id.
pub(crate) type AclEntry = (u16, u16, u32);

/// A valid ACL, entries in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acl(Vec<AclEntry>);

impl Acl {
    /// Parses the text form: entries separated by commas or newlines, each `tag:qualifier:perms`
    /// with an optional fourth field holding the numeric id (as star and bsdtar write it for
    /// named entries); `#` starts a comment. A qualifier that is a name without that numeric
    /// field is refused: resolving it would make the image depend on the host's user database.
    pub fn from_text(text: &[u8]) -> Result<Acl, String> {
        let text = std::str::from_utf8(text).map_err(|_| "ACL text is not UTF-8".to_string())?;
        let mut entries = Vec::new();
        for raw in text.split([',', '\n']) {
            let e = raw.split('#').next().unwrap_or("").trim();
            if e.is_empty() {
                continue;
            }
            let fields: Vec<&str> = e.split(':').collect();
            if fields.len() < 3 || fields.len() > 4 {
                return Err(format!(
                    "ACL entry {e:?}: expected tag:qualifier:permissions"
                ));
            }
            let (tag, qual, perms) = (fields[0], fields[1], fields[2]);
            let named = !qual.is_empty();
            let tag = match (tag, named) {
                ("user" | "u", false) => USER_OBJ,
                ("user" | "u", true) => USER,
                ("group" | "g", false) => GROUP_OBJ,
                ("group" | "g", true) => GROUP,
                ("mask" | "m", false) => MASK,
                ("other" | "o", false) => OTHER,
                _ => return Err(format!("ACL entry {e:?}: unknown tag")),
            };
            let id = if !named {
                UNDEFINED_ID
            } else if let Ok(n) = qual.parse::<u32>() {
                n
            } else if let Some(n) = fields.get(3).and_then(|f| f.parse::<u32>().ok()) {
                n
            } else {
                return Err(format!(
                    "ACL entry {e:?} names {qual:?} without its number; \
                     only numeric ids are taken (the host's names would change the image)"
                ));
            };
            let mut p = 0u16;
            for c in perms.chars() {
                p |= match c {
                    'r' => 4,
                    'w' => 2,
                    'x' => 1,
                    '-' => 0,
                    _ => return Err(format!("ACL entry {e:?}: bad permissions")),
                };
            }
            entries.push((tag, p, id));
        }
        Acl::checked(entries)
    }

    /// Parses the kernel's binary form.
    pub fn from_xattr(value: &[u8]) -> Result<Acl, String> {
        if value.len() < 4 || !(value.len() - 4).is_multiple_of(8) {
            return Err(format!("POSIX ACL xattr of {} bytes", value.len()));
        }
        let version = u32::from_le_bytes(value[..4].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(format!("POSIX ACL xattr version {version}"));
        }
        let entries = value[4..]
            .chunks_exact(8)
            .map(|c| {
                (
                    u16::from_le_bytes([c[0], c[1]]),
                    u16::from_le_bytes([c[2], c[3]]),
                    u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        Acl::checked(entries)
    }

    /// Sorts `entries` as the kernel wants them and checks the ACL is valid
    /// (`posix_acl_valid`): one owner, owning group and other entry, a mask if there are named
    /// entries, no id named twice, permissions within rwx.
    fn checked(mut entries: Vec<AclEntry>) -> Result<Acl, String> {
        for e in &mut entries {
            if matches!(e.0, USER_OBJ | GROUP_OBJ | MASK | OTHER) {
                e.2 = UNDEFINED_ID;
            }
            if e.1 & !7 != 0 {
                return Err(format!("ACL permissions {:#o}", e.1));
            }
        }
        entries.sort_by_key(|&(tag, _, id)| (tag, id));
        let count = |tag| entries.iter().filter(|e| e.0 == tag).count();
        if count(USER_OBJ) != 1 || count(GROUP_OBJ) != 1 || count(OTHER) != 1 || count(MASK) > 1 {
            return Err("ACL without exactly one owner, group and other entry".into());
        }
        if (count(USER) + count(GROUP)) > 0 && count(MASK) == 0 {
            return Err("ACL with named entries but no mask".into());
        }
        if entries
            .windows(2)
            .any(|w| (w[0].0, w[0].2) == (w[1].0, w[1].2))
        {
            return Err("ACL names an id twice".into());
        }
        Ok(Acl(entries))
    }

    /// The kernel's binary form.
    pub fn to_xattr(&self) -> Vec<u8> {
        let mut out = VERSION.to_le_bytes().to_vec();
        for &(tag, perm, id) in &self.0 {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// Whether it says no more than a mode would (owner, owning group and other only).
    pub fn is_mode(&self) -> bool {
        self.0.len() == 3
    }

    /// `mode` with its permission bits set from this access ACL, as the kernel sets them.
    pub fn apply_to_mode(&self, mode: u32) -> u32 {
        let perm = |tag| self.0.iter().find(|e| e.0 == tag).map_or(0, |e| e.1 as u32);
        let group = if self.0.iter().any(|e| e.0 == MASK) {
            perm(MASK)
        } else {
            perm(GROUP_OBJ)
        };
        (mode & !0o777) | perm(USER_OBJ) << 6 | group << 3 | perm(OTHER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `getfattr -e hex -n system.posix_acl_access` printed on this machine after
    /// `setfacl -m u:1234:rwx,g:77:r` on a file of mode 0644.
    const KERNEL: &str = "0200000001000600ffffffff02000700d204000004000400ffffffff080004004d00000010000700ffffffff20000400ffffffff";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn gnu_and_bsd_texts_give_the_kernels_bytes() {
        // GNU tar 1.34 (newlines) and bsdtar (commas, names with their number) of that file.
        let gnu = b"user::rw-\nuser:1234:rwx\ngroup::r--\ngroup:77:r--\nmask::rwx\nother::r--\n";
        let bsd = b"user::rw-,group::r--,other::r--,user:someone:rwx:1234,group:77:r--,mask::rwx";
        for text in [&gnu[..], &bsd[..]] {
            let acl = Acl::from_text(text).unwrap();
            assert_eq!(acl.to_xattr(), hex(KERNEL));
            assert!(!acl.is_mode());
            assert_eq!(acl.apply_to_mode(0o100640), 0o100674);
        }
        assert_eq!(
            Acl::from_xattr(&hex(KERNEL)).unwrap().to_xattr(),
            hex(KERNEL)
        );
        let plain = Acl::from_text(b"u::rwx,g::r-x,o::---").unwrap();
        assert!(plain.is_mode());
        assert_eq!(plain.apply_to_mode(0o40777), 0o40750);
    }

    #[test]
    fn invalid_acls_are_refused() {
        for bad in [
            &b"user::rw-,group::r--"[..],
            b"user::rw-,user:5:r--,group::r--,other::---",
            b"user::rw-,group::r--,other::---,user:bin:r--,mask::r--",
            b"user::rwz,group::r--,other::---",
            b"user::rw-,user::r--,group::r--,other::---",
        ] {
            assert!(
                Acl::from_text(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(Acl::from_xattr(&[2, 0, 0, 0, 1]).is_err());
        assert!(Acl::from_xattr(&hex(&KERNEL.replacen("02", "03", 1))).is_err());
    }
}
