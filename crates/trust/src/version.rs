//! Image versions for rollback protection: the `version` a statement may carry, compared with the
//! floor a reader is given (`--min-version`, [`crate::authenticate`]).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Most numbers a version may have.
const MAX_PARTS: usize = 16;

/// Most digits a number of a version may have (so that every number fits 64 bits).
const MAX_DIGITS: usize = 19;

/// A version that can be compared: decimal numbers separated by dots (`7`, `2026.11`, `1.2.10`),
/// compared number by number, a missing number counting as 0 (so `1` equals `1.0`, and `1.10` is
/// newer than `1.9`); at most 16 numbers of at most 19 digits each. A
/// statement's `version` is free text (docs/format.md §10.1); only one of this form can satisfy a
/// floor.
#[derive(Clone, Debug)]
pub struct Version {
    parts: Vec<u64>,
    text: String,
}

/// Why text is not a [`Version`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a version ({why})")]
pub struct VersionError {
    text: String,
    why: &'static str,
}

/// What a version is, said when text is not one.
const VERSION_FORM: &str = "decimal numbers separated by dots, such as 7 or 1.2.10";

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Version, VersionError> {
        let err = |why: &'static str| VersionError {
            text: text.to_string(),
            why,
        };
        let parts = text
            .split('.')
            .map(|p| {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err(VERSION_FORM));
                }
                if p.len() > MAX_DIGITS {
                    return Err(err(
                        "a number has more than 19 digits, the most a version's number may have",
                    ));
                }
                p.parse::<u64>().map_err(|_| err(VERSION_FORM))
            })
            .collect::<Result<Vec<u64>, VersionError>>()?;
        if parts.len() > MAX_PARTS {
            return Err(err("more than 16 numbers, the most a version may have"));
        }
        Ok(Version {
            parts,
            text: text.to_string(),
        })
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Version) -> Ordering {
        let n = self.parts.len().max(other.parts.len());
        (0..n)
            .map(|i| {
                let a = self.parts.get(i).copied().unwrap_or(0);
                let b = other.parts.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Version) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn order() {
        assert!(v("2") > v("1"));
        assert!(v("1.10") > v("1.9"));
        assert_eq!(v("1"), v("1.0.0"));
        assert!(v("1.0.1") > v("1"));
        assert!(v("2026.11.28") > v("2026.2.30"));
        assert!(v("10") > v("9.99.99"));
        assert_eq!(v("007"), v("7"));
        assert_eq!(v("3").to_string(), "3");
    }

    #[test]
    fn refused() {
        for bad in [
            "",
            ".",
            "1.",
            ".1",
            "1..2",
            "v1",
            "1.2-rc1",
            "1 ",
            "-1",
            "1.2.x",
            "99999999999999999999",
            "1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?}");
        }
    }

    /// Issue 38: `--min-version` over 19 digits was only "not a version"; the message now names
    /// the limit, and 19 digits (the most) are a version.
    #[test]
    fn min_version_over_19_digits_names_the_limit() {
        assert!(v("9999999999999999999") > v("999999999999999999"));
        let e = "10000000000000000000".parse::<Version>().unwrap_err();
        assert!(e.to_string().contains("more than 19 digits"), "{e}");
        let e = "1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1.1"
            .parse::<Version>()
            .unwrap_err();
        assert!(e.to_string().contains("more than 16 numbers"), "{e}");
        let e = "v1".parse::<Version>().unwrap_err();
        assert!(
            e.to_string().contains("decimal numbers separated by dots"),
            "{e}"
        );
    }
}
