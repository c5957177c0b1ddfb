//! libsealfs from C: installed into a temporary prefix by `install.sh`, found with `pkg-config`,
//! a test program (`tests/c/compare.c`) compiled with `cc` reads an image of the fixture tree
//! (built by the `sealfs` binary) and compares it with the source as the kernel's system calls
//! show it, then reads it again from 8 threads sharing one handle; run under valgrind, which must
//! find no invalid access and no leak. The same program linked statically runs too, and the
//! README's example compiles and runs. As root with FUSE, `tests/c/mount.c` mounts an image with
//! `sealfs_mount` and compares the mount with the source through plain system calls, under
//! valgrind too.

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
    pkg_config_pkg(pc_dir, "sealfs", args)
}

/// `pkg-config ARGS PACKAGE` against the prefix, split into arguments.
fn pkg_config_pkg(pc_dir: &Path, package: &str, args: &[&str]) -> Vec<String> {
    let out = run_ok(
        Command::new("pkg-config")
            .args(args)
            .arg(package)
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

/// What [`install_with_fixture`] made.
struct Installed {
    pc_dir: std::path::PathBuf,
    lib_dir: std::path::PathBuf,
    src: std::path::PathBuf,
    image: std::path::PathBuf,
    digest: String,
}

/// Installs the library from `built` into `w/prefix` (install.sh), makes the small fixture tree
/// (`seed`) at `w/src` and its lz4hc image at `w/fixture.img` with the `sealfs` binary.
fn install_with_fixture(w: &Path, built: &Path, seed: u64) -> Installed {
    // Installed as a user would install it.
    let prefix = w.join("prefix");
    must(
        "install.sh",
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh"))
            .arg(&prefix)
            .env("SEALFS_LIB_DIR", built),
    );
    let pc_dir = prefix.join("lib/pkgconfig");
    let lib_dir = prefix.join("lib");
    assert!(lib_dir.join("libsealfs.so.0").exists() && lib_dir.join("libsealfs.a").exists());

    // The fixture and its image.
    let src = w.join("src");
    fs::create_dir(&src).unwrap();
    small_fixture::build(&src, seed, true);
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
    Installed {
        pc_dir,
        lib_dir,
        src,
        image,
        digest,
    }
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

    let Installed {
        pc_dir,
        lib_dir,
        src,
        image,
        digest,
    } = install_with_fixture(w, &built, 41);

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

    // Linked statically: sealfs-static.pc names libsealfs.a and what it needs.
    let libs = pkg_config_pkg(&pc_dir, "sealfs-static", &["--static", "--libs"]);
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
    let dir = w.join("readme");
    let digest = readme_program(&dir, built);
    must(
        "cc (README example)",
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Werror"])
            .arg(dir.join("prog.c"))
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

/// Writes `dir/prog.c`, the C example of the README in a `main`, and the image it reads,
/// `dir/OUT.img` (holding `/etc/hostname`, its digest put in place of the example's placeholder);
/// returns that digest.
fn readme_program(dir: &Path, built: &Path) -> String {
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
    assert!(lines.len() <= 8, "the example is short:\n{code}");
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
    fs::write(dir.join("prog.c"), program).unwrap();
    digest
}

/// Runs `script` with `sh -c` in `dir`, with no `LD_LIBRARY_PATH` nor `PKG_CONFIG_PATH` from the
/// test's environment; returns its output, both streams.
fn sh(what: &str, dir: &Path, script: &str) -> (bool, String) {
    let out = run(Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("PKG_CONFIG_PATH"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{what}: {}\n{text}", out.status);
    (out.status.success(), text)
}

/// Issue 38, item 17: after `install.sh` into the default prefix (/usr/local) the documented
/// `cc prog.c $(pkg-config --cflags --libs sealfs) && ./a.out` failed at run time
/// (`libsealfs.so.0: cannot open shared object file`) until `ldconfig` ran; another prefix needed
/// an rpath or `LD_LIBRARY_PATH` the docs did not name; `pkg-config --static` picked the `.so`;
/// the libraries shipped their debug information. The documented lines are run as written (the
/// README's C example as `prog.c`), from a clean prefix: /usr/local is an empty tmpfs in a private
/// mount namespace whose /etc is a copy (so the machine's `ld.so.cache` is not touched), and a
/// fresh directory for another prefix, whose lines install.sh prints and docs/usage.md shows.
#[test]
fn the_documented_install_lines_link_and_run_from_a_clean_prefix() {
    for tool in ["cc", "pkg-config", "ldconfig", "unshare", "readelf"] {
        let check = need_tool(tool).map_err(|_| format!("{tool} not installed"));
        if !oracle_guard(check) {
            return;
        }
    }
    let root = sealfs_testsupport::is_root()
        .then_some(())
        .ok_or_else(|| "not root: cannot mount a clean /usr/local".to_string());
    if !oracle_guard(root) {
        return;
    }
    let built = workspace::cargo_build().unwrap_or_else(|e| panic!("cargo build: {e}"));
    let work = tempfile::Builder::new()
        .prefix("sealfs-capi-install-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let w = work.path();
    let dir = w.join("prog");
    let digest = readme_program(&dir, &built);
    let install = Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh");
    let usage = fs::read_to_string(workspace::root().join("docs/usage.md")).unwrap();

    // The default prefix: the documented line, as written, right after install.sh.
    let line = "cc prog.c $(pkg-config --cflags --libs sealfs) && ./a.out";
    assert!(usage.contains(line), "docs/usage.md shows `{line}`");
    let etc = w.join("etc-copy");
    let script = format!(
        "set -e\n\
         mount -t tmpfs sealfs-clean-prefix /usr/local\n\
         mkdir {etc} && cp -a /etc/. {etc}/ && mount --bind {etc} /etc\n\
         SEALFS_LIB_DIR={built} {install}\n\
         {line}\n\
         readelf -S --wide /usr/local/lib/libsealfs.so.0 /usr/local/lib/libsealfs.a | grep -cE '\\] \\.(z)?debug_' || true\n",
        etc = s(&etc),
        built = s(&built),
        install = s(&install),
    );
    fs::write(w.join("default.sh"), script).unwrap();
    let (ok, out) = sh(
        "the default prefix",
        &dir,
        &format!(
            "exec unshare --mount --propagation private sh {}",
            s(&w.join("default.sh"))
        ),
    );
    assert!(ok, "the documented lines failed in /usr/local:\n{out}");
    assert!(
        out.contains("sealed-host") && out.contains(&digest),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("\n0"),
        "the installed libraries carry no .debug_* section (readelf):\n{out}"
    );

    // Another prefix: the lines install.sh prints, which docs/usage.md shows, as written.
    let prefix = w.join("opt/sealfs");
    let out = must(
        "install.sh PREFIX",
        Command::new(&install)
            .arg(&prefix)
            .env("SEALFS_LIB_DIR", &built),
    );
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("build a program with"))
        .skip(1)
        .map(str::trim)
        .collect();
    assert_eq!(lines.len(), 2, "install.sh prints two lines:\n{out}");
    for l in &lines {
        let documented = l.replace(s(&prefix), "PREFIX");
        assert!(
            usage.contains(&documented),
            "docs/usage.md shows `{documented}`"
        );
    }
    let (ok, out) = sh(
        "another prefix",
        &dir,
        &format!("set -e\n{}\n./a.out\n", lines.join("\n")),
    );
    assert!(
        ok,
        "the printed lines failed for {}:\n{out}",
        prefix.display()
    );
    assert!(out.contains("sealed-host"), "{out}");

    // Linked statically, as documented: no libsealfs.so needed.
    let line = "cc prog.c $(pkg-config --cflags --libs --static sealfs-static)";
    assert!(usage.contains(line), "docs/usage.md shows `{line}`");
    let (ok, out) = sh(
        "static",
        &dir,
        &format!(
            "set -e\nexport PKG_CONFIG_PATH={}\n{line} -o static\nldd ./static || true\n./static\n",
            s(&prefix.join("lib/pkgconfig"))
        ),
    );
    assert!(ok, "the static line failed:\n{out}");
    assert!(!out.contains("libsealfs.so"), "linked statically:\n{out}");
    assert!(out.contains("sealed-host"), "{out}");
}

/// nginx serving `root` on loopback at 4 MB/s per response (`limit_rate`), so that a remote
/// image's background fetches are still in flight when a program stops reading; its access log
/// in `work`. Returns the server (killed on drop) and the base URL.
fn slow_nginx(root: &Path, work: &Path) -> (KillOnDrop, String) {
    let port = sealfs_testsupport::servers::free_port();
    let w = s(work);
    fs::create_dir_all(work.join("tmp")).unwrap();
    let conf = format!(
        "daemon off;\nmaster_process off;\nuser root;\npid {w}/nginx.pid;\n\
         error_log {w}/error.log info;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log {w}/access.log;\n  client_body_temp_path {w}/tmp;\n\
         server {{ listen 127.0.0.1:{port}; root {}; limit_rate 4m; }}\n}}\n",
        s(root)
    );
    fs::write(work.join("nginx.conf"), conf).unwrap();
    let child = Command::new("nginx")
        .args(["-c", s(&work.join("nginx.conf")), "-p", w])
        .spawn()
        .expect("nginx");
    let server = KillOnDrop(child);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (server, format!("http://127.0.0.1:{port}/"))
}

/// A child process killed and waited for when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 38, item 18: `sealfs_close` returned while a remote image's background threads still
/// ran (a program that opened a URL, read, closed and exited failed `valgrind
/// --error-exitcode=1`). `tests/c/remote_close.c` reads the start of a large file of an image
/// served by a rate-limited nginx (readahead is then still fetching), closes (the file then the
/// image; then the image before its file), and checks that the kernel lists as many threads of
/// the process as before the open (before the fix: 14 more); then the same with the background
/// fill on, over many files. Each under valgrind: no error, no leak of any kind.
#[test]
fn sealfs_close_of_a_url_leaves_no_thread_nor_memory_behind() {
    for tool in ["cc", "pkg-config", "valgrind", "nginx"] {
        let check = need_tool(tool).map_err(|_| format!("{tool} not installed"));
        if !oracle_guard(check) {
            return;
        }
    }
    let root = sealfs_testsupport::is_root()
        .then_some(())
        .ok_or_else(|| "not root: nginx would switch to another user".to_string());
    if !oracle_guard(root) {
        return;
    }
    let built = workspace::cargo_build().unwrap_or_else(|e| panic!("cargo build: {e}"));
    let work = tempfile::Builder::new()
        .prefix("sealfs-capi-close-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let w = work.path();
    let prefix = w.join("prefix");
    must(
        "install.sh",
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh"))
            .arg(&prefix)
            .env("SEALFS_LIB_DIR", &built),
    );
    let (pc_dir, lib_dir) = (prefix.join("lib/pkgconfig"), prefix.join("lib"));

    // A large file, for sequential readahead, and 64 files of 64 KiB, for scattered reads.
    let tree = w.join("tree");
    fs::create_dir_all(tree.join("small")).unwrap();
    let mut x: u64 = 38;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    fs::write(tree.join("big"), noise(24 << 20)).unwrap();
    for i in 0..64 {
        fs::write(tree.join(format!("small/{i}")), noise(64 << 10)).unwrap();
    }
    let www = w.join("www");
    fs::create_dir_all(&www).unwrap();
    let digest = must(
        "sealfs build",
        Command::new(built.join("sealfs"))
            .args(["build", "-z", "lz4hc"])
            .arg(&tree)
            .arg(www.join("img")),
    )
    .trim()
    .to_string();
    let (_server, base) = slow_nginx(&www, &w.join("nginx"));

    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/remote_close.c");
    let exe = w.join("remote_close");
    must(
        "cc",
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
            .arg(&program)
            .args(pkg_config(&pc_dir, &["--cflags", "--libs"]))
            .arg("-o")
            .arg(&exe),
    );
    let scattered: Vec<String> = (0..64).step_by(2).map(|i| format!("/small/{i}")).collect();
    let fill = "8"; // SEALFS_OPEN_FILL
    let runs: [(&str, &str, Vec<String>); 2] = [
        ("readahead", "0", vec!["/big".into()]),
        ("fill", fill, scattered),
    ];
    for (i, (what, flags, paths)) in runs.iter().enumerate() {
        let t = Instant::now();
        let out = run(Command::new("valgrind")
            .args([
                "--error-exitcode=1",
                "--leak-check=full",
                "--show-leak-kinds=all",
                "--errors-for-leak-kinds=definite,indirect,possible",
            ])
            .arg(&exe)
            .args([&format!("{base}img"), &digest, *flags, "4194304"])
            .args(paths)
            .env("LD_LIBRARY_PATH", &lib_dir)
            .env("SEALFS_CACHE_DIR", w.join(format!("cache-{i}"))));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        println!(
            "valgrind, {what} ({:.1?}):\n{stdout}\n{stderr}",
            t.elapsed()
        );
        assert!(stdout.contains("read "), "{what}: the program read");
        assert!(
            out.status.success(),
            "{what}: remote_close under valgrind --error-exitcode=1 failed ({})",
            out.status
        );
        assert!(
            stderr.contains("possibly lost: 0 bytes") || stderr.contains("no leaks are possible"),
            "{what}: nothing possibly lost"
        );
    }
}

/// Issue 39, item 5: the C library mounts an image with the library's one mount API
/// (`sealfs_mount`, served by threads of the calling process). `tests/c/mount.c` mounts an image
/// of the fixture tree and compares it with the source through plain system calls (lstat, open,
/// read), unmounts (`/proc/mounts` and the mount point checked), unmounts while a file is
/// open (detached lazily, the file still reads) and checks the refusals (`ENOTDIR`, `-o rw`).
/// Under valgrind: no error, no leak. Needs root and /dev/fuse.
#[test]
fn a_c_program_mounts_an_image_and_reads_it_with_plain_system_calls_under_valgrind() {
    for tool in ["cc", "pkg-config", "valgrind"] {
        let check = need_tool(tool).map_err(|_| format!("{tool} not installed"));
        if !oracle_guard(check) {
            return;
        }
    }
    let fuse = if !sealfs_testsupport::is_root() {
        Err("mounting needs root here".to_string())
    } else if !Path::new("/dev/fuse").exists() {
        Err("/dev/fuse missing (no FUSE)".to_string())
    } else {
        Ok(())
    };
    if !oracle_guard(fuse) {
        return;
    }
    let built = workspace::cargo_build().unwrap_or_else(|e| panic!("cargo build: {e}"));
    let work = tempfile::Builder::new()
        .prefix("sealfs-capi-mount-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let w = work.path();
    let Installed {
        pc_dir,
        lib_dir,
        src,
        image,
        digest,
    } = install_with_fixture(w, &built, 43);
    let mnt = w.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mount.c");
    let exe = w.join("mount");
    must(
        "cc",
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
            .arg(&program)
            .args(pkg_config(&pc_dir, &["--cflags", "--libs"]))
            .arg("-o")
            .arg(&exe),
    );
    let t = Instant::now();
    // The FUSE server is this process: valgrind must let its threads run while the main thread
    // waits in a system call on the mount (fuse-compatible), else neither proceeds.
    let out = run(Command::new("valgrind")
        .args([
            "--sim-hints=fuse-compatible",
            "--error-exitcode=97",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible",
        ])
        .arg(&exe)
        .args([s(&image), s(&src), &digest, s(&mnt)])
        .env("LD_LIBRARY_PATH", &lib_dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("valgrind ({:.1?}):\n{stdout}\n{stderr}", t.elapsed());
    // Whatever happened, nothing stays mounted.
    let _ = Command::new("umount").arg("-l").arg(&mnt).output();
    assert!(
        out.status.success(),
        "mount under valgrind failed ({}); 97 is valgrind's error exit",
        out.status
    );
    assert!(stdout.contains(", 0 problems"), "{stdout}");
    let files: usize = stdout
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(files > 10, "{files} files compared");
    assert!(
        stderr.contains("ERROR SUMMARY: 0 errors"),
        "valgrind found errors"
    );
    assert!(
        stderr.contains("definitely lost: 0 bytes") || stderr.contains("no leaks are possible"),
        "valgrind found leaks"
    );
}
