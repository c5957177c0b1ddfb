//! The one escaping rule for text output.
//!
//! Every name, path and string that came from outside sealfs (an image, an archive, a registry, a
//! server, the command line) is written into text output (listings, reports, policies, warnings and
//! error messages) through [`escape`], so that it stays one inert token: it can end no line, start
//! no terminal escape sequence, and add no rule to a policy. JSON output does not use it: JSON
//! carries the exact string.
//!
//! The rule is coreutils' `escape` quoting style in the C locale, byte for byte what
//! `LC_ALL=C ls --quoting-style=escape` (that is, `ls -b`) prints for a file name:
//!
//! | byte | written as |
//! |---|---|
//! | `!` to `~` (0x21–0x7e) but `\` | itself |
//! | `\` | `\\` |
//! | space | `\ ` |
//! | BEL BS FF LF CR TAB VT | `\a` `\b` `\f` `\n` `\r` `\t` `\v` |
//! | any other byte (controls, DEL, every byte ≥ 0x80) | `\ooo`, three octal digits |
//!
//! The output is printable ASCII: no control byte, and no UTF-8 sequence, so no locale or terminal
//! can read more into it (bidirectional overrides, zero-width characters and C1 controls are
//! escaped too). A name that is not ASCII shows as its UTF-8 bytes in octal (`café` is
//! `caf\303\251`), as `git` shows paths by default (`core.quotePath`). The escaping is reversible:
//! a reader that undoes C escapes (`printf %b`, `echo -e`) gets the exact bytes back.

use std::fmt;
use std::path::Path;

/// `bytes` escaped by the rule (see the crate documentation): printable ASCII, one token.
pub fn escape(bytes: &[u8]) -> String {
    Escaped(bytes).to_string()
}

/// Prose from outside (a server's error message) by the rule, but with spaces kept as spaces: a
/// message is words, not one name. Still printable ASCII on one line.
pub fn escape_prose(bytes: &[u8]) -> String {
    bytes
        .split(|&b| b == b' ')
        .map(escape)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A path escaped by the rule, from its exact bytes (a path that is not UTF-8 loses nothing).
pub fn escape_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    escape(path.as_os_str().as_bytes())
}

/// Bytes that display escaped by the rule, for `format!` without an intermediate `String`.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for &b in self.0 {
            match b {
                0x07 => f.write_str("\\a")?,
                0x08 => f.write_str("\\b")?,
                0x0c => f.write_str("\\f")?,
                b'\n' => f.write_str("\\n")?,
                b'\r' => f.write_str("\\r")?,
                b'\t' => f.write_str("\\t")?,
                0x0b => f.write_str("\\v")?,
                b'\\' => f.write_str("\\\\")?,
                b' ' => f.write_str("\\ ")?,
                0x21..=0x7e => f.write_char(b as char)?,
                _ => write!(f, "\\{b:03o}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_ls_b_in_the_c_locale() {
        // Expected values as GNU coreutils 9.1 `LC_ALL=C ls -b` prints these names.
        assert_eq!(escape(b"a b"), "a\\ b");
        assert_eq!(escape(b"nl\nx"), "nl\\nx");
        assert_eq!(escape(b"esc\x1b[31m"), "esc\\033[31m");
        assert_eq!(escape(b"bad\xff"), "bad\\377");
        assert_eq!(escape("café".as_bytes()), "caf\\303\\251");
        assert_eq!(escape(b"bs\\\\x"), "bs\\\\\\\\x");
        assert_eq!(escape(b"q\"'"), "q\"'");
        assert_eq!(escape(b"tab\tx"), "tab\\tx");
        assert_eq!(escape(b"\x7f\0"), "\\177\\000");
    }

    #[test]
    fn prose_keeps_its_spaces_only() {
        assert_eq!(
            escape_prose(b"denied: no\nway \x1b[2J"),
            "denied: no\\nway \\033[2J"
        );
    }

    #[test]
    fn output_is_one_printable_ascii_token() {
        let all: Vec<u8> = (0..=255).collect();
        let e = escape(&all);
        assert!(e.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{e}");
        // A space only ever follows the backslash that escapes it: the name is one token.
        assert!(!e.contains("  ") && !e.starts_with(' '), "{e}");
        assert_eq!(e.matches(' ').count(), e.matches("\\ ").count(), "{e}");
    }
}
