//! The one escaping rule for text output.
//!
//! Every name, path and string that came from outside sealfs (an image, an archive, a registry, a
//! server, the command line) is written into text output (listings, reports, policies, warnings and
//! error messages) through [`escape`], so that it stays one inert token: it can end no line, start
//! no terminal escape sequence, and add no rule to a policy. JSON output does not use it: JSON
//! carries the exact bytes, by the second rule here, [`json_bytes`].
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

//!
//! ## JSON: exact bytes
//!
//! A name, path or value written into JSON output goes through [`json_bytes`]: under its key
//! `K` the string itself when the bytes are UTF-8 (JSON escapes quotes, backslashes and control
//! characters, so a newline or ESC stays exact and inert), and when they are not, `K` holds the
//! bytes decoded with each invalid sequence replaced by U+FFFD (for display only) and a second
//! key `K_hex` holds the exact bytes in lowercase hex. A consumer gets the bytes back with
//! `bytes.fromhex(o["K_hex"]) if "K_hex" in o else o["K"].encode()`. The output is strict
//! UTF-8 JSON (RFC 8259, I-JSON) that every parser reads the same; lone surrogates in the style
//! of Python's `surrogateescape` would round-trip in Python only (jq, Go and JavaScript replace
//! them, serde_json refuses them).

use std::fmt;
use std::path::Path;

/// The JSON object fields that carry `bytes` exactly under `key`: `key` alone when `bytes` is
/// UTF-8; else `key` (the bytes decoded lossily, U+FFFD for each invalid sequence, for display)
/// and `key_hex` (the exact bytes, lowercase hex). See the crate documentation.
pub fn json_bytes(key: &str, bytes: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            m.insert(key.to_string(), s.into());
        }
        Err(_) => {
            m.insert(key.to_string(), String::from_utf8_lossy(bytes).into());
            m.insert(format!("{key}_hex"), hex(bytes).into());
        }
    }
    m
}

/// Adds the fields of [`json_bytes`]`(key, bytes)` to `object`, a JSON object built with
/// `serde_json::json!` (anything else is left as it is).
pub fn json_insert(object: &mut serde_json::Value, key: &str, bytes: &[u8]) {
    if let Some(m) = object.as_object_mut() {
        m.extend(json_bytes(key, bytes));
    }
}

/// [`json_bytes`] of a path's exact bytes (a path from the command line or the host).
pub fn json_path(key: &str, path: &Path) -> serde_json::Map<String, serde_json::Value> {
    use std::os::unix::ffi::OsStrExt;
    json_bytes(key, path.as_os_str().as_bytes())
}

/// `bytes` in lowercase hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

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
    fn json_bytes_adds_hex_only_for_bytes_that_are_not_utf8() {
        let m = json_bytes("path", "caf\u{e9}\n\x1b\"\\".as_bytes());
        assert_eq!(
            serde_json::Value::Object(m).to_string(),
            r#"{"path":"café\n\u001b\"\\"}"#
        );
        let m = json_bytes("path", b"a\xff\xfeb");
        assert_eq!(
            serde_json::Value::Object(m).to_string(),
            "{\"path\":\"a\u{fffd}\u{fffd}b\",\"path_hex\":\"61fffe62\"}"
        );
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
