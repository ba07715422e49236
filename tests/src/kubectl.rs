//! The real `kubectl` (v1.32; `.ci/run` installs it where it is missing), run against a
//! kubeconfig with a private HOME for its discovery cache. Without kubectl the tests that use it
//! fail, naming the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::Controller;

/// How long a condition read through kubectl may take to hold.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The words of the line of a `kubectl get` table whose first column is `name`.
pub fn row<'a>(table: &'a str, name: &str) -> Option<Vec<&'a str>> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.first() == Some(&name))
}

pub struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    /// kubectl with `KUBECONFIG=kubeconfig` and `HOME=home` (where it caches discovery and
    /// where [`Kubectl::write`] puts manifests).
    pub fn new(kubeconfig: &Path, home: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            home: home.to_path_buf(),
        }
    }

    /// The kubeconfig kubectl is run with.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null());
        command
    }

    /// Runs kubectl; panics (naming the fix) when it is not installed.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap_or_else(|error| {
            panic!("kubectl could not run ({error}): install kubectl (.ci/run does)")
        })
    }

    /// kubectl's stdout, asserting it succeeded.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `kubectl args` until its stdout satisfies `done`; returns it.
    pub fn until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let out = self.run(args);
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() && done(&String::from_utf8_lossy(&out.stdout)) {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("kubectl {args:?} never met the condition; last output:\n{last}");
    }

    /// Runs `script` with `sh` in HOME, where kubectl finds the kubeconfig as [`Kubectl::run`]
    /// gives it: for pipelines (`kubectl create --dry-run=client -o yaml | kubectl apply -f -`)
    /// and for commands copied from the docs.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("sh")
            .args(["-c", script])
            .current_dir(&self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("sh could not run: {error}"))
    }

    /// Writes a file under HOME (creating its folders); its path.
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.home.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create the file's folder");
        }
        std::fs::write(&path, bytes).expect("write file");
        path
    }

    /// Writes a manifest under HOME; its path.
    pub fn write(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.home.join(name);
        std::fs::write(&path, yaml).expect("write manifest");
        path
    }
}

/// An embedded controller (`run --embedded`) and kubectl on the kubeconfig it wrote, with a
/// private HOME.
pub struct Embedded {
    pub controller: Controller,
    pub kubectl: Kubectl,
    _home: tempfile::TempDir,
}

impl Embedded {
    /// `run --embedded` with `extra` flags, ready.
    pub fn start(extra: &[&str]) -> Embedded {
        let home = tempfile::tempdir().expect("temp dir");
        let kubeconfig = home.path().join("embedded/kubeconfig");
        let flag = format!("--embedded-kubeconfig={}", kubeconfig.display());
        let mut flags = vec![flag.as_str()];
        flags.extend(extra);
        let controller = Controller::start(&flags);
        controller.wait_for("/readyz", PATIENCE, |status, _| status == 200);
        assert!(kubeconfig.exists(), "run wrote {}", kubeconfig.display());
        Embedded {
            controller,
            kubectl: Kubectl::new(&kubeconfig, home.path()),
            _home: home,
        }
    }
}

impl std::ops::Deref for Embedded {
    type Target = Kubectl;

    fn deref(&self) -> &Kubectl {
        &self.kubectl
    }
}
