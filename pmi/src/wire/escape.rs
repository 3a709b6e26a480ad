//! Tokens and backslash escapes, the one place that knows how a value is
//! spelled on the wire.
//!
//! Reading follows MPICH's `pmi_wire.c`: tokens are separated by spaces, a
//! value runs to the next unescaped space, and `\x` stands for `x` (a
//! trailing lone backslash stays literal). Tabs also separate tokens here,
//! for tolerance. In `mcmd` lines a value runs to the end of the line, and
//! backslashes are still unescaped.
//!
//! Writing escapes only what a reader would otherwise split or unescape:
//! space, tab and backslash in line values, backslash in `mcmd` values. Values
//! without those characters come out byte-identical to what MPICH writes.
//! MPICH 4.0.2's client and Hydra 4.0.2 do *not* unescape (verified), so for
//! them a value with a space cannot be carried at all; MPICH itself
//! hex-encodes binary data for that reason.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// One `key[=value]` token of a line, value already unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub key: String,
    pub value: Option<String>,
}

fn is_sep(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Split one PMI-1 line (no newline) into tokens.
pub(crate) fn tokenize(line: &str) -> Result<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| is_sep(*c)) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        if first == '=' {
            return Err(Error::Malformed {
                reason: format!("token starting with '=' in line {line:?}"),
            });
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || is_sep(c) {
                break;
            }
            key.push(c);
            chars.next();
        }
        let value = if chars.peek() == Some(&'=') {
            chars.next();
            let mut value = String::new();
            while let Some(&c) = chars.peek() {
                if is_sep(c) {
                    break;
                }
                chars.next();
                if c == '\\' {
                    match chars.next() {
                        Some(escaped) => value.push(escaped),
                        None => value.push('\\'),
                    }
                } else {
                    value.push(c);
                }
            }
            Some(value)
        } else {
            None
        };
        tokens.push(Token { key, value });
    }
    Ok(tokens)
}

/// Undo backslash escapes in an `mcmd` value (runs to end of line).
pub(crate) fn unescape(value: &str) -> Cow<'_, str> {
    if !value.contains('\\') {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(escaped) => out.push(escaped),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Refuse characters no PMI-1 reader can get back: line ends and control
/// bytes (the framer treats those as a broken stream).
pub(crate) fn check_encodable(field: &'static str, value: &str) -> Result<()> {
    for c in value.chars() {
        if c == '\n' || c == '\r' {
            return Err(Error::Unencodable {
                field,
                what: "a line break",
            });
        }
        if (c.is_control() && c != '\t') || c == '\u{7f}' {
            return Err(Error::Unencodable {
                field,
                what: "a control character",
            });
        }
    }
    Ok(())
}

/// Spell a value for a `cmd=` line: escape space, tab and backslash.
pub(crate) fn escape_value<'a>(field: &'static str, value: &'a str) -> Result<Cow<'a, str>> {
    check_encodable(field, value)?;
    if !value.contains([' ', '\t', '\\']) {
        return Ok(Cow::Borrowed(value));
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        if c == ' ' || c == '\t' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    Ok(Cow::Owned(out))
}

/// Spell a value for an `mcmd` line: spaces are fine, escape backslash.
pub(crate) fn escape_mcmd_value<'a>(field: &'static str, value: &'a str) -> Result<Cow<'a, str>> {
    check_encodable(field, value)?;
    if !value.contains('\\') {
        return Ok(Cow::Borrowed(value));
    }
    Ok(Cow::Owned(value.replace('\\', "\\\\")))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Expected = Vec<(&'static str, Option<String>)>;

    fn tok(line: &str) -> Vec<(String, Option<String>)> {
        tokenize(line)
            .unwrap()
            .into_iter()
            .map(|t| (t.key, t.value))
            .collect()
    }

    #[test]
    fn tokenize_table() {
        let s = |x: &str| Some(x.to_string());
        let cases: &[(&str, Expected)] = &[
            ("cmd=get key=a", vec![("cmd", s("get")), ("key", s("a"))]),
            (
                "  cmd=get   key=a  ",
                vec![("cmd", s("get")), ("key", s("a"))],
            ),
            ("cmd=x\tk=v", vec![("cmd", s("x")), ("k", s("v"))]),
            ("cmd=x flag", vec![("cmd", s("x")), ("flag", None)]),
            ("cmd=x k=", vec![("cmd", s("x")), ("k", s(""))]),
            ("cmd=x k=a=b", vec![("cmd", s("x")), ("k", s("a=b"))]),
            ("cmd=x k=a\\ b", vec![("cmd", s("x")), ("k", s("a b"))]),
            ("cmd=x k=a\\\\b", vec![("cmd", s("x")), ("k", s("a\\b"))]),
            ("cmd=x k=a\\", vec![("cmd", s("x")), ("k", s("a\\"))]),
            ("cmd=x k=\\q", vec![("cmd", s("x")), ("k", s("q"))]),
            ("", vec![]),
        ];
        for (line, want) in cases {
            let want: Vec<(String, Option<String>)> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            assert_eq!(tok(line), want, "line {line:?}");
        }
    }

    #[test]
    fn token_starting_with_equals_is_malformed() {
        assert!(matches!(tokenize("cmd=x =v"), Err(Error::Malformed { .. })));
    }

    #[test]
    fn escape_round_trips_through_tokenize() {
        for v in [
            "plain",
            "a b",
            "back\\slash",
            "tab\there",
            "",
            "x=y",
            " lead",
            "trail\\",
        ] {
            let line = format!("cmd=x v={}", escape_value("v", v).unwrap());
            let toks = tokenize(&line).unwrap();
            assert_eq!(
                toks[1].value.as_deref(),
                Some(v),
                "value {v:?} line {line:?}"
            );
        }
    }

    #[test]
    fn escape_leaves_plain_values_alone() {
        assert!(matches!(
            escape_value("v", "abc-1_2/(x,y)"),
            Ok(Cow::Borrowed(_))
        ));
        assert_eq!(escape_mcmd_value("a", "a b").unwrap(), "a b");
        assert_eq!(escape_mcmd_value("a", "a\\b").unwrap(), "a\\\\b");
        assert_eq!(unescape("a\\\\b"), "a\\b");
        assert_eq!(unescape("a\\"), "a\\");
    }

    #[test]
    fn unencodable_values_are_refused() {
        for v in ["a\nb", "a\rb", "nul\0", "bell\u{7}", "del\u{7f}"] {
            assert!(
                matches!(escape_value("value", v), Err(Error::Unencodable { .. })),
                "{v:?}"
            );
            assert!(matches!(
                escape_mcmd_value("arg", v),
                Err(Error::Unencodable { .. })
            ));
        }
    }
}
