//! The fuzz harness of the registry client's parsers: manifests and indexes as a registry serves
//! them, the sealfs artifact read from a manifest, converted layers and their prefetch list,
//! platform selection, image references.
//!
//! ONE SOURCE FOR TWO USERS, as `harness.rs`: the `manifest` fuzz target calls it, and the stable
//! test `crates/registry/tests/fuzz_corpus.rs` compiles it with `#[path]`. It uses only `std` and
//! `sealfs_registry`. Errors are fine; a panic is a bug; what parses must round-trip.

use sealfs_registry::layers::{
    converted_layers, encode_prefetch_list, parse_prefetch_list, prefetch_list,
};
use sealfs_registry::manifest::{
    parse, select_platform, signature_layers, Artifact, Parsed, PlatformSpec, ACCEPTED,
};
use sealfs_registry::ImageRef;

/// Platforms asked of every index.
const PLATFORMS: [&str; 3] = ["linux/amd64", "linux/arm64/v8", "windows/amd64"];

/// One input: as a manifest or index (without a `Content-Type` and with each accepted one), and,
/// as text, as an image reference and a platform.
pub fn manifest(data: &[u8]) {
    for content_type in std::iter::once(None).chain(ACCEPTED.iter().map(|c| Some(*c))) {
        match parse(data, content_type) {
            Ok(Parsed::Manifest(m)) => {
                let _ = signature_layers(&m);
                // A converted-layers referrer and its prefetch list (an annotation).
                let _ = converted_layers(&m);
                if let Ok(list) = prefetch_list(&m) {
                    prefetch_round_trip(&list);
                }
                if let Ok(a) = Artifact::from_manifest(&m) {
                    // What reads as a sealfs artifact writes the same artifact back.
                    let bytes = serde_json::to_vec(&a.to_manifest()).expect("serializes");
                    match parse(&bytes, None) {
                        Ok(Parsed::Manifest(again)) => {
                            assert_eq!(Artifact::from_manifest(&again).ok(), Some(a));
                        }
                        other => panic!("an artifact's manifest reads back as {other:?}"),
                    }
                }
            }
            Ok(Parsed::Index(index)) => {
                for p in PLATFORMS {
                    let _ = select_platform(&index, &p.parse().expect("a valid platform"));
                }
            }
            Err(_) => {}
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(r) = text.parse::<ImageRef>() {
            let shown = r.to_string();
            let again: ImageRef = shown.parse().expect("a printed reference parses");
            assert_eq!(again.to_string(), shown);
            let _ = (r.manifest_key(), r.base_url(), r.tag_or_latest());
        }
        // As a prefetch list (`convert --prefetch`'s file, the referrer's annotation).
        if let Ok(list) = parse_prefetch_list(text) {
            prefetch_round_trip(&list);
        }
        if let Ok(p) = text.parse::<PlatformSpec>() {
            assert_eq!(p.to_string().parse::<PlatformSpec>().ok(), Some(p));
        }
    }
}

/// A prefetch list that parsed is written back as one that parses to the same paths.
fn prefetch_round_trip(list: &[String]) {
    let text = encode_prefetch_list(list);
    assert_eq!(parse_prefetch_list(&text).as_deref(), Ok(list));
}
