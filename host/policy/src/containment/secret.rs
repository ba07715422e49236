//! Rule `secret`: an Opaque Secret whose data, as sent, is of bounded size.

use std::fmt;

use super::json::Json;
use super::{Fields, Refusal, Rule, clip, short};

/// The most a Secret's data may hold, keys and values as sent (base64 counted as sent).
pub(crate) const MAX_SECRET_BYTES: usize = 64 << 10;

pub(super) fn check(what: &dyn fmt::Display, object: &Json<'_>) -> Result<(), Refusal> {
    let fields = Fields::new(Rule::Secret, what);
    let map = fields.object(
        object,
        "",
        &[
            "apiVersion",
            "kind",
            "metadata",
            "type",
            "data",
            "stringData",
            "immutable",
        ],
    )?;
    if let Some(kind) = map.get("type")
        && kind.as_str() != Some("Opaque")
    {
        return Err(fields.refuse(
            "type",
            format!(
                "{} is not Opaque, the only type a sandbox's Secret may have",
                short(kind)
            ),
        ));
    }
    let mut total = 0usize;
    for part in ["data", "stringData"] {
        let Some(entries) = map.get(part) else {
            continue;
        };
        let entries = entries
            .as_object()
            .ok_or_else(|| fields.refuse(part, "not an object"))?;
        for (key, value) in entries {
            let value = value.as_str().ok_or_else(|| {
                fields.refuse(format!("{part}.{}", clip(key, 64)), "not a string")
            })?;
            total = total.saturating_add(key.len()).saturating_add(value.len());
        }
    }
    if total > MAX_SECRET_BYTES {
        return Err(fields.refuse(
            "data",
            format!("{total} bytes of data, more than the {MAX_SECRET_BYTES} a Secret may hold"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::MAX_SECRET_BYTES;
    use crate::containment::tests::*;
    use crate::containment::*;

    #[test]
    fn secret_profile() {
        let name = "dev-alice-credentials";
        let base = manifest_of(Resource::Secret, name);
        let rules = Containment::default();
        let mut token = base.clone();
        token["type"] = json!("kubernetes.io/service-account-token");
        refused(
            check(&rules, Resource::Secret, name, &token),
            Rule::Secret,
            "type",
        );
        let mut big = base.clone();
        big["stringData"]["token"] = json!("x".repeat(MAX_SECRET_BYTES));
        refused(
            check(&rules, Resource::Secret, name, &big),
            Rule::Secret,
            "data",
        );
        let mut data = base;
        data["data"] = json!({"extra": "eA=="});
        assert_eq!(check(&rules, Resource::Secret, name, &data), Ok(()));
    }
}
