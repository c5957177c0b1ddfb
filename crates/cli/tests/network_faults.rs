//! Network faults and pushes of damaged images (issue 38, items 2 and 6 to 9): a short body on the
//! very first request of an open is retried (a small Python server on loopback without ETags, so
//! `object_store` cannot resume it itself, and Debian's `docker-registry` behind the fault proxy);
//! a server that trickles bytes is given up on with an error naming it, by the default minimum
//! rate and by the options that change it, and a slow but steady one by the per-request deadline;
//! `oci://` against a plain-HTTP registry says to use `oci+http://`; credentials half given in the
//! environment, or a credential helper that is not installed, are named; and `sealfs push` of an
//! image damaged in a data block, a tree block, its superblock or its trailer is refused with
//! exit 1, naming the image once, with nothing committed (asked of the registry by `skopeo` and
//! found in its storage).

mod common;

use common::servers::{docker_registry, FaultProxy, RegistrySetup, Server};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `sealfs ARGS` with `env`, its own cache, no credentials from the user's files.
fn sealfs_env(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(sealfs_bin());
    c.env("TZ", "UTC")
        .env("LC_ALL", "C")
        .env(
            "SEALFS_CACHE_DIR",
            std::env::temp_dir().join(format!("sealfs-netfault-cache-{}", std::process::id())),
        )
        .env("DOCKER_CONFIG", "/nonexistent")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("SEALFS_REGISTRY_USERNAME")
        .env_remove("SEALFS_REGISTRY_PASSWORD")
        .stdin(Stdio::null())
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

fn sealfs(args: &[&str]) -> Output {
    sealfs_env(args, &[])
}

fn ok(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        text(&o.stderr)
    );
    o
}

/// A small tree with a 1 MiB file, built and signed; the image, its digest and the public key.
struct Fixture {
    dir: tempfile::TempDir,
    image: PathBuf,
    digest: String,
    public_key: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    fs::create_dir_all(&src).unwrap();
    small_fixture::build(&src, 38, false);
    fs::write(src.join("big"), pseudo_random(1 << 20, 38)).unwrap();
    let (key, public_key) = (d.join("key.pem"), d.join("key.pub"));
    for args in [
        &["genpkey", "-algorithm", "ed25519", "-out", s(&key)][..],
        &["pkey", "-in", s(&key), "-pubout", "-out", s(&public_key)][..],
    ] {
        assert!(run(Command::new("openssl").args(args)).status.success());
    }
    let www = d.join("www");
    fs::create_dir_all(&www).unwrap();
    let image = www.join("img");
    build_ok(&src, &image, &[]);
    ok(sealfs(&["sign", s(&image), "--key", s(&key)]), "sign");
    let digest = text(&ok(sealfs(&["digest", s(&image)]), "digest").stdout)
        .trim()
        .to_string();
    Fixture {
        dir,
        image,
        digest,
        public_key,
    }
}

/// A one-file HTTP server in Python: ranges (`bytes=A-B`, `bytes=-N`), `Last-Modified`, an ETag
/// as nginx's but in `truncate` mode (without one `object_store` cannot resume a broken body by
/// itself: the fault reaches sealfs). MODE:
/// `truncate N` (the next N range answers cut in half, the connection closed), `trickle SECONDS`
/// (range answers one byte every SECONDS), `rate BYTES` (range answers BYTES a second, in pieces
/// of a tenth of it), `plain` (none).
const SERVER_PY: &str = r#"
import http.server, os, socketserver, sys, threading, time
ROOT, MODE, ARG, PORT_FILE = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
LEFT = {"truncate": int(ARG) if MODE == "truncate" else 0}
LOCK = threading.Lock()

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.answer(False)

    def do_GET(self):
        self.answer(True)

    def answer(self, body):
        path = os.path.join(ROOT, self.path.lstrip("/"))
        rng = self.headers.get("Range")
        sys.stderr.write(f"{self.command} {self.path} {rng}\n")
        sys.stderr.flush()
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = open(path, "rb").read()
        n = len(data)
        a, b, status = 0, n, 200
        if rng and rng.startswith("bytes="):
            first, last = rng[6:].split("-", 1)
            if first == "":
                a, b = max(0, n - int(last)), n
            else:
                a, b = int(first), (min(n, int(last) + 1) if last else n)
            status = 206
        part = data[a:b]
        self.send_response(status)
        self.send_header("Content-Length", str(len(part)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {a}-{b - 1}/{n}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(path))))
        if MODE != "truncate":
            # As nginx does: `object_store` then resumes a body broken off by itself.
            self.send_header("ETag", '"%x-%x"' % (int(os.path.getmtime(path)), n))
        self.end_headers()
        if not body:
            return
        with LOCK:
            cut = MODE == "truncate" and rng is not None and LEFT["truncate"] > 0
            if cut:
                LEFT["truncate"] -= 1
        try:
            if cut:
                self.wfile.write(part[: len(part) // 2])
                self.wfile.flush()
                self.close_connection = True
            elif MODE == "trickle" and rng is not None:
                for i in range(len(part)):
                    self.wfile.write(part[i : i + 1])
                    self.wfile.flush()
                    time.sleep(ARG)
            elif MODE == "rate" and rng is not None:
                piece = max(1, int(ARG / 10))
                for i in range(0, len(part), piece):
                    self.wfile.write(part[i : i + piece])
                    self.wfile.flush()
                    time.sleep(0.1)
            else:
                self.wfile.write(part)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

srv = S(("127.0.0.1", 0), H)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(PORT_FILE + ".tmp", PORT_FILE)
srv.serve_forever()
"#;

/// The Python server of [`SERVER_PY`] over `root`, killed when dropped.
struct PyServer {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
}

impl PyServer {
    fn start(root: &Path, work: &Path, mode: &str, arg: &str) -> Option<PyServer> {
        if !oracle_guard(need_tool("python3")) {
            return None;
        }
        let script = work.join("server.py");
        fs::write(&script, SERVER_PY).unwrap();
        let port_file = work.join(format!("{mode}.port"));
        let log = work.join(format!("{mode}.log"));
        let _ = fs::remove_file(&port_file);
        let mut child = Command::new("python3")
            .arg(&script)
            .args([s(root), mode, arg, s(&port_file)])
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("python3 starts");
        for _ in 0..1000 {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.parse().ok())
            {
                return Some(PyServer { child, port, log });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the Python server did not start");
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// The requests it logged: `METHOD PATH RANGE`.
    fn requests(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Item 6: a body cut short on the open's first request (the tail) is retried, as every later
/// request's is, and the image reads.
#[test]
fn a_short_body_on_the_first_request_is_retried_over_http() {
    let fx = fixture();
    let work = tempfile::tempdir().unwrap();
    let Some(server) = PyServer::start(&fx.dir.path().join("www"), work.path(), "truncate", "1")
    else {
        return;
    };
    let url = server.url("img");
    let o = sealfs(&["ls", "--no-cache", "--digest", &fx.digest, &url, "/"]);
    let requests = server.requests();
    assert!(
        o.status.success(),
        "{}\nrequests: {requests:#?}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("big"), "{}", text(&o.stdout));
    // The first (suffix) request was cut, and asked again.
    let suffixes = requests.iter().filter(|r| r.contains("bytes=-")).count();
    assert!(suffixes >= 2, "{requests:#?}");
    let local = ok(sealfs(&["ls", s(&fx.image), "/"]), "ls local");
    assert_eq!(o.stdout, local.stdout);
}

/// `docker-registry` on loopback, for a test.
fn registry() -> Option<(tempfile::TempDir, Server)> {
    let have = common::servers::docker_registry_bin()
        .map(|_| ())
        .and_then(|()| {
            need_tool("skopeo").map_err(|_| "skopeo not installed (Debian package skopeo)".into())
        })
        .and_then(|()| need_tool("openssl"));
    if !oracle_guard(have) {
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    let server = docker_registry(work.path(), &RegistrySetup::default()).expect("registry starts");
    Some((work, server))
}

/// Item 6 for registries: the blob's tail read at open cut short (through the fault proxy in
/// front of `docker-registry`) is retried.
#[test]
fn a_short_body_on_the_first_request_is_retried_over_oci_http() {
    let fx = fixture();
    let Some((_work, reg)) = registry() else {
        return;
    };
    let target = format!("oci+http://127.0.0.1:{}/short/img:v1", reg.port);
    ok(sealfs(&["push", s(&fx.image), &target]), "push");
    let pwork = tempfile::tempdir().unwrap();
    let proxy = match FaultProxy::start(&reg, pwork.path()) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let through = format!("oci+http://127.0.0.1:{}/short/img:v1", proxy.port);
    proxy.set(r#"{"truncate": 1, "only_ranges": true}"#);
    let o = sealfs(&[
        "ls",
        "--no-cache",
        "--key",
        s(&fx.public_key),
        &through,
        "/",
    ]);
    assert!(o.status.success(), "{}\n{}", text(&o.stderr), proxy.log());
    assert_eq!(
        proxy.left()["truncate"],
        0,
        "the fault was met: {}",
        proxy.log()
    );
    assert!(text(&o.stdout).contains("big"));
}

/// Runs `sealfs ARGS` under coreutils' `timeout` (so a hang fails the test, not the suite) and
/// how long it took.
fn timed(args: &[&str], limit_secs: u32) -> (Output, Duration) {
    let t = Instant::now();
    let o = run(Command::new("timeout")
        .arg(limit_secs.to_string())
        .arg(sealfs_bin())
        .args(args)
        .env(
            "SEALFS_CACHE_DIR",
            std::env::temp_dir().join("sealfs-netfault-slow"),
        )
        .stdin(Stdio::null()));
    (o, t.elapsed())
}

/// Item 7: a server sending one byte every 5 s (never silent for 10 s) is given up on by the
/// default minimum rate (1 KiB/s over 20 s), and sooner with --speed-limit/--speed-time; the error
/// names the server and what was asked.
#[test]
fn a_trickling_server_is_given_up_on_by_the_minimum_rate() {
    let fx = fixture();
    let work = tempfile::tempdir().unwrap();
    let www = fx.dir.path().join("www");
    let Some(slow) = PyServer::start(&www, work.path(), "trickle", "5") else {
        return;
    };
    let url = slow.url("img");
    let server = format!("127.0.0.1:{}", slow.port);
    // Defaults: given up after the 20 s window, well before `timeout` gives up at 90 s.
    let (o, took) = timed(&["ls", "--no-cache", "--digest", &fx.digest, &url, "/"], 90);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{took:?}: {err}");
    assert!(
        took >= Duration::from_secs(19) && took < Duration::from_secs(60),
        "{took:?}: {err}"
    );
    assert!(err.contains(&format!("the server at {server}")), "{err}");
    assert!(
        err.contains("slower than the minimum of 1024 bytes/s"),
        "{err}"
    );
    assert!(err.contains("--speed-limit"), "{err}");
    assert!(err.lines().count() == 1, "one line: {err}");

    // Options: 100 bytes/s over 2 s.
    let (o, took) = timed(
        &[
            "ls",
            "--no-cache",
            "--speed-limit",
            "100",
            "--speed-time",
            "2",
            "--digest",
            &fx.digest,
            &url,
            "/",
        ],
        60,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{took:?}: {err}");
    assert!(took < Duration::from_secs(10), "{took:?}: {err}");
    assert!(
        err.contains("slower than the minimum of 100 bytes/s"),
        "{err}"
    );
    assert!(err.contains(&server), "{err}");
}

/// Item 7: a server steady above the minimum rate but too slow to finish is given up on at
/// --max-time, naming it; with no minimum and a deadline long enough, the same server is read.
#[test]
fn a_slow_request_is_given_up_on_at_the_deadline() {
    let fx = fixture();
    let work = tempfile::tempdir().unwrap();
    let www = fx.dir.path().join("www");
    // 2000 bytes a second: above a 100 bytes/s minimum; the 64 KiB tail takes ~33 s.
    let Some(slow) = PyServer::start(&www, work.path(), "rate", "2000") else {
        return;
    };
    let url = slow.url("img");
    let (o, took) = timed(
        &[
            "ls",
            "--no-cache",
            "--speed-limit",
            "100",
            "--speed-time",
            "2",
            "--max-time",
            "3",
            "--digest",
            &fx.digest,
            &url,
            "/",
        ],
        60,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{took:?}: {err}");
    assert!(took < Duration::from_secs(15), "{took:?}: {err}");
    assert!(
        err.contains(&format!(
            "the server at 127.0.0.1:{} did not answer in full within 3s (--max-time)",
            slow.port
        )),
        "{err}"
    );
}

/// Item 8: `oci://` (HTTPS) against a registry that speaks plain HTTP says so and names
/// `oci+http://`, at once (no retries of a handshake that cannot succeed).
#[test]
fn oci_against_a_plain_http_registry_says_to_use_oci_http() {
    let fx = fixture();
    let Some((_work, reg)) = registry() else {
        return;
    };
    let plain = format!("oci+http://127.0.0.1:{}/plain/img:v1", reg.port);
    ok(sealfs(&["push", s(&fx.image), &plain]), "push");
    let tls = format!("oci://127.0.0.1:{}/plain/img:v1", reg.port);
    for args in [
        vec!["ls", "--digest", &fx.digest, &tls, "/"],
        vec!["push", s(&fx.image), &tls],
    ] {
        let t = Instant::now();
        let o = sealfs(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("the registry speaks plain HTTP, not HTTPS: use oci+http://127.0.0.1:"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("retries"), "{args:?}: {err}");
        assert!(t.elapsed() < Duration::from_secs(10), "{args:?}");
    }
}

/// Item 9: one of SEALFS_REGISTRY_USERNAME and SEALFS_REGISTRY_PASSWORD without the other is an
/// error naming both (not a silent anonymous session); a credential helper that docker's
/// config.json names but that is not installed is named.
#[test]
fn half_given_credentials_and_a_missing_helper_are_named() {
    let fx = fixture();
    let Some((_work, reg)) = registry() else {
        return;
    };
    let host = format!("127.0.0.1:{}", reg.port);
    let target = format!("oci+http://{host}/creds/img:v1");
    for (set, unset) in [
        ("SEALFS_REGISTRY_USERNAME", "SEALFS_REGISTRY_PASSWORD"),
        ("SEALFS_REGISTRY_PASSWORD", "SEALFS_REGISTRY_USERNAME"),
    ] {
        for args in [
            vec!["push", s(&fx.image), &target],
            vec!["ls", "--digest", &fx.digest, &target, "/"],
        ] {
            let o = sealfs_env(&args, &[(set, "someone".to_string())]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{set} {args:?}: {err}");
            assert!(
                err.contains(&format!("{set} is set but {unset} is not")),
                "{set} {args:?}: {err}"
            );
        }
    }
    // Nothing was pushed with the half credentials.
    let o = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{host}/creds/img:v1"),
    ]));
    assert!(!o.status.success(), "pushed anyway");

    let config = tempfile::tempdir().unwrap();
    fs::write(
        config.path().join("config.json"),
        format!(r#"{{"credHelpers": {{"{host}": "sealfs-test-absent"}}}}"#),
    )
    .unwrap();
    let o = sealfs_env(
        &["push", s(&fx.image), &target],
        &[("DOCKER_CONFIG", s(config.path()).to_string())],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("credHelpers names the helper `sealfs-test-absent`")
            && err.contains("docker-credential-sealfs-test-absent is not installed"),
        "{err}"
    );
}

/// The EROFS length of an image, from its superblock as the kernel's `erofs_fs.h` lays it out
/// (`blocks` at byte 1024 + 36, little-endian, in blocks of 2^`blkszbits` (byte 1024 + 12)).
fn erofs_length(image: &[u8]) -> usize {
    let sb = &image[1024..1024 + 128];
    let blocks = u32::from_le_bytes(sb[36..40].try_into().unwrap()) as usize;
    blocks << sb[12]
}

/// Item 2: an image damaged in a data block, a Merkle tree block, its EROFS superblock or its
/// seal trailer is refused by `push` with exit 1 (the image is at fault), its name said once, and
/// nothing committed: `skopeo inspect` finds no manifest under the tag, and the registry's storage
/// holds no blob of the damaged file. The undamaged image then pushes to the same tag.
#[test]
fn push_refuses_damaged_images_and_commits_nothing() {
    let fx = fixture();
    let Some((work, reg)) = registry() else {
        return;
    };
    let good = fs::read(&fx.image).unwrap();
    let len = erofs_length(&good);
    assert!(len > 1 << 20 && len < good.len(), "{len} of {}", good.len());
    // A 2-level tree: one block on top, then level 0, one block per 128 data blocks.
    let data_blocks = len / 4096;
    assert!(
        data_blocks > 256 && data_blocks <= 128 * 128,
        "{data_blocks}"
    );
    let last_leaf = data_blocks.div_ceil(128) - 1;
    for (name, at) in [
        ("data", len / 2 + 123),
        // The top of the tree (checked at open) and the last level-0 block (which no open
        // needs: it proves only the last data blocks).
        ("tree", len + 100),
        ("tree-leaf", len + 4096 + last_leaf * 4096 + 100),
        ("superblock", 1024 + 8),
        ("trailer", good.len() - 200),
    ] {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        let path = fx.dir.path().join(format!("damaged-{name}.img"));
        fs::write(&path, &bad).unwrap();
        // The damage is real: verify refuses it.
        let v = sealfs(&["verify", s(&path)]);
        assert_eq!(v.status.code(), Some(1), "{name}: {}", text(&v.stdout));
        let target = format!("oci+http://127.0.0.1:{}/damaged/img:{name}", reg.port);
        let o = sealfs(&["push", s(&path), &target]);
        let err = text(&o.stderr);
        println!("{name}: {err}");
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert_eq!(
            err.matches(s(&path)).count(),
            1,
            "{name}: named once: {err}"
        );
        let o = run(Command::new("skopeo").args([
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://127.0.0.1:{}/damaged/img:{name}", reg.port),
        ]));
        assert!(!o.status.success(), "{name}: a manifest was committed");
        let sha = {
            use std::io::Write;
            let mut child = Command::new("sha256sum")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&bad).unwrap();
            let out = child.wait_with_output().unwrap();
            format!(
                "sha256:{}",
                text(&out.stdout).split_whitespace().next().unwrap()
            )
        };
        assert!(
            !Server::registry_blob(work.path(), &sha).exists(),
            "{name}: the damaged image was uploaded"
        );
        let block = at / 4096;
        let data = format!(
            "image block {block} (bytes {}..{}) does not match its hash",
            block * 4096,
            block * 4096 + 4096
        );
        let leaf = format!("Merkle tree level 0 block {last_leaf} is damaged");
        let what = match name {
            "data" => data.as_str(),
            "tree" => "Merkle tree level 1 block 0",
            "tree-leaf" => leaf.as_str(),
            "superblock" => "block 0 does not match its hash",
            _ => "damaged seal trailer",
        };
        assert!(err.contains(what), "{name}: {err}");
    }
    let target = format!("oci+http://127.0.0.1:{}/damaged/img:data", reg.port);
    ok(
        sealfs(&["push", s(&fx.image), &target]),
        "push the good image",
    );
    let o = run(Command::new("skopeo").args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://127.0.0.1:{}/damaged/img:data", reg.port),
    ]));
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Item 9: a signatures blob whose bytes the registry spoiled (in its storage) fails the open
/// with an error that names the blob once (`Registry::small_blob` named it twice).
#[test]
fn a_spoiled_signatures_blob_is_named_once() {
    let fx = fixture();
    let Some((work, reg)) = registry() else {
        return;
    };
    let target = format!("oci+http://127.0.0.1:{}/sigs/img:v1", reg.port);
    let o = ok(sealfs(&["push", "--json", s(&fx.image), &target]), "push");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let digest = v["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["media_type"] == "application/vnd.sealfs.signatures.v1")
        .and_then(|b| b["digest"].as_str())
        .expect("a signatures blob")
        .to_string();
    let blob = Server::registry_blob(work.path(), &digest);
    let mut bytes = fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    fs::write(&blob, &bytes).unwrap();
    let o = sealfs(&["ls", "--no-cache", "--key", s(&fx.public_key), &target, "/"]);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert_eq!(err.matches(&digest).count(), 1, "named once: {err}");
}
