//! The project's own scripts and generated documentation, run as a newcomer runs them: the worked
//! examples of docs/format.md are what docs/examples.py makes from a real run of this build, and
//! scripts/deps.sh waits for apt's locks instead of failing (issue 38, items 23 and 24).

mod common;

use common::*;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Regression (issue 38, item 23): format.md §10.1's example statement named the digest
/// `93cd840f…` while the §13 image it describes has `3e5d033f…` (`sealfs statement` prints it).
/// The examples are now made by docs/examples.py from real runs of the binary under test
/// (sealfs, xxd, sha256sum, fsverity), and the document must be exactly what it makes.
#[test]
fn format_md_examples_are_what_docs_examples_py_makes() {
    let tools = need_tool("python3")
        .and_then(|_| need_tool("xxd"))
        .and_then(|_| need_tool("fsverity"));
    if !oracle_guard(tools) {
        return;
    }
    let root = workspace::root();
    let out = run(Command::new("python3")
        .arg(root.join("docs/examples.py"))
        .arg("--check")
        .arg("--sealfs")
        .arg(sealfs_bin()));
    assert!(
        out.status.success(),
        "docs/format.md differs from docs/examples.py's run (regenerate: python3 docs/examples.py):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The statement example is the §13 image's, as `sealfs statement` prints it.
    let doc = fs::read_to_string(root.join("docs/format.md")).unwrap();
    let built = doc
        .split("# prints sha256:")
        .nth(1)
        .and_then(|s| s.get(..64))
        .expect("§13.1's printed digest");
    assert!(
        doc.contains(&format!("sealfs-statement 1\ndigest sha256:{built}\n")),
        "§10.1's statement names another digest than §13.1's {built}"
    );
}

/// A private apt configuration (state, lists, cache and sources in `dir`) that `apt-get
/// update` and `apt-get install` accept without touching the system's files or the network.
fn private_apt(dir: &Path) -> std::path::PathBuf {
    for d in [
        "dpkg",
        "lists/partial",
        "cache/archives/partial",
        "parts",
        "log",
    ] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    fs::write(dir.join("dpkg/status"), "").unwrap();
    fs::write(dir.join("sources.list"), "").unwrap();
    let d = dir.display();
    let conf = dir.join("apt.conf");
    fs::write(
        &conf,
        format!(
            "Dir::State::status \"{d}/dpkg/status\";\nDir::State::Lists \"{d}/lists\";\n\
             Dir::Cache \"{d}/cache\";\nDir::Etc::sourcelist \"{d}/sources.list\";\n\
             Dir::Etc::sourceparts \"{d}/parts\";\nDir::Log \"{d}/log\";\n"
        ),
    )
    .unwrap();
    conf
}

/// Regression (issue 38, item 24): scripts/demo.sh (and scripts/test.sh), through
/// scripts/deps.sh, failed at once with "Could not get lock" when another apt process (a fresh
/// machine's unattended upgrades) held the dpkg lock. Here another process holds apt's locks
/// (the dpkg frontend, dpkg and package lists locks, as fcntl locks the way apt takes them) for
/// 3 seconds; deps.sh's update and install steps, run by apt itself, must wait and succeed.
#[test]
fn deps_sh_waits_for_apt_locks() {
    if !oracle_guard(need_tool("apt-get").and_then(|_| need_tool("python3"))) {
        return;
    }
    if !is_root() {
        // deps.sh goes through sudo when not root, which would drop APT_CONFIG.
        println!("SKIP: deps.sh runs apt-get through sudo unless root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = private_apt(dir.path());
    let locks = ["dpkg/lock-frontend", "dpkg/lock", "lists/lock"].map(|l| dir.path().join(l));
    let hold = 3.0;
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import fcntl, sys, time\n\
             fs = [open(p, 'a') for p in sys.argv[2:]]\n\
             for f in fs: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
             print('held', flush=True)\n\
             time.sleep(float(sys.argv[1]))\n",
            &hold.to_string(),
        ])
        .args(&locks)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n", "the lock holder took apt's locks");
    let start = Instant::now();
    let deps = workspace::root().join("scripts/deps.sh");
    for step in ["apt_get_update", "apt_get install -y -qq"] {
        let out = run(Command::new("bash")
            .args(["-c", &format!(". \"$1\"; {step}"), "deps"])
            .arg(&deps)
            .env("APT_CONFIG", &conf)
            .env("SEALFS_APT_LOCK_TIMEOUT", "60"));
        assert!(
            out.status.success(),
            "deps.sh's {step} with apt's locks held for {hold} s: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        start.elapsed() >= Duration::from_secs_f64(hold - 0.5),
        "the steps ended in {:?}, before the locks were released: they did not meet the held locks",
        start.elapsed()
    );
    holder.wait().unwrap();
}
