//! `cubepod-controller policy test MODULE [SCENARIO...]`: loads the module as the controller
//! would (same engine limits), runs every scenario file found, prints `PASS`/`FAIL` per
//! scenario with the diff under a failure, then `N passed, M failed`; optionally writes JUnit
//! XML. With no SCENARIO it runs the built-in conformance cases that every module passes to run.
//! A module of any supported contract runs, as the controller would run it (an older one through
//! the host's conversion, said so in the header).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::{CliError, engine, read_module};
use crate::config::PolicyTestArgs;
use crate::runtime::{Contract, PolicyModule};
use crate::scenario::runner::{self, Report};
use crate::scenario::{conformance, format, junit};

/// Every scenario file under the given paths: files as given, folders searched (recursively)
/// for `*.yaml` and `*.yml`, in name order.
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| CliError::Read {
            path: path.clone(),
            source,
        })?;
        if !meta.is_dir() {
            files.push(path.clone());
            continue;
        }
        let before = files.len();
        collect(path, &mut files)?;
        if files.len() == before {
            return Err(CliError::NoScenarios { path: path.clone() });
        }
    }
    Ok(files)
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), CliError> {
    let read = |source| CliError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, files)?;
        } else if entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(entry);
        }
    }
    Ok(())
}

/// Runs `policy test`; `Ok(true)` when every scenario passed. Call from a blocking thread.
pub fn run(args: &PolicyTestArgs, handle: &Handle, out: &mut dyn Write) -> Result<bool, CliError> {
    let files = scenario_files(&args.scenarios)?;
    let bytes = read_module(&args.module)?;
    let engine = engine(
        args.guest_deadline,
        args.guest_memory_mib,
        &args.containment,
    )?;
    let module = engine.load(&bytes).map_err(|source| CliError::Load {
        what: format!("{} cannot be loaded", args.module.display()),
        source,
    })?;
    let info = module.info();
    let converted = if module.contract() == Contract::CURRENT {
        String::new()
    } else {
        format!(
            ", its calls converted to and from {}",
            Contract::CURRENT.version()
        )
    };
    writeln!(
        out,
        "policy {} {} (contract {}{converted}, sha256 {})",
        info.name,
        info.version,
        info.contract_version,
        module.digest()
    )?;

    let reports = if files.is_empty() {
        run_conformance(&module, handle, out)?
    } else {
        run_files(&module, handle, &files, out)?
    };
    let failed = reports.iter().filter(|r| !r.passed()).count();
    writeln!(out, "{} passed, {failed} failed", reports.len() - failed)?;
    if let Some(path) = &args.junit {
        std::fs::write(path, junit::render(&reports)).map_err(|source| CliError::Junit {
            path: path.clone(),
            source,
        })?;
    }
    Ok(failed == 0)
}

fn run_files(
    module: &PolicyModule,
    handle: &Handle,
    files: &[PathBuf],
    out: &mut dyn Write,
) -> Result<Vec<Report>, CliError> {
    let mut reports = Vec::new();
    for file in files {
        match format::read_file(file) {
            Ok(scenarios) => {
                for scenario in &scenarios {
                    let report = runner::run(module, handle, scenario);
                    print(out, &report)?;
                    reports.push(report);
                }
            }
            // A file that cannot be read fails as one scenario, so that the rest still runs
            // and the summary and the report count it.
            Err(error) => {
                let report = Report {
                    name: file
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_else(|| file.display().to_string()),
                    file: file.clone(),
                    failures: vec![error.to_string()],
                    duration: Duration::ZERO,
                };
                print(out, &report)?;
                reports.push(report);
            }
        }
    }
    Ok(reports)
}

fn run_conformance(
    module: &PolicyModule,
    handle: &Handle,
    out: &mut dyn Write,
) -> Result<Vec<Report>, CliError> {
    writeln!(
        out,
        "no scenario given: running the built-in conformance cases"
    )?;
    let mut reports = Vec::new();
    for case in conformance::cases() {
        let started = Instant::now();
        let outcome = conformance::run_case(module, handle, case);
        let report = Report {
            name: case.name.to_string(),
            file: PathBuf::from(format!(
                "builtin:conformance/{}",
                case.file.unwrap_or("describe")
            )),
            failures: outcome.err().map(|e| e.to_string()).into_iter().collect(),
            duration: started.elapsed(),
        };
        print(out, &report)?;
        reports.push(report);
    }
    Ok(reports)
}

/// `PASS name (file)`, or `FAIL name (file)` and the diff indented under it.
fn print(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    let verdict = if report.passed() { "PASS" } else { "FAIL" };
    writeln!(out, "{verdict} {} ({})", report.name, report.file.display())?;
    for line in &report.failures {
        writeln!(out, "    {line}")?;
    }
    Ok(())
}
