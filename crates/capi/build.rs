//! Generates the C header, `include/sealfs.h`, from this crate with cbindgen (configuration in
//! cbindgen.toml, preamble in header.h): the doc comments become its Doxygen comments. The header is
//! committed so that it can be read without building; when the sources change it, the build writes
//! the new one there and says so (commit it). It also names the shared library's soname.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    for f in ["src", "cbindgen.toml", "header.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let mut config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    config.header = Some(std::fs::read_to_string(dir.join("header.h")).expect("header.h"));
    let mut text = Vec::new();
    cbindgen::Builder::new()
        .with_src(dir.join("src/lib.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen: the header")
        .write(&mut text);
    let out = dir.join("include/sealfs.h");
    if std::fs::read(&out).ok().as_deref() != Some(&text[..]) {
        std::fs::write(&out, &text).expect("write include/sealfs.h");
        println!("cargo:warning=include/sealfs.h regenerated from the sources: commit it");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsealfs.so.0");
}
