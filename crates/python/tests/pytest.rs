//! The Python bindings, tested from Python (`tests/python`, pytest).
//!
//! This program prepares what the suite reads and runs it once: the fixture tree (the full one as
//! root, on tmpfs; the small one otherwise), images of it built by the `sealfs` binary (plain, and
//! lz4hc with fragments, signed with an `openssl`-made Ed25519 key), nginx and versitygw (S3)
//! serving them on loopback; the wheel built once by maturin and installed into a fresh virtual
//! environment (`python3 -m venv`) with pytest, fsspec, pandas, pyarrow and DuckDB from PyPI. The suite
//! compares every file of the tree read through the Python API with the source as Python's `os`
//! reads it, for each image and each server; it also checks damaged blocks, concurrency (threads,
//! forked and spawned workers), fsspec with pandas, pyarrow and DuckDB, and the README's example.

use sealfs_testsupport::fixture::make_full_fixture;
use sealfs_testsupport::servers::{nginx, versitygw, versitygw_bin};
use sealfs_testsupport::{
    ci, is_root, need_tool, oracle_guard, run, run_ok, small_fixture, workspace, Tmpfs,
};
use serde_json::json;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// `python3` can make a virtual environment with pip in it (Debian: python3-venv).
fn python_venv() -> Result<(), String> {
    let ok = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err("python3 cannot make virtual environments (Debian package python3-venv)".into())
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

/// Runs `cmd`, printing what it is and how long it took; panics with its output on failure.
fn step(what: &str, cmd: &mut Command) -> String {
    let t = Instant::now();
    let out = run_ok(cmd).unwrap_or_else(|e| panic!("{what}: {e}"));
    println!("{what}: {:.1?}", t.elapsed());
    out
}

/// Builds `src` into `out` with `sealfs build ARGS`; returns the digest it printed.
fn build(sealfs: &Path, src: &Path, out: &Path, args: &[&str]) -> String {
    let o = step(
        &format!("sealfs build {args:?}"),
        Command::new(sealfs)
            .arg("build")
            .args(args)
            .arg(src)
            .arg(out)
            .env_remove("SOURCE_DATE_EPOCH"),
    );
    o.trim().to_string()
}

/// Issue 38, item 21: the wheel's extension carried its debug information (`_native.abi3.so`,
/// 73 MB). `readelf` (binutils) lists its sections: none may be `.debug_*`.
fn extension_is_stripped(wheel: &Path, w: &Path) {
    let dir = w.join("unpacked");
    step(
        "unpack the wheel",
        Command::new("python3")
            .args(["-m", "zipfile", "-e", s(wheel), s(&dir)])
            .stdin(Stdio::null()),
    );
    let so = dir.join("sealfs/_native.abi3.so");
    let size = fs::metadata(&so)
        .expect("sealfs/_native.abi3.so in the wheel")
        .len();
    println!("sealfs/_native.abi3.so: {size} bytes");
    if !oracle_guard(need_tool("readelf")) {
        return;
    }
    let sections = step(
        "readelf -S",
        Command::new("readelf").args(["-S", "--wide", s(&so)]),
    );
    let debug: Vec<&str> = sections
        .lines()
        .filter(|l| l.contains("] .debug_") || l.contains("] .zdebug_"))
        .collect();
    assert!(
        debug.is_empty(),
        "the extension carries debug sections:\n{}",
        debug.join("\n")
    );
}

#[test]
fn python_bindings_against_the_fixture_tree() {
    if !oracle_guard(python_venv()) || !oracle_guard(need_tool("openssl")) {
        return;
    }
    let sealfs = workspace::sealfs_bin();
    let work = tempfile::Builder::new()
        .prefix("sealfs-pytest-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let w = work.path();

    // The tree: the full fixture as root (devices, owners, trusted.* xattrs, 64 KiB values on
    // tmpfs), the small one otherwise.
    let t = Instant::now();
    let tmpfs = if is_root() {
        Some(Tmpfs::new("pytest").expect("tmpfs"))
    } else {
        println!("not root: the small fixture (no devices, owners or trusted.* xattrs)");
        None
    };
    let src = match &tmpfs {
        Some(t) => {
            let src = t.join("src");
            make_full_fixture(&src);
            src
        }
        None => {
            let src = w.join("src");
            fs::create_dir(&src).unwrap();
            small_fixture::build(&src, 31, true);
            src
        }
    };
    println!("fixture made in {:.1?}", t.elapsed());

    // The images, a signing key made by openssl, and their places on the servers.
    let www = w.join("www");
    let bucket = w.join("s3/bucket");
    fs::create_dir_all(&www).unwrap();
    fs::create_dir_all(&bucket).unwrap();
    let (key, public_key) = (w.join("key.pem"), w.join("key.pub"));
    step(
        "openssl genpkey",
        Command::new("openssl").args(["genpkey", "-algorithm", "ed25519", "-out", s(&key)]),
    );
    step(
        "openssl pkey -pubout",
        Command::new("openssl").args(["pkey", "-in", s(&key), "-pubout", "-out", s(&public_key)]),
    );
    let plain_digest = build(&sealfs, &src, &www.join("plain.img"), &[]);
    let z_digest = build(
        &sealfs,
        &src,
        &www.join("z.img"),
        &["-z", "lz4hc", "-C", "65536", "-E", "fragments"],
    );
    step(
        "sealfs sign",
        Command::new(&sealfs).args(["sign", s(&www.join("z.img")), "--key", s(&key)]),
    );
    fs::copy(www.join("z.img"), bucket.join("z.img")).unwrap();

    // The servers: nginx always (a test dependency), versitygw where it was built (CI: always).
    let http = nginx(&www, &w.join("nginx")).unwrap_or_else(|e| panic!("nginx: {e}"));
    let s3 = match versitygw_bin() {
        Ok(_) => {
            fs::create_dir_all(w.join("versitygw")).unwrap();
            Some(versitygw(&w.join("s3"), &w.join("versitygw")).expect("versitygw"))
        }
        Err(e) => {
            oracle_guard(Err(e));
            None
        }
    };

    // The images the suite reads the whole tree from.
    let local = |n: &str| www.join(n).display().to_string();
    let mut images = vec![
        json!({"name": "local-plain", "location": local("plain.img"), "digest": plain_digest}),
        json!({"name": "local-lz4hc", "location": local("z.img"), "key": public_key}),
        json!({"name": "http-plain", "location": http.url("plain.img"), "digest": plain_digest}),
        json!({"name": "http-lz4hc", "location": http.url("z.img"), "key": public_key}),
    ];
    if s3.is_some() {
        images
            .push(json!({"name": "s3-lz4hc", "location": "s3://bucket/z.img", "digest": z_digest}));
    }

    // The virtual environment and the wheel, built once.
    let venv = w.join("venv");
    step(
        "python3 -m venv",
        Command::new("python3").args(["-m", "venv", s(&venv)]),
    );
    let python = venv.join("bin/python");
    let pip = |what: &str, args: &[&str]| {
        let t = Instant::now();
        let o = run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(args));
        if !o.status.success() {
            let why = format!(
                "pip install {what} failed (PyPI unreachable?): {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(!ci(), "{why}");
            println!("SKIP: {why}");
            return false;
        }
        println!("pip install {what}: {:.1?}", t.elapsed());
        true
    };
    if !pip(
        "the test dependencies",
        &[
            "maturin>=1.9.4,<2",
            "pytest",
            "fsspec",
            "pandas",
            "pyarrow",
            "duckdb",
            "datasets",
            "mypy",
        ],
    ) {
        return;
    }
    let wheels = w.join("wheels");
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let release = workspace::profile_dir().ends_with("release");
    let mut maturin = Command::new(venv.join("bin/maturin"));
    maturin
        .args(["build", "--quiet", "-m"])
        .arg(crate_dir.join("Cargo.toml"))
        .args(["-i", s(&python), "-o", s(&wheels)]);
    if release {
        maturin.arg("--release");
    }
    workspace::clean_cargo_env(&mut maturin);
    step("maturin build (the wheel)", &mut maturin);
    let wheel = fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("a wheel");
    let name = wheel.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.contains("-cp39-abi3-"),
        "one abi3 wheel for CPython 3.9 and later: {name}"
    );
    extension_is_stripped(&wheel, w);
    if !pip("the wheel", &[s(&wheel)]) {
        return;
    }

    // The suite.
    let mut pytest = Command::new(&python);
    pytest
        .args([
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-rs",
            "--durations=12",
        ])
        .arg(crate_dir.join("tests/python"))
        // For a run of part of the suite: `SEALFS_PYTEST_ARGS="-k fsspec"`.
        .args(
            std::env::var("SEALFS_PYTEST_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .current_dir(w)
        .env("SEALFS_BIN", &sealfs)
        .env("SEALFS_TEST_SRC", &src)
        .env("SEALFS_TEST_FULL", if tmpfs.is_some() { "1" } else { "0" })
        .env("SEALFS_TEST_WORK", w)
        .env("SEALFS_TEST_WWW", &www)
        .env("SEALFS_TEST_HTTP", http.url(""))
        .env("SEALFS_TEST_KEY", &key)
        .env("SEALFS_TEST_KEY_PUB", &public_key)
        .env(
            "SEALFS_TEST_IMAGES",
            serde_json::Value::from(images).to_string(),
        )
        .env("SEALFS_TEST_README", workspace::root().join("README.md"))
        .env("SEALFS_CACHE_DIR", w.join("cache"))
        // Nothing written into the source tree (pytest caches its rewritten modules otherwise).
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    if let Some(s3) = &s3 {
        for (k, v) in s3.s3_env() {
            pytest.env(k, v);
        }
    }
    let t = Instant::now();
    let out = run(&mut pytest);
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    println!("pytest: {:.1?}", t.elapsed());
    assert!(out.status.success(), "pytest failed ({})", out.status);
    drop(s3);
    drop(http);
}
