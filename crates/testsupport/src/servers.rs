//! Real servers on loopback for the remote-image tests, no mocks: `nginx` (Debian package) serving a
//! directory with range requests and an access log of every request's method, range and status, and
//! `versitygw` (an S3 gateway, a Go program that `scripts/test.sh` builds into `target/oracles/`)
//! serving a directory with its posix backend, each subdirectory a bucket. Each listens on a free
//! port of 127.0.0.1 and is killed when dropped.

use crate::is_root;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free port on 127.0.0.1")
}

/// A server process the test started; killed (and reaped) on drop.
pub struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// nginx: the access log, one `METHOD URI RANGE STATUS BYTES` line per request.
    pub access_log: Option<PathBuf>,
    /// nginx: the error log, at level `info` (a TLS handshake the client broke off is a line).
    error_log: Option<PathBuf>,
    /// `http` or `https`.
    scheme: &'static str,
    /// Processes started with it (a registry's token server), killed with it.
    companions: Vec<Child>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for c in &mut self.companions {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    /// `http://127.0.0.1:PORT/name` (`https://` for a server with TLS).
    pub fn url(&self, name: &str) -> String {
        format!("{}://127.0.0.1:{}/{name}", self.scheme, self.port)
    }

    /// The lines of the access log (nginx).
    pub fn requests(&self) -> Vec<String> {
        let log = self.access_log.as_ref().expect("an nginx server");
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// [`Server::requests`] once the log has at least `n` lines, or after 5 s: nginx writes a
    /// request's line when it finalizes the request, which may be just after the client has its
    /// last byte.
    pub fn requests_at_least(&self, n: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let log = self.requests();
            if log.len() >= n || std::time::Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The lines of the error log (nginx, level `info`): among them one `SSL_do_handshake()
    /// failed (... alert number N)` line per TLS handshake the client broke off with an alert (a
    /// certificate it refused: alert 48, unknown CA), and none for a connection closed without
    /// one (the readiness probe's).
    pub fn errors(&self) -> Vec<String> {
        let log = self.error_log.as_ref().expect("an nginx server");
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Empties the access log (nginx appends, so the next request starts it again).
    pub fn clear_requests(&self) {
        let log = self.access_log.as_ref().expect("an nginx server");
        fs::write(log, b"").expect("truncate the access log");
    }

    fn wait_ready(mut self, what: &str, log: &Path) -> Result<Server, String> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            // Whether it exited first: another process may hold the port it could not take.
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{what} exited ({status}): {}",
                    fs::read_to_string(log).unwrap_or_default()
                ));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(self);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("{what} did not listen on port {}", self.port))
    }
}

/// Starts nginx serving `root` (its files by name) on a free port, with its configuration, pid file,
/// logs and temporary directories in `work`. `Err` says why it cannot (not installed).
pub fn nginx(root: &Path, work: &Path) -> Result<Server, String> {
    nginx_with(root, work, None)
}

/// A certificate authority and a server certificate it signed for 127.0.0.1, made by `openssl`
/// in `dir`: `(ca.pem, server.pem, server.key)`.
pub fn tls_certificates(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let (ca, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let (cert, key, csr) = (
        dir.join("server.pem"),
        dir.join("server.key"),
        dir.join("server.csr"),
    );
    let ext = dir.join("server.ext");
    fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("openssl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let s = |p: &Path| p.display().to_string();
    let (ca_s, ca_key_s, cert_s, key_s, csr_s) = (s(&ca), s(&ca_key), s(&cert), s(&key), s(&csr));
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout",
        &ca_key_s,
        "-out",
        &ca_s,
        "-days",
        "2",
        "-subj",
        "/CN=sealfs test CA",
    ]);
    openssl(&args)?;
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-keyout", &key_s, "-out", &csr_s, "-subj", "/CN=127.0.0.1"]);
    openssl(&args)?;
    let ext_s = s(&ext);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr_s,
        "-CA",
        &ca_s,
        "-CAkey",
        &ca_key_s,
        "-CAcreateserial",
        "-out",
        &cert_s,
        "-days",
        "2",
        "-extfile",
        &ext_s,
    ])?;
    Ok((ca, cert, key))
}

/// [`nginx`], serving HTTPS with `tls` (certificate and key, PEM) when given.
pub fn nginx_with(root: &Path, work: &Path, tls: Option<(&Path, &Path)>) -> Result<Server, String> {
    start_nginx(work, tls, &format!("root {};", root.display()))
}

/// nginx on loopback passing every request to the HTTP server on `upstream` (its `Host` header
/// kept, so that S3 signatures made for nginx's address verify), each logged with the body bytes
/// sent, as [`nginx`] logs them: what a server in front of an S3 server sent.
pub fn nginx_proxy(upstream: u16, work: &Path) -> Result<Server, String> {
    start_nginx(
        work,
        None,
        &format!(
            "location / {{\n      proxy_pass http://127.0.0.1:{upstream};\n      \
             proxy_set_header Host $http_host;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}"
        ),
    )
}

/// nginx with `site` as its one server's body.
fn start_nginx(work: &Path, tls: Option<(&Path, &Path)>, site: &str) -> Result<Server, String> {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("nginx not installed (Debian package nginx)")?;
    let port = free_port();
    let w = work.display();
    // As root, nginx would switch its worker to `nobody`, who cannot read a private temporary
    // directory; one process, no master, so that killing it ends the server.
    let user = if is_root() { "user root;" } else { "" };
    let listen = match tls {
        Some((cert, key)) => format!(
            "listen 127.0.0.1:{port} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};",
            cert.display(),
            key.display()
        ),
        None => format!("listen 127.0.0.1:{port};"),
    };
    let conf = format!(
        r#"daemon off;
master_process off;
{user}
pid {w}/nginx.pid;
error_log {w}/error.log info;
events {{ worker_connections 256; }}
http {{
  log_format ranges '$request_method $uri $http_range $status $body_bytes_sent';
  access_log {w}/access.log ranges;
  client_body_temp_path {w}/tmp;
  proxy_temp_path {w}/tmp;
  fastcgi_temp_path {w}/tmp;
  uwsgi_temp_path {w}/tmp;
  scgi_temp_path {w}/tmp;
  server {{
    {listen}
    {site}
  }}
}}
"#
    );
    fs::create_dir_all(work.join("tmp")).map_err(|e| e.to_string())?;
    let conf_path = work.join("nginx.conf");
    fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    let error_log = work.join("error.log");
    let child = Command::new(nginx)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(work)
        .arg("-e")
        .arg(&error_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("nginx: {e}"))?;
    Server {
        child,
        port,
        access_log: Some(work.join("access.log")),
        error_log: Some(error_log.clone()),
        scheme: if tls.is_some() { "https" } else { "http" },
        companions: Vec::new(),
    }
    .wait_ready("nginx", &error_log)
}

/// Where the versitygw binary is: `$SEALFS_VERSITYGW`, `target/oracles/versitygw` of this
/// workspace (where `scripts/test.sh` builds it), or `versitygw` in `PATH`.
pub fn versitygw_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SEALFS_VERSITYGW") {
        return Ok(p.into());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/oracles/versitygw");
    if built.is_file() {
        return Ok(built);
    }
    if crate::have_tool("versitygw") {
        return Ok("versitygw".into());
    }
    Err(
        "versitygw not built (scripts/test.sh builds it into target/oracles/ with `go install \
         github.com/versity/versitygw/cmd/versitygw@v1.8.0`)"
            .into(),
    )
}

/// The access key and secret the S3 server is started with.
pub const S3_ACCESS: (&str, &str) = ("sealfs-test", "sealfs-test-secret");

/// Starts versitygw serving `root` over S3 on a free port (each directory of `root` is a bucket),
/// its output in `work`. `Err` says why it cannot.
pub fn versitygw(root: &Path, work: &Path) -> Result<Server, String> {
    let bin = versitygw_bin()?;
    let port = free_port();
    let log = work.join("versitygw.log");
    let out = fs::File::create(&log).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .args(["--access", S3_ACCESS.0, "--secret", S3_ACCESS.1, "--port"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("posix")
        .arg(root)
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("versitygw: {e}"))?;
    Server {
        child,
        port,
        access_log: None,
        error_log: None,
        scheme: "http",
        companions: Vec::new(),
    }
    .wait_ready("versitygw", &log)
}

impl Server {
    /// The environment that points an S3 client at this server (versitygw).
    pub fn s3_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", S3_ACCESS.0.to_string()),
            ("AWS_SECRET_ACCESS_KEY", S3_ACCESS.1.to_string()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_REGION", "us-east-1".to_string()),
        ]
    }
}
/// `scripts/faultproxy.py` in front of `upstream`, spoiling answers as `control` says.
pub struct FaultProxy {
    child: std::process::Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    control: PathBuf,
    log: PathBuf,
    /// The number of the last setting ([`FaultProxy::set`]).
    gen: std::cell::Cell<u64>,
}

impl FaultProxy {
    /// Starts the proxy in front of `upstream`, its control file and log in `dir`.
    pub fn start(upstream: &Server, dir: &Path) -> Result<FaultProxy, String> {
        if !crate::have_tool("python3") {
            return Err("python3 not found".into());
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/faultproxy.py");
        let control = dir.join("faults.json");
        let port_file = dir.join("proxy.port");
        let log = dir.join("proxy.log");
        fs::write(&control, "{}").unwrap();
        let child = Command::new("python3")
            .arg(&script)
            .arg(upstream.port.to_string())
            .arg(&control)
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .map_err(|e| format!("python3 faultproxy.py: {e}"))?;
        for _ in 0..500 {
            if let Some(port) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.parse().ok())
            {
                return Ok(FaultProxy {
                    child,
                    port,
                    control,
                    log,
                    gen: std::cell::Cell::new(0),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err("faultproxy.py did not start".into())
    }

    /// `http://127.0.0.1:PORT/name`.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// Sets the faults (JSON), for range requests only (an open's suffix request is a range too):
    /// numbered, and renamed into place whole, so the proxy never sees half a setting and takes
    /// every new one (it counts them down in a file of its own).
    pub fn set(&self, faults: &str) {
        self.gen.set(self.gen.get() + 1);
        let mut v: serde_json::Value = serde_json::from_str(faults).unwrap();
        v["gen"] = self.gen.get().into();
        let tmp = self.control.with_extension("json.tmp");
        fs::write(&tmp, v.to_string()).unwrap();
        fs::rename(&tmp, &self.control).unwrap();
    }

    /// The faults left unused of the last setting.
    pub fn left(&self) -> serde_json::Value {
        let left = self.control.with_extension("json.left");
        let set: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&self.control).unwrap()).unwrap();
        match fs::read_to_string(left).map(|l| serde_json::from_str::<serde_json::Value>(&l)) {
            Ok(Ok(l)) if l["gen"] == set["gen"] => l,
            _ => set, // nothing of it used yet
        }
    }

    /// What the proxy logged: one `METHOD PATH RANGE -> STATUS FAULT` line per request.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a test registry is started ([`docker_registry`]).
#[derive(Clone, Debug, Default)]
pub struct RegistrySetup {
    /// Serve HTTPS with this certificate and key (PEM).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Ask for basic credentials: this user and password, written to an htpasswd file with
    /// `htpasswd -B` (apache2-utils).
    pub htpasswd: Option<(String, String)>,
    /// Ask for bearer tokens from `scripts/tokenserver.py` (started beside the registry, with an
    /// openssl-made RSA key and certificate): anonymous requests get pull access, this user and
    /// password every action.
    pub token: Option<(String, String)>,
    /// Store in the bucket `registry` of this S3 server (versitygw, [`versitygw`]) instead of the
    /// file system, with redirects on: blob reads are answered `307` to a presigned URL of it.
    pub s3: Option<u16>,
    /// Listen on this port of 127.0.0.1 rather than a free one: a registry started again where
    /// a stopped one served (its work directory, hence its storage, the same).
    pub port: Option<u16>,
}

/// Where `docker-registry` (Debian's package of the CNCF distribution registry) is.
pub fn docker_registry_bin() -> Result<PathBuf, String> {
    ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| "docker-registry not installed (Debian package docker-registry)".into())
}

/// Starts the distribution registry on a free port of 127.0.0.1, its filesystem storage in
/// `work/storage` (blobs under `docker/registry/v2/blobs/sha256/XX/HEX/data`), its configuration
/// and log (one line per request) in `work`. `Err` says why it cannot.
pub fn docker_registry(work: &Path, setup: &RegistrySetup) -> Result<Server, String> {
    let bin = docker_registry_bin()?;
    fs::create_dir_all(work.join("storage")).map_err(|e| e.to_string())?;
    let tls = match &setup.tls {
        Some((cert, key)) => format!(
            "  tls:\n    certificate: {}\n    key: {}\n",
            cert.display(),
            key.display()
        ),
        None => String::new(),
    };
    let auth = match &setup.htpasswd {
        Some((user, password)) => {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .map_err(|e| format!("htpasswd (Debian package apache2-utils): {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "htpasswd: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let file = work.join("htpasswd");
            fs::write(&file, &out.stdout).map_err(|e| e.to_string())?;
            format!(
                "auth:\n  htpasswd:\n    realm: sealfs-test\n    path: {}\n",
                file.display()
            )
        }
        None => String::new(),
    };
    let mut companions = Vec::new();
    let auth = match &setup.token {
        Some((user, password)) => {
            let (key, cert) = (work.join("token.key"), work.join("token.pem"));
            let o = Command::new("openssl")
                .args([
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                ])
                .args(["-subj", "/CN=sealfs test token issuer", "-keyout"])
                .arg(&key)
                .arg("-out")
                .arg(&cert)
                .output()
                .map_err(|e| format!("openssl: {e}"))?;
            if !o.status.success() {
                return Err(format!("openssl: {}", String::from_utf8_lossy(&o.stderr)));
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/tokenserver.py");
            let port_file = work.join("token.port");
            let child = Command::new("python3")
                .arg(&script)
                .arg(&port_file)
                .arg(&key)
                .arg(&cert)
                .arg("sealfs-test-issuer")
                .arg(format!("{user}:{password}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(work.join("token.log")).map_err(|e| e.to_string())?)
                .spawn()
                .map_err(|e| format!("python3 tokenserver.py: {e}"))?;
            companions.push(child);
            let mut token_port = None;
            for _ in 0..500 {
                token_port = fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|p| p.parse::<u16>().ok());
                if token_port.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let token_port = token_port.ok_or("tokenserver.py did not start")?;
            format!(
                "auth:\n  token:\n    realm: http://127.0.0.1:{token_port}/token\n    service: \
                 sealfs-test-registry\n    issuer: sealfs-test-issuer\n    rootcertbundle: {}\n",
                cert.display()
            )
        }
        None => auth,
    };
    let storage = match setup.s3 {
        Some(s3) => format!(
            "  s3:\n    accesskey: {}\n    secretkey: {}\n    region: us-east-1\n    \
             regionendpoint: http://127.0.0.1:{s3}\n    bucket: registry\n    secure: false\n    \
             v4auth: true\n  redirect:\n    disable: false\n",
            S3_ACCESS.0, S3_ACCESS.1
        ),
        None => format!(
            "  filesystem:\n    rootdirectory: {}\n",
            work.join("storage").display()
        ),
    };
    // The port is picked after the token server has bound its own: picked before, it was free
    // for the token server's bind to take (seen once), and then the registry could not listen.
    let port = setup.port.unwrap_or_else(free_port);
    let conf = format!(
        "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n{storage}  delete:\n    \
         enabled: true\n  maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: \
         127.0.0.1:{port}\n  secret: sealfs-test-secret\n{tls}{auth}"
    );
    let conf_path = work.join("registry.yml");
    fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
    let log = work.join("registry.log");
    let out = fs::File::create(&log).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .arg("serve")
        .arg(&conf_path)
        // The AWS SDK of the S3 driver refuses to start with a CA bundle it cannot add.
        .env_remove("AWS_CA_BUNDLE")
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("docker-registry: {e}"))?;
    Server {
        child,
        port,
        access_log: Some(log.clone()),
        error_log: None,
        scheme: if setup.tls.is_some() { "https" } else { "http" },
        companions,
    }
    .wait_ready("docker-registry", &log)
}

impl Server {
    /// The registry's storage directory (see [`docker_registry`]), given its work directory.
    pub fn registry_blob(work: &Path, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        work.join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The registry's requests so far, as `METHOD PATH STATUS` (from its log of each request).
    pub fn registry_requests(&self) -> Vec<String> {
        let log = self.access_log.as_ref().expect("a registry");
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                // The access log's lines: `... "GET /v2/... HTTP/1.1" 206 ...`.
                let (_, rest) = l.split_once('"')?;
                let (request, after) = rest.split_once('"')?;
                let mut r = request.split(' ');
                let (method, path) = (r.next()?, r.next()?);
                let status = after.split_whitespace().next()?;
                Some(format!("{method} {path} {status}"))
            })
            .collect()
    }
}

impl Server {
    /// Bytes of blob bodies the registry has sent so far (from its log of each request).
    pub fn registry_blob_bytes(&self) -> u64 {
        let log = self.access_log.as_ref().expect("a registry");
        fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("/blobs/sha256:"))
            .filter_map(|l| {
                let (_, rest) = l.split_once("HTTP/1.1\" ")?;
                rest.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .sum()
    }
}

/// Where the `oras` CLI is: `$SEALFS_ORAS`, `target/oracles/oras` of this workspace (where
/// `scripts/build-oracles.sh` builds it), or `oras` in `PATH`.
pub fn oras_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SEALFS_ORAS") {
        return Ok(p.into());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/oracles/oras");
    if built.is_file() {
        return Ok(built);
    }
    if crate::have_tool("oras") {
        return Ok("oras".into());
    }
    Err(
        "oras not built (scripts/build-oracles.sh builds it into target/oracles/ with `go install \
         oras.land/oras/cmd/oras@v1.3.6`)"
            .into(),
    )
}
