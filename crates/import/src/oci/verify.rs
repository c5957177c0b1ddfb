//! Blobs read with their size and digest checked as they are read: the bytes of a blob are
//! what its descriptor names, or the read fails (at the end, or as soon as it runs long).

use super::spec::{Algorithm, Descriptor, Digest};
use sha2::Digest as _;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};

enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn new(alg: Algorithm) -> Hasher {
        match alg {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }

    fn finish(&mut self) -> String {
        let bytes: Vec<u8> = match self {
            Hasher::Sha256(h) => h.finalize_reset().to_vec(),
            Hasher::Sha512(h) => h.finalize_reset().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A blob's bytes, checked against its descriptor: reading past the size it gives fails at
/// once, and the end of the stream fails unless the size and digest are the descriptor's.
/// A failure is sticky: every later read returns it again.
pub struct Verified {
    inner: Box<dyn Read + Send>,
    hasher: Hasher,
    want: Digest,
    size: u64,
    read: u64,
    failed: Option<(io::ErrorKind, String)>,
    done: bool,
}

impl Verified {
    /// Checks what `inner` gives against `d`.
    pub fn new(inner: Box<dyn Read + Send>, d: &Descriptor) -> Verified {
        Verified {
            inner,
            hasher: Hasher::new(d.digest.algorithm),
            want: d.digest.clone(),
            size: d.size,
            read: 0,
            failed: None,
            done: false,
        }
    }

    fn fail(&mut self, kind: io::ErrorKind, what: String) -> io::Error {
        self.failed = Some((kind, what.clone()));
        io::Error::new(kind, what)
    }

    /// Reads the rest of the blob (what a reader above did not need), checking it.
    pub fn finish(&mut self) -> io::Result<()> {
        io::copy(self, &mut io::sink()).map(drop)
    }
}

impl Read for Verified {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((kind, what)) = &self.failed {
            return Err(io::Error::new(*kind, what.clone()));
        }
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        // Never more than one byte past the size: enough to see that it runs long.
        let room = (self.size - self.read).saturating_add(1);
        let cap = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..cap])?;
        if n == 0 {
            if self.read < self.size {
                return Err(self.fail(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the blob ends after {} of the {} bytes its descriptor gives",
                        self.read, self.size
                    ),
                ));
            }
            let got = self.hasher.finish();
            if got != self.want.hex {
                return Err(self.fail(
                    io::ErrorKind::InvalidData,
                    format!(
                        "its bytes hash to {}:{got}, not to the digest its descriptor gives",
                        self.want.algorithm.name()
                    ),
                ));
            }
            self.done = true;
            return Ok(0);
        }
        self.read += n as u64;
        if self.read > self.size {
            return Err(self.fail(
                io::ErrorKind::InvalidData,
                format!(
                    "the blob is longer than the {} bytes its descriptor gives",
                    self.size
                ),
            ));
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// A [`Verified`] blob shared between the reader that consumes it and whoever finishes it.
#[derive(Clone)]
pub struct Shared(pub Arc<Mutex<Verified>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).read(buf)
    }
}

impl Shared {
    /// Reads the rest of the blob and checks it.
    pub fn finish(&self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).finish()
    }
}

/// Reads a whole small blob (a manifest, a config: at most `limit` bytes), checked.
pub fn read_small(inner: Box<dyn Read + Send>, d: &Descriptor, limit: u64) -> io::Result<Vec<u8>> {
    if d.size > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "its descriptor gives {} bytes, more than the {limit} read",
                d.size
            ),
        ));
    }
    let mut out = Vec::with_capacity(d.size as usize);
    Verified::new(inner, d).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn desc(bytes: &[u8]) -> Descriptor {
        let hex: String = sha2::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Descriptor {
            media_type: "x".into(),
            digest: format!("sha256:{hex}").parse().unwrap(),
            size: bytes.len() as u64,
            platform: None,
            annotations: BTreeMap::new(),
        }
    }

    fn read(bytes: &'static [u8], d: &Descriptor) -> io::Result<Vec<u8>> {
        read_small(Box::new(bytes), d, 1 << 20)
    }

    #[test]
    fn a_blob_is_its_descriptor_or_an_error() {
        let d = desc(b"hello");
        assert_eq!(read(b"hello", &d).unwrap(), b"hello");
        let e = read(b"hellO", &d).unwrap_err().to_string();
        assert!(
            e.contains("hash to sha256:") && e.contains("not to the digest"),
            "{e}"
        );
        let e = read(b"hell", &d).unwrap_err().to_string();
        assert!(e.contains("ends after 4 of the 5 bytes"), "{e}");
        let e = read(b"hello!", &d).unwrap_err().to_string();
        assert!(e.contains("longer than the 5 bytes"), "{e}");
        let e = read_small(Box::new(&b"hello"[..]), &d, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than the 4"), "{e}");
        // A failure stays.
        let mut v = Verified::new(Box::new(&b"hellO"[..]), &d);
        assert!(v.finish().is_err());
        assert!(v.read(&mut [0u8; 8]).is_err());
    }
}
