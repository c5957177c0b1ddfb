//! `sealfs getfattr`: extended attributes of paths in the image, printed as `getfattr -d -m -` prints
//! them through a kernel mount (run as root, so `trusted.*` is included).
//!
//! The output format is getfattr's (attr 2.5): a `# file: PATH` header, one `name=value` line per
//! attribute in name order, an empty line. Values are text in double quotes when at most one byte in
//! eight is not printable (a final NUL is not counted and not shown; `\` and `"` are escaped, and,
//! unlike getfattr, which escapes only NUL, CR and LF, every byte that is not printable ASCII is
//! written `\ooo`, as in paths and names), else base64 (`0s...`); `-e` forces text, `hex` (`0x...`) or `base64`. Unlike getfattr,
//! the default `--match` pattern selects every attribute, not only `user.*`; and since paths are in
//! the image, they are printed as given (never stripped of a leading `/`).
//!
//! With `-n NAME` only that attribute is printed; if the path has no such attribute that is an error
//! ("No such attribute", exit 1), answered from the inode's xattr name filter when it can be.

use super::{fault, resolve, show, Status};
use crate::open::ImageArgs;
use anyhow::{anyhow, Context, Result};
use clap::{ArgAction, Args};
use regex::bytes::Regex;
use sealfs_reader::{Follow, Image, Inode, Visit, WalkEvent};
use std::ffi::OsString;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// Arguments of `sealfs getfattr`.
#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct GetfattrArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Paths in the image.
    #[arg(required = true)]
    paths: Vec<OsString>,
    /// Print only this attribute (full name, such as `user.mime_type`).
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    name: Option<OsString>,
    /// Print every attribute with its value (the default; accepted for getfattr compatibility).
    #[arg(short = 'd', long)]
    dump: bool,
    /// Print only the names, without values.
    #[arg(long, conflicts_with_all = ["name", "only_values"])]
    names_only: bool,
    /// Only attributes whose names match this regular expression ("-" or empty: all, the default).
    #[arg(short = 'm', long = "match", value_name = "PATTERN")]
    pattern: Option<String>,
    /// Encode values as text, hex or base64 (default: text when printable, else base64).
    #[arg(short = 'e', long, value_name = "ENC", value_parser = ["text", "hex", "base64"])]
    encoding: Option<String>,
    /// Print the raw values only, nothing else.
    #[arg(long)]
    only_values: bool,
    /// Do not follow symlinks: show a symlink's own attributes.
    #[arg(short = 'h', long)]
    no_dereference: bool,
    /// Walk directories recursively.
    #[arg(short = 'R', long)]
    recursive: bool,
    /// Accepted for getfattr compatibility: paths are always printed as given.
    #[arg(long)]
    absolute_names: bool,
    /// Print one JSON object per path (JSON Lines): path, and each attribute's name, value as text
    /// (when it is UTF-8) and value in hex.
    #[arg(long, conflicts_with_all = ["only_values", "names_only"])]
    json: bool,
    /// Print help.
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
}

/// getfattr's `quote`: `\`, the characters in `chars`, and (unlike getfattr, which writes them
/// raw) every byte [`sealfs_text::escape`] escapes but space, as `\ooo`: the one escaping rule in
/// the notation `setfattr --restore` reads back.
pub fn quote(s: &[u8], chars: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b == b'\\' || chars.contains(&b) || !printable(b) {
            out.extend_from_slice(format!("\\{b:03o}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

fn printable(b: u8) -> bool {
    (0x20..0x7f).contains(&b)
}

/// getfattr's `well_enough_printable`: at most one non-printable byte in eight, a final NUL excluded.
fn well_enough_printable(v: &[u8]) -> bool {
    let v = v.strip_suffix(b"\0").unwrap_or(v);
    let nonpr = v.iter().filter(|&&b| !printable(b)).count();
    v.len() >= nonpr * 8
}

/// getfattr's value encoding.
pub fn encode(v: &[u8], encoding: Option<&str>) -> Vec<u8> {
    let enc = encoding.unwrap_or(if well_enough_printable(v) {
        "text"
    } else {
        "base64"
    });
    match enc {
        "text" => {
            let mut out = vec![b'"'];
            for (i, &b) in v.iter().enumerate() {
                if b == 0 && i + 1 == v.len() {
                    break;
                }
                match b {
                    b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
                    // getfattr escapes only NUL, LF and CR; every unprintable byte is escaped
                    // here, so that no value reaches a terminal as a control sequence.
                    b if !printable(b) => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
                    _ => out.push(b),
                }
            }
            out.push(b'"');
            out
        }
        "hex" => format!("0x{}", super::hex(v)).into_bytes(),
        _ => {
            const D: &[u8; 64] =
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut out = b"0s".to_vec();
            for c in v.chunks(3) {
                let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
                out.push(D[(b[0] >> 2) as usize]);
                out.push(D[(((b[0] & 3) << 4) | (b[1] >> 4)) as usize]);
                out.push(if c.len() > 1 {
                    D[(((b[1] & 0xf) << 2) | (b[2] >> 6)) as usize]
                } else {
                    b'='
                });
                out.push(if c.len() > 2 {
                    D[(b[2] & 0x3f) as usize]
                } else {
                    b'='
                });
            }
            out
        }
    }
}

struct Printer<'a> {
    args: &'a GetfattrArgs,
    img: &'a Image,
    pattern: Option<Regex>,
    out: BufWriter<std::io::StdoutLock<'static>>,
    status: Status,
}

impl Printer<'_> {
    /// The attributes of `inode` to print: `(name, value)` in name order.
    fn attrs(&self, path: &[u8], inode: &Inode) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if let Some(name) = &self.args.name {
            let name = super::arg_bytes(name);
            return match self
                .img
                .get_xattr(inode, name)
                .with_context(|| format!("{}: {}", show(path), show(name)))?
            {
                Some(v) => Ok(vec![(name.to_vec(), v)]),
                None => Err(fault(format!(
                    "{}: {}: No such attribute",
                    show(path),
                    show(name)
                ))),
            };
        }
        let mut all = self
            .img
            .xattrs(inode)
            .with_context(|| format!("{}: xattrs", show(path)))?;
        if let Some(re) = &self.pattern {
            all.retain(|(n, _)| re.is_match(n));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    fn print(&mut self, path: &[u8], inode: &Inode) -> Result<()> {
        let attrs = self.attrs(path, inode)?;
        let o = &mut self.out;
        if self.args.json {
            let list: Vec<serde_json::Value> = attrs
                .iter()
                .map(|(n, v)| {
                    let mut x = serde_json::json!({
                        "value": std::str::from_utf8(v).ok(),
                        "value_hex": super::hex(v),
                    });
                    sealfs_text::json_insert(&mut x, "name", n);
                    x
                })
                .collect();
            let mut obj = serde_json::json!({ "xattrs": list });
            sealfs_text::json_insert(&mut obj, "path", path);
            writeln!(o, "{obj}")?;
            return Ok(());
        }
        if self.args.only_values {
            for (_, v) in &attrs {
                o.write_all(v)?;
            }
            return Ok(());
        }
        if attrs.is_empty() {
            return Ok(());
        }
        o.write_all(b"# file: ")?;
        o.write_all(&quote(path, b"\n\r"))?;
        o.write_all(b"\n")?;
        for (n, v) in &attrs {
            o.write_all(&quote(n, b"=\n\r"))?;
            if !self.args.names_only {
                o.write_all(b"=")?;
                o.write_all(&encode(v, self.args.encoding.as_deref()))?;
            }
            o.write_all(b"\n")?;
        }
        o.write_all(b"\n")?;
        Ok(())
    }

    /// Prints `path` (already resolved to `inode`, which is the symlink itself for symlinks) and, with
    /// `-R`, everything below it.
    fn visit(&mut self, path: &[u8], inode: Inode) -> Result<()> {
        self.show_one(path, &inode)?;
        if !self.args.recursive || !inode.is_dir() {
            return Ok(());
        }
        let img = self.img;
        img.walk(&inode, path, &mut |event| -> Result<Visit> {
            match event {
                WalkEvent::Dir { .. } => {}
                WalkEvent::Error { path, error, .. } => {
                    self.out.flush()?;
                    self.status
                        .error(&anyhow::Error::new(error).context(show(path)));
                }
                WalkEvent::Entry(e) => {
                    self.show_one(e.path, e.inode)?;
                    if e.revisited {
                        self.out.flush()?;
                        self.status.error(&fault(format!(
                            "{}: directory nid {} reached twice: the image has a directory cycle",
                            show(e.path),
                            e.entry.nid
                        )));
                    }
                }
            }
            Ok(Visit::Continue)
        })
    }

    /// Prints the attributes of one path (of its target, for a symlink unless -h); an error is
    /// reported and remembered, except a closed stdout, which ends the command.
    fn show_one(&mut self, path: &[u8], inode: &Inode) -> Result<()> {
        let follow = !self.args.no_dereference;
        let shown = if follow && inode.is_symlink() {
            resolve(self.img, path, Follow::All)
        } else {
            Ok(inode.clone())
        };
        if let Err(e) = shown.and_then(|i| self.print(path, &i)) {
            if super::exit_code(&e).is_none() {
                return Err(e);
            }
            self.out.flush()?;
            self.status.error(&e);
        }
        Ok(())
    }
}

/// Runs `sealfs getfattr`.
pub fn run(args: GetfattrArgs) -> Result<ExitCode> {
    let pattern = match args.pattern.as_deref() {
        None | Some("-") | Some("") => None,
        Some(p) => Some(Regex::new(p).map_err(|e| anyhow!("--match {}: {e}", show(p.as_bytes())))?),
    };
    let opened = args.image.open()?;
    let mut pr = Printer {
        args: &args,
        img: &opened.image,
        pattern,
        out: BufWriter::new(std::io::stdout().lock()),
        status: Status::default(),
    };
    for p in &args.paths {
        let path = super::arg_bytes(p);
        let inode = resolve(&opened.image, path, Follow::Parents);
        if let Err(e) = inode.and_then(|i| pr.visit(path, i)) {
            if super::exit_code(&e).is_none() {
                return Err(e);
            }
            pr.out.flush()?;
            pr.status.error(&e);
        }
    }
    pr.out.flush()?;
    Ok(pr.status.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_encoded_like_getfattr() {
        assert_eq!(encode(b"abc", None), b"\"abc\"");
        assert_eq!(encode(b"", None), b"\"\"");
        assert_eq!(encode(b"label\0", None), b"\"label\"");
        // One byte in seven is not printable: base64, as getfattr chooses.
        assert_eq!(encode(b"a\"b\\c\nd", None), b"0sYSJiXGMKZA==");
        assert_eq!(
            encode(b"a\"b\\c\nd", Some("text")),
            b"\"a\\\"b\\\\c\\012d\""
        );
        assert_eq!(encode(b"\0\x01\x02\xff", None), b"0sAAEC/w==");
        assert_eq!(encode(b"\x01\x02", Some("hex")), b"0x0102");
        assert_eq!(encode(b"ab", Some("base64")), b"0sYWI=");
        assert_eq!(encode(b"abc", Some("base64")), b"0sYWJj");
        assert_eq!(quote(b"a=b\\", b"=\n\r"), b"a\\075b\\134");
    }
}
