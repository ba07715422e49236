//! `cubepod-controller policy test MODULE [SCENARIO...]`: loads the module as the controller
//! would (same engine limits), runs every scenario file found, prints `PASS`/`FAIL` per
//! scenario with the diff under a failure, then `N passed, M failed`; optionally writes JUnit
//! XML. With no SCENARIO it runs the built-in conformance cases that every module passes to run.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::conformance;
use super::format;
use super::junit;
use super::runner::{self, Report};
use crate::config::{ContainmentArgs, PolicyTestArgs};
use crate::runtime::{DEFAULT_POLICY, PolicyEngine, PolicyModule, RuntimeConfig, RuntimeError};

/// The MODULE argument that names the policy embedded in the binary.
pub const BUILTIN_DEFAULT: &str = "builtin:default";

/// Why `policy test` or `policy inspect` could not run at all (as opposed to a scenario that
/// failed).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: no scenario file (*.yaml, *.yml) there", path.display())]
    NoScenarios { path: PathBuf },
    #[error("{0}")]
    Engine(RuntimeError),
    #[error("{what}: {source}")]
    Load {
        what: String,
        #[source]
        source: RuntimeError,
    },
    #[error("writing the JUnit report {}: {source}", path.display())]
    Junit {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Key(#[from] crate::signing::KeyError),
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// The bytes of MODULE: the embedded default policy for [`BUILTIN_DEFAULT`], else the file.
pub fn read_module(module: &Path) -> Result<Cow<'static, [u8]>, CliError> {
    if module.as_os_str() == BUILTIN_DEFAULT {
        return Ok(Cow::Borrowed(DEFAULT_POLICY));
    }
    std::fs::read(module)
        .map(Cow::Owned)
        .map_err(|source| CliError::Read {
            path: module.to_path_buf(),
            source,
        })
}

/// An engine with the given bounds and containment rules, as `run` makes it (no compilation cache: a test run
/// should not depend on, or fill, the controller's).
pub fn engine(
    deadline: Duration,
    memory_mib: u32,
    containment: &ContainmentArgs,
) -> Result<PolicyEngine, CliError> {
    PolicyEngine::new(RuntimeConfig {
        call_deadline: deadline,
        memory_limit_bytes: memory_mib as usize * 1024 * 1024,
        containment: Arc::new(containment.containment()),
        ..RuntimeConfig::default()
    })
    .map_err(CliError::Engine)
}

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
pub fn test(args: &PolicyTestArgs, handle: &Handle, out: &mut dyn Write) -> Result<bool, CliError> {
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
    writeln!(
        out,
        "policy {} {} (contract {}, sha256 {})",
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
