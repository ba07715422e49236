//! The README's flag table (`## Configuration`) is `cubepod-controller run --help`, kept true:
//! every flag of the help is in the table and no other, each with the environment variable and
//! the default the help gives.

use std::collections::BTreeMap;
use std::process::Command;

use cubepod_tests::{backticked, binary, workspace};

/// A flag as `run --help` describes it.
#[derive(Debug, Default)]
struct Help {
    env: Option<String>,
    default: Option<String>,
    /// The description says how the default is computed (`Default: ...`).
    computed_default: bool,
}

/// `[key: value]` annotations of a clap help line.
fn annotation(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("[{key}: "))? + key.len() + 3;
    let end = start + line[start..].find(']')?;
    Some(line[start..end].trim_end_matches('=').to_string())
}

fn help() -> BTreeMap<String, Help> {
    let output = Command::new(binary())
        .args(["run", "--help"])
        .output()
        .expect("run --help");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8 help");
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("--") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            current = Some(format!("--{name}"));
            flags.insert(format!("--{name}"), Help::default());
        } else if trimmed.starts_with("-h, --help") {
            current = None;
        } else if let Some(flag) = &current {
            let entry = flags.get_mut(flag).expect("inserted above");
            entry.env = entry.env.take().or_else(|| annotation(trimmed, "env"));
            entry.default = entry
                .default
                .take()
                .or_else(|| annotation(trimmed, "default"));
            entry.computed_default |= trimmed.contains("Default: ");
        }
    }
    assert!(flags.len() > 30, "{text}");
    flags
}

/// The README's rows: each flag with its environment and default cells' entry for it.
fn readme() -> BTreeMap<String, (String, String)> {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Configuration")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a ## Configuration section");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(
            cells.len() >= 4,
            "flag | environment | default | meaning: {line}"
        );
        let flags = backticked(cells[0]);
        let envs = backticked(cells[1]);
        // Several flags in a row: their defaults in the same order, or one for all.
        let defaults: Vec<String> = if cells[2].starts_with('`') {
            backticked(cells[2])
        } else {
            vec![cells[2].to_string()]
        };
        for (i, flag) in flags.iter().enumerate() {
            let pick = |list: &[String]| list.get(i).or(list.last()).cloned().unwrap_or_default();
            let previous = rows.insert(flag.clone(), (pick(&envs), pick(&defaults)));
            assert!(previous.is_none(), "{flag} is in the table twice");
        }
    }
    rows
}

#[test]
fn the_readme_flag_table_is_run_help() {
    let help = help();
    let table = readme();
    let mut wrong = Vec::new();
    for (flag, described) in &help {
        let Some((env, default)) = table.get(flag) else {
            wrong.push(format!("{flag}: in run --help, not in the README"));
            continue;
        };
        if let Some(expected) = &described.env {
            // `CUBEPOD_LEASE_*` stands for the variables of several flags.
            let matches = match env.strip_suffix('*') {
                Some(prefix) => expected.starts_with(prefix),
                None => env == expected,
            };
            if !matches {
                wrong.push(format!(
                    "{flag}: environment {expected}, the README says {env:?}"
                ));
            }
        }
        match &described.default {
            Some(expected) if default != expected => {
                wrong.push(format!(
                    "{flag}: default {expected}, the README says {default:?}"
                ));
            }
            None if !described.computed_default && table_value(default) => {
                wrong.push(format!(
                    "{flag}: no default in run --help, the README gives {default:?}"
                ));
            }
            _ => {}
        }
    }
    for flag in table.keys() {
        if !help.contains_key(flag) {
            wrong.push(format!("{flag}: in the README, not in run --help"));
        }
    }
    assert!(wrong.is_empty(), "README flag table:\n{}", wrong.join("\n"));
}

/// A default cell that reads as a value rather than prose (`none`, `off`, `built-in ...`).
fn table_value(cell: &str) -> bool {
    !cell.is_empty()
        && !cell.starts_with("none")
        && !cell.starts_with("off")
        && cell.chars().next().is_some_and(|c| !c.is_ascii_lowercase())
}
