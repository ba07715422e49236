//! How a rule reads a manifest: an allowlist of keys at each field, anything else refused
//! with the rule and the field's path, the path written out only when a refusal names it.

use std::fmt;

use super::json::{Json, Object};
use super::{Refusal, Rule, clip};

/// The field `key` of the field `parent` (`spec` and `volumes`: `spec.volumes`), written out
/// only when a refusal names it: an admitted manifest costs no text.
pub(super) fn sub<'a>(parent: &'a dyn fmt::Display, key: &'a str) -> Below<'a> {
    Below(parent, Step::Key(key))
}

/// The `i`th item of the list at `parent` (`spec.volumes[0]`), as [`sub`].
pub(super) fn nth(parent: &dyn fmt::Display, i: usize) -> Below<'_> {
    Below(parent, Step::Index(i))
}

#[derive(Clone, Copy)]
pub(super) struct Below<'a>(&'a dyn fmt::Display, Step<'a>);

#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl fmt::Display for Below<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Step::Key(key) => write!(f, "{}.{key}", self.0),
            Step::Index(i) => write!(f, "{}[{i}]", self.0),
        }
    }
}

/// Reads a manifest for one rule, refusing what it does not know. Fields are named by
/// anything that writes a path (`""` for the manifest itself), written out only on refusal.
pub(super) struct Fields<'a> {
    rule: Rule,
    what: &'a dyn fmt::Display,
}

impl<'a> Fields<'a> {
    pub(super) fn new(rule: Rule, what: &'a dyn fmt::Display) -> Self {
        Self { rule, what }
    }

    pub(super) fn refuse(&self, field: impl fmt::Display, reason: impl Into<String>) -> Refusal {
        Refusal::new(self.rule, self.what, field, reason)
    }

    /// `value` as an object whose every key is in `allowed`.
    pub(super) fn object<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: &[&str],
    ) -> Result<&'v Object<'j>, Refusal> {
        self.object_with(value, field, |key| allowed.contains(&key))
    }

    pub(super) fn object_with<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: impl Fn(&str) -> bool,
    ) -> Result<&'v Object<'j>, Refusal> {
        self.object_with_reason(value, field, allowed, |_| {
            "a field the host does not know to be safe for a sandbox".to_string()
        })
    }

    /// [`Self::object_with`], saying why a key is refused with `why`.
    pub(super) fn object_with_reason<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        allowed: impl Fn(&str) -> bool,
        why: impl Fn(&str) -> String,
    ) -> Result<&'v Object<'j>, Refusal> {
        let Some(map) = value.as_object() else {
            let shown = field.to_string();
            let shown = if shown.is_empty() {
                "the manifest".to_string()
            } else {
                shown
            };
            return Err(self.refuse(shown, "not an object"));
        };
        if let Some(key) = map.keys().find(|k| !allowed(k)) {
            let path = joined(&field, &clip(key, 128));
            return Err(self.refuse(path, why(key)));
        }
        Ok(map)
    }

    pub(super) fn array<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
    ) -> Result<&'v Vec<Json<'j>>, Refusal> {
        value
            .as_array()
            .ok_or_else(|| self.refuse(field, "not an array"))
    }

    /// `value.key`, where `value` is at `field` (`""` for the manifest itself).
    pub(super) fn required<'v, 'j>(
        &self,
        value: &'v Json<'j>,
        field: impl fmt::Display,
        key: &str,
    ) -> Result<&'v Json<'j>, Refusal> {
        value
            .get(key)
            .ok_or_else(|| self.refuse(joined(&field, key), "required, and missing"))
    }
}

/// `field.key`, or `key` where `field` is the manifest itself (written as `""`).
fn joined(field: &dyn fmt::Display, key: &str) -> String {
    let field = field.to_string();
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}
