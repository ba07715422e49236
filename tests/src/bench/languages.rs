//! What a policy costs by the language it is written in: the default policy built from each SDK
//! (Rust: the built-in `guest/`; Python: `sdk/python/examples/default`, componentize-py;
//! JavaScript: `sdk/js/default`, once by componentize-js (StarlingMonkey) and once by
//! componentize-qjs (QuickJS)), every one deciding as the Rust default does
//! (`host/tests/differential.rs`), so that the figures differ by the language alone.
//!
//! For each: the component's size, plain and gzipped (what a ConfigMap or an image carries);
//! admission (read, compile, contract check, `describe`, the conformance self-test: what a
//! replica runs before it serves a module) in a process of its own, once with an empty
//! compiled-module cache (`--cache-dir`) and once more with the cache that run filled, as a
//! second replica or a restart finds it, with the wall time and the process's peak RSS; and one
//! decision per call against the Rust default's: each call instantiates the module in a fresh
//! Store, as the controller does when its decision memo has no answer (the memo off here), on the
//! module checked to be the language's (`decision::Subject`, [`Language::engine_mark`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cubepod_host::admission::Admission;
use cubepod_host::signing::KeyRing;
use cubepod_policy_host::runtime::{DEFAULT_POLICY, PolicyEngine, RuntimeConfig};

use super::decision;
use super::process::memory_of;

/// The argument that makes `cubepod-bench` the child that admits one module and says what it
/// took: `cubepod-bench admit-once MODULE CACHE_DIR`.
pub const ADMIT_ONCE: &str = "admit-once";

/// The most a module may hold here, over the controller's default (32 MiB), so that a module a
/// toolchain made bigger is measured rather than refused.
const MAX_MODULE_BYTES: u64 = 64 << 20;

/// One language's build of the default policy.
#[derive(Clone, Copy, Debug)]
pub struct Language {
    /// The name in the report.
    pub label: &'static str,
    /// Its component under `target/polyglot/` (`.ci/policy-examples build`); `None`: the
    /// built-in Rust default.
    pub polyglot: Option<&'static str>,
    /// The name its `describe` gives: the module timed must give it.
    pub describe_name: &'static str,
    /// Bytes only its toolchain's runtime puts in a component (the name of the runtime's own
    /// crate or engine), so that one JavaScript engine's build is not timed as the other's;
    /// `None` for the built-in default, which is the controller's own.
    pub engine_mark: Option<&'static str>,
    /// The most its decision's p50 may be, as a multiple of the Rust default's (issue 56's
    /// targets); `None`: no target.
    pub call_ratio_target: Option<f64>,
}

/// The longest an admission from the compiled-module cache may take, any language, seconds.
pub const TARGET_CACHED_ADMISSION_SECONDS: f64 = 0.5;

/// Every language measured, the Rust default first (the others' per-call ratio is against it).
pub const LANGUAGES: [Language; 4] = [
    Language {
        label: "Rust (the built-in default)",
        polyglot: None,
        describe_name: decision::DEFAULT_POLICY_NAME,
        engine_mark: None,
        call_ratio_target: None,
    },
    Language {
        label: "Python (componentize-py)",
        polyglot: Some("python-default"),
        describe_name: "cubepod-default-python",
        engine_mark: Some("componentize_py_runtime"),
        call_ratio_target: Some(15.0),
    },
    Language {
        label: "JavaScript (componentize-js, StarlingMonkey)",
        polyglot: Some("js-default"),
        describe_name: "cubepod-default-js",
        engine_mark: Some("StarlingMonkey"),
        call_ratio_target: None,
    },
    Language {
        label: "JavaScript (componentize-qjs, QuickJS)",
        polyglot: Some("js-default-qjs"),
        describe_name: "cubepod-default-js",
        engine_mark: Some("componentize_qjs_runtime"),
        call_ratio_target: Some(5.0),
    },
];

/// One admission in a process of its own.
#[derive(Clone, Copy, Debug)]
pub struct Admitted {
    /// From the read of the file to the module admitted.
    pub took: Duration,
    /// The process's peak RSS (VmHWM) once admitted, KiB.
    pub peak_kib: u64,
    /// Its RSS before the read (the runtime and the engine, no module), KiB.
    pub before_kib: u64,
    /// A load of the same bytes again, once admitted: the compile from the cache the admission
    /// filled or used, the contract check and `describe`, without the self-test.
    pub load: Duration,
}

/// One round over a language: a cold admission, then one from the cache it filled.
#[derive(Clone, Debug)]
pub struct AdmissionRun {
    pub cold: Admitted,
    pub cached: Admitted,
    /// The second admission loaded the cache entry the first wrote, as it was (the same file:
    /// a compile replaces it through a rename).
    pub hit: bool,
    /// The cache entry's size: the native code, bytes.
    pub compiled_bytes: u64,
}

/// Everything measured of one language.
#[derive(Clone, Debug)]
pub struct LanguageRun {
    pub language: Language,
    pub bytes: usize,
    pub gzipped: usize,
    pub admissions: Vec<AdmissionRun>,
    /// One set of decision cases per round, as [`decision::run`] times them.
    pub decisions: Vec<Vec<decision::Case>>,
}

/// The component of `language`, read, and checked to be built by its toolchain.
fn component(language: &Language) -> Result<Vec<u8>> {
    let Some(name) = language.polyglot else {
        return Ok(DEFAULT_POLICY.to_vec());
    };
    let path = crate::workspace()
        .join("target/polyglot")
        .join(format!("{name}.wasm"));
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    built_by(language, &bytes).with_context(|| path.display().to_string())?;
    Ok(bytes)
}

/// Fails unless `bytes` carry the runtime of `language`'s toolchain.
fn built_by(language: &Language, bytes: &[u8]) -> Result<()> {
    let Some(mark) = language.engine_mark else {
        return Ok(());
    };
    if !bytes.windows(mark.len()).any(|w| w == mark.as_bytes()) {
        bail!(
            "not a build of {}: its runtime ({mark}) is not in the component; rebuild it with \
             .ci/policy-examples build",
            language.label
        );
    }
    Ok(())
}

/// Builds the Python and JavaScript components with their pinned toolchains, as the tests do
/// (`.ci/policy-examples build` rebuilds only what changed).
fn build_components() -> Result<()> {
    let script = crate::workspace().join(".ci/policy-examples");
    let status = std::process::Command::new("bash")
        .arg(&script)
        .arg("build")
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!(
            "{} build failed ({status}): install the toolchains with .ci/policy-toolchains",
            script.display()
        );
    }
    Ok(())
}

fn gzipped_len(bytes: &[u8]) -> Result<usize> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).context("gzip")?;
    Ok(encoder.finish().context("gzip")?.len())
}

/// The child's side: admits MODULE with the compiled-module cache at CACHE_DIR, as a replica
/// does at start, and prints `admitted <µs> <peak KiB> <KiB before> <µs of a load again>` on
/// stdout.
pub fn admit_once(args: &[String]) -> Result<()> {
    let [module, cache] = args else {
        bail!("usage: cubepod-bench {ADMIT_ONCE} MODULE CACHE_DIR");
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let engine = PolicyEngine::new(RuntimeConfig {
        cache_dir: Some(PathBuf::from(cache)),
        ..RuntimeConfig::default()
    })
    .context("engine")?;
    let admission =
        Admission::new(engine.clone(), KeyRing::default()).with_max_module_bytes(MAX_MODULE_BYTES);
    let before = memory_of(std::process::id())?;
    let started = Instant::now();
    // The refusal's own words (they name the file), as the controller would log them.
    let admitted = runtime.block_on(async {
        let candidate = admission
            .read(Path::new(module))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        admission
            .admit(candidate)
            .await
            .map_err(|e| anyhow::anyhow!("{module} refused: {e}"))
    });
    let took = started.elapsed();
    let admitted = admitted?;
    let after = memory_of(std::process::id())?;
    drop(admitted);
    let bytes = std::fs::read(module).with_context(|| format!("reading {module}"))?;
    let started = Instant::now();
    engine
        .load(&bytes)
        .with_context(|| format!("loading {module} again"))?;
    let load = started.elapsed();
    println!(
        "admitted {} {} {} {}",
        took.as_micros(),
        after.hwm_kib,
        before.rss_kib,
        load.as_micros()
    );
    Ok(())
}

/// Runs [`admit_once`] in a child process (this executable) and reads its answer.
fn admit_in_child(module: &Path, cache: &Path) -> Result<Admitted> {
    let exe = std::env::current_exe().context("this executable's path")?;
    let output = std::process::Command::new(exe)
        .arg(ADMIT_ONCE)
        .arg(module)
        .arg(cache)
        .output()
        .context("starting the admitting process")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "admitting {} failed ({}): {}",
            module.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let fields: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("admitted "))
        .context("the admitting process said nothing")?
        .split_whitespace()
        .map(|f| f.parse().context("the admitting process's answer"))
        .collect::<Result<_>>()?;
    let [micros, peak_kib, before_kib, load_micros] = fields[..] else {
        bail!("the admitting process answered {stdout:?}");
    };
    Ok(Admitted {
        took: Duration::from_micros(micros),
        peak_kib,
        before_kib,
        load: Duration::from_micros(load_micros),
    })
}

/// The one compiled entry in `cache`: its inode, modification time and size.
fn entry_of(cache: &Path) -> Result<(u64, i64, i64, u64)> {
    let mut entries = std::fs::read_dir(cache)
        .with_context(|| format!("reading {}", cache.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"));
    let (Some(entry), None) = (entries.next(), entries.next()) else {
        bail!(
            "{}: not one compiled entry after an admission",
            cache.display()
        );
    };
    let meta = std::fs::metadata(&entry).with_context(|| entry.display().to_string())?;
    Ok((meta.ino(), meta.mtime(), meta.mtime_nsec(), meta.size()))
}

/// One cold admission of `file` with an empty cache (`cache`, missing), then one from that
/// cache.
fn admissions(file: &Path, cache: &Path) -> Result<AdmissionRun> {
    let cold = admit_in_child(file, cache)?;
    let written = entry_of(cache)?;
    let cached = admit_in_child(file, cache)?;
    let read = entry_of(cache)?;
    Ok(AdmissionRun {
        cold,
        cached,
        hit: written == read,
        compiled_bytes: written.3,
    })
}

/// Every language: sizes, `runs` rounds of admissions, `runs` rounds of decisions of
/// `calls` calls each. Call from outside the tokio runtime `handle` belongs to.
pub fn run(runs: usize, calls: usize, handle: tokio::runtime::Handle) -> Result<Vec<LanguageRun>> {
    build_components()?;
    let dir = tempfile::tempdir().context("temp dir")?;
    let mut out = Vec::new();
    for language in LANGUAGES {
        let bytes = component(&language)?;
        let name = language.polyglot.unwrap_or("rust-default");
        let file = dir.path().join(format!("{name}.wasm"));
        std::fs::write(&file, &bytes).with_context(|| file.display().to_string())?;
        let cache = |round: usize| dir.path().join(format!("{name}-cache-{round}"));
        let admissions = (0..runs.max(1))
            .map(|round| admissions(&file, &cache(round)))
            .collect::<Result<Vec<_>>>()
            .with_context(|| language.label)?;
        // The decisions on the module as the admissions loaded it, from the cache they filled;
        // the per-call rows read the calls that instantiate it every time (its memo off).
        let subject = decision::Subject::load(
            &RuntimeConfig {
                cache_dir: Some(cache(0)),
                ..RuntimeConfig::default()
            },
            &bytes,
            language.describe_name,
        )
        .with_context(|| language.label)?;
        let decisions = (0..runs)
            .map(|_| decision::run(&subject, handle.clone(), calls, calls))
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("{}: the decisions", language.label))?;
        let run = LanguageRun {
            language,
            bytes: bytes.len(),
            gzipped: gzipped_len(&bytes)?,
            admissions,
            decisions,
        };
        say(&run);
        out.push(run);
    }
    Ok(out)
}

fn say(run: &LanguageRun) {
    for (round, a) in run.admissions.iter().enumerate() {
        super::say(format_args!(
            "{} round {}: {} bytes ({} gzipped); admission cold {:.2} s (peak RSS {:.0} MiB), \
             from the cache {:.2} s (peak RSS {:.0} MiB, {}; a load from the cache without the \
             self-test {:.2} s)",
            run.language.label,
            round + 1,
            run.bytes,
            run.gzipped,
            a.cold.took.as_secs_f64(),
            a.cold.peak_kib as f64 / 1024.0,
            a.cached.took.as_secs_f64(),
            a.cached.peak_kib as f64 / 1024.0,
            if a.hit {
                "cache hit"
            } else {
                "compiled again: no cache hit"
            },
            a.cached.load.as_secs_f64()
        ));
    }
    for cases in &run.decisions {
        for case in cases {
            let (p50, _) = super::stats::p50_p99_micros(&case.wasm);
            super::say(format_args!(
                "{}: {} p50 {p50:.1} µs",
                run.language.label, case.label
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_of_another_toolchain_is_not_timed_as_this_one() {
        let quickjs = LANGUAGES
            .iter()
            .find(|l| l.polyglot == Some("js-default-qjs"))
            .expect("QuickJS is measured");
        let refused =
            built_by(quickjs, DEFAULT_POLICY).expect_err("the Rust default is no QuickJS build");
        let said = format!("{refused:#}");
        assert!(
            said.contains("not a build of JavaScript (componentize-qjs, QuickJS)")
                && said.contains("componentize_qjs_runtime"),
            "{said}"
        );
        let mut quickjs_like = DEFAULT_POLICY.to_vec();
        quickjs_like.extend_from_slice(b"componentize_qjs_runtime");
        built_by(quickjs, &quickjs_like).expect("a component that carries the runtime");
    }
}
