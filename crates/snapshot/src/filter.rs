//! containerd's filter syntax (`github.com/containerd/containerd/filters`), which clients and
//! containerd's garbage collection pass to `List`: a port of its scanner and parser, token for
//! token, so that a filter means here what it means to containerd, and fails to parse where it
//! fails there, with the same message.
//!
//! ```text
//! selectors := selector ("," selector)*           all must match
//! selector  := fieldpath [operator value]         no operator: the field is present
//! fieldpath := field ("." field)*
//! field     := quoted | [A-Za-z0-9_]+
//! operator  := "==" | "!=" | "~="                 "~=": the value is a regular expression
//! value     := quoted | [^\s,]+                   "~=" also takes /.../ and |...| quotes
//! quoted    := "..." with Go's escapes
//! ```
//!
//! Several filter strings match what any of them matches; no strings, or an empty one, match
//! everything. The fields of a snapshot ([`SnapshotFields`]) are those of containerd's
//! `adaptSnapshot`: `kind` (`active`, `view`, `committed`), `name`, `parent` (present even when
//! empty), `labels.KEY` (the rest of the path joined with `.` is the key; quote keys with other
//! characters: `labels."containerd.io/gc.root"`).
//!
//! A regular expression that does not compile matches nothing rather than failing the call, as
//! in containerd (which compiles it when first matched and logs the error). Rust's `regex` has
//! RE2's syntax and semantics, as Go's `regexp` (unanchored search); the two differ in corners
//! (Unicode classes of newer Unicode versions, a few Perl classes). Where Go's scanner asks
//! `unicode.IsGraphic` of a value's character, unassigned code points count as graphic here.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// A parsed set of filter strings: an object matches when it matches all selectors of any one
/// of them. No strings: everything matches.
#[derive(Debug, Clone)]
pub struct Filters {
    any: Vec<Vec<Selector>>,
}

/// What a selector tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Present,
    Equal,
    NotEqual,
    Matches,
}

#[derive(Debug, Clone)]
struct Selector {
    fieldpath: Vec<Vec<u8>>,
    operator: Operator,
    value: Vec<u8>,
    /// `~=`: the value compiled (`None`: it does not compile, and matches nothing).
    regex: Option<regex::bytes::Regex>,
}

/// The fields a filter reads of an object (containerd's `filters.Adaptor`): the value of a
/// fieldpath, if present.
pub trait Adaptor {
    /// The value at `fieldpath`, or `None` when it is absent.
    fn field(&self, fieldpath: &[Vec<u8>]) -> Option<Vec<u8>>;
}

/// A snapshot as the filters see it (containerd's `adaptSnapshot`).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotFields<'a> {
    /// `active`, `view` or `committed`.
    pub kind: &'a str,
    /// The key (name).
    pub name: &'a str,
    /// The parent's name, "" for none.
    pub parent: &'a str,
    /// The labels.
    pub labels: &'a HashMap<String, String>,
}

impl Adaptor for SnapshotFields<'_> {
    fn field(&self, fieldpath: &[Vec<u8>]) -> Option<Vec<u8>> {
        let (first, rest) = fieldpath.split_first()?;
        match first.as_slice() {
            b"kind" => Some(self.kind.as_bytes().to_vec()),
            b"name" => Some(self.name.as_bytes().to_vec()),
            b"parent" => Some(self.parent.as_bytes().to_vec()),
            b"labels" => {
                // checkMap: no labels at all is absent; the key is the rest joined by ".".
                if self.labels.is_empty() {
                    return None;
                }
                let key = rest.join(&b'.');
                let key = std::str::from_utf8(&key).ok()?;
                self.labels.get(key).map(|v| v.as_bytes().to_vec())
            }
            _ => None,
        }
    }
}

impl Filters {
    /// Parses `filters` (containerd's `ParseAll`); a string that does not parse is an
    /// [`Error::InvalidArgument`] naming it and saying where and why.
    pub fn parse_all(filters: &[String]) -> Result<Filters> {
        let mut any = Vec::with_capacity(filters.len());
        for f in filters {
            let selectors = parse(f).map_err(|why| {
                Error::InvalidArgument(format!(
                    "filter {}: {}",
                    sealfs_text::Escaped(f.as_bytes()),
                    sealfs_text::escape_prose(why.as_bytes())
                ))
            })?;
            any.push(selectors);
        }
        Ok(Filters { any })
    }

    /// Whether `object` matches.
    pub fn matches(&self, object: &dyn Adaptor) -> bool {
        self.any.is_empty()
            || self
                .any
                .iter()
                .any(|all| all.iter().all(|s| s.matches(object)))
    }
}

impl Selector {
    fn matches(&self, object: &dyn Adaptor) -> bool {
        let value = object.field(&self.fieldpath);
        match self.operator {
            Operator::Present => value.is_some(),
            Operator::Equal => value.is_some_and(|v| v == self.value),
            // As containerd: an absent field has the value "".
            Operator::NotEqual => value.unwrap_or_default() != self.value,
            Operator::Matches => self
                .regex
                .as_ref()
                .is_some_and(|re| re.is_match(&value.unwrap_or_default())),
        }
    }
}

/// One filter string's selectors ("" matches everything), or containerd's message of why it
/// does not parse.
fn parse(input: &str) -> std::result::Result<Vec<Selector>, String> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut p = Parser {
        input,
        scanner: Scanner::new(input),
    };
    p.selectors().map_err(|e| format!("filters: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The scanner (scanner.go)
// ---------------------------------------------------------------------------------------------

/// A scanned rune, or one of the token kinds (negative in Go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Eof,
    Quoted,
    Value,
    Field,
    Separator,
    Operator,
    Illegal,
    Char(char),
}

struct Scanner<'a> {
    input: &'a str,
    /// Start of the current rune.
    pos: usize,
    /// End of the current rune.
    ppos: usize,
    /// The next token is a value (after an operator).
    value: bool,
    err: Option<&'static str>,
}

impl<'a> Scanner<'a> {
    fn new(input: &'a str) -> Scanner<'a> {
        Scanner {
            input,
            pos: 0,
            ppos: 0,
            value: false,
            err: None,
        }
    }

    fn next(&mut self) -> Tok {
        if self.pos >= self.input.len() {
            return Tok::Eof;
        }
        self.pos = self.ppos;
        let Some(c) = self.input.get(self.ppos..).and_then(|s| s.chars().next()) else {
            return Tok::Eof;
        };
        self.ppos += c.len_utf8();
        // Go's utf8.RuneError: the decoder's answer to bad bytes, which U+FFFD also is.
        if c == char::REPLACEMENT_CHARACTER {
            self.error("rune error");
            return Tok::Illegal;
        }
        if c == '\0' {
            self.error("unexpected null");
            return Tok::Illegal;
        }
        Tok::Char(c)
    }

    fn peek(&mut self) -> Tok {
        let (pos, ppos) = (self.pos, self.ppos);
        let t = self.next();
        self.pos = pos;
        self.ppos = ppos;
        t
    }

    fn text(&self, from: usize) -> &'a str {
        self.input.get(from..self.ppos).unwrap_or("")
    }

    fn scan(&mut self) -> (usize, Tok, &'a str) {
        let mut ch = self.next();
        let mut pos = self.pos;
        loop {
            let Tok::Char(c) = ch else {
                // EOF or illegal.
                return (self.pos, ch, "");
            };
            if is_quote(c) {
                if !self.scan_quoted(c) {
                    return (pos, Tok::Illegal, self.text(pos));
                }
                return (pos, Tok::Quoted, self.text(pos));
            } else if is_separator(c) {
                self.value = false;
                return (pos, Tok::Separator, self.text(pos));
            } else if is_operator(c) {
                self.scan_while(is_operator);
                self.value = true;
                return (pos, Tok::Operator, self.text(pos));
            } else if c.is_whitespace() {
                ch = self.next();
                pos = self.pos;
                continue;
            } else if self.value {
                self.scan_while(is_value);
                self.value = false;
                return (pos, Tok::Value, self.text(pos));
            } else if is_field(c) {
                self.scan_while(is_field);
                return (pos, Tok::Field, self.text(pos));
            }
            return (self.pos, ch, "");
        }
    }

    fn scan_while(&mut self, class: fn(char) -> bool) {
        while let Tok::Char(c) = self.peek() {
            if !class(c) {
                break;
            }
            self.next();
        }
    }

    fn scan_quoted(&mut self, quote: char) -> bool {
        let mut illegal = false;
        let mut ch = self.next();
        while ch != Tok::Char(quote) {
            match ch {
                Tok::Char('\n') | Tok::Eof | Tok::Illegal => {
                    self.error("quoted literal not terminated");
                    return false;
                }
                Tok::Char('\\') => {
                    let (next, legal) = self.scan_escape(quote);
                    ch = next;
                    illegal |= !legal;
                }
                _ => ch = self.next(),
            }
        }
        !illegal
    }

    fn scan_escape(&mut self, quote: char) -> (Tok, bool) {
        let ch = self.next();
        match ch {
            Tok::Char(c) if "abfnrtv\\".contains(c) || c == quote => (self.next(), true),
            Tok::Char('0'..='7') => self.scan_digits(ch, 8, 3),
            Tok::Char('x') => {
                let c = self.next();
                self.scan_digits(c, 16, 2)
            }
            Tok::Char('u') => {
                let c = self.next();
                self.scan_digits(c, 16, 4)
            }
            Tok::Char('U') => {
                let c = self.next();
                self.scan_digits(c, 16, 8)
            }
            _ => {
                self.error("illegal escape sequence");
                (ch, false)
            }
        }
    }

    fn scan_digits(&mut self, mut ch: Tok, base: u32, mut n: u32) -> (Tok, bool) {
        while n > 0 && digit_value(ch) < base {
            ch = self.next();
            n -= 1;
        }
        if n > 0 {
            self.error("illegal numeric escape sequence");
            return (ch, false);
        }
        (ch, true)
    }

    fn error(&mut self, msg: &'static str) {
        self.err.get_or_insert(msg);
    }
}

fn digit_value(ch: Tok) -> u32 {
    match ch {
        Tok::Char(c) => c.to_digit(16).unwrap_or(16),
        _ => 16,
    }
}

fn is_field(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

fn is_operator(c: char) -> bool {
    matches!(c, '=' | '!' | '~')
}

fn is_quote(c: char) -> bool {
    matches!(c, '/' | '|' | '"')
}

fn is_separator(c: char) -> bool {
    matches!(c, ',' | '.')
}

/// Go's `isValueRune`: not a comma or space, and a letter, digit, graphic or punctuation
/// character (Go's `IsGraphic` takes every letter, mark, number, punctuation, symbol and the
/// space separators; control and format characters are out).
fn is_value(c: char) -> bool {
    c != ',' && !c.is_whitespace() && !c.is_control() && !is_format(c)
}

/// Unicode's format characters (category Cf) that Go's `IsGraphic` refuses.
fn is_format(c: char) -> bool {
    matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
        // Private use and unassigned are not graphic either; surrogates cannot be chars.
        || (0xE000..=0xF8FF).contains(&(c as u32))
        || (0xF0000..=0x10FFFF).contains(&(c as u32))
}

// ---------------------------------------------------------------------------------------------
// The parser (parser.go)
// ---------------------------------------------------------------------------------------------

struct Parser<'a> {
    input: &'a str,
    scanner: Scanner<'a>,
}

impl Parser<'_> {
    fn selectors(&mut self) -> std::result::Result<Vec<Selector>, String> {
        let mut all = vec![self.selector()?];
        loop {
            match self.scanner.peek() {
                Tok::Char(',') => {
                    let (pos, tok, _) = self.scanner.scan();
                    if tok != Tok::Separator {
                        return Err(self.error(pos, "expected a separator"));
                    }
                    all.push(self.selector()?);
                }
                Tok::Eof => return Ok(all),
                other => {
                    let shown = match other {
                        Tok::Char(c) => c.to_string(),
                        // Go prints string(rune(-1)): U+FFFD.
                        _ => char::REPLACEMENT_CHARACTER.to_string(),
                    };
                    return Err(
                        self.error(self.scanner.ppos, &format!("unexpected input: {shown}"))
                    );
                }
            }
        }
    }

    fn selector(&mut self) -> std::result::Result<Selector, String> {
        let fieldpath = self.fieldpath()?;
        if matches!(self.scanner.peek(), Tok::Char(',') | Tok::Eof) {
            return Ok(Selector {
                fieldpath,
                operator: Operator::Present,
                value: Vec::new(),
                regex: None,
            });
        }
        let operator = self.operator()?;
        let value = self.value(operator == Operator::Matches)?;
        // containerd compiles it when first matched; an error there matches nothing.
        let regex = (operator == Operator::Matches)
            .then(|| std::str::from_utf8(&value).ok())
            .flatten()
            .and_then(|p| regex::bytes::Regex::new(p).ok());
        Ok(Selector {
            fieldpath,
            operator,
            value,
            regex,
        })
    }

    fn fieldpath(&mut self) -> std::result::Result<Vec<Vec<u8>>, String> {
        let mut fields = vec![self.field()?];
        while self.scanner.peek() == Tok::Char('.') {
            let (pos, tok, _) = self.scanner.scan();
            if tok != Tok::Separator {
                return Err(self.error(pos, "expected a field separator (`.`)"));
            }
            fields.push(self.field()?);
        }
        Ok(fields)
    }

    fn field(&mut self) -> std::result::Result<Vec<u8>, String> {
        let (pos, tok, s) = self.scanner.scan();
        match tok {
            Tok::Field => Ok(s.as_bytes().to_vec()),
            Tok::Quoted => self.unquote(pos, s, false),
            Tok::Illegal => Err(self.scanner_error(pos)),
            _ => Err(self.error(pos, "expected field or quoted")),
        }
    }

    fn operator(&mut self) -> std::result::Result<Operator, String> {
        let (pos, tok, s) = self.scanner.scan();
        match tok {
            Tok::Operator => match s {
                "==" => Ok(Operator::Equal),
                "!=" => Ok(Operator::NotEqual),
                "~=" => Ok(Operator::Matches),
                _ => Err(self.error(pos, &format!("unsupported operator {}", go_quote(s)))),
            },
            Tok::Illegal => Err(self.scanner_error(pos)),
            _ => Err(self.error(pos, "expected an operator (\"==\"|\"!=\"|\"~=\")")),
        }
    }

    fn value(&mut self, alt_quotes: bool) -> std::result::Result<Vec<u8>, String> {
        let (pos, tok, s) = self.scanner.scan();
        match tok {
            Tok::Value | Tok::Field => Ok(s.as_bytes().to_vec()),
            Tok::Quoted => self.unquote(pos, s, alt_quotes),
            Tok::Illegal => Err(self.scanner_error(pos)),
            _ => Err(self.error(pos, "expected value or quoted")),
        }
    }

    fn unquote(
        &self,
        pos: usize,
        s: &str,
        alt_quotes: bool,
    ) -> std::result::Result<Vec<u8>, String> {
        if !alt_quotes && !s.starts_with(['\'', '"']) {
            return Err(self.error(pos, "invalid quote encountered"));
        }
        unquote(s).ok_or_else(|| self.error(pos, "unquoting failed: quote syntax error"))
    }

    fn scanner_error(&self, pos: usize) -> String {
        self.error(pos, self.scanner.err.unwrap_or(""))
    }

    /// containerd's `parseError`: the input with the character at `pos` marked.
    fn error(&self, pos: usize, msg: &str) -> String {
        let b = self.input.as_bytes();
        if pos < b.len() {
            format!(
                "parse error: [{} >|{}|< {}]: {msg}",
                String::from_utf8_lossy(&b[..pos]),
                String::from_utf8_lossy(&b[pos..pos + 1]),
                String::from_utf8_lossy(&b[pos + 1..])
            )
        } else {
            format!("parse error: [{}]: {msg}", self.input)
        }
    }
}

/// Go's `%q` of an operator (only `=`, `!`, `~` in it): a double-quoted string.
fn go_quote(s: &str) -> String {
    format!("\"{s}\"")
}

// ---------------------------------------------------------------------------------------------
// Unquoting (quote.go: Go's strconv.Unquote with `/` and `|` as double quotes)
// ---------------------------------------------------------------------------------------------

/// The bytes `s` quotes (`"..."`, `/.../`, `|...|`, `` `...` ``, `'c'`), or `None` on a syntax
/// error.
fn unquote(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let n = b.len();
    if n < 2 {
        return None;
    }
    let quote = b[0];
    if quote != b[n - 1] {
        return None;
    }
    let inner = &s[1..n - 1];
    if quote == b'`' {
        if inner.contains('`') {
            return None;
        }
        return Some(inner.bytes().filter(|&c| c != b'\r').collect());
    }
    if !matches!(quote, b'"' | b'\'' | b'|' | b'/') || inner.contains('\n') {
        return None;
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while !rest.is_empty() {
        let (bytes, tail) = unquote_char(rest, quote)?;
        out.extend_from_slice(&bytes);
        rest = tail;
        if quote == b'\'' && !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// The first character or escape of `s` as bytes, and the rest.
fn unquote_char(s: &str, quote: u8) -> Option<(Vec<u8>, &str)> {
    let c = *s.as_bytes().first()?;
    if c == quote {
        return None;
    }
    if c != b'\\' {
        let ch = s.chars().next()?;
        let mut buf = [0u8; 4];
        return Some((
            ch.encode_utf8(&mut buf).as_bytes().to_vec(),
            &s[ch.len_utf8()..],
        ));
    }
    let e = *s.as_bytes().get(1)?;
    let s = s.get(2..)?;
    let simple = |v: u8| Some((vec![v], s));
    match e {
        b'a' => simple(0x07),
        b'b' => simple(0x08),
        b'f' => simple(0x0c),
        b'n' => simple(b'\n'),
        b'r' => simple(b'\r'),
        b't' => simple(b'\t'),
        b'v' => simple(0x0b),
        b'\\' => simple(b'\\'),
        b'\'' | b'"' | b'|' | b'/' if e == quote => simple(e),
        b'x' | b'u' | b'U' => {
            let n = match e {
                b'x' => 2,
                b'u' => 4,
                _ => 8,
            };
            let digits = s.get(..n)?;
            let mut v: u32 = 0;
            for d in digits.chars() {
                v = v << 4 | d.to_digit(16)?;
            }
            let s = &s[n..];
            if e == b'x' {
                // One byte, perhaps not UTF-8.
                return Some((vec![v as u8], s));
            }
            if v > 0x10FFFF {
                return None;
            }
            // Go encodes a surrogate as U+FFFD.
            let ch = char::from_u32(v).unwrap_or(char::REPLACEMENT_CHARACTER);
            let mut buf = [0u8; 4];
            Some((ch.encode_utf8(&mut buf).as_bytes().to_vec(), s))
        }
        b'0'..=b'7' => {
            let digits = s.as_bytes().get(..2)?;
            let mut v = u32::from(e - b'0');
            for &d in digits {
                if !(b'0'..=b'7').contains(&d) {
                    return None;
                }
                v = v << 3 | u32::from(d - b'0');
            }
            let v = u8::try_from(v).ok()?;
            Some((vec![v], &s[2..]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The corpus of containerd's `TestFilters` (pkg/filters/filter_test.go) with its adaptor:
    /// `name` and `other` present when not empty, `labels.KEY` by the joined key.
    struct Entry {
        name: &'static str,
        other: &'static str,
        labels: &'static [(&'static str, &'static str)],
    }

    impl Adaptor for Entry {
        fn field(&self, fieldpath: &[Vec<u8>]) -> Option<Vec<u8>> {
            let present = |v: &str| (!v.is_empty()).then(|| v.as_bytes().to_vec());
            match fieldpath[0].as_slice() {
                b"name" => present(self.name),
                b"other" => present(self.other),
                b"labels" => {
                    let key = fieldpath[1..].join(&b'.');
                    self.labels
                        .iter()
                        .find(|(k, _)| k.as_bytes() == key)
                        .map(|(_, v)| v.as_bytes().to_vec())
                }
                _ => None,
            }
        }
    }

    const CORPUS: [Entry; 9] = [
        Entry {
            name: "foo",
            other: "",
            labels: &[("foo", "true")],
        },
        Entry {
            name: "bar",
            other: "",
            labels: &[],
        },
        Entry {
            name: "foo",
            other: "",
            labels: &[("foo", "present"), ("more complex label", "present")],
        },
        Entry {
            name: "bar",
            other: "",
            labels: &[("bar", "true")],
        },
        Entry {
            name: "fooer",
            other: "",
            labels: &[("more complex label with \\ and \"", "present")],
        },
        Entry {
            name: "fooer",
            other: "",
            labels: &[("more complex label with \\ and \".post", "present")],
        },
        Entry {
            name: "baz",
            other: "too complex, yo",
            labels: &[],
        },
        Entry {
            name: "bazo",
            other: "abc",
            labels: &[],
        },
        Entry {
            name: "compound",
            other: "",
            labels: &[("foo", "omg_asdf.asdf-qwer")],
        },
    ];

    fn matching(input: &str) -> std::result::Result<Vec<usize>, String> {
        let selectors = parse(input)?;
        let f = Filters {
            any: vec![selectors],
        };
        Ok((0..CORPUS.len())
            .filter(|&i| f.matches(&CORPUS[i]))
            .collect())
    }

    /// containerd's own cases, expected sets and error messages copied from its test.
    #[test]
    fn containerds_filter_test_cases() {
        let all: Vec<usize> = (0..9).collect();
        let ok: &[(&str, &[usize])] = &[
            ("", &all),
            ("name", &all),
            ("labels.foo", &[0, 2, 8]),
            ("labels.foo,name", &[0, 2, 8]),
            ("labels.foo==true", &[0]),
            ("labels.foo==omg_asdf.asdf-qwer", &[8]),
            ("name==bar", &[1, 3]),
            ("name!=bar", &[0, 2, 4, 5, 6, 7, 8]),
            ("name==bar,labels.bar", &[3]),
            ("other==\"too complex, yo\"", &[6]),
            ("other~=[abc]+,name!=foo", &[6, 7]),
            ("other~=/[abc]+/,name!=foo", &[6, 7]),
            ("other~=/[abc]{1,2}/,name!=foo", &[6, 7]),
            ("other~=/[abc]{0,1}\"\\//,name!=foo", &[]),
            ("name==bar,labels.bar==true", &[3]),
            ("name==bar,labels.bar==wrong", &[]),
            ("name==foo,labels.\"more complex label\"", &[2]),
            (
                r#"labels."more complex label with \\ and \""==present"#,
                &[4],
            ),
            (
                r#"labels."more complex label with \\ and \"".post==present"#,
                &[5],
            ),
        ];
        for (input, expected) in ok {
            assert_eq!(matching(input).as_deref(), Ok(*expected), "{input}");
        }
        let bad: &[(&str, &str)] = &[
            (
                "labels.|foo|==omg_asdf.asdf-qwer",
                "filters: parse error: [labels. >|||< foo|==omg_asdf.asdf-qwer]: invalid quote encountered",
            ),
            (
                r#"labels.?"more complex label with \\ and \"".post==present"#,
                r#"filters: parse error: [labels. >|?|< "more complex label with \\ and \"".post==present]: expected field or quoted"#,
            ),
            (
                "name==foo,",
                "filters: parse error: [name==foo,]: expected field or quoted",
            ),
            (
                "labels.",
                "filters: parse error: [labels.]: expected field or quoted",
            ),
            (
                "image~=,id?=?fbaq",
                "filters: parse error: [image~= >|,|< id?=?fbaq]: expected value or quoted",
            ),
            (
                "labels.ns/key==value",
                "filters: parse error: [labels.ns >|/|< key==value]: quoted literal not terminated",
            ),
            (
                "labels.key==/value",
                "filters: parse error: [labels.key== >|/|< value]: quoted literal not terminated",
            ),
        ];
        for (input, message) in bad {
            assert_eq!(matching(input).err().as_deref(), Some(*message), "{input}");
        }
    }

    #[test]
    fn odd_inputs_are_errors_not_panics() {
        for input in [
            " ",
            "name ",
            "name==foo bar",
            "name===x",
            "name=~x",
            "\"\\q\"",
            "\"\\x4",
            "\"\\u12345\"",
            "labels.\"\\777\"",
            "labels.\"é\u{0}\"",
            "na\u{fffd}me",
            "é",
            "name==é",
            "labels.\"\u{10ffff}",
            "a.b.c.d.e.f==|x|",
        ] {
            let _ = matching(input);
        }
        assert!(matching("name==foo bar")
            .unwrap_err()
            .ends_with("unexpected input:  "));
        assert!(matching("name===x")
            .unwrap_err()
            .ends_with("unsupported operator \"===\""));
        // The value after an operator may hold dots, equals signs and non-ASCII letters.
        assert_eq!(matching("labels.foo==omg_asdf.asdf-qwer=1"), Ok(vec![]));
        assert_eq!(matching("name~=^ba"), Ok(vec![1, 3, 6, 7]));
        assert_eq!(matching("name== bar"), Ok(vec![1, 3]));
        // An expression that does not compile matches nothing (containerd logs it).
        assert_eq!(matching("name~=|[|"), Ok(vec![]));
        // A label quoted with escapes: \x20 is a space.
        assert_eq!(
            matching("labels.\"more complex label\"==present"),
            Ok(vec![2])
        );
        assert_eq!(matching("labels.\"more\\x20complex label\""), Ok(vec![2]));
    }

    #[test]
    fn several_strings_are_or_and_errors_name_the_filter() {
        let f = Filters::parse_all(&["name==bar".into(), "name==baz".into()]).unwrap();
        let hits: Vec<usize> = (0..9).filter(|&i| f.matches(&CORPUS[i])).collect();
        assert_eq!(hits, [1, 3, 6]);
        let f = Filters::parse_all(&[]).unwrap();
        assert!((0..9).all(|i| f.matches(&CORPUS[i])));
        let e = Filters::parse_all(&["name==bar".into(), "labels.\u{1b}x,".into()]).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)));
        assert!(
            msg.starts_with("filter labels.\\033x,: filters: parse error: [labels. >|\\033|< x,]"),
            "{msg}"
        );
    }

    #[test]
    fn snapshot_fields_are_containerds() {
        let labels: HashMap<String, String> = [("containerd.io/gc.root", "x"), ("a.b", "y")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let none = HashMap::new();
        let s = SnapshotFields {
            kind: "committed",
            name: "l1",
            parent: "",
            labels: &labels,
        };
        let bare = SnapshotFields {
            kind: "active",
            name: "a",
            parent: "l1",
            labels: &none,
        };
        let m =
            |f: &str, o: &SnapshotFields| Filters::parse_all(&[f.to_string()]).unwrap().matches(o);
        assert!(m("parent", &s), "parent is present even when empty");
        assert!(m("parent==\"\"", &s));
        assert!(m("labels.\"containerd.io/gc.root\"", &s));
        assert!(m("labels.a.b==y", &s), "the rest of the path is the key");
        assert!(!m("labels", &s));
        assert!(!m("labels.x", &bare));
        assert!(m("labels.x!=y", &bare), "absent is \"\" to !=");
        assert!(m("kind==active,parent==l1", &bare));
        assert!(!m("kind==Active", &bare));
        assert!(!m("size", &s));
    }
}
