//! Several tar streams as the layers of one tree, with an entry hook acting on OCI-style
//! whiteouts through the sink (what an OCI importer does): the image equals the directory build
//! of the tree the layers leave. Archives are written with the `tar` crate's builder.

use sealfs_builder::{build, build_from, BuildOptions, NoProgress};
use sealfs_import::{EntryHook, TarSource};
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A tar of regular files (path, contents) and directories (path ending in '/').
fn archive(members: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        if path.ends_with('/') {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            b.append_data(&mut h, path, std::io::empty()).unwrap();
        } else {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, path, data.as_bytes()).unwrap();
        }
    }
    b.into_inner().unwrap()
}

/// Applies `.wh.NAME` (remove NAME) and `.wh..wh..opq` (opaque directory) through the sink.
fn whiteouts() -> EntryHook {
    Box::new(|sink, entry| {
        let (dir, name) = match entry.path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&entry.path[..i], &entry.path[i + 1..]),
            None => (&[][..], &entry.path[..]),
        };
        if name == b".wh..wh..opq" {
            sink.make_opaque(dir)?;
            return Ok(None);
        }
        if let Some(target) = name.strip_prefix(b".wh.") {
            let mut p = dir.to_vec();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(target);
            sink.remove(&p)?;
            return Ok(None);
        }
        Ok(Some(entry))
    })
}

fn reader(bytes: Vec<u8>) -> Box<dyn Read + Send> {
    Box::new(std::io::Cursor::new(bytes))
}

#[test]
fn layers_with_whiteouts_give_the_flattened_tree() {
    let lower = archive(&[
        ("etc/", ""),
        ("etc/keep", "kept\n"),
        ("etc/gone", "removed by the upper layer\n"),
        ("opq/", ""),
        ("opq/old", "hidden by the opaque marker\n"),
        ("file-then-dir", "a file below\n"),
    ]);
    let upper = archive(&[
        ("etc/.wh.gone", ""),
        ("opq/new", "added above\n"),
        ("opq/.wh..wh..opq", ""),
        ("file-then-dir/", ""),
        ("file-then-dir/inside", "a directory above\n"),
        ("etc/keep", "changed above\n"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    for (path, data) in [
        ("etc/keep", "changed above\n"),
        ("opq/new", "added above\n"),
        ("file-then-dir/inside", "a directory above\n"),
    ] {
        let p = tree.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    }
    for d in ["", "etc", "opq", "file-then-dir"] {
        fs::set_permissions(tree.join(d), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let opts = BuildOptions {
        timestamp: Some(0),
        force_uid: Some(0),
        force_gid: Some(0),
        xattrs: false,
        ..BuildOptions::default()
    };
    let (a, b) = (dir.path().join("dir.img"), dir.path().join("layers.img"));
    build(&tree, &a, &opts, &NoProgress).unwrap();
    let mut source = TarSource::layers(vec![
        (reader(lower), "lower".into()),
        (reader(upper), "upper".into()),
    ])
    .unwrap()
    .with_hook(whiteouts());
    build_from(&mut source, &b, &opts, &NoProgress).unwrap();
    assert!(
        fs::read(&a).unwrap() == fs::read(&b).unwrap(),
        "the flattened layers differ from the directory build of the expected tree"
    );
    // Within one layer, a directory over a file is still an error, named with its offset.
    let bad = archive(&[("x", "file"), ("x/", "")]);
    let e = build_from(
        &mut TarSource::from_reader(reader(bad), "bad").unwrap(),
        &dir.path().join("bad.img"),
        &opts,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bad: entry x") && e.contains("byte 1024"), "{e}");
    assert!(!Path::new(&dir.path().join("bad.img")).exists());
}
