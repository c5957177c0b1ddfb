//! What `sealfs snapshotter` holds and frees, against real programs: `sealfs snapshotter status`
//! while the snapshotter runs under a real containerd (snapshots made by `ctr`, the layer's
//! mode and digest as `/proc/mounts` shows them, a damaged layer found by the container's read);
//! `List` with containerd's filters, driven over gRPC by the generated client of containerd's
//! snapshots API against a running snapshotter, the expected sets written by hand from
//! containerd's filter semantics, and the same requests answered by containerd's own `List`
//! (its pkg/filters over its records) with the same sets and the same parse errors;
//! `ctr snapshots usage` against `du`; and an image removed by
//! `ctr image rm` freeing its layers, mount points, directories and the space `df` reports.
//!
//! Needs root, containerd, runc, umoci, busybox-static, /dev/fuse and overlayfs: prints `SKIP:`
//! otherwise (a failure under CI=true).

mod common;

use common::containerd::*;
use common::*;
use containerd_snapshots::api::snapshots::v1 as api;
use containerd_snapshots::tonic;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `sealfs snapshotter status --root ROOT [--json]`: its exit code and stdout.
fn status(root: &Path, json: bool) -> (i32, String) {
    let mut cmd = Command::new(sealfs_bin());
    cmd.args(["snapshotter", "status", "--root"]).arg(root);
    if json {
        cmd.arg("--json");
    }
    let out = run(&mut cmd);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn status_json(root: &Path) -> (i32, Value) {
    let (code, out) = status(root, true);
    (code, serde_json::from_str(&out).unwrap())
}

/// The snapshot containerd's clients call `name`, in a status.
fn snapshot<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no snapshot {name} in {status:#}"))
}

/// `du -s --block-size=1 PATH`: bytes of allocated blocks (GNU coreutils, the oracle).
fn du_blocks(path: &Path) -> u64 {
    let out = sh(&format!("du -s --block-size=1 '{}'", path.display()));
    out.split_whitespace().next().unwrap().parse().unwrap()
}

/// `du -s --apparent-size --block-size=1 PATH` (`du -sb`): bytes of the files' sizes.
fn du_apparent(path: &Path) -> u64 {
    let out = sh(&format!("du -sb '{}'", path.display()));
    out.split_whitespace().next().unwrap().parse().unwrap()
}

/// Distinct inodes under `path` (findutils), the root included, as `du` and containerd count.
fn inodes(path: &Path) -> u64 {
    sh(&format!(
        "find '{}' -printf '%i\\n' | sort -u | wc -l",
        path.display()
    ))
    .trim()
    .parse()
    .unwrap()
}

/// `df --block-size=1 --output=used PATH`: bytes used on the file system holding `path`.
fn df_used(path: &Path) -> u64 {
    let out = sh(&format!(
        "df --block-size=1 --output=used '{}'",
        path.display()
    ));
    out.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn status_reports_each_layer_its_mode_digest_and_damage() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let m = c.dir.path().join("m");
    let root = c.root();

    // A layer with a file of random bytes (lz4 keeps them as they are: found by its bytes).
    c.snap(&["prepare", "a1"]);
    c.mount("a1", &m);
    sh(&format!(
        "cd '{0}' && echo hello > f1 && head -c 65536 /dev/urandom > big && cd / && umount '{0}'",
        m.display()
    ));
    let big = {
        let (_, s) = status_json(&root);
        let dir = PathBuf::from(snapshot(&s, "a1")["dir"].as_str().unwrap());
        fs::read(dir.join("big")).unwrap()
    };
    c.snap(&["commit", "l1", "a1"]);
    // A label with a newline and an escape sequence: text output escapes it, JSON keeps it.
    // (containerd hands its snapshotter only the labels under containerd.io/snapshot/.)
    c.snap(&["label", "l1", "containerd.io/snapshot/evil=a\nb\x1b[31m"]);
    c.view_kept("v", "l1");

    // While the snapshotter runs, its store is locked (redb takes an exclusive flock and has no
    // read-only open): the status comes over its status socket.
    let locked = sealfs_snapshot::store::Store::open_existing(&root.join("metadata.redb"))
        .err()
        .map(|e| e.to_string());
    assert!(
        locked
            .as_deref()
            .is_some_and(|e| e.contains("already open")),
        "{locked:?}"
    );
    let (code, s) = status_json(&root);
    assert_eq!(code, 0, "{s:#}");
    assert_eq!(s["source"], "snapshotter");
    assert_eq!(s["snapshots"].as_array().unwrap().len(), 2, "{s:#}");
    let l1 = snapshot(&s, "l1");
    assert_eq!(l1["kind"], "committed");
    assert_eq!(l1["namespace"], "default");
    assert_eq!(l1["parent"], "");
    assert_eq!(l1["labels"]["containerd.io/snapshot/evil"], "a\nb\x1b[31m");
    let key = l1["key"].as_str().unwrap();
    assert!(key.starts_with("default/") && key.ends_with("/l1"), "{key}");
    let v = snapshot(&s, "v");
    assert_eq!(
        (v["kind"].as_str(), v["parent"].as_str()),
        (Some("view"), Some(key))
    );
    let layer = &l1["layer"];
    let image = PathBuf::from(layer["image"].as_str().unwrap());
    assert_eq!(layer["size_on_disk"].as_u64(), Some(du_blocks(&image)));
    assert_eq!(layer["size_at_commit"], layer["size_on_disk"]);
    assert_eq!(layer["damaged"], false);
    let digest = layer["digest"].as_str().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(layer["mount"]["mode"], "fuse-verified");
    // The mode and digest are what /proc/mounts and the log say.
    let mounts = layer_mounts(&root);
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    let fields: Vec<&str> = mounts[0].split(' ').collect();
    assert_eq!(fields[0], format!("sealfs:{digest}:fuse-verified"));
    assert_eq!(fields[1], layer["mount"]["mountpoint"].as_str().unwrap());
    let log = fs::read_to_string(c.dir.path().join("snapshotter.log")).unwrap();
    assert!(
        log.contains(&format!(
            "(mode fuse-verified): FUSE, every block verified against {digest}"
        )),
        "{log}"
    );
    let (_, text) = status(&root, false);
    assert!(
        text.contains("label containerd.io/snapshot/evil=a\\nb\\033[31m\n"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.contains("root ") && text.contains("(answered by the running snapshotter)"));
    assert!(text.contains(&format!("  digest {digest}\n")), "{text}");
    assert!(text.contains("  mounted fuse-verified on "), "{text}");
    println!("{text}");

    // A byte flipped in the layer image: the read through the view fails, the status says so.
    let window = &big[8192..12288];
    let mut bytes = fs::read(&image).unwrap();
    let at = bytes
        .windows(window.len())
        .position(|w| w == window)
        .expect("the random block is in the image as it is");
    bytes[at + 100] ^= 0x20;
    fs::write(&image, &bytes).unwrap();
    c.mount("v", &m);
    assert_eq!(fs::read_to_string(m.join("f1")).unwrap(), "hello\n");
    let err = fs::read(m.join("big")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    sh(&format!("umount '{}'", m.display()));
    let (code, s) = status_json(&root);
    let layer = &snapshot(&s, "l1")["layer"];
    assert_eq!(code, 1, "a damaged layer fails the status: {s:#}");
    assert_eq!(layer["damaged"], true, "{s:#}");
    assert!(
        layer["mount"]["verification_failures"].as_u64() >= Some(1),
        "{s:#}"
    );
    assert!(
        layer["mount"]["failed_requests"].as_u64() >= Some(1),
        "{s:#}"
    );
    let (_, text) = status(&root, false);
    assert!(text.contains("  DAMAGED: "), "{text}");
    println!("{text}");

    // With no snapshotter running, the status is read from the store; nothing is mounted.
    let mut stopped = c.snapshotter.take().unwrap();
    sh(&format!("kill {}", stopped.id()));
    stopped.wait().unwrap();
    let (code, s) = status_json(&root);
    assert_eq!((code, s["source"].as_str()), (0, Some("store")), "{s:#}");
    assert!(snapshot(&s, "l1")["layer"]["mount"].is_null(), "{s:#}");
    assert_eq!(snapshot(&s, "l1")["layer"]["digest"], digest);
    let (_, text) = status(&root, false);
    assert!(
        text.contains("no snapshotter runs") && text.contains("  not mounted\n"),
        "{text}"
    );
}

/// A `sealfs snapshotter` alone (no containerd), its state and socket in a temporary directory;
/// stopped on drop.
struct Standalone {
    dir: tempfile::TempDir,
    child: Child,
}

impl Standalone {
    fn start() -> Standalone {
        let dir = tempfile::Builder::new()
            .prefix("sealfs-snap-")
            .tempdir()
            .unwrap();
        let log = fs::File::create(dir.path().join("log")).unwrap();
        let child = Command::new(sealfs_bin())
            .arg("snapshotter")
            .arg("--root")
            .arg(dir.path().join("root"))
            .arg("--address")
            .arg(dir.path().join("s.sock"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(dir.path().join("s.sock")).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "no snapshotter socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Standalone { dir, child }
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let dir = self.dir.path().to_str().unwrap().to_string();
        let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
        for p in mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|p| p.starts_with(&dir))
            .collect::<Vec<_>>()
            .iter()
            .rev()
        {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

type Client = api::snapshots_client::SnapshotsClient<tonic::transport::Channel>;

/// containerd's generated client of the snapshots API, connected to the unix socket `path`.
async fn connect(path: PathBuf) -> Client {
    let channel = tonic::transport::Endpoint::try_from("http://[::]:0")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            tokio::net::UnixStream::connect(path.clone())
        }))
        .await
        .unwrap();
    api::snapshots_client::SnapshotsClient::new(channel)
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The names `List` answers for `filters`, or its error.
async fn list(c: &mut Client, filters: &[&str]) -> Result<BTreeSet<String>, tonic::Status> {
    list_in(c, None, filters).await
}

/// A request, in containerd's namespace `ns` if given (the header containerd's API reads).
fn request<T>(ns: Option<&str>, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(ns) = ns {
        r.metadata_mut()
            .insert("containerd-namespace", ns.parse().unwrap());
    }
    r
}

/// [`list`] in containerd's namespace `ns`.
async fn list_in(
    c: &mut Client,
    ns: Option<&str>,
    filters: &[&str],
) -> Result<BTreeSet<String>, tonic::Status> {
    let mut stream = c
        .list(request(
            ns,
            api::ListSnapshotsRequest {
                snapshotter: "sealfs".into(),
                filters: filters.iter().map(|f| f.to_string()).collect(),
            },
        ))
        .await?
        .into_inner();
    let mut names = BTreeSet::new();
    while let Some(r) = stream.message().await? {
        names.extend(r.info.into_iter().map(|i| i.name));
    }
    Ok(names)
}

#[test]
fn list_applies_containerds_filters() {
    if !oracle_guard(root_env().and(if Path::new("/dev/fuse").exists() {
        Ok(())
    } else {
        Err("no /dev/fuse".into())
    })) {
        return;
    }
    let s = Standalone::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = connect(s.dir.path().join("s.sock")).await;
        let prepare = |key: &str, parent: &str, l: &[(&str, &str)]| api::PrepareSnapshotRequest {
            snapshotter: "sealfs".into(),
            key: key.into(),
            parent: parent.into(),
            labels: labels(l),
        };
        c.prepare(prepare("a", "", &[("team", "blue")]))
            .await
            .unwrap();
        c.commit(api::CommitSnapshotRequest {
            snapshotter: "sealfs".into(),
            name: "l1".into(),
            key: "a".into(),
            labels: labels(&[
                ("containerd.io/gc.root", "x"),
                ("containerd.io/snapshot.ref", "sha256:abc"),
                ("tier", "base"),
            ]),
        })
        .await
        .unwrap();
        c.prepare(prepare("b", "l1", &[("team", "red")]))
            .await
            .unwrap();
        c.view(api::ViewSnapshotRequest {
            snapshotter: "sealfs".into(),
            key: "v".into(),
            parent: "l1".into(),
            labels: HashMap::new(),
        })
        .await
        .unwrap();
        c.prepare(prepare("c", "", &[("a.b", "dotted"), ("sp ace", "q")]))
            .await
            .unwrap();

        // Each filter's set written by hand from containerd's semantics (pkg/filters and its
        // snapshot adaptor): `parent` is present even when empty, `!=` takes an absent field
        // as "", `labels.a.b` is the label "a.b", several strings are OR, "" matches all.
        let cases: &[(&[&str], &[&str])] = &[
            (&[], &["b", "c", "l1", "v"]),
            (&["kind==committed"], &["l1"]),
            (&["kind==active"], &["b", "c"]),
            (&["kind==active", "kind==view"], &["b", "c", "v"]),
            (&["kind==Active"], &[]),
            (&["parent==l1"], &["b", "v"]),
            (&["parent"], &["b", "c", "l1", "v"]),
            (&["parent!=l1"], &["c", "l1"]),
            (&["parent==\"\""], &["c", "l1"]),
            (&["labels.\"containerd.io/gc.root\""], &["l1"]),
            (&["labels.team"], &["b"]),
            (&["labels.team==red,kind==active"], &["b"]),
            (&["labels.team==red,kind==view"], &[]),
            (&["labels.team!=red"], &["c", "l1", "v"]),
            (&["labels.a.b==dotted"], &["c"]),
            (&["labels.\"sp ace\"==q"], &["c"]),
            (&["name~=^[a-c]$"], &["b", "c"]),
            (&["name~=/^l/"], &["l1"]),
            (&["name~=|[|"], &[]),
            (&["labels.tier~=ba,name"], &["l1"]),
            (&["name==l1", ""], &["b", "c", "l1", "v"]),
            (&["name==nope", "labels.\"sp ace\""], &["c"]),
            // Spaces around the operator are skipped, as containerd's scanner does.
            (&[" kind == committed"], &["l1"]),
            (&["kind== committed"], &["l1"]),
            // What containerd's metadata layer asks a snapshotter that answered AlreadyExists
            // for a target (core/metadata/snapshot.go: labels.%q==%s,parent==%q).
            (
                &["labels.\"containerd.io/snapshot.ref\"==sha256:abc,parent==\"\""],
                &["l1"],
            ),
        ];
        let mut failed = Vec::new();
        for (filters, expected) in cases {
            let got = list(&mut c, filters).await;
            let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
            match got {
                Ok(got) if got == expected => {}
                other => failed.push(format!("{filters:?}: {other:?}, expected {expected:?}")),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));

        // Filters that do not parse: InvalidArgument, naming the filter and why.
        for (filters, why) in [
            (
                &["name==l1", "labels.ns/key==v"][..],
                "quoted literal not terminated",
            ),
            (&["name=="][..], "expected value or quoted"),
            (&["kind==committed,"][..], "expected field or quoted"),
            (&["name==a b"][..], "unexpected input"),
            (&["labels.|x|"][..], "invalid quote encountered"),
        ] {
            let e = list(&mut c, filters).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{filters:?}: {e:?}");
            let bad = filters.last().unwrap();
            assert!(
                e.message().starts_with(&format!(
                    "filter {}: filters: parse error: ",
                    sealfs_text::escape(bad.as_bytes())
                )) && e.message().contains(why),
                "{filters:?}: {}",
                e.message()
            );
        }
    });
}

#[test]
fn list_filters_as_containerds_own_list_does() {
    if !containerd_guard() {
        return;
    }
    let c = Containerd::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The same client, the same requests: once to containerd (its snapshots service filters
        // its own records with its pkg/filters), once to the snapshotter behind it.
        let mut theirs = connect(c.dir.path().join("containerd.sock")).await;
        let mut ours = connect(c.dir.path().join("sealfs.sock")).await;
        let ns = Some("default");
        // containerd hands its snapshotter only containerd.io/snapshot.ref and the labels under
        // containerd.io/snapshot/; gc.root keeps the snapshots from its garbage collection.
        let l = |pairs: &[(&str, &str)]| {
            let mut m = labels(pairs);
            m.insert("containerd.io/gc.root".into(), "test".into());
            m
        };
        let prepare = |key: &str, parent: &str, labels| {
            request(
                ns,
                api::PrepareSnapshotRequest {
                    snapshotter: "sealfs".into(),
                    key: key.into(),
                    parent: parent.into(),
                    labels,
                },
            )
        };
        theirs
            .prepare(prepare(
                "a",
                "",
                l(&[("containerd.io/snapshot/team", "blue")]),
            ))
            .await
            .unwrap();
        theirs
            .commit(request(
                ns,
                api::CommitSnapshotRequest {
                    snapshotter: "sealfs".into(),
                    name: "l1".into(),
                    key: "a".into(),
                    labels: l(&[
                        ("containerd.io/snapshot.ref", "sha256:abc"),
                        ("containerd.io/snapshot/tier", "base"),
                    ]),
                },
            ))
            .await
            .unwrap();
        theirs
            .prepare(prepare(
                "b",
                "l1",
                l(&[("containerd.io/snapshot/team", "red")]),
            ))
            .await
            .unwrap();
        theirs
            .view(request(
                ns,
                api::ViewSnapshotRequest {
                    snapshotter: "sealfs".into(),
                    key: "v".into(),
                    parent: "l1".into(),
                    labels: l(&[]),
                },
            ))
            .await
            .unwrap();
        theirs
            .prepare(prepare(
                "c",
                "",
                l(&[("containerd.io/snapshot/a.b", "dotted")]),
            ))
            .await
            .unwrap();

        // The snapshotter's keys are containerd's NAMESPACE/ID/NAME: compared by NAME.
        let names = |keys: BTreeSet<String>| -> BTreeSet<String> {
            keys.into_iter()
                .map(|k| k.splitn(3, '/').nth(2).unwrap_or(&k).to_string())
                .collect()
        };
        let cases: &[(&[&str], &[&str])] = &[
            (&[], &["b", "c", "l1", "v"]),
            (&["kind==committed"], &["l1"]),
            (&["kind==active", "kind==view"], &["b", "c", "v"]),
            (&["kind!=active"], &["l1", "v"]),
            (&["parent"], &["b", "c", "l1", "v"]),
            (&["parent==\"\""], &["c", "l1"]),
            (&["labels.\"containerd.io/snapshot/team\""], &["b"]),
            (
                &["labels.\"containerd.io/snapshot/team\"!=red"],
                &["c", "l1", "v"],
            ),
            (
                &["labels.\"containerd.io/snapshot/a.b\"==dotted,kind==active"],
                &["c"],
            ),
            (&["labels.\"containerd.io/snapshot/tier\"~=^b"], &["l1"]),
            (
                &["labels.\"containerd.io/snapshot/tier\"~=/^x|ba/"],
                &["l1"],
            ),
            (
                &["labels.\"containerd.io/snapshot.ref\"==sha256:abc"],
                &["l1"],
            ),
            (&["kind~=|[|"], &[]),
            (&[" kind == view"], &["v"]),
            (&["kind==view", ""], &["b", "c", "l1", "v"]),
        ];
        let mut failed = Vec::new();
        for (filters, expected) in cases {
            let expected: BTreeSet<String> = expected.iter().map(|s| s.to_string()).collect();
            let t = list_in(&mut theirs, ns, filters).await;
            let o = list(&mut ours, filters).await.map(names);
            match (&t, &o) {
                (Ok(t), Ok(o)) if *t == expected && *o == expected => {}
                _ => failed.push(format!(
                    "{filters:?}: containerd {t:?}, sealfs {o:?}, expected {expected:?}"
                )),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));

        // Filters that do not parse: containerd's error, its message in ours.
        for bad in [
            "labels.ns/key==v",
            "kind==",
            "kind==committed,",
            "kind==a b",
            "labels.|x|",
            "labels.\"\\q\"",
            "kind===x",
            "labels.?x",
        ] {
            let t = list_in(&mut theirs, ns, &[bad]).await.unwrap_err();
            let o = list(&mut ours, &[bad]).await.unwrap_err();
            // containerd 1.6's List stream sends its errdefs error without converting it: code
            // Unknown, the message ending in errdefs.ErrInvalidArgument's text.
            assert_eq!(o.code(), tonic::Code::InvalidArgument, "{bad}: {o:?}");
            assert!(t.message().ends_with(": invalid argument"), "{bad}: {t:?}");
            let theirs_says = &t.message()[..t.message().len() - ": invalid argument".len()];
            println!("{bad}: containerd: {}", t.message());
            assert!(
                o.message()
                    .ends_with(&sealfs_text::escape_prose(theirs_says.as_bytes())),
                "{bad}: containerd says {:?}, sealfs {:?}",
                t.message(),
                o.message()
            );
        }
    });
}

/// `ctr snapshots usage -b KEY`: size and inodes.
fn ctr_usage(c: &Containerd, key: &str) -> (u64, u64) {
    let out = c.snap(&["usage", "-b", key]);
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    (row[1].parse().unwrap(), row[2].parse().unwrap())
}

#[test]
fn ctr_usage_agrees_with_du() {
    if !containerd_guard() {
        return;
    }
    let c = Containerd::start();
    let m = c.dir.path().join("m");
    let root = c.root();

    // Files of many sizes, a hard link (one inode), and a sparse file: 8 MiB long, one block
    // written, so its blocks and its size differ.
    c.snap(&["prepare", "a1"]);
    c.mount("a1", &m);
    sh(&format!(
        "cd '{0}' && mkdir -p d/e && head -c 1000001 /dev/urandom > d/r && echo x > s && ln s d/e/link \
         && seq 1 100000 > seq && truncate -s 8M sparse && echo end >> sparse \
         && for i in $(seq 1 50); do echo $i > d/e/f$i; done && cd / && umount '{0}'",
        m.display()
    ));
    let (_, s) = status_json(&root);
    let a1 = PathBuf::from(snapshot(&s, "a1")["dir"].as_str().unwrap());
    let (size, count) = ctr_usage(&c, "a1");
    println!(
        "a1: ctr usage {size} bytes, {count} inodes; du -s -B1 {}, du -sb {}, distinct inodes {}",
        du_blocks(&a1),
        du_apparent(&a1),
        inodes(&a1)
    );
    assert_eq!((size, count), (du_blocks(&a1), inodes(&a1)));
    assert!(
        du_apparent(&a1) > size + 7_000_000,
        "the sparse file is not counted by its length"
    );
    let tree_inodes = count;

    c.snap(&["commit", "l1", "a1"]);
    let (_, s) = status_json(&root);
    let image = PathBuf::from(snapshot(&s, "l1")["layer"]["image"].as_str().unwrap());
    let (size, count) = ctr_usage(&c, "l1");
    println!(
        "l1: ctr usage {size} bytes, {count} inodes; du -s -B1 of its image {}",
        du_blocks(&image)
    );
    assert_eq!(size, du_blocks(&image));
    assert_eq!(count, tree_inodes, "the image holds the tree's inodes");

    // An active snapshot over it: its upper directory only (the layer below is counted once,
    // in l1), as containerd's overlayfs snapshotter counts it.
    c.snap(&["prepare", "a2", "l1"]);
    c.mount("a2", &m);
    sh(&format!(
        "cd '{0}' && rm seq && head -c 300000 /dev/urandom > new && echo y >> d/e/f1 && cd / && umount '{0}'",
        m.display()
    ));
    let (_, s) = status_json(&root);
    let a2 = PathBuf::from(snapshot(&s, "a2")["dir"].as_str().unwrap());
    let (size, count) = ctr_usage(&c, "a2");
    println!(
        "a2: ctr usage {size} bytes, {count} inodes; du -s -B1 {}, distinct inodes {}",
        du_blocks(&a2),
        inodes(&a2)
    );
    assert_eq!((size, count), (du_blocks(&a2), inodes(&a2)));
}

/// [`make_image`]'s image with one more layer: 24 MiB of random bytes in /big/blob.
fn make_big_image(dir: &Path) -> PathBuf {
    make_image(dir);
    let (l, d) = (dir.join("layout"), dir.display());
    sh(&format!(
        "set -e; mkdir -p '{d}/bigl'; head -c 25165824 /dev/urandom > '{d}/bigl/blob'
         umoci insert --image '{l}:t' '{d}/bigl' /big
         tar -C '{l}' -cf '{d}/big.tar' .",
        l = l.display()
    ));
    dir.join("big.tar")
}

#[test]
fn removing_an_image_frees_its_layers_and_the_space() {
    if !containerd_guard() || !oracle_guard(need_tool("mkfs.ext4")) {
        return;
    }
    let mut c = Containerd::start();
    // The snapshotter's root on a file system of its own, so that `df` sees only its use.
    let mut stopped = c.snapshotter.take().unwrap();
    sh(&format!("kill {}", stopped.id()));
    stopped.wait().unwrap();
    let root = c.root();
    let fs_image = c.dir.path().join("ext4.img");
    sh(&format!(
        "set -e; truncate -s 256M '{0}'; mkfs.ext4 -q -F '{0}'; rm -rf '{1}'; mkdir '{1}'; mount -o loop '{0}' '{1}'",
        fs_image.display(),
        root.display()
    ));
    c.start_snapshotter();
    // containerd redials its proxy plugin after a gRPC backoff; `ctr snapshots ls` does not
    // reach the snapshotter (containerd lists its own records), a Prepare does.
    eventually("containerd reconnects to the restarted snapshotter", || {
        run(c
            .ctr()
            .args(["snapshots", "--snapshotter", "sealfs", "prepare", "probe"]))
        .status
        .success()
    });
    c.snap(&["rm", "probe"]);
    eventually("the probe removed", || {
        fs::read_dir(root.join("snapshots"))
            .unwrap()
            .next()
            .is_none()
    });
    let before = df_used(&root);

    let tar = make_big_image(c.dir.path());
    c.ok(&[
        "image",
        "import",
        "--base-name",
        "sealfs.test/big",
        "--snapshotter",
        "sealfs",
        tar.to_str().unwrap(),
    ]);
    // A container reads the big layer: its layers are mounted (the FUSE mounts hold the images
    // open) when the image is removed.
    // runc's state (and so a container's id) is shared by every containerd on the host.
    let id = format!("sealfs-gc-{}", std::process::id());
    let out = c.run_script("sealfs", "sealfs.test/big:t", &id, "sha256sum /big/blob");
    let expect = sh(&format!(
        "cd '{}' && sha256sum blob",
        c.dir.path().join("bigl").display()
    ));
    assert_eq!(
        out.split_whitespace().next(),
        expect.split_whitespace().next()
    );
    let (_, s) = status_json(&root);
    let layers: Vec<&Value> = s["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "committed")
        .collect();
    assert_eq!(layers.len(), 4, "{s:#}");
    let in_layers: u64 = layers
        .iter()
        .map(|l| l["layer"]["size_on_disk"].as_u64().unwrap())
        .sum();
    let during = df_used(&root);
    println!(
        "df used on the snapshotter's file system: {before} before the import, {during} after it (layer images {in_layers} bytes)"
    );
    assert!(during >= before + (24 << 20), "{before} -> {during}");
    assert!(!layer_mounts(&root).is_empty());

    c.ok(&["image", "rm", "--sync", "sealfs.test/big:t"]);
    eventually(
        "the image's layers, mount points and directories freed",
        || {
            ["snapshots", "layers", "mnt"]
                .iter()
                .all(|d| fs::read_dir(root.join(d)).unwrap().next().is_none())
        },
    );
    eventually("no layer mounted", || layer_mounts(&root).is_empty());
    let mut after = df_used(&root);
    let t = Instant::now();
    while after > before + (1 << 20) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        after = df_used(&root);
    }
    println!("df used after `ctr image rm --sync`: {after} (before the import: {before})");
    assert!(
        after <= before + (1 << 20),
        "the space is not given back: {before} before, {during} with the image, {after} after"
    );
    let (_, s) = status_json(&root);
    assert!(s["snapshots"].as_array().unwrap().is_empty(), "{s:#}");
    assert_eq!(
        c.snap(&["ls"]).lines().count(),
        1,
        "only the header is left"
    );
}
