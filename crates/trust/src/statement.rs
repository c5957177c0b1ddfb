//! The statement a key signs: canonical, versioned UTF-8 text (`docs/format.md` §10.1).

use sealfs_verity::{Digest, Params};
use std::fmt::Write as _;

/// First line of every version-1 statement.
const HEADER: &str = "sealfs-statement 1";

/// Why bytes are not a statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a sealfs statement: {0}")]
pub struct StatementError(String);

/// What a signature vouches for: an image digest with the seal parameters it was computed with,
/// and optional descriptive fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The image digest (its algorithm is the seal's hash algorithm).
    pub digest: Digest,
    /// The Merkle block size.
    pub block_size: u32,
    /// The salt (empty for none).
    pub salt: Vec<u8>,
    /// Bytes of EROFS data the digest covers.
    pub erofs_length: u64,
    /// A name for the image (no control characters, not empty).
    pub name: Option<String>,
    /// A version of the image (no control characters, not empty).
    pub version: Option<String>,
    /// When it was signed, in seconds since the Unix epoch.
    pub created: Option<u64>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Whether `text` may be a name or version: not empty, no control characters.
fn valid_text(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(char::is_control)
}

impl Statement {
    /// The statement for a seal with these parameters, digest and EROFS length.
    pub fn for_seal(params: &Params, digest: Digest, erofs_length: u64) -> Statement {
        Statement {
            digest,
            block_size: params.block_size() as u32,
            salt: params.salt().to_vec(),
            erofs_length,
            name: None,
            version: None,
            created: None,
        }
    }

    /// Checks the optional text fields (the encoder refuses what the parser would refuse).
    pub fn validate(&self) -> Result<(), StatementError> {
        for (what, v) in [("name", &self.name), ("version", &self.version)] {
            if v.as_deref().is_some_and(|t| !valid_text(t)) {
                return Err(StatementError(format!(
                    "the {what} must be non-empty text without control characters"
                )));
            }
        }
        Ok(())
    }

    /// The canonical bytes (call [`Statement::validate`] first for fields from outside).
    pub fn encode(&self) -> Vec<u8> {
        let alg = self.digest.alg().name();
        let mut s = String::new();
        let _ = writeln!(s, "{HEADER}");
        let _ = writeln!(s, "digest {}", self.digest);
        let _ = writeln!(s, "hash-algorithm {alg}");
        let _ = writeln!(s, "block-size {}", self.block_size);
        let salt = if self.salt.is_empty() {
            "-".to_string()
        } else {
            hex(&self.salt)
        };
        let _ = writeln!(s, "salt {salt}");
        let _ = writeln!(s, "erofs-length {}", self.erofs_length);
        if let Some(n) = &self.name {
            let _ = writeln!(s, "name {n}");
        }
        if let Some(v) = &self.version {
            let _ = writeln!(s, "version {v}");
        }
        if let Some(c) = self.created {
            let _ = writeln!(s, "created {c}");
        }
        s.into_bytes()
    }

    /// Parses a statement strictly: the bytes must be exactly what [`Statement::encode`] writes for
    /// the fields they hold (UTF-8, LF-terminated lines, the fixed order, lowercase hex, decimal
    /// without leading zeros, valid parameters).
    pub fn parse(bytes: &[u8]) -> Result<Statement, StatementError> {
        let bad = |what: &str| StatementError(what.to_string());
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let body = text
            .strip_suffix('\n')
            .ok_or_else(|| bad("the last line does not end in a line feed"))?;
        let mut lines = body.split('\n');
        if lines.next() != Some(HEADER) {
            return Err(bad("the first line is not `sealfs-statement 1`"));
        }
        let mut field = |key: &str| -> Result<&str, StatementError> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(key))
                .and_then(|l| l.strip_prefix(' '))
                .ok_or_else(|| StatementError(format!("no `{key}` line where it belongs")))
        };
        let digest: Digest = field("digest")?
            .parse()
            .map_err(|e| bad(&format!("digest: {e}")))?;
        let alg = field("hash-algorithm")?;
        if alg != digest.alg().name() {
            return Err(bad("the hash algorithm is not the digest's"));
        }
        let block_size: u32 = field("block-size")?
            .parse()
            .map_err(|_| bad("block-size is not a number"))?;
        let salt = match field("salt")? {
            "-" => Vec::new(),
            h => unhex(h).ok_or_else(|| bad("salt is not hex"))?,
        };
        Params::new(digest.alg(), block_size as usize, &salt)
            .map_err(|e| bad(&format!("parameters: {e}")))?;
        let erofs_length: u64 = field("erofs-length")?
            .parse()
            .map_err(|_| bad("erofs-length is not a number"))?;
        let mut st = Statement {
            digest,
            block_size,
            salt,
            erofs_length,
            name: None,
            version: None,
            created: None,
        };
        let mut rest: Vec<&str> = lines.collect();
        rest.reverse();
        let mut take = |key: &str| -> Option<String> {
            let l = rest.last()?;
            let v = l.strip_prefix(key)?.strip_prefix(' ')?.to_string();
            rest.pop();
            Some(v)
        };
        st.name = take("name");
        st.version = take("version");
        st.created = take("created")
            .map(|c| c.parse().map_err(|_| bad("created is not a number")))
            .transpose()?;
        if !rest.is_empty() {
            return Err(bad("unknown or misplaced lines"));
        }
        st.validate()?;
        if st.encode() != bytes {
            return Err(bad("not in canonical form"));
        }
        Ok(st)
    }

    /// Whether the statement binds exactly this seal: digest (with its algorithm), block size,
    /// salt and EROFS length. `Err` names the first field that differs.
    pub fn binds(
        &self,
        params: &Params,
        digest: &Digest,
        erofs_length: u64,
    ) -> Result<(), &'static str> {
        if self.digest != *digest {
            return Err("digest");
        }
        if self.block_size as usize != params.block_size() {
            return Err("block-size");
        }
        if self.salt != params.salt() {
            return Err("salt");
        }
        if self.erofs_length != erofs_length {
            return Err("erofs-length");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealfs_verity::HashAlg;

    fn sample() -> Statement {
        let digest = Digest::new(HashAlg::Sha256, &[0xab; 32]).unwrap();
        let params = Params::new(HashAlg::Sha256, 4096, &[1, 2]).unwrap();
        let mut s = Statement::for_seal(&params, digest, 12288);
        s.name = Some("base image".into());
        s.version = Some("1.2 ü".into());
        s.created = Some(1_764_000_000);
        s
    }

    #[test]
    fn round_trip_and_exact_text() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            format!(
                "sealfs-statement 1\ndigest sha256:{}\nhash-algorithm sha256\nblock-size 4096\nsalt 0102\nerofs-length 12288\nname base image\nversion 1.2 ü\ncreated 1764000000\n",
                "ab".repeat(32)
            )
        );
        assert_eq!(Statement::parse(&bytes).unwrap(), s);
        let mut minimal = s.clone();
        minimal.name = None;
        minimal.version = None;
        minimal.created = None;
        minimal.salt.clear();
        let b = minimal.encode();
        assert!(String::from_utf8_lossy(&b).contains("\nsalt -\n"));
        assert_eq!(Statement::parse(&b).unwrap(), minimal);
        // Only some optional fields.
        let mut some = s.clone();
        some.version = None;
        assert_eq!(Statement::parse(&some.encode()).unwrap(), some);
    }

    #[test]
    fn strict_parsing() {
        let good = String::from_utf8(sample().encode()).unwrap();
        let variants = [
            good.replace("sealfs-statement 1", "sealfs-statement 2"),
            good.replace("sha256:ab", "sha256:AB"),
            good.replace("sha256:ab", "SHA256:ab"),
            good.replace("hash-algorithm sha256", "hash-algorithm sha512"),
            good.replace("block-size 4096", "block-size 04096"),
            good.replace("block-size 4096", "block-size 4095"),
            good.replace("block-size 4096", "block-size  4096"),
            good.replace("salt 0102", "salt 0A02"),
            good.replace("salt 0102", "salt "),
            good.replace("erofs-length 12288", "erofs-length +12288"),
            good.replace("name base image\n", "name \n"),
            good.replace("name base image", "name base\timage"),
            good.replace("created 1764000000\n", "created 1764000000"),
            good.replace('\n', "\r\n"),
            good.replace(
                "name base image\nversion 1.2 ü\n",
                "version 1.2 ü\nname base image\n",
            ),
            good.clone() + "extra 1\n",
            good.clone() + "\n",
            good.replace("created 1764000000", "created -1"),
        ];
        for v in &variants {
            assert!(Statement::parse(v.as_bytes()).is_err(), "accepted {v:?}");
        }
        assert!(Statement::parse(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn truncations_and_bit_flips_never_panic() {
        let bytes = sample().encode();
        // A truncation is a statement only where it ends a line after the required fields (the
        // optional ones may be absent); anything it accepts is canonical.
        for n in 0..bytes.len() {
            if let Ok(s) = Statement::parse(&bytes[..n]) {
                assert_eq!(s.encode(), &bytes[..n]);
                assert!(n > 100 && bytes[n - 1] == b'\n');
            }
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                if let Ok(s) = Statement::parse(&b) {
                    assert_eq!(s.encode(), b);
                }
            }
        }
    }

    #[test]
    fn binds_checks_every_field() {
        let s = sample();
        let params = Params::new(HashAlg::Sha256, 4096, &[1, 2]).unwrap();
        assert_eq!(s.binds(&params, &s.digest, 12288), Ok(()));
        assert_eq!(s.binds(&params, &s.digest, 4096), Err("erofs-length"));
        let p2 = Params::new(HashAlg::Sha256, 1024, &[1, 2]).unwrap();
        assert_eq!(s.binds(&p2, &s.digest, 12288), Err("block-size"));
        let p3 = Params::new(HashAlg::Sha256, 4096, &[]).unwrap();
        assert_eq!(s.binds(&p3, &s.digest, 12288), Err("salt"));
        let d = Digest::new(HashAlg::Sha256, &[0xac; 32]).unwrap();
        assert_eq!(s.binds(&params, &d, 12288), Err("digest"));
    }
}
