//! Signed images: an Ed25519 signature over a small canonical **statement** that binds an image
//! digest and the seal's parameters (`docs/format.md` §10).
//!
//! - [`Statement`]: the canonical, versioned text that is signed, and its strict parser.
//! - [`PublicKey`], [`SigningKey`], [`Fingerprint`]: keys in the PEM files `openssl` writes
//!   (`openssl genpkey -algorithm ed25519`, `openssl pkey -pubout`).
//! - [`Signature`] and [`encode_section`]/[`parse_section`]: the signature section of a seal (or
//!   of a detached `IMAGE.sig`), whose byte layout is in `sealfs_format`.
//! - [`authenticate`]: the one check a reader makes at open: some signature by one of the given keys
//!   verifies over a statement that binds this seal (and, given a floor, names a [`Version`] at or
//!   above it: rollback protection).
//! - [`sign_image`]: adds a signature to a sealed image (attached seal, sidecar or `IMAGE.sig`),
//!   never touching the EROFS bytes, so the image digest does not change.

mod keys;
mod section;
mod sign;
mod statement;
mod version;

pub use keys::{Fingerprint, KeyError, PublicKey, SigningKey};
pub use section::{authenticate, encode_section, parse_section, Refusal, Signature};
pub use sign::{
    add_signature, detached_path, seal_statement, sign_image, SignError, SignTarget, Signed,
};
pub use statement::{Statement, StatementError};
pub use version::{Version, VersionError};
