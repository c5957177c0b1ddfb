//! The in-process mount API ([`sealfs_fuse::mount::mount`]) against the kernel's FUSE: an image
//! opened and verified by the library, mounted by a handle in this process, reads through the
//! kernel as the source tree it was built from (every stat field, entries, targets, xattrs,
//! content: [`compare_trees`]); a damaged block fails the read of its file only (`EIO`, logged once
//! with its path and block), every other file reading correctly; unmounting (or dropping the
//! handle) takes the mount down and joins the threads that served it, so the file system and the
//! image it held are released when it returns.
//!
//! Needs root and FUSE: prints `SKIP:` otherwise (a failure under CI=true).

use sealfs_fuse::mount::{self, Access, LogTo, MountImage, MountOptions};
use sealfs_reader::{OpenOptions, VerifyMode};
use sealfs_testsupport::build::build_image;
use sealfs_testsupport::compare::{compare_trees, Expect};
use sealfs_testsupport::fixture::make_full_fixture;
use sealfs_testsupport::{oracle_guard, root_env, Rng, Tmpfs};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn fuse_env() -> Result<(), String> {
    root_env()?;
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse missing (no FUSE)".into());
    }
    Ok(())
}

/// Whether `/proc/self/mountinfo` lists a mount on `mp` (canonical), and its type.
fn mounted_type(mp: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let dash = f.iter().position(|x| *x == "-")?;
        (Path::new(f[4]) == mp).then(|| f[dash + 1].to_string())
    })
}

/// `image` opened as a mount opens it, verified, ready to mount.
fn open(image: &Path) -> MountImage {
    let options = OpenOptions {
        verify: VerifyMode::Full,
        cache_blocks: mount::MOUNT_BLOCK_CACHE,
        cluster_cache_bytes: mount::mount_cluster_cache(),
        keep_passed_extents: false,
        ..OpenOptions::default()
    };
    let opened = sealfs_reader::open(image, &options).expect("opening the image");
    MountImage::new(opened)
}

/// A logger keeping its lines.
fn collecting() -> (LogTo, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = lines.clone();
    let log = LogTo::Custom(Box::new(move |l: &str| {
        kept.lock().unwrap().push(l.to_string())
    }));
    (log, lines)
}

fn mountpoint(dir: &Path) -> PathBuf {
    let mp = dir.join("mnt");
    fs::create_dir(&mp).unwrap();
    fs::canonicalize(&mp).unwrap()
}

#[test]
fn in_process_mount_reads_as_the_source_and_unmount_joins() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let tmp = Tmpfs::new("fuse-inproc").expect("tmpfs");
    let src = tmp.path().join("src");
    make_full_fixture(&src);
    let dir = tempfile::Builder::new()
        .prefix("sealfs-inproc-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let image = dir.path().join("img.erofs");
    build_image(&src, &image, &Default::default()).unwrap();
    let mp = mountpoint(dir.path());

    let mut img = open(&image);
    // No background xattr check: once unmounted, nothing but this test may hold the image.
    img.xattrs = sealfs_fuse::XattrMode::On;
    let held = img.image.clone();
    let options = MountOptions {
        access: Access::All,
        fsname: Some(mount::source_name(&image)),
        ..MountOptions::default()
    };
    let (log, lines) = collecting();
    let handle = mount::mount(img, &mp, &options, log).expect("mounting in-process");
    assert_eq!(handle.mountpoint(), mp);
    assert_eq!(mounted_type(&mp).as_deref(), Some("fuse.sealfs"));

    let diffs = compare_trees(&src, &mp, &Expect::default());
    assert!(
        diffs.is_empty(),
        "source vs in-process mount:\n{}",
        diffs.join("\n")
    );
    let stats = handle.stats().expect("statistics of the in-process mount");
    assert!(
        stats["trust"].as_str().unwrap().contains("self-consistent"),
        "{stats}"
    );
    assert!(
        stats["verify"]["blocks_verified"].as_u64().unwrap() > 0,
        "{stats}"
    );
    assert!(
        lines.lock().unwrap().is_empty(),
        "{:?}",
        lines.lock().unwrap()
    );

    handle.unmount().expect("unmounting");
    // Unmounted and joined: the kernel no longer lists it, and the serving threads have dropped
    // the file system, whose image this test now holds alone.
    assert_eq!(mounted_type(&mp), None);
    assert_eq!(
        Arc::strong_count(&held),
        1,
        "the file system outlived unmount()"
    );

    // Dropping the handle does the same.
    let mut img = open(&image);
    img.xattrs = sealfs_fuse::XattrMode::On;
    let held = img.image.clone();
    let handle = mount::mount(img, &mp, &options, LogTo::Stderr).unwrap();
    assert!(fs::read_dir(&mp).unwrap().count() > 0);
    drop(handle);
    assert_eq!(mounted_type(&mp), None);
    assert_eq!(Arc::strong_count(&held), 1, "the file system outlived drop");
}

/// Offset in `hay` of the first occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("file data not found in the image")
}

#[test]
fn in_process_damaged_block_fails_only_its_file() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..8u32 {
        let data = Rng::new(100 + i as u64).bytes(300_000 + i as usize * 7777);
        fs::write(src.join(format!("f{i}")), &data).unwrap();
    }
    fs::write(src.join("sub/small"), b"small file\n").unwrap();
    let image = dir.path().join("img.erofs");
    build_image(&src, &image, &Default::default()).unwrap();
    let victim = fs::read(src.join("f3")).unwrap();
    let mut bytes = fs::read(&image).unwrap();
    // A byte in the second block of f3's data.
    let off = find(&bytes, &victim[4096..4096 + 64]) + 100;
    bytes[off] ^= 0x40;
    fs::write(&image, &bytes).unwrap();

    let mp = mountpoint(dir.path());
    let (log, lines) = collecting();
    let handle = mount::mount(open(&image), &mp, &MountOptions::default(), log).unwrap();
    for _ in 0..2 {
        let e = fs::read(mp.join("f3")).expect_err("damaged file read without error");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    }
    // Its first block, before the damage, reads; so does every other file.
    let mut head = vec![0; 4096];
    std::io::Read::read_exact(&mut fs::File::open(mp.join("f3")).unwrap(), &mut head).unwrap();
    assert_eq!(head, victim[..4096]);
    for i in (0..8).filter(|&i| i != 3) {
        let name = format!("f{i}");
        assert_eq!(
            fs::read(mp.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(fs::read(mp.join("sub/small")).unwrap(), b"small file\n");
    let stats = handle.stats().unwrap();
    assert!(
        stats["fuse"]["verification_errors"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    // Logged once, by a thread of the mount, with the path and the block.
    let deadline = Instant::now() + Duration::from_secs(10);
    while lines.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let lines = lines.lock().unwrap().clone();
    let block = off / 4096;
    assert_eq!(lines.len(), 1, "one failure, logged once: {lines:?}");
    assert!(
        lines[0].contains("/f3") && lines[0].contains(&format!("block {block}")),
        "the log line names the path and block {block}: {}",
        lines[0]
    );
    handle.unmount().unwrap();
    assert_eq!(mounted_type(&mp), None);
}

#[test]
fn in_process_unmount_with_a_file_open_waits_for_it() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"held open\n").unwrap();
    let image = dir.path().join("img.erofs");
    build_image(&src, &image, &Default::default()).unwrap();
    let mp = mountpoint(dir.path());
    let handle = mount::mount(open(&image), &mp, &MountOptions::default(), LogTo::Stderr).unwrap();
    let file = fs::File::open(mp.join("a")).unwrap();
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        // Still readable after the lazy detach: the open file keeps the mount.
        let text = fs::read_to_string(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            file.as_raw_fd()
        }));
        drop(file);
        text
    });
    let t = Instant::now();
    handle.unmount().expect("unmounting a busy mount");
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "returned before the file was closed"
    );
    assert_eq!(closer.join().unwrap().unwrap(), "held open\n");
    assert_eq!(mounted_type(&mp), None);
}

#[test]
fn in_process_mount_unmounted_from_outside_still_joins() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a\n").unwrap();
    let image = dir.path().join("img.erofs");
    build_image(&src, &image, &Default::default()).unwrap();
    let mp = mountpoint(dir.path());
    let mut img = open(&image);
    img.xattrs = sealfs_fuse::XattrMode::On;
    let held = img.image.clone();
    let handle = mount::mount(img, &mp, &MountOptions::default(), LogTo::Stderr).unwrap();
    assert_eq!(fs::read(mp.join("a")).unwrap(), b"a\n");
    // util-linux's umount takes it down behind the handle's back.
    let st = std::process::Command::new("umount")
        .arg(&mp)
        .status()
        .unwrap();
    assert!(st.success(), "umount {}: {st}", mp.display());
    handle.unmount().expect("a mount already gone is no error");
    assert_eq!(
        Arc::strong_count(&held),
        1,
        "the file system outlived unmount()"
    );
}

/// A handle can be kept by a service's threads (a snapshotter's table of mounts).
#[test]
fn mount_handle_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<mount::MountHandle>();
    send_sync::<MountImage>();
}

#[test]
fn in_process_mount_detached_lazily_ends_when_its_last_file_closes() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a\n").unwrap();
    let image = dir.path().join("img.erofs");
    build_image(&src, &image, &Default::default()).unwrap();
    let mp = mountpoint(dir.path());
    let handle = mount::mount(open(&image), &mp, &MountOptions::default(), LogTo::Stderr).unwrap();
    let file = fs::File::open(mp.join("a")).unwrap();
    mount::unmount(&mp, true).expect("lazy unmount");
    assert_eq!(mounted_type(&mp), None, "detached at once");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!handle.has_ended(), "ended while a file was still open");
    drop(file);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !handle.has_ended() {
        assert!(
            Instant::now() < deadline,
            "still serving 10 s after the last file closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.unmount().expect("joining an ended mount");
}
