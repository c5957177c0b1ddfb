//! The `oci_spec` harness: the input is an OCI index, manifest or image config (JSON, or
//! anything): parsed every way `sealfs_import::oci::spec` parses, a platform chosen from it
//! when it is an index, and read through an image layout as its `index.json` and as the
//! manifest `index.json` names (so that digests and media types from the input reach the
//! layout's blob paths). Errors are fine, panics are bugs.
//!
//! This file is compiled by the fuzz target and by the stable test
//! `crates/import/tests/fuzz_corpus.rs` (with `#[path]`), so both run the very same code.

use sealfs_import::oci::spec::{self, Parsed, Platform};
use sealfs_import::OciLayout;
use sha2::Digest as _;
use std::fs;
use std::path::Path;

/// Parses `data` every way, and reads it through a layout made in `dir`.
pub fn oci_spec_in(dir: &Path, data: &[u8]) {
    let platforms: [Platform; 3] = [
        Platform::default(),
        "linux/arm64".parse().expect("a platform"),
        "linux/arm/v7".parse().expect("a platform"),
    ];
    for said in [
        None,
        Some(spec::OCI_INDEX),
        Some(spec::OCI_MANIFEST),
        Some(spec::DOCKER_LIST),
        Some(spec::DOCKER_MANIFEST),
    ] {
        if let Ok(Parsed::Index(index)) = spec::parse(data, said) {
            for p in &platforms {
                let _ = sealfs_import::oci::choose(&index.manifests, p);
            }
        }
    }
    let _ = spec::parse_config(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = text.parse::<Platform>();
        let _ = text.parse::<spec::Digest>();
    }

    // The input as index.json, then as the manifest a fixed index.json names.
    let layout = dir.join("layout");
    if !layout.join("oci-layout").exists() {
        fs::create_dir_all(layout.join("blobs/sha256")).expect("layout directory");
        fs::write(
            layout.join("oci-layout"),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .expect("write");
    }
    fs::write(layout.join("index.json"), data).expect("write");
    let open = OciLayout::open(&layout).expect("the layout marker is valid");
    for r in [None, Some("t")] {
        let _ = open.image(r, &platforms[0]);
    }
    let hex: String = sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let blob = layout.join("blobs/sha256").join(&hex);
    fs::write(&blob, data).expect("write");
    for media_type in [spec::OCI_MANIFEST, spec::OCI_INDEX] {
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{media_type}","digest":"sha256:{hex}","size":{}}}]}}"#,
            data.len()
        );
        fs::write(layout.join("index.json"), index).expect("write");
        for p in &platforms {
            let _ = open.image(None, p);
        }
    }
    let _ = fs::remove_file(&blob);
}
