//! Image references: `oci://HOST[:PORT]/REPO[:TAG][@DIGEST]`.
//!
//! The scheme says how the registry is spoken to: `oci://` over HTTPS (certificates checked, the
//! system's authorities and `--ca-cert`), `oci+http://` over plain HTTP, asked for by name (a
//! registry on loopback, a test). `docker://` is accepted as `oci://` (skopeo's spelling). The
//! host is always written out (no default registry is guessed); `docker.io` is Docker Hub. A
//! reference with neither tag nor digest means the tag `latest`; a digest (`@sha256:<64 hex>`)
//! names one manifest whatever the tags say, and reads made through it are pinned to it.
//!
//! Repository names and tags follow the grammar of the OCI distribution specification
//! (`[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` path components; tags `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).

use crate::RegistryError;
use std::fmt;
use std::str::FromStr;

/// How a registry is spoken to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// HTTPS (`oci://`, `docker://`).
    Https,
    /// Plain HTTP (`oci+http://`).
    Http,
}

impl Transport {
    /// `https` or `http`.
    pub fn scheme(self) -> &'static str {
        match self {
            Transport::Https => "https",
            Transport::Http => "http",
        }
    }
}

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// HTTPS or plain HTTP.
    pub transport: Transport,
    /// `HOST[:PORT]`, as written (IPv6 hosts in brackets).
    pub registry: String,
    /// The repository (`library/busybox`).
    pub repository: String,
    /// The tag, if one was written.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:<hex>`), if one was written (or pinned, see [`ImageRef::pinned`]).
    pub digest: Option<String>,
}

/// The schemes a reference may start with, and their transports.
const SCHEMES: [(&str, Transport); 3] = [
    ("oci://", Transport::Https),
    ("oci+http://", Transport::Http),
    ("docker://", Transport::Https),
];

/// Whether `location` is written as an image reference (starts with one of its schemes) rather
/// than a path or another URL.
pub fn is_image_ref(location: &str) -> bool {
    SCHEMES
        .iter()
        .any(|(s, _)| starts_with_ignore_case(location, s))
}

/// Whether `location` starts with `prefix`, ASCII case ignored (compared as bytes: a prefix's
/// length may fall inside a character of `location`).
fn starts_with_ignore_case(location: &str, prefix: &str) -> bool {
    location
        .as_bytes()
        .get(..prefix.len())
        .is_some_and(|b| b.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Whether `s` is a digest this crate checks: `sha256:` and 64 lowercase hex digits, or `sha512:`
/// and 128.
pub fn is_digest(s: &str) -> bool {
    let (alg, hex) = match s.split_once(':') {
        Some(x) => x,
        None => return false,
    };
    let len = match alg {
        "sha256" => 64,
        "sha512" => 128,
        _ => return false,
    };
    hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_component(c: &str) -> bool {
    // [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)*
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'_' | b'.' | b'-'))
}

impl FromStr for ImageRef {
    type Err = RegistryError;

    fn from_str(s: &str) -> Result<ImageRef, RegistryError> {
        let bad = |reason: &str| RegistryError::BadReference {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        let (scheme_len, transport) = SCHEMES
            .iter()
            .find(|(p, _)| starts_with_ignore_case(s, p))
            .map(|(p, t)| (p.len(), *t))
            .ok_or_else(|| bad("not an image reference (oci://, oci+http:// or docker://)"))?;
        let rest = &s[scheme_len..];
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the registry (HOST[:PORT]/REPO[:TAG])"))?;
        if registry.is_empty() {
            return Err(bad("no registry host"));
        }
        let host_ok = registry.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']' | b'_')
        });
        if !host_ok {
            return Err(bad("the registry is not HOST[:PORT]"));
        }
        if let Some((_, port)) = registry
            .rsplit_once(':')
            .filter(|_| !registry.ends_with(']'))
        {
            if !registry.starts_with('[') && port.parse::<u16>().is_err() {
                return Err(bad("the registry's port is not a number"));
            }
        }
        let (name, digest) = match path.split_once('@') {
            Some((n, d)) => {
                if !is_digest(d) {
                    return Err(bad(
                        "the digest is not sha256:<64 hex> (or sha512:<128 hex>)",
                    ));
                }
                (n, Some(d.to_string()))
            }
            None => (path, None),
        };
        // A tag follows the last `:` after the last `/`.
        let last = name.rsplit('/').next().unwrap_or(name);
        let (repository, tag) = match last.rsplit_once(':') {
            Some((_, t)) => {
                if !is_tag(t) {
                    return Err(bad("the tag is not [A-Za-z0-9_][A-Za-z0-9._-]{0,127}"));
                }
                (&name[..name.len() - t.len() - 1], Some(t.to_string()))
            }
            None => (name, None),
        };
        if repository.is_empty() || !repository.split('/').all(is_component) {
            return Err(bad(
                "the repository is not lowercase path components ([a-z0-9] joined by . _ __ or -)",
            ));
        }
        if repository.len() > 255 {
            return Err(bad("the repository name is longer than 255 characters"));
        }
        Ok(ImageRef {
            transport,
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag,
            digest,
        })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.transport {
            Transport::Https => "oci://",
            Transport::Http => "oci+http://",
        };
        write!(f, "{scheme}{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl ImageRef {
    /// The tag to resolve or push to: the one written, else `latest` (none when only a digest is
    /// written).
    pub fn tag_or_latest(&self) -> Option<&str> {
        match (&self.tag, &self.digest) {
            (Some(t), _) => Some(t),
            (None, Some(_)) => None,
            (None, None) => Some("latest"),
        }
    }

    /// This reference pinned to `digest` (the tag kept for messages).
    pub fn pinned(&self, digest: &str) -> ImageRef {
        ImageRef {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// Another repository or tag in the same registry, by its digest (`sha256:...`) or tag.
    pub fn sibling(&self, tag: Option<&str>, digest: Option<&str>) -> ImageRef {
        ImageRef {
            transport: self.transport,
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: tag.map(str::to_string),
            digest: digest.map(str::to_string),
        }
    }

    /// What `/v2/<name>/manifests/<this>` takes: the digest if pinned, else the tag.
    pub fn manifest_key(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag_or_latest())
            .unwrap_or("latest")
    }

    /// `https://HOST[:PORT]` (or `http://`).
    pub fn base_url(&self) -> String {
        format!("{}://{}", self.transport.scheme(), self.registry)
    }

    /// The `oci-client` form of this reference.
    pub(crate) fn to_oci(&self) -> oci_client::Reference {
        let (r, n) = (self.registry.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(t), Some(d)) => {
                oci_client::Reference::with_tag_and_digest(r, n, t.clone(), d.clone())
            }
            (None, Some(d)) => oci_client::Reference::with_digest(r, n, d.clone()),
            (t, None) => {
                oci_client::Reference::with_tag(r, n, t.clone().unwrap_or_else(|| "latest".into()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print_back() {
        let d = format!("sha256:{}", "ab".repeat(32));
        for (text, transport, registry, repo, tag, digest) in [
            (
                "oci://127.0.0.1:5000/a/b:v1",
                Transport::Https,
                "127.0.0.1:5000",
                "a/b",
                Some("v1"),
                None,
            ),
            (
                "oci+http://localhost/img",
                Transport::Http,
                "localhost",
                "img",
                None,
                None,
            ),
            (
                "oci://r.example/x.y/z__w:1.0-rc_2",
                Transport::Https,
                "r.example",
                "x.y/z__w",
                Some("1.0-rc_2"),
                None,
            ),
            (
                &format!("oci://r:1/a@{d}") as &str,
                Transport::Https,
                "r:1",
                "a",
                None,
                Some(d.as_str()),
            ),
            (
                &format!("oci://r/a:t@{d}"),
                Transport::Https,
                "r",
                "a",
                Some("t"),
                Some(d.as_str()),
            ),
        ] {
            let r: ImageRef = text.parse().unwrap();
            assert_eq!(r.transport, transport, "{text}");
            assert_eq!(r.registry, registry, "{text}");
            assert_eq!(r.repository, repo, "{text}");
            assert_eq!(r.tag.as_deref(), tag, "{text}");
            assert_eq!(r.digest.as_deref(), digest, "{text}");
            assert_eq!(r.to_string(), text);
        }
        let r: ImageRef = "docker://h/a/b".parse().unwrap();
        assert_eq!(r.to_string(), "oci://h/a/b");
        assert_eq!(r.tag_or_latest(), Some("latest"));
    }

    #[test]
    fn malformed_references_are_refused_with_the_reason() {
        for (text, why) in [
            ("http://h/a", "not an image reference"),
            ("oci://h", "no repository"),
            ("oci:///a", "no registry host"),
            ("oci://h/A", "lowercase"),
            ("oci://h/a//b", "lowercase"),
            ("oci://h/a-/b", "lowercase"),
            ("oci://h/a:", "tag"),
            ("oci://h/a:-x", "tag"),
            ("oci://h/a@sha256:12", "digest"),
            ("oci://h/a@md5:00", "digest"),
            ("oci://h:port/a", "port"),
            ("oci://h?x/a", "HOST[:PORT]"),
        ] {
            let err = text.parse::<ImageRef>().unwrap_err().to_string();
            assert!(err.contains(why) && err.contains(text), "{text}: {err}");
        }
    }

    #[test]
    fn only_reference_schemes_are_references() {
        assert!(is_image_ref("oci://h/a") && is_image_ref("OCI+HTTP://h/a"));
        assert!(is_image_ref("docker://h/a"));
        assert!(!is_image_ref("https://h/a") && !is_image_ref("oci:layout"));
        // A scheme's length inside a character (found by the fuzzer: a panic once).
        assert!(!is_image_ref("oci+http:\u{e3}\u{8e9e}x") && !is_image_ref("abcde\u{20ac}"));
    }
}
