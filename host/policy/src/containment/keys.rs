//! The labels and annotations an operator lets a policy put on a sandbox's Pod beyond the
//! host's own (`--allow-pod-label`, `--allow-pod-annotation`): keys (`team`), or prefixes ending
//! in `/` (`example.com/`). The host's keys stay the host's whatever the lists say, and so do
//! the annotations that configure the container runtime or a security profile, which the Pod
//! rules check in fields only.

use std::collections::BTreeSet;
use std::fmt;

use crate::model::names::MANAGED_BY_LABEL;

/// Every key the controller sets or reads of its own is under this prefix.
pub(crate) const HOST_PREFIX: &str = "cubepod.io/";

/// Annotation keys, by prefix, that configure the runtime or a security profile: Kata's
/// hypervisor and kernel settings, CRI-O's, and the legacy AppArmor and seccomp annotations.
/// Allowed, they would reach past the Pod profile and the Pod Security Standards the boundary
/// checks in the Pod's fields.
const RUNTIME_ANNOTATION_PREFIXES: [&str; 5] = [
    "io.katacontainers.",
    "io.kubernetes.cri-o.",
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
];

/// Which metadata map a list is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// `metadata.labels`.
    Label,
    /// `metadata.annotations`.
    Annotation,
}

impl KeyKind {
    /// The flag that widens it.
    pub(crate) const fn flag(self) -> &'static str {
        match self {
            KeyKind::Label => "--allow-pod-label",
            KeyKind::Annotation => "--allow-pod-annotation",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            KeyKind::Label => "label",
            KeyKind::Annotation => "annotation",
        }
    }
}

/// Why `key` is one no flag widens, if it is.
pub(crate) fn reserved(kind: KeyKind, key: &str) -> Option<&'static str> {
    if key.starts_with(HOST_PREFIX) {
        return Some("the host's (every key under cubepod.io/ is)");
    }
    match kind {
        KeyKind::Label if key == MANAGED_BY_LABEL => Some("the host's"),
        KeyKind::Annotation
            if RUNTIME_ANNOTATION_PREFIXES
                .iter()
                .any(|prefix| key.starts_with(prefix)) =>
        {
            Some("read by the container runtime, past the Pod profile")
        }
        _ => None,
    }
}

/// The keys of one kind a policy may set on a Pod besides the host's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAllowlist {
    kind: KeyKind,
    /// Keys, and prefixes ending in `/`.
    entries: BTreeSet<String>,
}

impl KeyAllowlist {
    /// An allowlist of label or annotation keys, from the operator's entries.
    pub fn new<I, S>(kind: KeyKind, entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            kind,
            entries: entries.into_iter().map(Into::into).collect(),
        }
    }

    /// Nothing allowed: the host's keys only.
    pub(crate) fn none(kind: KeyKind) -> Self {
        Self::new(kind, Vec::<String>::new())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a policy may set `key`: an entry names it or is a prefix of it, and it is not a
    /// reserved key.
    pub fn admits(&self, key: &str) -> bool {
        reserved(self.kind, key).is_none()
            && self.entries.iter().any(|entry| {
                if entry.ends_with('/') {
                    key.starts_with(entry.as_str())
                } else {
                    key == entry
                }
            })
    }

    /// Why `key` is refused, for a refusal's message.
    pub(crate) fn refusal(&self, key: &str) -> String {
        let noun = self.kind.noun();
        match reserved(self.kind, key) {
            Some(why) => format!("a Pod {noun} that is {why}: no flag widens it"),
            None => format!(
                "not a {noun} of the host's, nor one {} allows ({self})",
                self.kind.flag()
            ),
        }
    }
}

impl fmt::Display for KeyAllowlist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("none");
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{entry:?}")?;
        }
        Ok(())
    }
}

/// One entry of `--allow-pod-label` or `--allow-pod-annotation`: a key as Kubernetes writes
/// them (`[prefix/]name`), or a prefix (`example.com/`); not a key no flag widens.
pub fn parse_entry(kind: KeyKind, text: &str) -> Result<String, String> {
    let text = text.trim();
    let (prefix, name) = match text.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    if let Some(prefix) = prefix
        && !dns_subdomain(prefix)
    {
        return Err(format!(
            "{text:?}: the part before '/' must be a DNS subdomain (example.com)"
        ));
    }
    // A prefix alone (`example.com/`) admits every name under it.
    let prefix_alone = prefix.is_some() && name.is_empty();
    if !prefix_alone && !key_name(name) {
        return Err(format!(
            "{text:?} is not a {} key: a name of at most 63 letters, digits, '-', '_' and '.', \
             beginning and ending with a letter or digit, after an optional prefix and '/'",
            kind.noun()
        ));
    }
    if let Some(why) = reserved(kind, text) {
        return Err(format!("{text:?} is {why}: no flag widens it"));
    }
    Ok(text.to_string())
}

/// The name part of a label or annotation key.
fn key_name(name: &str) -> bool {
    let edge = |c: char| c.is_ascii_alphanumeric();
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(edge)
        && name.ends_with(edge)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A key's prefix: a DNS subdomain (RFC 1123) of at most 253 characters.
fn dns_subdomain(prefix: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !prefix.is_empty()
        && prefix.len() <= 253
        && prefix.split('.').all(|label| {
            label.starts_with(alnum)
                && label.ends_with(alnum)
                && label.chars().all(|c| alnum(c) || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_key_or_a_prefix() {
        for (kind, text) in [
            (KeyKind::Label, "team"),
            (KeyKind::Label, "cost-center"),
            (KeyKind::Label, "example.com/"),
            (KeyKind::Label, "example.com/cost-center"),
            (KeyKind::Label, "app.kubernetes.io/part-of"),
            // Wider than a host's key: the host's key under it stays the host's.
            (KeyKind::Label, "app.kubernetes.io/"),
            (KeyKind::Annotation, "example.com/owner"),
            (KeyKind::Annotation, "kubernetes.io/description"),
        ] {
            assert_eq!(parse_entry(kind, text).as_deref(), Ok(text), "{text}");
        }
        for (kind, text) in [
            (KeyKind::Label, ""),
            (KeyKind::Label, "/"),
            (KeyKind::Label, "team!"),
            (KeyKind::Label, "-team"),
            (KeyKind::Label, "Example.com/x"),
            (KeyKind::Label, "a/b/c"),
            (KeyKind::Label, &"x".repeat(64)),
        ] {
            let error = parse_entry(kind, text).unwrap_err();
            assert!(
                error.contains("is not a label key") || error.contains("DNS"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_hosts_and_the_runtimes_keys_are_no_entry() {
        for (kind, text) in [
            (KeyKind::Label, "app.kubernetes.io/managed-by"),
            (KeyKind::Label, "cubepod.io/sandbox"),
            (KeyKind::Label, "cubepod.io/rootfs-generation"),
            (KeyKind::Label, "cubepod.io/"),
            (KeyKind::Annotation, "cubepod.io/spec-hash"),
            (
                KeyKind::Annotation,
                "io.katacontainers.config.hypervisor.path",
            ),
            (
                KeyKind::Annotation,
                "container.apparmor.security.beta.kubernetes.io/",
            ),
            (
                KeyKind::Annotation,
                "seccomp.security.alpha.kubernetes.io/pod",
            ),
        ] {
            let error = parse_entry(kind, text).unwrap_err();
            assert!(error.contains("no flag widens it"), "{text}: {error}");
        }
    }

    #[test]
    fn a_prefix_admits_the_names_under_it_and_never_a_reserved_one() {
        let labels = KeyAllowlist::new(
            KeyKind::Label,
            ["team", "example.com/", "app.kubernetes.io/", "cubepod.io/"],
        );
        for key in [
            "team",
            "example.com/cost-center",
            "app.kubernetes.io/part-of",
        ] {
            assert!(labels.admits(key), "{key}");
        }
        for key in [
            "teams",
            "example.com.evil/x",
            "sub.example.com/x",
            "app.kubernetes.io/managed-by",
            "cubepod.io/sandbox",
            "cubepod.io/pool",
        ] {
            assert!(!labels.admits(key), "{key}");
        }
        let annotations = KeyAllowlist::new(KeyKind::Annotation, ["io.katacontainers.x"]);
        assert!(!annotations.admits("io.katacontainers.x"));
        assert!(!KeyAllowlist::none(KeyKind::Label).admits("team"));
    }
}
