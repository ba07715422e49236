//! One `x-kubernetes-validations` entry, read and compiled to a CEL program: what a node of the
//! structural schema holds, and `rules` evaluates.

use std::sync::{Arc, OnceLock};

use cel::common::value::CowVal;
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

/// The standard environment and what the CRDs use of Kubernetes' list library
/// (`isSorted()`), built once: rules are compiled and run in it.
pub(super) fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        env.add_member_overload(
            "isSorted",
            "list_is_sorted",
            cel::common::types::LIST_TYPE,
            vec![],
            is_sorted,
        )
        .expect("isSorted is declared once");
        Arc::new(env)
    })
}

/// Kubernetes' `<list>.isSorted()`: whether each element is at least the one before it; an
/// error, as there, for elements that do not compare.
fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, cel::ExecutionError> {
    let [list]: [CowVal<'b, 'v>; 1] = args
        .try_into()
        .map_err(|args: Vec<_>| cel::ExecutionError::invalid_argument_count(1, args.len()))?;
    let not_a_list = || cel::ExecutionError::function_error("isSorted", "not a list");
    let mut items = list.as_ref().as_iterable().ok_or_else(not_a_list)?.iter();
    let mut sorted = true;
    let mut previous = items.next();
    while let (Some(before), Some(item)) = (previous, items.next()) {
        let order = before
            .as_comparer()
            .ok_or_else(|| {
                cel::ExecutionError::function_error("isSorted", "elements do not compare")
            })?
            .compare(item)?;
        sorted &= order != std::cmp::Ordering::Greater;
        previous = Some(item);
    }
    Ok(CowVal::owned(cel::common::types::CelBool::from(sorted)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_sorted_reads_as_kubernetes_list_library_does() {
        for (rule, sorted) in [
            ("[1, 2, 2, 3].isSorted()", true),
            ("[2, 1].isSorted()", false),
            ("[].isSorted()", true),
            ("['a', 'b', 'b', 'c'].isSorted()", true),
            (
                "[{'w': 10}, {'w': 50}, {'w': 25}].map(s, s.w).isSorted()",
                false,
            ),
        ] {
            let program = env().compile(rule).expect("compiles");
            let context = cel::Context::with_env(Arc::clone(env()));
            assert_eq!(
                program.execute(&context),
                Ok(cel::Value::Bool(sorted)),
                "{rule}"
            );
        }
    }
}
