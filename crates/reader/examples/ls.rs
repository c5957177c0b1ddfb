//! Lists a directory of an image through the reader: `ls IMAGE [DIGEST] [PATH]`. A sealed image is
//! verified (authenticated when DIGEST, `sha256:<hex>`, is given; `-` for none); a plain one is read as it is.
//!
//! Prints one line per entry: nid, mode, nlink, uid:gid, size and name (symlinks with their target).

use sealfs_reader::{open, Follow, OpenOptions};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: ls IMAGE [DIGEST|-] [PATH]");
        return ExitCode::from(2);
    }
    let digest = args.get(2).map(String::as_str).filter(|d| *d != "-");
    match run(
        &args[1],
        digest,
        args.get(3).map(String::as_str).unwrap_or("/"),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(image: &str, digest: Option<&str>, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut options = OpenOptions::new();
    options.digest = digest.map(str::parse).transpose()?;
    let opened = open(image, &options)?;
    eprintln!("{image}: {}", opened.trust);
    let img = &opened.image;
    let dir = img.resolve(path, Follow::All)?;
    for entry in img.read_dir(&dir)? {
        let entry = entry?;
        let inode = img.inode(entry.nid)?;
        let st = inode.stat();
        let name = String::from_utf8_lossy(&entry.name);
        print!(
            "{:>8} {:06o} {:>3} {}:{} {:>10} {}",
            st.ino, st.mode, st.nlink, st.uid, st.gid, st.size, name
        );
        if inode.is_symlink() {
            print!(" -> {}", String::from_utf8_lossy(&img.readlink(&inode)?));
        }
        println!();
    }
    Ok(())
}
