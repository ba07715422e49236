//! A CRD's `openAPIV3Schema` read into the structural schema the API server defaults and
//! validates with: one [`Node`] per schema, holding the keywords it enforces. A keyword the API
//! server would enforce and this reader does not is an error (`SchemaError::Unsupported`), so a
//! CRD that starts using one fails the unit test that loads every CRD instead of going
//! unchecked here.

use regex::Regex;
use serde_json::Value;

use super::cel_rule::Rule;
use super::error::SchemaError;

/// `type`: what a value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn parse(text: &str) -> Option<Type> {
        Some(match text {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            _ => return None,
        })
    }

    pub(crate) const fn name(self) -> &'static str {
        match self {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        }
    }
}

/// `format`, of those the API server checks for a CRD (the others, `int32` and `int64` among
/// them, it strips from the schema before validating).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// RFC 3339 `date-time`, as kube-openapi's `strfmt` reads it; the name as the CRD writes it.
    DateTime(String),
}

/// The formats a CRD's schema is checked against (apiextensions' `supportedVersionedFormats`),
/// as go-openapi normalizes them (no `-`).
const CHECKED_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// `minimum` or `maximum`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bound {
    pub(crate) value: f64,
    pub(crate) exclusive: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    /// As the CRD writes it: what the error message quotes.
    pub(crate) source: String,
    pub(crate) regex: Regex,
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    /// Items are objects identified by these keys (`x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) ty: Option<Type>,
    pub(crate) format: Option<Format>,
    /// By name, as the API server holds them (a map).
    pub(crate) properties: Vec<(String, Node)>,
    pub(crate) additional_properties: Option<Box<Node>>,
    pub(crate) items: Option<Box<Node>>,
    pub(crate) required: Vec<String>,
    pub(crate) enumeration: Vec<Value>,
    pub(crate) minimum: Option<Bound>,
    pub(crate) maximum: Option<Bound>,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) min_length: Option<u64>,
    pub(crate) max_length: Option<u64>,
    pub(crate) pattern: Option<Pattern>,
    pub(crate) min_items: Option<u64>,
    pub(crate) max_items: Option<u64>,
    pub(crate) min_properties: Option<u64>,
    pub(crate) max_properties: Option<u64>,
    pub(crate) default: Option<Value>,
    pub(crate) nullable: bool,
    pub(crate) list_type: Option<ListType>,
    /// `x-kubernetes-validations`, compiled.
    pub(crate) rules: Vec<Rule>,
}

impl Node {
    pub(crate) fn property(&self, name: &str) -> Option<&Node> {
        self.properties
            .binary_search_by(|(key, _)| key.as_str().cmp(name))
            .ok()
            .map(|index| &self.properties[index].1)
    }

    /// The schema of an object's field `name`: a named property, else `additionalProperties`.
    pub(crate) fn field(&self, name: &str) -> Option<&Node> {
        self.property(name)
            .or(self.additional_properties.as_deref())
    }

    /// Reads a schema; `path` names it in errors (`.spec.storage`).
    pub(crate) fn parse(schema: &Value, path: &str) -> Result<Node, SchemaError> {
        let invalid = |why: String| SchemaError::Invalid {
            path: display(path),
            why,
        };
        let fields = schema
            .as_object()
            .ok_or_else(|| invalid("a schema must be an object".into()))?;
        let mut node = Node::default();
        for (keyword, value) in fields {
            match keyword.as_str() {
                // Documentation, and what only clients read.
                "description" | "title" | "example" | "externalDocs" | "x-kubernetes-map-type" => {}
                // Unknown fields are pruned before validation (crds::prune): nothing to check.
                "x-kubernetes-preserve-unknown-fields" => {}
                "type" => {
                    let text = value.as_str().unwrap_or_default();
                    node.ty = Some(
                        Type::parse(text)
                            .ok_or_else(|| invalid(format!("unknown type {value}")))?,
                    );
                }
                "format" => node.format = format(value.as_str().unwrap_or_default(), path)?,
                "properties" => {
                    let properties = value
                        .as_object()
                        .ok_or_else(|| invalid("properties must be an object".into()))?;
                    let mut parsed = Vec::with_capacity(properties.len());
                    for (name, schema) in properties {
                        parsed.push((
                            name.clone(),
                            Node::parse(schema, &format!("{path}.{name}"))?,
                        ));
                    }
                    parsed.sort_by(|a, b| a.0.cmp(&b.0));
                    node.properties = parsed;
                }
                "additionalProperties" => match value {
                    Value::Bool(_) => {}
                    schema => {
                        node.additional_properties =
                            Some(Box::new(Node::parse(schema, &format!("{path}[*]"))?));
                    }
                },
                "items" => {
                    node.items = Some(Box::new(Node::parse(value, &format!("{path}[*]"))?));
                }
                "required" => node.required = strings(value),
                "enum" => node.enumeration = value.as_array().cloned().unwrap_or_default(),
                "minimum" | "maximum" => {
                    let number = value
                        .as_f64()
                        .ok_or_else(|| invalid(format!("{keyword} must be a number")))?;
                    let exclusive = fields
                        .get(&format!("exclusive{}", capitalized(keyword)))
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let bound = Some(Bound {
                        value: number,
                        exclusive,
                    });
                    if keyword == "minimum" {
                        node.minimum = bound;
                    } else {
                        node.maximum = bound;
                    }
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {}
                "multipleOf" => node.multiple_of = value.as_f64(),
                "minLength" => node.min_length = count(value, keyword, path)?,
                "maxLength" => node.max_length = count(value, keyword, path)?,
                "minItems" => node.min_items = count(value, keyword, path)?,
                "maxItems" => node.max_items = count(value, keyword, path)?,
                "minProperties" => node.min_properties = count(value, keyword, path)?,
                "maxProperties" => node.max_properties = count(value, keyword, path)?,
                "pattern" => {
                    let source = value.as_str().unwrap_or_default().to_owned();
                    let regex = Regex::new(&source)
                        .map_err(|e| invalid(format!("pattern {source:?}: {e}")))?;
                    node.pattern = Some(Pattern { source, regex });
                }
                "default" => node.default = Some(value.clone()),
                "nullable" => node.nullable = value.as_bool().unwrap_or(false),
                "x-kubernetes-list-type" => {
                    node.list_type = Some(match value.as_str().unwrap_or_default() {
                        "atomic" => ListType::Atomic,
                        "set" => ListType::Set,
                        "map" => ListType::Map(strings(
                            fields
                                .get("x-kubernetes-list-map-keys")
                                .unwrap_or(&Value::Null),
                        )),
                        other => return Err(invalid(format!("unknown list type {other:?}"))),
                    });
                }
                "x-kubernetes-list-map-keys" => {}
                "x-kubernetes-validations" => {
                    let rules = value
                        .as_array()
                        .ok_or_else(|| invalid("x-kubernetes-validations must be a list".into()))?;
                    for (index, rule) in rules.iter().enumerate() {
                        let rule_path = format!("{path}.x-kubernetes-validations[{index}]");
                        node.rules.push(Rule::parse(rule, &rule_path)?);
                    }
                }
                other => {
                    return Err(SchemaError::Unsupported {
                        path: display(path),
                        keyword: other.to_owned(),
                    });
                }
            }
        }
        Ok(node)
    }
}

fn format(name: &str, path: &str) -> Result<Option<Format>, SchemaError> {
    let normalized = name.replace('-', "");
    if !CHECKED_FORMATS.contains(&normalized.as_str()) {
        return Ok(None);
    }
    if normalized == "datetime" {
        return Ok(Some(Format::DateTime(name.to_owned())));
    }
    Err(SchemaError::Unsupported {
        path: display(path),
        keyword: format!("format: {name}"),
    })
}

fn count(value: &Value, keyword: &str, path: &str) -> Result<Option<u64>, SchemaError> {
    value
        .as_u64()
        .map(Some)
        .ok_or_else(|| SchemaError::Invalid {
            path: display(path),
            why: format!("{keyword} must be a non-negative integer"),
        })
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn capitalized(keyword: &str) -> String {
    let mut chars = keyword.chars();
    chars
        .next()
        .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

fn display(path: &str) -> String {
    if path.is_empty() {
        "openAPIV3Schema".into()
    } else {
        format!("openAPIV3Schema{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords_are_read_and_unknown_ones_refused() {
        let node = Node::parse(
            &json!({
                "type": "object",
                "required": ["b"],
                "properties": {
                    "b": {"type": "integer", "minimum": 1, "exclusiveMinimum": true, "format": "int32"},
                    "a": {"type": "string", "format": "date-time", "pattern": "^x$", "maxLength": 3},
                    "l": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["k"], "items": {"type": "object"}},
                },
            }),
            "",
        )
        .unwrap();
        assert_eq!(node.ty, Some(Type::Object));
        assert_eq!(
            node.properties
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "l"]
        );
        let b = node.property("b").unwrap();
        assert_eq!(
            b.minimum,
            Some(Bound {
                value: 1.0,
                exclusive: true
            })
        );
        assert_eq!(b.format, None, "int32 is not checked by the API server");
        let a = node.property("a").unwrap();
        assert_eq!(a.format, Some(Format::DateTime("date-time".into())));
        assert_eq!(a.max_length, Some(3));
        assert_eq!(
            node.property("l").unwrap().list_type,
            Some(ListType::Map(vec!["k".into()]))
        );

        let refused = |schema: Value| Node::parse(&schema, "").unwrap_err().to_string();
        assert_eq!(
            refused(json!({"properties": {"a": {"anyOf": []}}})),
            "openAPIV3Schema.a: `anyOf` is not enforced by the in-memory API server"
        );
        assert!(refused(json!({"type": "string", "format": "email"})).contains("format: email"));
        assert!(refused(json!({"type": "str"})).contains("unknown type"));
        assert!(refused(json!({"pattern": "("})).contains("pattern"));
    }
}
