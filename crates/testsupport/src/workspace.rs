//! Artifacts of this workspace that the tests of another crate need: the `sealfs` binary for the
//! bindings' tests, `libsealfs` for the C library's. Cargo gives a test only its own package's
//! binaries (`CARGO_BIN_EXE_*`), so these are built with cargo, in the profile the test itself
//! was built in (nothing to do when `cargo test --workspace` built them already).

use std::path::PathBuf;
use std::process::Command;

/// The workspace's root directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// The directory of the running test's profile (`target/release`, `target/debug`): the test
/// program is `PROFILE/deps/NAME-HASH`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test program's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("a test program under target/PROFILE/deps")
        .to_path_buf()
}

/// The packages other crates' tests need built: always asked for together, so that every caller
/// (and scripts/test.sh, which builds them before the tests run) gets one and the same feature
/// set. Cargo unifies features over the packages of one command: `-p sealfs-cli` alone and
/// `-p sealfs-capi -p sealfs-cli` are two builds of most of the workspace (on a clean checkout of
/// a loaded 2-core machine, the second took 14 minutes inside a test program's time limit).
pub const ARTIFACT_PACKAGES: [&str; 2] = ["sealfs-capi", "sealfs-cli"];

/// Builds [`ARTIFACT_PACKAGES`] (`cargo build -p ...`) in the running test's profile; returns the
/// profile directory, where their binaries and libraries are.
pub fn cargo_build() -> Result<PathBuf, String> {
    let dir = profile_dir();
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no profile directory")?
        .to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build").current_dir(root());
    clean_cargo_env(&mut cmd);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    for p in ARTIFACT_PACKAGES {
        cmd.args(["-p", p]);
    }
    crate::run_ok(&mut cmd)?;
    Ok(dir)
}

/// The `sealfs` binary of this workspace, built if needed.
pub fn sealfs_bin() -> PathBuf {
    let dir = cargo_build().unwrap_or_else(|e| panic!("building sealfs: {e}"));
    dir.join("sealfs")
}

/// Removes what cargo sets for the running test (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...) from
/// the environment of a cargo (or maturin) run started by it: build scripts that watch these
/// variables (ring's) would otherwise see them change and rebuild, with everything above them.
pub fn clean_cargo_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let set_by_cargo_test = k == "CARGO_MANIFEST_DIR"
            || k == "CARGO_MANIFEST_PATH"
            || k == "CARGO_CRATE_NAME"
            || k == "CARGO_PRIMARY_PACKAGE"
            || k == "CARGO_TARGET_TMPDIR"
            || k == "CARGO_BIN_NAME"
            || k == "OUT_DIR"
            || k.starts_with("CARGO_PKG_");
        if set_by_cargo_test {
            cmd.env_remove(k);
        }
    }
}
