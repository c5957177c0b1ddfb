//! Access profiles: which byte ranges of an image a real run read, in the order it first read
//! them ([`crate::VerifiedBlocks::profile`]), kept in a file outside the image (so recording one
//! never changes the image or its digest) and replayed later with [`crate::Image::prefetch`] to
//! warm the persistent cache of a remote image.
//!
//! The file is text: the line `sealfs-profile 1`, the line `digest <image digest>`, then one
//! `<start> <end>` byte range per line (decimal, end exclusive).

use sealfs_verity::Digest;
use std::ops::Range;

/// The profile file for `ranges` read from the image with `digest`.
pub fn encode_profile(digest: &Digest, ranges: &[Range<u64>]) -> String {
    let mut out = format!("sealfs-profile 1\ndigest {digest}\n");
    for r in ranges {
        out += &format!("{} {}\n", r.start, r.end);
    }
    out
}

/// The ranges of a profile file, which must have been recorded from the image with `digest`.
/// Errors say what is wrong and on which line.
pub fn parse_profile(text: &str, digest: &Digest) -> Result<Vec<Range<u64>>, String> {
    let mut lines = text.lines().enumerate();
    if lines.next().map(|(_, l)| l) != Some("sealfs-profile 1") {
        return Err("line 1: not a sealfs profile (no `sealfs-profile 1`)".into());
    }
    let recorded = match lines.next() {
        Some((_, l)) => l.strip_prefix("digest ").unwrap_or(""),
        None => "",
    };
    if recorded != digest.to_string() {
        return Err(format!(
            "line 2: recorded from image {recorded:?}, not this one ({digest})"
        ));
    }
    lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let mut f = l.split_whitespace().map(str::parse::<u64>);
            match (f.next(), f.next(), f.next()) {
                (Some(Ok(a)), Some(Ok(b)), None) if a < b => Ok(a..b),
                _ => Err(format!(
                    "line {}: expected `<start> <end>` with start < end",
                    i + 1
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sealfs_verity::HashAlg;

    #[test]
    fn profiles_round_trip_and_refuse_another_image() {
        let d = HashAlg::Sha256.hash(b"image");
        let ranges = vec![4096..8192, 0..4096, 1 << 20..(1 << 20) + 100];
        let text = encode_profile(&d, &ranges);
        assert_eq!(parse_profile(&text, &d).unwrap(), ranges);
        let other = HashAlg::Sha256.hash(b"other");
        assert!(parse_profile(&text, &other).unwrap_err().contains("line 2"));
        assert!(parse_profile("nope", &d).is_err());
        let bad = text.replace("4096 8192", "8192 4096");
        assert!(parse_profile(&bad, &d).unwrap_err().contains("line 3"));
    }
}
