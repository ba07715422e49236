//! Field errors as apimachinery's `field.Error` words them, and the 422 Invalid they make: the
//! Status message (`Sandbox.cubepod.io "a" is invalid: spec.x: Invalid value: ...`) and one
//! `details.causes` entry per error, which is what kubectl prints line by line.

use std::fmt;

use cubepod_kube::{ApiError, ApiErrorKind, Resource, StatusCause};

/// `field.ErrorType`: the cause's `reason` and the words before the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Required,
    Invalid,
    /// A value of the wrong JSON type: worded as Invalid, reported as its own cause.
    TypeInvalid,
    NotSupported,
    Forbidden,
    Duplicate,
    TooLong,
    TooMany,
}

impl Kind {
    /// The Status cause's `reason`.
    pub(crate) const fn reason(self) -> &'static str {
        match self {
            Kind::Required => "FieldValueRequired",
            Kind::Invalid => "FieldValueInvalid",
            Kind::TypeInvalid => "FieldValueTypeInvalid",
            Kind::NotSupported => "FieldValueNotSupported",
            Kind::Forbidden => "FieldValueForbidden",
            Kind::Duplicate => "FieldValueDuplicate",
            Kind::TooLong => "FieldValueTooLong",
            Kind::TooMany => "FieldValueTooMany",
        }
    }

    const fn words(self) -> &'static str {
        match self {
            Kind::Required => "Required value",
            Kind::Invalid | Kind::TypeInvalid => "Invalid value",
            Kind::NotSupported => "Unsupported value",
            Kind::Forbidden => "Forbidden",
            Kind::Duplicate => "Duplicate value",
            Kind::TooLong => "Too long",
            Kind::TooMany => "Too many",
        }
    }

    /// Kinds whose message never shows the value.
    const fn hides_value(self) -> bool {
        matches!(self, Kind::Required | Kind::Forbidden | Kind::TooLong)
    }
}

/// The offending value as Go's `fmt` prints it in `ErrorBody`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum BadValue {
    /// Not shown (`field.OmitValueType`).
    Omit,
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Quoted, as `%q` prints it.
    Str(String),
    /// Already in Go's `%#v` form (a map of list keys).
    Raw(String),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Omit => Ok(()),
            BadValue::Null => f.write_str("\"null\""),
            BadValue::Bool(b) => write!(f, "{b}"),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Float(x) => f.write_str(&go_float(*x)),
            BadValue::Str(s) => f.write_str(&go_quote(s)),
            BadValue::Raw(s) => f.write_str(s),
        }
    }
}

/// One field's error.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FieldError {
    pub(crate) kind: Kind,
    /// The field's path (`spec.ports[1].name`); `<nil>` for the object as a whole.
    pub(crate) field: String,
    pub(crate) value: BadValue,
    pub(crate) detail: String,
}

impl FieldError {
    pub(crate) fn new(
        kind: Kind,
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(Kind::Required, field, BadValue::Omit, detail)
    }

    pub(crate) fn invalid(
        field: impl Into<String>,
        value: BadValue,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(Kind::Invalid, field, value, detail)
    }

    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, field, BadValue::Omit, detail)
    }

    /// `field.NotSupported`: the value and the supported ones, quoted.
    pub(crate) fn not_supported(
        field: impl Into<String>,
        value: BadValue,
        supported: &[String],
    ) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(Kind::NotSupported, field, value, detail)
    }

    /// The message without the field: `ErrorBody`.
    pub(crate) fn body(&self) -> String {
        let mut body = self.kind.words().to_owned();
        if !self.kind.hides_value() && self.value != BadValue::Omit {
            body.push_str(&format!(": {}", self.value));
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// A field's path as `field.Path` builds and prints it: `spec.ports[1]`, `metadata.labels[a]`;
/// the object itself (no path) is `<nil>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Path(String);

impl Path {
    /// The object itself.
    pub(crate) fn root() -> Path {
        Path(String::new())
    }

    pub(crate) fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub(crate) fn index(&self, index: usize) -> Path {
        Path(format!("{}[{index}]", self.0))
    }

    /// A key of a map (`additionalProperties`).
    pub(crate) fn key(&self, key: &str) -> Path {
        Path(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("<nil>")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl From<&Path> for String {
    fn from(path: &Path) -> String {
        path.to_string()
    }
}

impl From<Path> for String {
    fn from(path: Path) -> String {
        path.to_string()
    }
}

/// `Sandbox.cubepod.io`, `Pod`: a kind as `schema.GroupKind` prints it.
pub(crate) fn qualified_kind(resource: Resource) -> String {
    match resource.descriptor().group {
        "" => resource.kind().to_owned(),
        group => format!("{}.{group}", resource.kind()),
    }
}

/// The 422 of `errors`, worded as `errors.NewInvalid`: the message joins them (without
/// repeats, in brackets when more than one), the causes list each.
pub(crate) fn invalid(resource: Resource, name: &str, errors: &[FieldError]) -> ApiError {
    let mut messages: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_string();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    let kind = qualified_kind(resource);
    let message = match messages.as_slice() {
        [] => format!("{kind} \"{name}\" is invalid"),
        [one] => format!("{kind} \"{name}\" is invalid: {one}"),
        many => format!("{kind} \"{name}\" is invalid: [{}]", many.join(", ")),
    };
    let mut error = ApiError::new(ApiErrorKind::Invalid, message);
    error.causes = errors
        .iter()
        .map(|e| StatusCause {
            reason: e.kind.reason().to_owned(),
            message: e.body(),
            field: e.field.clone(),
        })
        .collect();
    error
}

/// Go's `%q` of a string: double quotes, Go's escapes, printable Unicode kept.
pub(crate) fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                let code = u32::from(c);
                if code < 0x100 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else {
                    out.push_str(&format!("\\u{code:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a float64: the shortest digits that read back, in exponent form from 1e21 up
/// and below 1e-4 (`1e+21`, `1e-05`).
pub(crate) fn go_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let magnitude = x.abs();
    if magnitude != 0.0 && !(1e-4..1e21).contains(&magnitude) {
        // Rust's `{:e}` is `1e21`, `1.5e-5`; Go writes a signed exponent of two digits or more.
        let text = format!("{x:e}");
        if let Some((mantissa, exponent)) = text.split_once('e') {
            let (sign, digits) = match exponent.strip_prefix('-') {
                Some(digits) => ('-', digits),
                None => ('+', exponent),
            };
            return format!("{mantissa}e{sign}{digits:0>2}");
        }
        return text;
    }
    format!("{x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_read_as_apimachinery_writes_them() {
        let min = FieldError::invalid(
            "spec.idleTimeoutSeconds",
            BadValue::Int(-5),
            "spec.idleTimeoutSeconds in body should be greater than or equal to 0",
        );
        assert_eq!(
            min.to_string(),
            "spec.idleTimeoutSeconds: Invalid value: -5: spec.idleTimeoutSeconds in body should \
             be greater than or equal to 0"
        );
        let supported = ["Running".to_owned(), "Paused".to_owned()];
        let enumeration = FieldError::not_supported(
            "spec.desiredState",
            BadValue::Str("Stopped".into()),
            &supported,
        );
        assert_eq!(
            enumeration.to_string(),
            "spec.desiredState: Unsupported value: \"Stopped\": supported values: \"Running\", \"Paused\""
        );
        assert_eq!(
            FieldError::required("spec", "").to_string(),
            "spec: Required value"
        );
        let forbidden = FieldError::forbidden("spec.forkFrom", "immutable");
        assert_eq!(forbidden.to_string(), "spec.forkFrom: Forbidden: immutable");
        let too_long = FieldError::new(
            Kind::TooLong,
            "spec.x",
            BadValue::Str("x".repeat(70)),
            "may not be longer than 63",
        );
        assert_eq!(
            too_long.to_string(),
            "spec.x: Too long: may not be longer than 63"
        );
        assert_eq!(
            FieldError::invalid("<nil>", BadValue::Null, "d").to_string(),
            "<nil>: Invalid value: \"null\": d"
        );
    }

    #[test]
    fn invalid_joins_messages_and_lists_causes() {
        let errors = [
            FieldError::required("spec.image", ""),
            FieldError::required("spec.image", ""),
            FieldError::invalid("spec.x", BadValue::Bool(true), "no"),
        ];
        let error = invalid(Resource::Sandbox, "a", &errors);
        assert_eq!(error.kind, ApiErrorKind::Invalid);
        assert_eq!(
            error.message,
            "Sandbox.cubepod.io \"a\" is invalid: [spec.image: Required value, spec.x: Invalid value: true: no]"
        );
        assert_eq!(error.causes.len(), 3);
        assert_eq!(error.causes[2].reason, "FieldValueInvalid");
        assert_eq!(error.causes[2].message, "Invalid value: true: no");
        assert_eq!(error.causes[2].field, "spec.x");
        let pod = invalid(Resource::Pod, "p", &errors[..1]);
        assert_eq!(
            pod.message,
            "Pod \"p\" is invalid: spec.image: Required value"
        );
    }

    #[test]
    fn values_print_as_go_prints_them() {
        assert_eq!(go_quote("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
        assert_eq!(go_quote("é"), "\"é\"");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(-0.25), "-0.25");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-5), "1.5e-05");
        assert_eq!(go_float(100.0), "100");
    }
}
