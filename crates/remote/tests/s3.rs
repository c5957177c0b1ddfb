//! A remote image on a real S3 server (versitygw over a directory, on loopback): read through an
//! `s3://` URL with the credentials and endpoint from the `AWS_*` environment, and a replaced object
//! fails with the ETag error instead of returning its bytes. One test in this binary: it sets the
//! process environment.

use sealfs_reader::{open, Follow, OpenOptions, Source};
use sealfs_remote::RemoteObject;
use sealfs_testsupport::build::{build_image, BuildOptions};
use sealfs_testsupport::servers::versitygw;
use sealfs_testsupport::{oracle_guard, pseudo_random};
use std::fs;
use std::path::Path;
use std::sync::Arc;

fn image(dir: &Path, out: &Path, seed: u64) {
    let src = dir.join(format!("src{seed}"));
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("data"), pseudo_random(3 << 20, seed)).unwrap();
    fs::write(src.join("pad"), vec![b'p'; seed as usize * 10000]).unwrap();
    build_image(&src, out, &BuildOptions::default()).unwrap();
}

#[test]
fn an_s3_object_reads_verified_and_a_replaced_one_fails_with_the_etag_error() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bucket = d.join("s3/bucket");
    fs::create_dir_all(&bucket).unwrap();
    image(d, &bucket.join("img"), 1);
    let server = match versitygw(&d.join("s3"), d) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    for (k, v) in server.s3_env() {
        std::env::set_var(k, v);
    }
    let expected = open(bucket.join("img"), &OpenOptions::new())
        .unwrap()
        .trust
        .digest()
        .copied()
        .unwrap();
    // Uploaded with a PUT, as an S3 client would: the object has an ETag.
    put(&server.port, "img", &fs::read(bucket.join("img")).unwrap());
    let url = "s3://bucket/img";
    let remote = Arc::new(RemoteObject::open(url).unwrap());
    let etag = remote.etag().expect("S3 gives an ETag").to_string();
    let opened = open(
        Source::reader(remote.clone(), url),
        &OpenOptions::new().digest(expected),
    )
    .unwrap();
    assert!(opened.trust.is_authenticated());
    let img = &opened.image;
    let data = img.resolve("/data", Follow::All).unwrap();
    assert!(img.read_vec(&data, 0, 1 << 20).unwrap() == pseudo_random(1 << 20, 1));

    image(d, &d.join("other"), 2);
    put(&server.port, "img", &fs::read(d.join("other")).unwrap());
    let err =
        sealfs_reader::ErrorChain(&img.read_vec(&data, 2 << 20, 1 << 20).unwrap_err()).to_string();
    println!("{err}");
    assert!(
        err.contains(&format!(
            "{url}: the object changed since it was opened: ETag {etag} ("
        )),
        "{err}"
    );

    // A file put in the bucket's directory behind the server's back has no ETag: the size and
    // modification time identify it instead.
    image(d, &bucket.join("plain"), 1);
    let expected = open(bucket.join("plain"), &OpenOptions::new())
        .unwrap()
        .trust
        .digest()
        .copied()
        .unwrap();
    let url = "s3://bucket/plain";
    let remote = Arc::new(RemoteObject::open(url).unwrap());
    let opened = open(
        Source::reader(remote.clone(), url),
        &OpenOptions::new().digest(expected),
    )
    .unwrap();
    let img = &opened.image;
    let data = img.resolve("/data", Follow::All).unwrap();
    assert!(img.read_vec(&data, 0, 1 << 20).unwrap() == pseudo_random(1 << 20, 1));
    image(d, &d.join("other3"), 3);
    fs::rename(d.join("other3"), bucket.join("plain")).unwrap();
    let err =
        sealfs_reader::ErrorChain(&img.read_vec(&data, 2 << 20, 1 << 20).unwrap_err()).to_string();
    println!("{err}");
    assert!(
        err.contains(&format!("{url}: the object changed since it was opened: ")),
        "{err}"
    );
}

/// Uploads `bytes` as `bucket/key` with an S3 PUT (object_store, the environment's settings).
fn put(port: &u16, key: &str, bytes: &[u8]) {
    use object_store::ObjectStoreExt;
    let store = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name("bucket")
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .build()
        .unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(store.put(&key.into(), bytes.to_vec().into()))
        .unwrap();
}
