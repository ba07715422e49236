//! Field selectors (`fieldSelector=metadata.name=a,involvedObject.kind=Sandbox`): what
//! `kubectl describe` lists Events with and `kubectl delete` waits with. Terms are `f=v`,
//! `f==v` or `f!=v` on a dotted field path, all of which must hold; a value is compared as the
//! text the API server compares (numbers and booleans as written, a missing field as `""`).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid field selector {0:?}: terms are field=value, field==value or field!=value")]
pub(crate) struct FieldSelectorError(String);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    /// (path, value, equal).
    terms: Vec<(Vec<String>, String, bool)>,
}

impl FieldSelector {
    pub(crate) fn parse(text: &str) -> Result<Self, FieldSelectorError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(FieldSelectorError(text.to_owned()));
            };
            let path: Vec<String> = field.trim().split('.').map(str::to_owned).collect();
            if path.iter().any(String::is_empty) {
                return Err(FieldSelectorError(text.to_owned()));
            }
            terms.push((path, value.trim().to_owned(), equal));
        }
        Ok(Self { terms })
    }

    pub(crate) fn is_everything(&self) -> bool {
        self.terms.is_empty()
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(path, wanted, equal)| {
            let actual = path
                .iter()
                .try_fold(object, |value, field| value.get(field))
                .map(|value| match value {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (actual == *wanted) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selects_on_nested_fields() {
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Sandbox", "name": "a"}, "count": 2});
        let selector =
            FieldSelector::parse("involvedObject.kind=Sandbox,involvedObject.name==a").unwrap();
        assert!(selector.matches(&event));
        assert!(
            !FieldSelector::parse("involvedObject.name!=a")
                .unwrap()
                .matches(&event)
        );
        assert!(FieldSelector::parse("count=2").unwrap().matches(&event));
        assert!(
            FieldSelector::parse("metadata.namespace=")
                .unwrap()
                .matches(&event)
        );
        assert!(FieldSelector::parse("").unwrap().is_everything());
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("a..b=c").is_err());
    }
}
