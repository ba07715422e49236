//! Label selectors in the API's string form: `k=v`, `k==v`, `k!=v`, `k`, `!k`,
//! `k in (a,b)`, `k notin (a,b)`, comma-separated terms that must all hold.

use serde_json::Value;

use super::meta;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub(crate) struct SelectorError(String);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    /// Parses a selector; the empty string selects everything.
    pub(crate) fn parse(text: &str) -> Result<Self, SelectorError> {
        let terms = split_terms(text)
            .into_iter()
            .map(str::trim)
            .filter(|term| !term.is_empty())
            .map(parse_term)
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }

    pub(crate) fn is_everything(&self) -> bool {
        self.terms.is_empty()
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = meta::labels(object);
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.terms.iter().all(|term| match term {
            Term::Equals(key, value) => label(key) == Some(value.as_str()),
            // As in the API: `!=` and `notin` also select objects without the label.
            Term::NotEquals(key, value) => label(key) != Some(value.as_str()),
            Term::Exists(key) => label(key).is_some(),
            Term::NotExists(key) => label(key).is_none(),
            Term::In(key, values) => label(key).is_some_and(|v| values.iter().any(|x| x == v)),
            Term::NotIn(key, values) => !label(key).is_some_and(|v| values.iter().any(|x| x == v)),
        })
    }
}

/// Splits on the commas that are not inside a `( )` value set.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_term(term: &str) -> Result<Term, SelectorError> {
    let fail = || SelectorError(term.to_owned());
    if let Some(key) = term.strip_prefix('!') {
        return Ok(Term::NotExists(key_of(key.trim()).ok_or_else(fail)?));
    }
    if let Some((key, rest)) = term.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
            (true, set)
        } else if let Some(set) = rest.strip_prefix("in") {
            (false, set)
        } else {
            return parse_comparison(term).ok_or_else(fail);
        };
        let key = key_of(key).ok_or_else(fail)?;
        let values = value_set(set).ok_or_else(fail)?;
        return Ok(if negated {
            Term::NotIn(key, values)
        } else {
            Term::In(key, values)
        });
    }
    parse_comparison(term).ok_or_else(fail)
}

fn parse_comparison(term: &str) -> Option<Term> {
    if let Some((key, value)) = term.split_once("!=") {
        return Some(Term::NotEquals(
            key_of(key.trim())?,
            value_of(value.trim())?,
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Some(Term::Equals(key_of(key.trim())?, value_of(value.trim())?));
    }
    Some(Term::Exists(key_of(term)?))
}

/// `(a, b)` -> `["a", "b"]`.
fn value_set(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    inner.split(',').map(|v| value_of(v.trim())).collect()
}

fn key_of(text: &str) -> Option<String> {
    let valid = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    valid.then(|| text.to_owned())
}

fn value_of(text: &str) -> Option<String> {
    let valid = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    valid.then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    fn selects(selector: &str, labels: Value) -> bool {
        Selector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
            .matches(&object(labels))
    }

    #[test]
    fn equality_terms() {
        assert!(selects("app=web", json!({"app": "web"})));
        assert!(selects("app==web", json!({"app": "web"})));
        assert!(!selects("app=web", json!({"app": "db"})));
        assert!(!selects("app=web", json!({})));
        assert!(selects("app!=web", json!({"app": "db"})));
        assert!(selects("app!=web", json!({})));
        assert!(!selects("app!=web", json!({"app": "web"})));
    }

    #[test]
    fn existence_terms() {
        assert!(selects(
            "cubepod.io/sandbox",
            json!({"cubepod.io/sandbox": "a"})
        ));
        assert!(!selects("cubepod.io/sandbox", json!({})));
        assert!(selects("!cubepod.io/sandbox", json!({})));
        assert!(!selects("!tier", json!({"tier": "x"})));
    }

    #[test]
    fn terms_are_anded() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(selects("app=web,tier=front", labels.clone()));
        assert!(selects("app=web, tier", labels.clone()));
        assert!(!selects("app=web,tier=back", labels));
    }

    #[test]
    fn set_terms() {
        assert!(selects("env in (prod, dev)", json!({"env": "dev"})));
        assert!(!selects("env in (prod,dev)", json!({"env": "qa"})));
        assert!(selects("env notin (prod),app=x", json!({"app": "x"})));
        assert!(!selects("env notin (prod)", json!({"env": "prod"})));
    }

    #[test]
    fn empty_selects_everything() {
        let selector = Selector::parse("").unwrap();
        assert!(selector.is_everything());
        assert!(selector.matches(&json!({})));
    }

    #[test]
    fn malformed_terms_are_refused() {
        for bad in ["=x", "a b c", "a=b c", "!", "env in prod", "a=(b)"] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }
}
