//! The Python and JavaScript SDKs against the contract. Unlike this crate, whose bindings are
//! generated from `wit/`, their types and clients are written by hand; so each record of
//! `wit/controller.wit` must be a type of theirs with each of its fields, and each
//! `kube-client` function must be declared and carried out by each of their clients (the
//! client's protocol or interface, the component's glue to the host, the recording client of
//! native tests). A child kind, a spec field or a call added to the WIT fails here, naming each
//! file and name, until both SDKs have it.

use std::path::{Path, PathBuf};

use wit_parser::{Resolve, TypeDefKind};

/// Records the JavaScript SDK writes inline where they are used rather than as an interface of
/// their own: `retry-after` is the `val` of `KubeError`'s `retryable` case.
const INLINE_IN_JS: [&str; 1] = ["retry-after"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("sdk/ is in the repository")
        .to_path_buf()
}

/// What the WIT names: the `kube-client` functions, and each record with its fields, in kebab
/// case.
struct Contract {
    functions: Vec<String>,
    records: Vec<(String, Vec<String>)>,
}

fn contract() -> Contract {
    let mut resolve = Resolve::new();
    let (package, _) = resolve
        .push_dir(repository().join("wit"))
        .expect("wit/ parses");
    let interfaces = &resolve.packages[package].interfaces;
    let functions = resolve.interfaces[interfaces["kube-client"]]
        .functions
        .keys()
        .cloned()
        .collect();
    let mut records = Vec::new();
    for &interface in interfaces.values() {
        for (name, &id) in &resolve.interfaces[interface].types {
            if let TypeDefKind::Record(record) = &resolve.types[id].kind {
                let fields = record.fields.iter().map(|f| f.name.clone()).collect();
                records.push((name.clone(), fields));
            }
        }
    }
    Contract { functions, records }
}

fn snake(kebab: &str) -> String {
    kebab.replace('-', "_")
}

/// `network-policy` as `networkPolicy` (`upper_first`: `NetworkPolicy`).
fn camel(kebab: &str, upper_first: bool) -> String {
    let mut out = String::new();
    for (i, word) in kebab.split('-').enumerate() {
        let mut chars = word.chars();
        match chars.next() {
            Some(first) if i > 0 || upper_first => {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
            _ => out.push_str(word),
        }
    }
    out
}

/// A file of an SDK, by its path from the repository's root.
fn read(path: &str) -> String {
    std::fs::read_to_string(repository().join(path))
        .unwrap_or_else(|e| panic!("{path} is readable: {e}"))
}

/// The lines of the block opened by the line that starts with `opening`: a Python class's
/// indented lines (`class KubeClient`, then `:` or `(`), or a JavaScript or TypeScript block
/// up to the `}` that closes it at the start of a line (`export interface KubeClient {`).
/// `None` when no line opens it.
fn block<'a>(text: &'a str, path: &str, opening: &str) -> Option<Vec<&'a str>> {
    let python = path.ends_with(".py");
    let mut lines = text.lines();
    lines.by_ref().find(|l| {
        l.strip_prefix(opening)
            .is_some_and(|rest| !python || rest.starts_with([':', '(']))
    })?;
    Some(if python {
        lines
            .take_while(|l| l.is_empty() || l.starts_with(char::is_whitespace))
            .collect()
    } else {
        lines.take_while(|l| !l.starts_with('}')).collect()
    })
}

/// Checks that the block `opening` of the file `path` has, for each of `names`, a line that
/// starts (once indented) with one of `starts(name)`; adds what it lacks to `missing`.
fn check(
    missing: &mut Vec<String>,
    path: &str,
    opening: &str,
    names: &[String],
    what: &str,
    starts: impl Fn(&str) -> Vec<String>,
) {
    let text = read(path);
    let Some(block) = block(&text, path, opening) else {
        missing.push(format!("{path} has no `{opening}`: {what}"));
        return;
    };
    for name in names {
        let starts = starts(name);
        let found = block.iter().any(|line| {
            let line = line.trim_start();
            starts.iter().any(|s| line.starts_with(s.as_str()))
        });
        if !found {
            missing.push(format!(
                "{path} ({opening}) lacks `{}`: {what}, {name}",
                starts[0]
            ));
        }
    }
}

fn assert_none_missing(missing: &[String]) {
    assert!(
        missing.is_empty(),
        "the Python and JavaScript SDKs do not follow wit/controller.wit:\n{}",
        missing.join("\n")
    );
}

#[test]
fn each_sdk_client_has_every_kube_client_function_of_the_wit() {
    let functions = contract().functions;
    assert!(functions.iter().any(|f| f == "ensure-pod"), "{functions:?}");
    let python = |f: &str| vec![format!("def {}(", snake(f))];
    let js = |f: &str| vec![format!("{}(", camel(f, false))];
    let what = "a kube-client function";
    let mut missing = Vec::new();
    for (path, opening) in [
        ("sdk/python/cubepod_policy/client.py", "class KubeClient"),
        ("sdk/python/cubepod_policy/component.py", "class HostClient"),
        (
            "sdk/python/cubepod_policy/testing.py",
            "class RecordingClient",
        ),
    ] {
        check(&mut missing, path, opening, &functions, what, python);
    }
    for (path, opening) in [
        ("sdk/js/src/types.d.ts", "export interface KubeClient {"),
        ("sdk/js/src/testing.js", "export class RecordingClient {"),
        (
            "sdk/js/src/testing.d.ts",
            "export declare class RecordingClient ",
        ),
    ] {
        check(&mut missing, path, opening, &functions, what, js);
    }
    check(
        &mut missing,
        "sdk/js/src/component.js",
        "export const hostClient = ",
        &functions,
        what,
        |f| vec![format!("{0}: wrap(host.{0})", camel(f, false))],
    );
    assert_none_missing(&missing);
}

#[test]
fn each_record_of_the_wit_is_a_type_of_each_sdk_with_every_field() {
    let records = contract().records;
    assert!(
        records
            .iter()
            .any(|(name, fields)| name == "observed-children" && fields.iter().any(|f| f == "pod")),
        "observed-children among {} records",
        records.len()
    );
    let mut missing = Vec::new();
    for (record, fields) in &records {
        let what = format!("a field of the record {record}");
        let class = format!("class {}", camel(record, true));
        check(
            &mut missing,
            "sdk/python/cubepod_policy/types.py",
            &class,
            fields,
            &what,
            |f| vec![format!("{}:", snake(f))],
        );
        if INLINE_IN_JS.contains(&record.as_str()) {
            continue;
        }
        let interface = format!("export interface {} {{", camel(record, true));
        check(
            &mut missing,
            "sdk/js/src/types.d.ts",
            &interface,
            fields,
            &what,
            |f| {
                let field = camel(f, false);
                vec![format!("{field}:"), format!("{field}?:")]
            },
        );
    }
    assert_none_missing(&missing);
}
