//! A custom resource's `metadata.name`, held as the API server holds it: an RFC 1123 subdomain
//! (`NameIsDNSSubdomain`), worded as apimachinery words it.

use regex::Regex;
use std::sync::OnceLock;

use crate::field::{BadValue, FieldError, Path};

const MAX_LENGTH: usize = 253;
const SUBDOMAIN: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// The errors of `name` (a create's: an update cannot change it).
pub(crate) fn validate_name(name: &str, out: &mut Vec<FieldError>) {
    static ANCHORED: OnceLock<Option<Regex>> = OnceLock::new();
    let field = Path::root().child("metadata").child("name");
    let value = || BadValue::Str(name.to_owned());
    if name.len() > MAX_LENGTH {
        out.push(FieldError::invalid(
            &field,
            value(),
            format!("must be no more than {MAX_LENGTH} characters"),
        ));
    }
    let matches = ANCHORED
        .get_or_init(|| Regex::new(&format!("^{SUBDOMAIN}$")).ok())
        .as_ref()
        .is_some_and(|regex| regex.is_match(name));
    if !matches {
        out.push(FieldError::invalid(
            &field,
            value(),
            format!(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                 characters, '-' or '.', and must start and end with an alphanumeric character \
                 (e.g. 'example.com', regex used for validation is '{SUBDOMAIN}')"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_subdomains() {
        let errors = |name: &str| {
            let mut out = Vec::new();
            validate_name(name, &mut out);
            out.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert!(errors("dev-alice").is_empty());
        assert!(errors("a.b").is_empty());
        assert_eq!(
            errors("Dev_Alice"),
            [
                "metadata.name: Invalid value: \"Dev_Alice\": a lowercase RFC 1123 subdomain must \
              consist of lower case alphanumeric characters, '-' or '.', and must start and end \
              with an alphanumeric character (e.g. 'example.com', regex used for validation is \
              '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert_eq!(errors(&"a".repeat(254)).len(), 1);
    }
}
