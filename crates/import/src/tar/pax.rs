//! PAX extended header records (POSIX.1-2001 `x` and `g` members) and the values sealfs reads
//! from them.
//!
//! A record is `"<length> <key>=<value>\n"`, the length counting the whole record in decimal; the
//! value may hold any byte, newlines and NULs included (binary xattr values), so records are cut
//! by their length, never at newlines. (The `tar` crate's `PaxExtensions` splits at newlines,
//! which breaks binary values; this parser is ours for that reason.)

/// One record: key and value, borrowed from the member's data.
pub(crate) type Record<'a> = (&'a [u8], &'a [u8]);

/// Parses every record of an extended header's data, in order (a key may repeat: GNU sparse 0.0
/// maps are pairs of repeated keys).
pub(crate) fn records(data: &[u8]) -> Result<Vec<Record<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        if rest.iter().all(|&b| b == 0) {
            break; // padding some writers leave
        }
        let space = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or_else(|| format!("PAX record at byte {at} of the header has no length"))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("PAX record at byte {at} of the header: bad length"))?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(format!(
                "PAX record at byte {at} of the header: length {len} does not fit"
            ));
        }
        let kv = &rest[space + 1..len - 1];
        let eq = kv
            .iter()
            .position(|&b| b == b'=')
            .ok_or_else(|| format!("PAX record at byte {at} of the header has no '='"))?;
        out.push((&kv[..eq], &kv[eq + 1..]));
        at += len;
    }
    Ok(out)
}

/// A decimal number without sign (PAX `size`, `uid`, `gid`, GNU sparse numbers).
pub(crate) fn unsigned(key: &[u8], value: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(value)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "PAX {}={} is not a number",
                sealfs_text::escape(key),
                sealfs_text::escape(value)
            )
        })
}

/// A PAX time: decimal seconds, with a sign and a fraction allowed (`-1.5`, `1700000000.25`),
/// as (seconds, nanoseconds) rounded down, as GNU tar reads it: `-1.5` is (-2, 500000000).
/// Digits past the ninth of the fraction are dropped.
pub(crate) fn time(key: &[u8], value: &[u8]) -> Result<(i64, u32), String> {
    let bad = || {
        format!(
            "PAX {}={} is not a time",
            sealfs_text::escape(key),
            sealfs_text::escape(value)
        )
    };
    let (negative, digits) = match value.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, value),
    };
    let (int, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], &digits[dot + 1..]),
        None => (digits, &[][..]),
    };
    if int.is_empty() || !int.iter().chain(frac).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let secs: i64 = std::str::from_utf8(int)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let mut nsec = 0u32;
    for i in 0..9 {
        nsec = nsec * 10 + frac.get(i).map_or(0, |d| (d - b'0') as u32);
    }
    if !negative {
        return Ok((secs, nsec));
    }
    let dropped = frac.iter().skip(9).any(|&d| d != b'0');
    match (nsec, dropped) {
        (0, false) => Ok((-secs, 0)),
        // -(s + n/1e9 + a bit) rounded down
        (n, true) => Ok((-secs - 1, 999_999_999 - n)),
        (n, false) => Ok((-secs - 1, 1_000_000_000 - n)),
    }
}

/// Decodes `%XX` escapes (the names of `LIBARCHIVE.xattr.*` records).
pub(crate) fn url_decode(s: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad %-escape in xattr name {}", sealfs_text::escape(s)))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_cut_by_length_not_newlines() {
        let value = b"a\nb\0c";
        let body = [b"SCHILY.xattr.user.x=".as_slice(), value].concat();
        let mut rec = Vec::new();
        let len = body.len() + 4; // "NN " + body + "\n", NN two digits
        rec.extend_from_slice(format!("{len} ").as_bytes());
        rec.extend_from_slice(&body);
        rec.push(b'\n');
        rec.extend_from_slice(b"11 path=ab\n");
        let r = records(&rec).unwrap();
        assert_eq!(r[0], (&b"SCHILY.xattr.user.x"[..], &value[..]));
        assert_eq!(r[1], (&b"path"[..], &b"ab"[..]));
        assert!(records(b"12 path=ab\n").is_err(), "length past the end");
        assert!(
            records(b"10 path=ab\n").is_err(),
            "length short of the newline"
        );
        assert!(records(b"x path=ab\n").is_err());
    }

    #[test]
    fn times_round_down() {
        assert_eq!(time(b"mtime", b"1700000000").unwrap(), (1700000000, 0));
        assert_eq!(time(b"mtime", b"12.5").unwrap(), (12, 500_000_000));
        assert_eq!(time(b"mtime", b"-1.5").unwrap(), (-2, 500_000_000));
        assert_eq!(time(b"mtime", b"-3").unwrap(), (-3, 0));
        assert_eq!(time(b"mtime", b"-0.000000001").unwrap(), (-1, 999_999_999));
        assert_eq!(time(b"mtime", b"1.1234567891").unwrap(), (1, 123_456_789));
        assert_eq!(time(b"mtime", b"-1.0000000001").unwrap(), (-2, 999_999_999));
        for bad in [&b""[..], b"-", b"1.2.3", b"1e5", b".5"] {
            assert!(time(b"mtime", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn url_decoding() {
        assert_eq!(url_decode(b"user.a%3Db%25").unwrap(), b"user.a=b%");
        assert!(url_decode(b"user.%4").is_err());
    }
}
