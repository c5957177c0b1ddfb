//! Signature entries, the signature section, and the check a reader makes with its keys.

use crate::{Fingerprint, PublicKey, Statement, Version};
use sealfs_format as fmt;
use sealfs_verity::{Digest, Params};

/// One signature: a key, the statement bytes it signed, the Ed25519 signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The signer's raw public key.
    pub public_key: [u8; 32],
    /// The statement bytes that were signed.
    pub statement: Vec<u8>,
    /// The Ed25519 signature over `statement`.
    pub signature: [u8; 64],
}

impl Signature {
    /// The signer's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.public_key)
    }

    /// Whether the signature verifies with the key it names (it says nothing about whether that key
    /// is trusted).
    pub fn verifies(&self) -> bool {
        PublicKey::from_bytes(&self.public_key)
            .is_ok_and(|k| k.verify(&self.statement, &self.signature))
    }
}

/// Encodes a signature section (`docs/format.md` §10.3) from at least one signature.
pub fn encode_section(signatures: &[Signature]) -> Vec<u8> {
    let refs: Vec<_> = signatures
        .iter()
        .map(|s| fmt::SignatureEntryRef {
            public_key: &s.public_key,
            statement: &s.statement,
            signature: &s.signature,
        })
        .collect();
    fmt::encode_signatures(&refs)
}

/// Parses a signature section; the error text says what is wrong.
pub fn parse_section(bytes: &[u8]) -> Result<Vec<Signature>, String> {
    let entries = fmt::parse_signatures(bytes).map_err(|e| match e {
        fmt::SealError::Damaged(what) => what,
        other => other.to_string(),
    })?;
    Ok(entries
        .into_iter()
        .map(|e| Signature {
            public_key: *e.public_key,
            statement: e.statement.to_vec(),
            signature: *e.signature,
        })
        .collect())
}

/// Why the signatures did not authenticate an image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// There is no signature at all.
    #[error("not signed")]
    NotSigned,
    /// Every signature is by a key not given.
    #[error("signed only by unknown keys (fingerprints {})", list(.0))]
    UnknownKeys(Vec<Fingerprint>),
    /// A signature by a given key verifies, but its statement is for another image (or other seal
    /// parameters).
    #[error("the statement signed by {fingerprint} names another image (digest {digest}; its {field} differs from this seal's)")]
    OtherImage {
        /// The signer.
        fingerprint: Fingerprint,
        /// The digest the statement names.
        digest: Digest,
        /// The first field that differs.
        field: &'static str,
    },
    /// A signature by a given key does not verify, or what it signed is not a statement.
    #[error("damaged signature by key {fingerprint}: {what}")]
    Damaged {
        /// The signer.
        fingerprint: Fingerprint,
        /// What is wrong.
        what: String,
    },
    /// The signature section (or `IMAGE.sig`) cannot be parsed.
    #[error("damaged signature section: {0}")]
    Section(String),
    /// Signatures by given keys bind this seal, but none vouches for a version at or above the
    /// floor: an older image, validly signed (a rollback), or a statement without a version.
    #[error("{}", rollback_text(.fingerprint, .version.as_deref(), .minimum))]
    Rollback {
        /// The signer of the newest such statement.
        fingerprint: Fingerprint,
        /// The version it names (`None`: no version, or text that is not a version).
        version: Option<String>,
        /// The floor given.
        minimum: Version,
    },
}

/// [`Refusal::Rollback`] in words: a version below the floor, none, or text that is no version
/// (which no floor can be compared with: it is not "below" one).
fn rollback_text(fingerprint: &Fingerprint, version: Option<&str>, minimum: &Version) -> String {
    match version {
        None => format!(
            "signed by {fingerprint} without a version, below the minimum version {minimum}: refused as a possible rollback"
        ),
        Some(v) => match v.parse::<Version>() {
            Ok(_) => format!(
                "signed by {fingerprint} as version {v}, below the minimum version {minimum}: refused as a possible rollback"
            ),
            Err(e) => format!(
                "signed by {fingerprint} with a version that cannot be compared with the minimum version {minimum}: {e}"
            ),
        },
    }
}

fn list(f: &[Fingerprint]) -> String {
    f.iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one check at open: some signature by one of `keys` verifies over a statement that binds this
/// seal (`params`, `digest`, `erofs_length`) and, when `min_version` is given, names a
/// [`Version`] at or above it (rollback protection: an older image, however validly signed, is
/// refused). On success, the signer and its statement; otherwise why not, the most telling reason
/// first (a rollback, then a damaged signature by a given key, then a statement for another image,
/// then unknown keys, then none at all).
pub fn authenticate(
    signatures: &[Signature],
    keys: &[PublicKey],
    params: &Params,
    digest: &Digest,
    erofs_length: u64,
    min_version: Option<&Version>,
) -> Result<(Fingerprint, Statement), Refusal> {
    if signatures.is_empty() {
        return Err(Refusal::NotSigned);
    }
    let mut rollback: Option<(Option<Version>, Refusal)> = None;
    let mut damaged = None;
    let mut other = None;
    let mut unknown = Vec::new();
    for sig in signatures {
        let fingerprint = sig.fingerprint();
        let Some(key) = keys.iter().find(|k| k.to_bytes() == sig.public_key) else {
            if !unknown.contains(&fingerprint) {
                unknown.push(fingerprint);
            }
            continue;
        };
        if !key.verify(&sig.statement, &sig.signature) {
            damaged.get_or_insert(Refusal::Damaged {
                fingerprint,
                what: "the signature does not verify over its statement".into(),
            });
            continue;
        }
        let statement = match Statement::parse(&sig.statement) {
            Ok(s) => s,
            Err(e) => {
                damaged.get_or_insert(Refusal::Damaged {
                    fingerprint,
                    what: e.to_string(),
                });
                continue;
            }
        };
        match statement.binds(params, digest, erofs_length) {
            Ok(()) => {
                let Some(minimum) = min_version else {
                    return Ok((fingerprint, statement));
                };
                let version = statement.version.as_deref().and_then(|v| v.parse().ok());
                if version.as_ref().is_some_and(|v| v >= minimum) {
                    return Ok((fingerprint, statement));
                }
                // Report the newest version offered.
                if rollback.as_ref().is_none_or(|(best, _)| version > *best) {
                    let refusal = Refusal::Rollback {
                        fingerprint,
                        version: statement.version.clone(),
                        minimum: minimum.clone(),
                    };
                    rollback = Some((version, refusal));
                }
            }
            Err(field) => {
                other.get_or_insert(Refusal::OtherImage {
                    fingerprint,
                    digest: statement.digest,
                    field,
                });
            }
        }
    }
    Err(rollback
        .map(|(_, r)| r)
        .or(damaged)
        .or(other)
        .unwrap_or(Refusal::UnknownKeys(unknown)))
}
