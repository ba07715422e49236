//! The real `kubectl` (v1.32; `.ci/run` installs it where it is missing), run against a
//! kubeconfig with a private HOME for its discovery cache. Without kubectl the tests that use it
//! fail, naming the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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

    /// Writes a manifest under HOME; its path.
    pub fn write(&self, name: &str, yaml: &str) -> PathBuf {
        let path = self.home.join(name);
        std::fs::write(&path, yaml).expect("write manifest");
        path
    }
}
