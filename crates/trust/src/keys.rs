//! Ed25519 keys in the PEM files `openssl` writes, and their fingerprints.

use ed25519_dalek::pkcs8::{
    spki::der::pem::LineEnding, DecodePrivateKey, DecodePublicKey, EncodePrivateKey,
    EncodePublicKey,
};
use ed25519_dalek::{Signer, Verifier};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Why a key could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// The fingerprint of a public key: the first 16 bytes of SHA-256 over the 32 raw public key
/// bytes, written `ed25519:<32 hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint([u8; 16]);

impl Fingerprint {
    /// The fingerprint of raw public key bytes.
    pub fn of(public_key: &[u8; 32]) -> Fingerprint {
        let h = Sha256::digest(public_key);
        Fingerprint(h[..16].try_into().expect("16 bytes"))
    }

    /// Its 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ed25519:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl PublicKey {
    /// A key from its 32 raw bytes (a valid curve point).
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, KeyError> {
        ed25519_dalek::VerifyingKey::from_bytes(bytes)
            .map(PublicKey)
            .map_err(|_| KeyError("not a valid Ed25519 public key".into()))
    }

    /// A key from an SPKI PEM file's text (`-----BEGIN PUBLIC KEY-----`, as `openssl pkey -pubout`
    /// writes it).
    pub fn from_pem(pem: &str) -> Result<PublicKey, KeyError> {
        ed25519_dalek::VerifyingKey::from_public_key_pem(pem)
            .map(PublicKey)
            .map_err(|e| KeyError(format!("not an Ed25519 public key in PEM (SPKI): {e}")))
    }

    /// Reads a public key PEM file.
    pub fn read(path: &std::path::Path) -> Result<PublicKey, KeyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
        PublicKey::from_pem(&text).map_err(|e| KeyError(format!("{}: {e}", path.display())))
    }

    /// Every key of a keyring: each `*.pub` file of directory `dir` (regular files, in name
    /// order). A keyring without one, or a key that cannot be read, is an error naming it.
    pub fn read_keyring(dir: &std::path::Path) -> Result<Vec<PublicKey>, KeyError> {
        let listing =
            std::fs::read_dir(dir).map_err(|e| KeyError(format!("{}: {e}", dir.display())))?;
        let mut found: Vec<std::path::PathBuf> = listing
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "pub") && p.is_file())
            .collect();
        if found.is_empty() {
            return Err(KeyError(format!("{}: no *.pub key in it", dir.display())));
        }
        found.sort();
        found.iter().map(|p| PublicKey::read(p)).collect()
    }

    /// The SPKI PEM text.
    pub fn to_pem(&self) -> String {
        self.0
            .to_public_key_pem(LineEnding::LF)
            .expect("an Ed25519 key encodes")
    }

    /// The 32 raw bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// Its fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.to_bytes())
    }

    /// Whether `signature` is this key's signature over `message` (strict verification: no
    /// small-order keys or malleable signatures).
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let sig = ed25519_dalek::Signature::from_bytes(signature);
        self.0.verify_strict(message, &sig).is_ok() && self.0.verify(message, &sig).is_ok()
    }
}

/// An Ed25519 private key.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public().fingerprint())
    }
}

impl SigningKey {
    /// A new random key (from the operating system's generator).
    pub fn generate() -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::generate(&mut rand_core::OsRng))
    }

    /// A key from a PKCS#8 PEM file's text (`-----BEGIN PRIVATE KEY-----`, as
    /// `openssl genpkey -algorithm ed25519` writes it).
    pub fn from_pem(pem: &str) -> Result<SigningKey, KeyError> {
        ed25519_dalek::SigningKey::from_pkcs8_pem(pem)
            .map(SigningKey)
            .map_err(|e| KeyError(format!("not an Ed25519 private key in PEM (PKCS#8): {e}")))
    }

    /// Reads a private key PEM file.
    pub fn read(path: &std::path::Path) -> Result<SigningKey, KeyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| KeyError(format!("{}: {e}", path.display())))?;
        SigningKey::from_pem(&text).map_err(|e| KeyError(format!("{}: {e}", path.display())))
    }

    /// The PKCS#8 PEM text (what `openssl genpkey` writes: version 1, no public key).
    pub fn to_pem(&self) -> String {
        let kp = ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: self.0.to_bytes(),
            public_key: None,
        };
        kp.to_pkcs8_pem(LineEnding::LF)
            .expect("an Ed25519 key encodes")
            .to_string()
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The signature over `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trip_sign_verify() {
        let k = SigningKey::generate();
        let k2 = SigningKey::from_pem(&k.to_pem()).unwrap();
        let p = PublicKey::from_pem(&k.public().to_pem()).unwrap();
        assert_eq!(p, k2.public());
        let sig = k2.sign(b"hello");
        assert!(p.verify(b"hello", &sig));
        assert!(!p.verify(b"hellp", &sig));
        assert!(k.to_pem().starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(p.to_pem().starts_with("-----BEGIN PUBLIC KEY-----\n"));
        assert!(p.fingerprint().to_string().starts_with("ed25519:"));
        assert_eq!(p.fingerprint().to_string().len(), 8 + 32);
        assert!(PublicKey::from_pem(&k.to_pem()).is_err());
        assert!(SigningKey::from_pem(&p.to_pem()).is_err());
    }

    #[test]
    fn rfc8032_test_vector_1() {
        // RFC 8032 §7.1, TEST 1: empty message.
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let public: [u8; 32] =
            hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
                .try_into()
                .unwrap();
        let sig: [u8; 64] = hex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b").try_into().unwrap();
        assert!(PublicKey::from_bytes(&public).unwrap().verify(b"", &sig));
    }
}
