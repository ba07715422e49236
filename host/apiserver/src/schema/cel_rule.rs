//! One `x-kubernetes-validations` entry, read and compiled to a CEL program: what a node of the
//! structural schema holds, and `rules` evaluates.

use std::sync::{Arc, OnceLock};

use cel::{Env, Program};
use serde_json::Value;

use super::error::SchemaError;
use crate::field::Kind;

pub(crate) struct Rule {
    /// The expression as the CRD writes it.
    source: String,
    pub(super) program: Program,
    message: Option<String>,
    /// `fieldPath` without its leading dot (`forkFrom`): where a failure is reported.
    pub(super) field_path: Option<String>,
    pub(super) reason: Kind,
    pub(super) uses_old_self: bool,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The standard environment, built once: rules are compiled and run in it.
pub(super) fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib()))
}

impl Rule {
    /// Reads and compiles one entry of `x-kubernetes-validations`.
    pub(crate) fn parse(rule: &Value, path: &str) -> Result<Rule, SchemaError> {
        let invalid = |why: String| SchemaError::Invalid {
            path: format!("openAPIV3Schema{path}"),
            why,
        };
        let fields = rule
            .as_object()
            .ok_or_else(|| invalid("a validation rule must be an object".into()))?;
        for keyword in fields.keys() {
            if !matches!(
                keyword.as_str(),
                "rule" | "message" | "fieldPath" | "reason"
            ) {
                return Err(SchemaError::Unsupported {
                    path: format!("openAPIV3Schema{path}"),
                    keyword: keyword.clone(),
                });
            }
        }
        let text = |key: &str| fields.get(key).and_then(Value::as_str).map(str::trim);
        let source = text("rule")
            .ok_or_else(|| invalid("a validation rule needs `rule`".into()))?
            .to_owned();
        let program = env()
            .compile(&source)
            .map_err(|e| invalid(format!("rule {source:?} does not compile: {e}")))?;
        let uses_old_self = program.references().has_variable("oldSelf");
        let field_path = match text("fieldPath") {
            None => None,
            Some(path) => Some(normalized_field_path(path).ok_or_else(|| {
                invalid(format!(
                    "fieldPath {path:?}: only `.a.b` paths are supported"
                ))
            })?),
        };
        let reason = match text("reason") {
            None | Some("FieldValueInvalid") => Kind::Invalid,
            Some("FieldValueForbidden") => Kind::Forbidden,
            Some("FieldValueRequired") => Kind::Required,
            Some("FieldValueDuplicate") => Kind::Duplicate,
            Some(other) => return Err(invalid(format!("unknown reason {other:?}"))),
        };
        Ok(Rule {
            source,
            program,
            message: text("message").filter(|m| !m.is_empty()).map(str::to_owned),
            field_path,
            reason,
            uses_old_self,
        })
    }

    /// `ruleErrorString`: the message, else the rule.
    pub(super) fn described(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.source)
    }

    /// The failure's detail: the message, else `failed rule: <rule>`.
    pub(super) fn failure_detail(&self) -> String {
        match &self.message {
            Some(message) => message.clone(),
            None => format!("failed rule: {}", self.source),
        }
    }
}

/// `.a.b` as apiextensions normalizes a simple `fieldPath`: `a.b`.
fn normalized_field_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix('.')?;
    let valid = rest.split('.').all(|name| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    valid.then(|| rest.to_owned())
}
