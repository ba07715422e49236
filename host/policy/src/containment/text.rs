//! The text of refusals: a guest's strings clipped (a refused manifest or name may be
//! megabytes), and Kubernetes' rule for object names.

use std::fmt;

use super::json::Json;

/// [`clip`] without the allocation.
pub(super) struct Clipped<'a>(pub(super) &'a str, pub(super) usize);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Clipped(text, max) = *self;
        if text.len() <= max {
            return f.write_str(text);
        }
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{}... ({} bytes)", &text[..end], text.len())
    }
}

/// At most `max` bytes of `text` (on a character boundary), and how long it was if cut.
pub fn clip(text: &str, max: usize) -> String {
    Clipped(text, max).to_string()
}

/// The most of a guest's text a refusal quotes: a refused output may be megabytes.
const SHOWN_BYTES: usize = 128;

/// A bounded prefix of a guest's `text` for a refusal.
pub fn shown(text: &str) -> String {
    clip(text, SHOWN_BYTES)
}

/// A guest's value in a message, clipped.
pub(super) fn short(value: &Json<'_>) -> String {
    clip(&value.to_string(), 128)
}

/// Kubernetes' rule for object names (RFC 1123 subdomain): at most 253 characters, dot-separated
/// labels of lower-case alphanumerics and '-', each starting and ending alphanumeric.
pub(super) fn dns1123_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 253 {
        return Err("is longer than 253 characters");
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = name.split('.').all(|label| {
        label.starts_with(alnum)
            && label.ends_with(alnum)
            && label.chars().all(|c| alnum(c) || c == '-')
    });
    if ok {
        Ok(())
    } else {
        Err("is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.')")
    }
}
