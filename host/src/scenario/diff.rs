//! Readable expected-vs-actual: a line diff for ordered lists (calls, events), and a JSON-path
//! diff for objects and status (`status.phase: expected "Paused", got "Running"`), where the
//! expectation is a subset of the actual value.

use serde_json::Value;

/// [`lines`] of two ordered lists, indented under the header `{what} (- {first}, + {second}):`
/// (`sides` names the lists), into `out`; nothing when the lists are equal.
pub(crate) fn listed(
    out: &mut Vec<String>,
    what: &str,
    sides: [&str; 2],
    expected: &[String],
    actual: &[String],
) {
    let lines = lines(expected, actual);
    if !lines.is_empty() {
        let [first, second] = sides;
        out.push(format!("{what} (- {first}, + {second}):"));
        out.extend(lines.into_iter().map(|l| format!("  {l}")));
    }
}

/// A line diff of two lists, `- ` for expected only, `+ ` for actual only, `  ` for both, in
/// the order of a longest common subsequence. Empty when the lists are equal.
pub(crate) fn lines(expected: &[String], actual: &[String]) -> Vec<String> {
    if expected == actual {
        return Vec::new();
    }
    let (n, m) = (expected.len(), actual.len());
    // lcs[i][j]: the longest common subsequence of expected[i..] and actual[j..].
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == actual[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && expected[i] == actual[j] {
            out.push(format!("  {}", expected[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+ {}", actual[j]));
            j += 1;
        } else {
            out.push(format!("- {}", expected[i]));
            i += 1;
        }
    }
    if actual.is_empty() {
        out.push("+ (none)".to_string());
    }
    out
}

/// Every way `actual` falls short of `expected`, one line per path (keys in sorted order, as
/// serde_json keeps them). `expected` is a subset:
/// a key it does not name is not checked; `null` asks for the field to be absent (or null).
/// Lists of objects that all have a `type` (conditions) or all a `name` (containers, volumes,
/// env) are matched by that key, so that a condition can be checked without listing every
/// other; any other list must match item by item, with the same length.
pub(crate) fn subset(path: &str, expected: &Value, actual: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    walk(path, expected, actual, &mut out);
    out
}

fn walk(path: &str, expected: &Value, actual: Option<&Value>, out: &mut Vec<String>) {
    let actual = actual.filter(|a| !a.is_null());
    match (expected, actual) {
        (Value::Null, None) => {}
        (Value::Null, Some(actual)) => {
            out.push(format!("{path}: expected nothing, got {}", show(actual)));
        }
        (_, None) => out.push(format!("{path}: expected {}, got nothing", show(expected))),
        (Value::Object(fields), Some(Value::Object(have))) => {
            for (key, value) in fields {
                walk(&join(path, key), value, have.get(key), out);
            }
        }
        (Value::Array(items), Some(Value::Array(have))) => list(path, items, have, out),
        (expected, Some(actual)) if expected == actual => {}
        (Value::Number(a), Some(Value::Number(b))) if a.as_f64() == b.as_f64() => {}
        (expected, Some(actual)) => {
            let hint = match (expected, actual) {
                // `status: False` in YAML is a boolean; Kubernetes condition statuses are
                // strings.
                (Value::Bool(b), Value::String(s))
                    if ["True", "False", "Unknown"].contains(&s.as_str()) =>
                {
                    let word = if *b { "True" } else { "False" };
                    format!(" (YAML reads an unquoted {word} as a boolean: write \"{word}\")")
                }
                _ => String::new(),
            };
            out.push(format!(
                "{path}: expected {}, got {}{hint}",
                show(expected),
                show(actual)
            ));
        }
    }
}

fn list(path: &str, items: &[Value], have: &[Value], out: &mut Vec<String>) {
    if let Some(key) = list_key(items) {
        for item in items {
            let id = &item[key];
            let label = format!("{path}[{key}={}]", plain(id));
            match have.iter().find(|h| h.get(key) == Some(id)) {
                Some(found) => walk(&label, item, Some(found), out),
                None => {
                    let present: Vec<String> =
                        have.iter().filter_map(|h| h.get(key)).map(plain).collect();
                    out.push(format!(
                        "{label}: expected an item, got none (there are: {})",
                        if present.is_empty() {
                            "none".to_string()
                        } else {
                            present.join(", ")
                        }
                    ));
                }
            }
        }
        return;
    }
    if items.len() != have.len() {
        out.push(format!(
            "{path}: expected {} item(s), got {}: {}",
            items.len(),
            have.len(),
            show(&Value::Array(have.to_vec()))
        ));
        return;
    }
    for (index, (item, actual)) in items.iter().zip(have).enumerate() {
        walk(&format!("{path}[{index}]"), item, Some(actual), out);
    }
}

/// Every difference between `before` and `after`, one line per path, `path: before -> after`
/// (`nothing` for a field one side lacks), keys in sorted order. Lists as [`fields`] matches
/// them. Empty when they are equal.
pub(crate) fn changes(path: &str, before: &Value, after: &Value) -> Vec<String> {
    fields(path, before, after)
        .into_iter()
        .map(|(path, before, after)| format!("{path}: {before} -> {after}"))
        .collect()
}

/// Every field that differs between `before` and `after`: its path and both values, shown
/// ([`show`], `nothing` for a field one side lacks), keys in sorted order. Lists of objects that
/// all have a `type` or all a `name` are matched by that key, as [`subset`] matches them; other
/// lists of the same length item by item, and of different lengths whole. Empty when they are
/// equal.
pub(crate) fn fields(path: &str, before: &Value, after: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    change(path, Some(before), Some(after), &mut out);
    out
}

fn change(
    path: &str,
    before: Option<&Value>,
    after: Option<&Value>,
    out: &mut Vec<(String, String, String)>,
) {
    let before = before.filter(|v| !v.is_null());
    let after = after.filter(|v| !v.is_null());
    let (before, after) = match (before, after) {
        (None, None) => return,
        (Some(b), None) => {
            out.push((path.to_string(), show(b), "nothing".to_string()));
            return;
        }
        (None, Some(a)) => {
            out.push((path.to_string(), "nothing".to_string(), show(a)));
            return;
        }
        (Some(b), Some(a)) => (b, a),
    };
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            for key in keys {
                change(&join(path, key), b.get(key), a.get(key), out);
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            let key = list_key(b).filter(|k| a.is_empty() || list_key(a) == Some(*k));
            let key = key.or_else(|| list_key(a).filter(|_| b.is_empty()));
            if let Some(key) = key {
                // Before's items in their order, then those only after has.
                let mut ids: Vec<&Value> = b.iter().map(|i| &i[key]).collect();
                ids.extend(
                    a.iter()
                        .map(|i| &i[key])
                        .filter(|id| !b.iter().any(|i| &i[key] == *id)),
                );
                for id in ids {
                    let label = format!("{path}[{key}={}]", plain(id));
                    let find = |items: &'_ [Value]| items.iter().find(|i| &i[key] == id).cloned();
                    change(&label, find(b).as_ref(), find(a).as_ref(), out);
                }
            } else if b.len() == a.len() {
                for (index, (b, a)) in b.iter().zip(a).enumerate() {
                    change(&format!("{path}[{index}]"), Some(b), Some(a), out);
                }
            } else {
                out.push((path.to_string(), show(before), show(after)));
            }
        }
        (Value::Number(b), Value::Number(a)) if b.as_f64() == a.as_f64() => {}
        (b, a) if b == a => {}
        (b, a) => out.push((path.to_string(), show(b), show(a))),
    }
}

/// The key a list of objects is matched by, if every item has it.
fn list_key(items: &[Value]) -> Option<&'static str> {
    if items.is_empty() {
        return None;
    }
    ["type", "name"].into_iter().find(|key| {
        items
            .iter()
            .all(|i| i.get(key).is_some_and(Value::is_string))
    })
}

/// `status.phase`, and `metadata.labels["cubepod.io/sandbox"]` for keys that are not plain.
fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::String(key.to_string())),
    }
}

/// A value in a diff line: JSON, compact, cut when long.
pub(crate) fn show(value: &Value) -> String {
    const MAX: usize = 160;
    let text = value.to_string();
    if text.chars().count() <= MAX {
        return text;
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}...")
}

/// A key's value without quotes: `Ready`, not `"Ready"`.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_line_diff_marks_what_is_missing_and_what_is_extra() {
        let expected = strings(&["ensure-pvc a-workspace", "ensure-pod a"]);
        let actual = strings(&["ensure-pvc a-workspace", "ensure-secret a-credentials"]);
        assert_eq!(
            lines(&expected, &actual),
            [
                "  ensure-pvc a-workspace",
                "+ ensure-secret a-credentials",
                "- ensure-pod a"
            ]
        );
        assert!(lines(&expected, &expected).is_empty());
        assert_eq!(
            lines(&expected[..1], &[]),
            ["- ensure-pvc a-workspace", "+ (none)"]
        );
    }

    #[test]
    fn a_subset_diff_names_the_path() {
        let actual = json!({"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Paused", "status": "False"}]});
        let expected = json!({"phase": "Paused", "podIP": null,
            "conditions": [{"type": "Paused", "status": "True"}, {"type": "Gone"}]});
        assert_eq!(
            subset("status", &expected, Some(&actual)),
            [
                "status.conditions[type=Paused].status: expected \"True\", got \"False\"",
                "status.conditions[type=Gone]: expected an item, got none (there are: Ready, Paused)",
                "status.phase: expected \"Paused\", got \"Running\"",
                "status.podIP: expected nothing, got \"10.0.0.1\"",
            ]
        );
        assert!(subset("status", &json!({"phase": "Running"}), Some(&actual)).is_empty());
    }

    #[test]
    fn changes_name_each_path_both_ways() {
        let before = json!({"phase": "Running", "podIP": "10.0.0.1", "n": 1,
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Paused", "status": "False"}]});
        let after = json!({"phase": "Failed", "n": 1.0, "message": "no",
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "SpecValid", "status": "False"}]});
        assert_eq!(
            changes("status", &before, &after),
            [
                "status.conditions[type=Ready].status: \"True\" -> \"False\"",
                "status.conditions[type=Paused]: {\"status\":\"False\",\"type\":\"Paused\"} -> nothing",
                "status.conditions[type=SpecValid]: nothing -> {\"status\":\"False\",\"type\":\"SpecValid\"}",
                "status.message: nothing -> \"no\"",
                "status.phase: \"Running\" -> \"Failed\"",
                "status.podIP: \"10.0.0.1\" -> nothing",
            ]
        );
        assert!(changes("status", &before, &before).is_empty());
        assert_eq!(
            changes("args", &json!(["a"]), &json!(["a", "b"])),
            ["args: [\"a\"] -> [\"a\",\"b\"]"]
        );
        assert_eq!(changes("x", &json!(null), &json!(2)), ["x: nothing -> 2"]);
    }

    #[test]
    fn odd_keys_lists_and_booleans_read_well() {
        let actual = json!({"metadata": {"labels": {"cubepod.io/sandbox": "b"}},
            "args": ["a"], "status": "False"});
        let expected = json!({"metadata": {"labels": {"cubepod.io/sandbox": "a"}}, "args": ["a", "b"],
                "status": false});
        assert_eq!(
            subset("Pod/a", &expected, Some(&actual)),
            [
                "Pod/a.args: expected 2 item(s), got 1: [\"a\"]",
                "Pod/a.metadata.labels[\"cubepod.io/sandbox\"]: expected \"a\", got \"b\"",
                "Pod/a.status: expected false, got \"False\" (YAML reads an unquoted False as a boolean: write \"False\")",
            ]
        );
        assert_eq!(subset("x", &json!(1), None), ["x: expected 1, got nothing"]);
    }
}
