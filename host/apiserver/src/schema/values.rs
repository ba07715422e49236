//! A value held to its schema as kube-openapi's `SchemaValidator` holds a custom resource, and
//! each failure as apiextensions turns it into a field error (`kubeOpenAPIResultToFieldErrors`):
//! the type, then a string's length or pattern (the first that fails), its format, a number's
//! bounds, an array's items and size, the enum, an object's properties and required fields.
//! Messages are kube-openapi's (`spec.x in body should be greater than or equal to 0`).

use serde_json::Value;

use super::datetime;
use super::structural::{Bound, Format, Node, Type};
use crate::field::{BadValue, FieldError, Kind, Path, go_float};

/// Every failure of `value` (at `path`) against `node`, appended to `out`.
pub(crate) fn validate(node: &Node, value: &Value, path: &Path, out: &mut Vec<FieldError>) {
    check_type(node, value, path, out);
    match value {
        Value::String(text) => {
            check_string(node, text, path, out);
            check_format(node, text, path, out);
        }
        Value::Number(_) => check_number(node, value, path, out),
        Value::Array(items) => check_array(node, items, path, out),
        _ => {}
    }
    check_enum(node, value, path, out);
    if let Value::Object(fields) = value {
        check_object(node, fields, path, out);
    }
}

/// The JSON type of a value as kube-openapi names it, and the Go format it infers for numbers.
fn json_type(value: &Value) -> (&'static str, &'static str) {
    match value {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.is_f64() => ("number", "float64"),
        Value::Number(_) => ("integer", "int64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

fn check_type(node: &Node, value: &Value, path: &Path, out: &mut Vec<FieldError>) {
    let Some(ty) = node.ty else {
        return;
    };
    let (actual, actual_format) = json_type(value);
    let type_error = |expected: &str, got: &str| {
        FieldError::new(
            Kind::TypeInvalid,
            path,
            BadValue::Str(got.to_owned()),
            format!("{path} in body must be of type {expected}: \"{got}\""),
        )
    };
    if value.is_null() {
        if !node.nullable {
            out.push(type_error(ty.name(), "null"));
        }
        return;
    }
    let integral_float = value
        .as_f64()
        .is_some_and(|x| actual == "number" && x.fract() == 0.0 && x.is_finite());
    let float_int = integral_float && ty == Type::Integer;
    let int_float = actual == "integer" && ty == Type::Number;
    let numeric_schema = matches!(ty, Type::Integer | Type::Number);
    // kube-openapi's order: a non-string, non-array value of a schema with a format is first
    // held to the format's type (`must be of type date-time: "int64"`)...
    if let Some(Format::DateTime(format)) = &node.format {
        let is_string_or_array = matches!(value, Value::String(_) | Value::Array(_));
        if !(is_string_or_array || ty.name() == actual || float_int || int_float) {
            out.push(type_error(format, actual_format));
            return;
        }
        // ...and a string or an array under a non-numeric schema with a format passes as it is.
        if !numeric_schema && is_string_or_array {
            return;
        }
    }
    if !(ty.name() == actual || float_int || int_float) {
        out.push(type_error(ty.name(), actual));
    }
}

fn check_string(node: &Node, text: &str, path: &Path, out: &mut Vec<FieldError>) {
    let length = text.chars().count() as u64;
    let value = || BadValue::Str(text.to_owned());
    if let Some(max) = node.max_length
        && length > max
    {
        out.push(FieldError::new(
            Kind::TooLong,
            path,
            value(),
            format!("may not be longer than {max}"),
        ));
        return;
    }
    if let Some(min) = node.min_length
        && length < min
    {
        out.push(FieldError::invalid(
            path,
            value(),
            format!("{path} in body should be at least {min} chars long"),
        ));
        return;
    }
    if let Some(pattern) = &node.pattern
        && !pattern.regex.is_match(text)
    {
        out.push(FieldError::invalid(
            path,
            value(),
            format!("{path} in body should match '{}'", pattern.source),
        ));
    }
}

fn check_format(node: &Node, text: &str, path: &Path, out: &mut Vec<FieldError>) {
    let Some(Format::DateTime(format)) = &node.format else {
        return;
    };
    if !datetime::is_date_time(text) {
        out.push(FieldError::new(
            Kind::TypeInvalid,
            path,
            BadValue::Str(text.to_owned()),
            format!(
                "{path} in body must be of type {format}: {}",
                crate::field::go_quote(text)
            ),
        ));
    }
}

fn check_number(node: &Node, value: &Value, path: &Path, out: &mut Vec<FieldError>) {
    // An integer is compared as one (bounds printed as integers), any other number as a float.
    let integer = value.as_i64();
    let float = value.as_f64().unwrap_or_default();
    let shown = |bound: f64| match integer {
        Some(_) => format!("{}", bound as i64),
        None => go_float(bound),
    };
    let bad = || bad_value(value);
    if let Some(factor) = node.multiple_of {
        let multiple = match integer {
            Some(i) => {
                let factor = factor as i64;
                factor != 0 && i % factor == 0
            }
            None => {
                let quotient = if factor < 1.0 {
                    float * (1.0 / factor)
                } else {
                    float / factor
                };
                quotient.fract() == 0.0
            }
        };
        if !multiple {
            out.push(FieldError::invalid(
                path,
                bad(),
                format!("{path} in body should be a multiple of {}", shown(factor)),
            ));
        }
    }
    let beyond = |bound: &Bound, above: bool| {
        let (a, b) = match integer {
            Some(i) => (i as f64, (bound.value as i64) as f64),
            None => (float, bound.value),
        };
        match (above, bound.exclusive) {
            (true, false) => a > b,
            (true, true) => a >= b,
            (false, false) => a < b,
            (false, true) => a <= b,
        }
    };
    if let Some(max) = &node.maximum
        && beyond(max, true)
    {
        let words = if max.exclusive {
            "less than"
        } else {
            "less than or equal to"
        };
        out.push(FieldError::invalid(
            path,
            bad(),
            format!("{path} in body should be {words} {}", shown(max.value)),
        ));
    }
    if let Some(min) = &node.minimum
        && beyond(min, false)
    {
        let words = if min.exclusive {
            "greater than"
        } else {
            "greater than or equal to"
        };
        out.push(FieldError::invalid(
            path,
            bad(),
            format!("{path} in body should be {words} {}", shown(min.value)),
        ));
    }
}

fn check_array(node: &Node, items: &[Value], path: &Path, out: &mut Vec<FieldError>) {
    if let Some(item) = &node.items {
        for (index, value) in items.iter().enumerate() {
            validate(item, value, &path.index(index), out);
        }
    }
    let size = items.len() as u64;
    if let Some(min) = node.min_items
        && size < min
    {
        out.push(FieldError::invalid(
            path,
            BadValue::Int(size as i64),
            format!("{path} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = node.max_items
        && size > max
    {
        out.push(FieldError::new(
            Kind::TooMany,
            path,
            BadValue::Int(size as i64),
            format!("must have at most {max} items"),
        ));
    }
}

fn check_enum(node: &Node, value: &Value, path: &Path, out: &mut Vec<FieldError>) {
    if node.enumeration.is_empty() || node.enumeration.iter().any(|e| enum_equal(e, value)) {
        return;
    }
    let supported: Vec<String> = node
        .enumeration
        .iter()
        .map(|e| match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    out.push(FieldError::not_supported(
        path,
        bad_value(value),
        &supported,
    ));
}

/// Go's `reflect.DeepEqual` after converting to the enum value's type: numbers by value.
fn enum_equal(allowed: &Value, value: &Value) -> bool {
    match (allowed, value) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => allowed == value,
    }
}

fn check_object(
    node: &Node,
    fields: &serde_json::Map<String, Value>,
    path: &Path,
    out: &mut Vec<FieldError>,
) {
    let count = fields.len() as u64;
    if let Some(min) = node.min_properties
        && count < min
    {
        out.push(FieldError::invalid(
            path,
            BadValue::Int(count as i64),
            format!("{path} in body should have at least {min} properties"),
        ));
        return;
    }
    if let Some(max) = node.max_properties
        && count > max
    {
        out.push(FieldError::new(
            Kind::TooMany,
            path,
            BadValue::Int(count as i64),
            format!("must have at most {max} items"),
        ));
        return;
    }
    if let Some(additional) = &node.additional_properties {
        for (key, value) in fields {
            if node.property(key).is_none() {
                validate(additional, value, &path.child(key), out);
            }
        }
    }
    for (name, schema) in &node.properties {
        if let Some(value) = fields.get(name) {
            validate(schema, value, &path.child(name), out);
        }
    }
    for name in &node.required {
        if !fields.contains_key(name) {
            out.push(FieldError::required(path.child(name), ""));
        }
    }
}

/// A JSON value as the error shows it.
pub(crate) fn bad_value(value: &Value) -> BadValue {
    match value {
        Value::Null => BadValue::Null,
        Value::Bool(b) => BadValue::Bool(*b),
        Value::String(s) => BadValue::Str(s.clone()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => BadValue::Int(i),
            None => BadValue::Float(n.as_f64().unwrap_or_default()),
        },
        other => BadValue::Raw(go_syntax(other)),
    }
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"port":80}`).
pub(crate) fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => crate::field::go_quote(s),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or_default()),
        },
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(fields) => {
            // Go's fmt prints a map's keys sorted; serde_json's map is sorted too.
            let mut pairs: Vec<(&String, &Value)> = fields.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            let pairs: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("{}:{}", crate::field::go_quote(k), go_syntax(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", pairs.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(schema: Value, value: Value) -> Vec<String> {
        let node = Node::parse(&schema, "").unwrap();
        let mut out = Vec::new();
        validate(&node, &value, &Path::root().child("f"), &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn each_keyword_fails_as_kube_openapi_words_it() {
        assert_eq!(
            errors(json!({"type": "integer", "minimum": 0}), json!(-5)),
            ["f: Invalid value: -5: f in body should be greater than or equal to 0"]
        );
        assert_eq!(
            errors(json!({"type": "integer", "maximum": 65535}), json!(70000)),
            ["f: Invalid value: 70000: f in body should be less than or equal to 65535"]
        );
        assert_eq!(
            errors(json!({"type": "integer"}), json!("lots")),
            ["f: Invalid value: \"string\": f in body must be of type integer: \"string\""]
        );
        assert!(errors(json!({"type": "integer"}), json!(2.0)).is_empty());
        assert_eq!(
            errors(json!({"type": "integer", "minimum": 1}), json!(0.5)),
            [
                "f: Invalid value: \"number\": f in body must be of type integer: \"number\"",
                "f: Invalid value: 0.5: f in body should be greater than or equal to 1"
            ]
        );
        assert_eq!(
            errors(
                json!({"type": "string", "enum": ["Running", "Paused"]}),
                json!("Stopped")
            ),
            ["f: Unsupported value: \"Stopped\": supported values: \"Running\", \"Paused\""]
        );
        assert_eq!(
            errors(
                json!({"type": "string", "minLength": 1, "pattern": "^a$"}),
                json!("")
            ),
            ["f: Invalid value: \"\": f in body should be at least 1 chars long"]
        );
        assert_eq!(
            errors(
                json!({"type": "string", "maxLength": 2, "pattern": "^a$"}),
                json!("bbb")
            ),
            ["f: Too long: may not be longer than 2"]
        );
        assert_eq!(
            errors(
                json!({"type": "string", "pattern": "^[0-9]+$"}),
                json!("lots")
            ),
            ["f: Invalid value: \"lots\": f in body should match '^[0-9]+$'"]
        );
        assert_eq!(
            errors(
                json!({"type": "string", "format": "date-time"}),
                json!("tomorrow")
            ),
            ["f: Invalid value: \"tomorrow\": f in body must be of type date-time: \"tomorrow\""]
        );
        assert!(
            errors(
                json!({"type": "string", "format": "date-time"}),
                json!("2026-01-01T00:00:00Z")
            )
            .is_empty()
        );
        assert_eq!(
            errors(json!({"type": "string", "format": "date-time"}), json!(5)),
            ["f: Invalid value: \"int64\": f in body must be of type date-time: \"int64\""]
        );
        assert_eq!(
            errors(
                json!({"type": "array", "maxItems": 1, "items": {"type": "string", "minLength": 1}}),
                json!(["", "a"])
            ),
            [
                "f[0]: Invalid value: \"\": f[0] in body should be at least 1 chars long",
                "f: Too many: 2: must have at most 1 items"
            ]
        );
        assert_eq!(
            errors(
                json!({"type": "object", "required": ["b", "a"], "properties": {"a": {"type": "string"}}}),
                json!({})
            ),
            ["f.b: Required value", "f.a: Required value"]
        );
        assert_eq!(
            errors(json!({"type": "object"}), json!([1])),
            ["f: Invalid value: \"array\": f in body must be of type object: \"array\""]
        );
    }

    #[test]
    fn go_syntax_is_fmts() {
        assert_eq!(
            go_syntax(&json!({"protocol": "TCP", "port": 80})),
            "map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}"
        );
    }
}
