//! The `Source` trait as an importer uses it: a source holding a tree in memory, its entries
//! given in reverse order (children before their directories, which the sink makes first and
//! fills in later; hard links last), builds the byte-identical image of the same tree on disk built by the directory scan,
//! plain and compressed.

use sealfs_builder::{
    build, build_from, BuildOptions, DataId, Entry, EntryKind, FileRef, NoProgress, Preset,
    ScanContext, Sink, Source, SourceFile,
};
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

/// A tree in memory: entries and the data of its files by handle.
struct MemSource {
    entries: Vec<Entry>,
    data: Vec<Vec<u8>>,
}

struct MemFile<'a>(&'a [u8]);

impl SourceFile for MemFile<'_> {
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> sealfs_builder::Result<()> {
        let at = offset as usize;
        buf.copy_from_slice(&self.0[at..at + buf.len()]);
        Ok(())
    }

    fn finish(self: Box<Self>) -> sealfs_builder::Result<()> {
        Ok(())
    }
}

impl Source for MemSource {
    fn scan(&mut self, sink: &mut Sink, _: &ScanContext<'_>) -> sealfs_builder::Result<()> {
        // Children before their directories; hard links last (their targets must be there).
        let is_link = |e: &&Entry| matches!(e.kind, EntryKind::HardLink(_));
        let others = self.entries.iter().rev().filter(|e| !is_link(e));
        for e in others.chain(self.entries.iter().filter(is_link)) {
            sink.add(e.clone())
                .unwrap_or_else(|e| panic!("entry refused: {e}"));
        }
        Ok(())
    }

    fn open(&self, file: &FileRef<'_>) -> sealfs_builder::Result<Box<dyn SourceFile + '_>> {
        Ok(Box::new(MemFile(&self.data[file.data.0 as usize])))
    }
}

/// The entries of `root` as the scan of a directory would give them (breadth first), hard
/// links as links to their first name; file data read into `data`.
fn entries_of(root: &Path) -> MemSource {
    let mut src = MemSource {
        entries: Vec::new(),
        data: Vec::new(),
    };
    let mut seen = std::collections::HashMap::new();
    let mut level = vec![(root.to_path_buf(), Vec::<u8>::new())];
    while !level.is_empty() {
        let mut next = Vec::new();
        for (path, rel) in level {
            let md = fs::symlink_metadata(&path).unwrap();
            let ft = md.file_type();
            let kind = if ft.is_dir() {
                let mut names: Vec<_> = fs::read_dir(&path)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                names.sort();
                for n in names {
                    use std::os::unix::ffi::OsStrExt;
                    let mut r = rel.clone();
                    if !r.is_empty() {
                        r.push(b'/');
                    }
                    r.extend_from_slice(n.as_bytes());
                    next.push((path.join(&n), r));
                }
                EntryKind::Dir
            } else if let Some(first) = seen.get(&md.ino()).filter(|_| md.nlink() > 1) {
                EntryKind::HardLink(Vec::clone(first))
            } else if ft.is_symlink() {
                use std::os::unix::ffi::OsStrExt;
                EntryKind::Symlink(
                    fs::read_link(&path)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else {
                seen.insert(md.ino(), rel.clone());
                src.data.push(fs::read(&path).unwrap());
                EntryKind::File {
                    size: md.len(),
                    data: DataId(src.data.len() as u64 - 1),
                    data_ranges: None,
                }
            };
            src.entries.push(Entry {
                path: rel,
                kind,
                mode: md.mode() & 0o7777,
                uid: md.uid(),
                gid: md.gid(),
                mtime: md.mtime(),
                mtime_nsec: md.mtime_nsec() as u32,
                xattrs: Vec::new(),
            });
        }
        level = next;
    }
    src
}

#[test]
fn a_source_in_memory_gives_the_directory_scans_image() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tree");
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    for i in 0..40u32 {
        let data: Vec<u8> = (0..i * 997).map(|j| (j * 31 + i) as u8).collect();
        fs::write(root.join(format!("a/f{i}")), &data).unwrap();
        fs::write(root.join(format!("a/b/c/g{i}")), &data[..data.len() / 2]).unwrap();
    }
    fs::hard_link(root.join("a/f7"), root.join("a/b/link")).unwrap();
    symlink("../f3", root.join("a/b/sym")).unwrap();
    fs::set_permissions(root.join("a/f5"), fs::Permissions::from_mode(0o4755)).unwrap();
    let out = dir.path().join("out");
    fs::create_dir(&out).unwrap();
    let opts_sets = [
        BuildOptions {
            xattrs: false,
            ..BuildOptions::default()
        },
        BuildOptions {
            xattrs: false,
            seal: None,
            compress: Some(Preset::Fast.options()),
            ..BuildOptions::default()
        },
    ];
    for opts in &opts_sets {
        let (a, b) = (out.join("dir.img"), out.join("mem.img"));
        build(&root, &a, opts, &NoProgress).unwrap();
        let mut mem = entries_of(&root);
        build_from(&mut mem, &b, opts, &NoProgress).unwrap();
        assert!(
            fs::read(&a).unwrap() == fs::read(&b).unwrap(),
            "the in-memory source's image differs from the directory scan's"
        );
    }
}
