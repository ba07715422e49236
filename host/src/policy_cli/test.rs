//! `cubepod-controller policy test MODULE [SCENARIO...]`: puts the module through the
//! controller's admission (compile, contract, `describe`, the conformance self-test; not the
//! signature) with the same flags, then runs every scenario file found; prints `PASS`/`FAIL` per
//! conformance case and scenario with the diff under a failure, then `N passed, M failed`;
//! optionally writes JUnit XML. `--no-conformance` leaves the self-test out, for the scenarios
//! alone. A module of any supported contract runs, as the controller would run it (an older one
//! through the host's conversion, said so in the header).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::{CliError, engine, read_module, write_junit};
use crate::admission::{Admission, Extent};
use crate::config::PolicyTestArgs;
use crate::scenario::runner::{self, Report};
use crate::scenario::{conformance, format};
use crate::signing::KeyRing;
use cubepod_policy_host::runtime::{Contract, PolicyModule};

/// Every scenario file under the given paths: files as given, folders searched (recursively)
/// for `*.yaml` and `*.yml`, in name order.
pub(crate) fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
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

/// Runs `policy test`; `Ok(true)` when the module passed the admission checks and every
/// scenario passed. Call from a blocking thread.
pub(crate) fn run(
    args: &PolicyTestArgs,
    handle: &Handle,
    out: &mut dyn Write,
) -> Result<bool, CliError> {
    let files = scenario_files(&args.scenarios)?;
    if files.is_empty() && args.no_conformance {
        return Err(CliError::NothingToRun);
    }
    let bytes = read_module(&args.module)?;
    let engine = engine(&args.guest, &args.containment)?;
    // The controller's own admission, but for the signature (`policy inspect --verify-key`
    // checks that): a module that passes here is one `run` with the same flags takes.
    let admission = Admission::new(engine, KeyRing::default());
    let extent = if args.no_conformance {
        Extent::Load
    } else {
        Extent::Conformance(conformance::Extent::EveryCase)
    };
    let started = Instant::now();
    let mut reports = Vec::new();
    match admission.examine(&bytes, handle, extent) {
        Ok(examination) => {
            header(out, &examination.module)?;
            let module = examination.module;
            if !examination.cases.is_empty() {
                writeln!(
                    out,
                    "conformance: the self-test `run` gives a module before it runs it \
                     (--no-conformance skips it)"
                )?;
            }
            for outcome in examination.cases {
                let report = Report {
                    name: outcome.case.name.to_string(),
                    file: PathBuf::from(format!(
                        "builtin:conformance/{}",
                        outcome.case.file.unwrap_or("describe")
                    )),
                    failures: outcome
                        .result
                        .err()
                        .map(|e| e.to_string())
                        .into_iter()
                        .collect(),
                    duration: outcome.duration,
                };
                print(out, &report)?;
                reports.push(report);
            }
            if reports.iter().any(|r| !r.passed()) {
                writeln!(
                    out,
                    "admission: refused (self_test): `run` with these flags would not run this \
                     module"
                )?;
            }
            reports.extend(run_files(&module, handle, &files, out)?);
        }
        // A module the controller would not even load fails as a case of its own, so that a
        // CI report says why rather than nothing; its scenarios cannot run.
        Err(refused) => {
            writeln!(out, "policy {}", args.module.display())?;
            let report = Report {
                name: LOAD_CASE.to_string(),
                file: PathBuf::from("builtin:admission/load"),
                failures: vec![format!("refused ({}): {refused}", refused.reason())],
                duration: started.elapsed(),
            };
            print(out, &report)?;
            reports.push(report);
        }
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    writeln!(out, "{} passed, {failed} failed", reports.len() - failed)?;
    write_junit(args.junit.as_deref(), &reports)?;
    Ok(failed == 0)
}

/// The case a module that does not load fails.
const LOAD_CASE: &str = "the module loads as the controller loads it (compile, contract, describe)";

/// `policy NAME VERSION (contract ..., sha256 ...)`.
fn header(out: &mut dyn Write, module: &PolicyModule) -> std::io::Result<()> {
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
    )
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

/// `PASS name (file)`, or `FAIL name (file)` and the diff indented under it.
fn print(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    let verdict = if report.passed() { "PASS" } else { "FAIL" };
    writeln!(out, "{verdict} {} ({})", report.name, report.file.display())?;
    for line in &report.failures {
        writeln!(out, "    {line}")?;
    }
    Ok(())
}
