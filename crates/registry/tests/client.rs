//! The client's library calls that building from container images uses (issue 30), against
//! Debian's docker-registry on loopback: an index resolved to a platform's manifest, a layer
//! streamed with its digest checked (and refused, naming it, when the registry's storage holds
//! other bytes), and blob uploads that the registry checks by digest. Manifests and indexes are
//! written here as a container tool writes them (JSON with `serde_json`); the registry, which
//! checks every digest it is given, and `skopeo` are the judges.

use sealfs_registry::manifest::{self, Descriptor, Parsed};
use sealfs_registry::{ImageRef, Registry, RegistryOptions};
use sealfs_testsupport::servers::{docker_registry, RegistrySetup, Server};
use sealfs_testsupport::{oracle_guard, pseudo_random, run};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::Command;

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(b);
    format!(
        "sha256:{}",
        h.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: sha256(bytes),
        size: bytes.len() as u64,
        annotations: BTreeMap::new(),
    }
}

#[test]
fn an_index_resolves_to_a_platform_and_layers_stream_with_their_digest_checked() {
    if !oracle_guard(
        sealfs_testsupport::servers::docker_registry_bin()
            .map(|_| ())
            .and_then(|()| sealfs_testsupport::need_tool("skopeo")),
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let server = docker_registry(work.path(), &RegistrySetup::default()).unwrap();
    let reference: ImageRef = format!("oci+http://127.0.0.1:{}/lib/multi:v1", server.port)
        .parse()
        .unwrap();
    let registry = Registry::connect(
        &reference,
        &RegistryOptions {
            chunk_size: 100_000,
            ..Default::default()
        },
    )
    .unwrap();
    // Two platforms, each one layer (the second in chunks) and a config.
    let mut entries = Vec::new();
    let mut layers = Vec::new();
    for (i, arch) in ["amd64", "arm64"].into_iter().enumerate() {
        let layer = pseudo_random(300_000 + i * 1000, 40 + i as u64);
        let layer_desc = descriptor("application/vnd.oci.image.layer.v1.tar", &layer);
        registry
            .push_bytes(&layer_desc, layer.clone().into(), &[])
            .unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": [layer_desc.digest]}
        }))
        .unwrap();
        let config_desc = descriptor("application/vnd.oci.image.config.v1+json", &config);
        registry
            .push_bytes(&config_desc, config.into(), &[])
            .unwrap();
        let m = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": manifest::OCI_MANIFEST,
            "config": {"mediaType": config_desc.media_type, "digest": config_desc.digest, "size": config_desc.size},
            "layers": [{"mediaType": layer_desc.media_type, "digest": layer_desc.digest, "size": layer_desc.size}],
        }))
        .unwrap();
        let pushed = registry
            .put_manifest(&sha256(&m), manifest::OCI_MANIFEST, m.clone().into())
            .unwrap();
        assert_eq!(pushed.digest, sha256(&m));
        entries.push(serde_json::json!({
            "mediaType": manifest::OCI_MANIFEST, "digest": pushed.digest, "size": m.len(),
            "platform": {"os": "linux", "architecture": arch},
        }));
        layers.push((layer_desc, layer));
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": manifest::OCI_INDEX, "manifests": entries,
    }))
    .unwrap();
    registry
        .put_manifest("v1", manifest::OCI_INDEX, index.clone().into())
        .unwrap();
    // skopeo sees the index as pushed.
    let o = run(Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://127.0.0.1:{}/lib/multi:v1", server.port)));
    assert!(o.status.success() && o.stdout == index);

    for (i, arch) in ["amd64", "arm64"].into_iter().enumerate() {
        let platform = format!("linux/{arch}").parse().unwrap();
        let (image, from) = registry.image_manifest(&reference, &platform).unwrap();
        assert_eq!(from.unwrap().digest, sha256(&index));
        let Parsed::Manifest(m) = &image.parsed else {
            panic!("an index")
        };
        assert_eq!(m.layers[0].digest, layers[i].0.digest);
        let mut got = Vec::new();
        registry
            .blob_reader(&layers[i].0)
            .unwrap()
            .read_to_end(&mut got)
            .unwrap();
        assert!(got == layers[i].1, "{arch}: the layer's bytes");
    }
    let err = registry
        .image_manifest(&reference, &"linux/s390x".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("linux/amd64, linux/arm64"), "{err}");

    // Other bytes in the registry's storage: the stream fails at its end, naming the layer.
    let (desc, bytes) = &layers[1];
    let stored = Server::registry_blob(work.path(), &desc.digest);
    let mut spoiled = bytes.clone();
    spoiled[1234] ^= 0x10;
    std::fs::write(&stored, &spoiled).unwrap();
    let mut got = Vec::new();
    let err = registry
        .blob_reader(desc)
        .unwrap()
        .read_to_end(&mut got)
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let text = err.to_string();
    assert!(
        text.contains(&desc.digest) && text.contains("hash to"),
        "{text}"
    );
    // Bytes the registry checks itself: an upload under the wrong digest is refused.
    let lie = Descriptor {
        digest: sha256(b"something else"),
        ..descriptor("application/octet-stream", b"these bytes")
    };
    let err = registry
        .push_bytes(&lie, bytes::Bytes::from_static(b"these bytes"), &[])
        .unwrap_err();
    assert!(err.is_content_fault(), "{err}");
}

/// A blob large enough to be received by a thread ahead of the reader ([`PUMP_MIN_BYTES`]), and
/// more than it keeps ready ([`PUMP_BYTES`]): read in small pieces by a reader slower than the
/// loopback, its bytes are docker-registry's; with other bytes in the registry's storage the
/// read fails at the end naming the blob, as a content fault; a reader dropped early returns.
#[test]
fn a_large_blob_is_received_ahead_of_its_reader_and_checked() {
    use sealfs_registry::{registry_error, PUMP_BYTES, PUMP_MIN_BYTES};
    if !oracle_guard(sealfs_testsupport::servers::docker_registry_bin().map(|_| ())) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let server = docker_registry(work.path(), &RegistrySetup::default()).unwrap();
    let reference: ImageRef = format!("oci+http://127.0.0.1:{}/lib/big:v1", server.port)
        .parse()
        .unwrap();
    let registry = Registry::connect(&reference, &RegistryOptions::default()).unwrap();
    let size = (PUMP_BYTES + PUMP_MIN_BYTES) as usize + 12_345;
    let blob = pseudo_random(size, 7);
    let desc = descriptor("application/vnd.oci.image.layer.v1.tar", &blob);
    registry
        .push_bytes(&desc, blob.clone().into(), &[])
        .unwrap();

    let mut reader = registry.blob_reader(&desc).unwrap();
    let mut got = Vec::with_capacity(size);
    let mut buf = vec![0u8; 7_000];
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() < 2 * PUMP_BYTES as usize && got.len() % 70_000 < 7_000 {
            // Slower than the sender for a while: the thread waits for room.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    assert!(got == blob, "the blob's bytes");
    assert_eq!(reader.bytes_read(), size as u64);
    assert_eq!(reader.read(&mut buf).unwrap(), 0, "the end, again");

    // Dropped after its first bytes: the drop returns (the thread is let go).
    let mut early = registry.blob_reader(&desc).unwrap();
    early.read_exact(&mut buf).unwrap();
    assert_eq!(buf[..], blob[..buf.len()]);
    drop(early);

    let stored = Server::registry_blob(work.path(), &desc.digest);
    let mut spoiled = blob.clone();
    spoiled[size - 5] ^= 0x01;
    std::fs::write(&stored, &spoiled).unwrap();
    let mut sink = Vec::new();
    let err = registry
        .blob_reader(&desc)
        .unwrap()
        .read_to_end(&mut sink)
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert!(
        registry_error(&err).is_some_and(|e| e.is_content_fault()),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&desc.digest) && text.contains("hash to"),
        "{text}"
    );
}
