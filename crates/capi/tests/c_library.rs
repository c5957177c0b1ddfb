//! libsealfs from C: installed into a temporary prefix by `install.sh`, found with `pkg-config`,
//! a test program (`tests/c/compare.c`) compiled with `cc` reads an image of the fixture tree
//! (built by the `sealfs` binary) and compares it with the source as the kernel's system calls
//! show it, then reads it again from 8 threads sharing one handle; run under valgrind, which must
//! find no invalid access and no leak. The same program linked statically runs too, and the
//! README's example compiles and runs.

use sealfs_testsupport::{need_tool, oracle_guard, run, run_ok, small_fixture, workspace};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 test paths")
}

/// `pkg-config ARGS sealfs` against the prefix, split into arguments.
fn pkg_config(pc_dir: &Path, args: &[&str]) -> Vec<String> {
    let out = run_ok(
        Command::new("pkg-config")
            .args(args)
            .arg("sealfs")
            .env("PKG_CONFIG_PATH", pc_dir),
    )
    .unwrap_or_else(|e| panic!("pkg-config: {e}"));
    out.split_whitespace().map(str::to_string).collect()
}

/// Runs `cmd`, which must succeed; returns its stdout, printing both streams.
fn must(what: &str, cmd: &mut Command) -> String {
    let t = Instant::now();
    let out = run(cmd);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("{what} ({:.1?}):\n{o}{e}", t.elapsed());
    assert!(out.status.success(), "{what} failed ({})", out.status);
    o.into_owned()
}

#[test]
fn a_c_program_reads_the_fixture_image_under_valgrind() {
    for tool in ["cc", "pkg-config", "valgrind"] {
        let check = need_tool(tool).map_err(|_| format!("{tool} not installed"));
        if !oracle_guard(check) {
            return;
        }
    }
    let built = workspace::cargo_build().unwrap_or_else(|e| panic!("cargo build: {e}"));
    let work = tempfile::Builder::new()
        .prefix("sealfs-capi-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let w = work.path();

    // Installed as a user would install it.
    let prefix = w.join("prefix");
    must(
        "install.sh",
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh"))
            .arg(&prefix)
            .env("SEALFS_LIB_DIR", &built),
    );
    let pc_dir = prefix.join("lib/pkgconfig");
    let lib_dir = prefix.join("lib");
    assert!(lib_dir.join("libsealfs.so.0").exists() && lib_dir.join("libsealfs.a").exists());

    // The fixture and its image.
    let src = w.join("src");
    fs::create_dir(&src).unwrap();
    small_fixture::build(&src, 41, true);
    let image = w.join("fixture.img");
    let digest = must(
        "sealfs build",
        Command::new(built.join("sealfs"))
            .args(["build", "-z", "lz4hc", "-C", "65536"])
            .arg(&src)
            .arg(&image)
            .env_remove("SOURCE_DATE_EPOCH"),
    )
    .trim()
    .to_string();

    // Compiled against the installed header and library, as pkg-config says.
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/compare.c");
    let cflags = [
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread",
    ];
    let compare = w.join("compare");
    must(
        "cc (shared)",
        Command::new("cc")
            .args(cflags)
            .arg(&program)
            .args(pkg_config(&pc_dir, &["--cflags", "--libs"]))
            .arg("-o")
            .arg(&compare),
    );
    let ldd = must(
        "ldd",
        Command::new("ldd")
            .arg(&compare)
            .env("LD_LIBRARY_PATH", &lib_dir),
    );
    assert!(
        ldd.contains("libsealfs.so.0 =>"),
        "linked by its soname: {ldd}"
    );

    let t = Instant::now();
    let out = run(Command::new("valgrind")
        .args([
            "--error-exitcode=97",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible",
        ])
        .arg(&compare)
        .args([s(&image), s(&src), &digest])
        .env("LD_LIBRARY_PATH", &lib_dir));
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("valgrind ({:.1?}):", t.elapsed());
    println!("{}", String::from_utf8_lossy(&out.stdout));
    println!("{stderr}");
    assert!(
        out.status.success(),
        "compare under valgrind failed ({}); 97 is valgrind's error exit",
        out.status
    );
    assert!(
        stderr.contains("ERROR SUMMARY: 0 errors"),
        "valgrind found errors"
    );
    assert!(
        stderr.contains("definitely lost: 0 bytes") || stderr.contains("no leaks are possible"),
        "valgrind found leaks"
    );

    // Linked statically: libsealfs.a and what pkg-config --static says it needs.
    let libs: Vec<String> = pkg_config(&pc_dir, &["--static", "--libs"])
        .into_iter()
        .map(|a| {
            if a == "-lsealfs" {
                "-l:libsealfs.a".into()
            } else {
                a
            }
        })
        .collect();
    let fixed = w.join("compare-static");
    must(
        "cc (static)",
        Command::new("cc")
            .args(cflags)
            .arg(&program)
            .args(pkg_config(&pc_dir, &["--cflags"]))
            .args(&libs)
            .arg("-o")
            .arg(&fixed),
    );
    let ldd = run(Command::new("ldd").arg(&fixed));
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libsealfs"),
        "the static program needs no libsealfs.so"
    );
    must(
        "compare (static)",
        Command::new(&fixed).args([s(&image), s(&src), &digest]),
    );

    readme_example_runs(w, &built, &pc_dir, &lib_dir);
}

/// The C example of the README, in a `main`, compiled and run against an image holding
/// `/etc/hostname` at `OUT.img` (its placeholder digest replaced by the real one).
fn readme_example_runs(w: &Path, built: &Path, pc_dir: &Path, lib_dir: &Path) {
    let readme = fs::read_to_string(workspace::root().join("README.md")).unwrap();
    assert_eq!(
        readme.matches("```c\n").count(),
        1,
        "one C example in the README"
    );
    let block = readme
        .split("```c\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```c block");
    let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    let indent = lines
        .iter()
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let code: String = lines
        .iter()
        .map(|l| format!("{}\n", &l[indent..]))
        .collect();
    assert_eq!(lines.len(), 5, "the example is five lines:\n{code}");
    let dir = w.join("readme");
    fs::create_dir_all(dir.join("tree/etc")).unwrap();
    fs::write(dir.join("tree/etc/hostname"), "sealed-host\n").unwrap();
    let digest = must(
        "sealfs build (README)",
        Command::new(built.join("sealfs"))
            .arg("build")
            .arg(dir.join("tree"))
            .arg(dir.join("OUT.img")),
    )
    .trim()
    .to_string();
    let placeholder = code
        .split('"')
        .find(|p| p.starts_with("sha256:"))
        .expect("a sha256: digest in the example");
    let program = format!(
        "#include <sealfs.h>\n#include <stdio.h>\nint main(void) {{\n{}\nreturn 0;\n}}\n",
        code.replace(placeholder, &digest)
    );
    fs::write(dir.join("example.c"), program).unwrap();
    must(
        "cc (README example)",
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Werror"])
            .arg(dir.join("example.c"))
            .args(pkg_config(pc_dir, &["--cflags", "--libs"]))
            .arg("-o")
            .arg(dir.join("example")),
    );
    let out = must(
        "README example",
        Command::new(dir.join("example"))
            .current_dir(&dir)
            .env("LD_LIBRARY_PATH", lib_dir),
    );
    assert!(
        out.contains("sealed-host"),
        "the example prints the file: {out}"
    );
    assert!(out.contains(&digest), "the example prints the trust: {out}");
}
