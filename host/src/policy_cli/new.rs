//! `cubepod-controller policy new NAME`: a policy crate of its own, outside this workspace, on
//! the SDK (`sdk/`, by path to a checkout or by git URL): the default decisions with one
//! overridden as an example, a passing scenario, a native unit test and a CI workflow. The
//! files are the templates beside this module (`new/`), with the crate's name and the SDK's
//! source filled in.

use std::path::{Path, PathBuf};

use crate::config::{PolicyLang, PolicyNewArgs};

mod js;
mod python;

/// The checkout this binary was built from: the default SDK, when it is still there.
const BUILT_FROM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// A template and the path (in the new crate) it is written to.
struct Template {
    path: &'static str,
    text: &'static str,
}

const TEMPLATES: &[Template] = &[
    Template {
        path: "Cargo.toml",
        text: include_str!("new/Cargo.toml.tmpl"),
    },
    Template {
        path: "src/lib.rs",
        text: include_str!("new/lib.rs.tmpl"),
    },
    Template {
        path: "scenarios/new-sandbox.yaml",
        text: include_str!("new/scenarios/new-sandbox.yaml"),
    },
    Template {
        path: "scenarios/pool-cap.yaml",
        text: include_str!("new/scenarios/pool-cap.yaml"),
    },
    Template {
        path: ".github/workflows/policy.yml",
        text: include_str!("new/policy.yml.tmpl"),
    },
    Template {
        path: "README.md",
        text: include_str!("new/README.md.tmpl"),
    },
    Template {
        path: ".gitignore",
        text: include_str!("new/gitignore.tmpl"),
    },
    // The project's own toolchain (and its wasm32-wasip2 target): the SDK is built and tested
    // with it.
    Template {
        path: "rust-toolchain.toml",
        text: include_str!("../../../rust-toolchain.toml"),
    },
];

/// Why `policy new` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error(
        "{name:?} is not a policy name: use lowercase letters, digits and single hyphens, \
         starting with a letter, at most 64 characters (it names the crate and the policy)"
    )]
    Name { name: String },
    #[error("{} exists and is not empty: name a new or empty directory with --path", path.display())]
    NotEmpty { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} holds no SDK (sdk/Cargo.toml): name one with --sdk-path CHECKOUT or --sdk-git URL",
        checkout.display()
    )]
    NoSdk { checkout: PathBuf },
    #[error(
        "--sdk-git does not work with --lang js: npm installs a package from a path, not from a \
         subdirectory of a git repository; clone cubepod-controller and name it with --sdk-path"
    )]
    JsSdkGit,
    #[error(
        "--sdk-git does not work with --lang python: the project builds against a checkout's \
         contract (wit/) and Python SDK (sdk/python); clone cubepod-controller and name it with \
         --sdk-path"
    )]
    PythonSdkGit,
}

/// Where the new crate gets the SDK from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SdkSource {
    /// A cubepod-controller checkout on this machine (its root).
    Path(PathBuf),
    /// A cubepod-controller git repository, at a commit, tag or branch if given.
    Git { url: String, at: Option<GitRef> },
}

/// Where in a git repository, as cargo names it (in a dependency as in `cargo install`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GitRef {
    Rev(String),
    Tag(String),
    Branch(String),
}

impl GitRef {
    fn key_and_value(&self) -> (&'static str, &str) {
        match self {
            GitRef::Rev(rev) => ("rev", rev),
            GitRef::Tag(tag) => ("tag", tag),
            GitRef::Branch(branch) => ("branch", branch),
        }
    }
}

impl SdkSource {
    /// The source the flags name, else the checkout this binary was built from.
    fn from_args(args: &PolicyNewArgs) -> Result<SdkSource, NewError> {
        if let Some(url) = &args.sdk_git {
            let at = (args.sdk_rev.clone().map(GitRef::Rev))
                .or_else(|| args.sdk_tag.clone().map(GitRef::Tag))
                .or_else(|| args.sdk_branch.clone().map(GitRef::Branch));
            return Ok(SdkSource::Git {
                url: url.clone(),
                at,
            });
        }
        let checkout = args
            .sdk_path
            .clone()
            .unwrap_or_else(|| PathBuf::from(BUILT_FROM));
        let checkout = absolute(&checkout)?;
        if !checkout.join("sdk").join("Cargo.toml").is_file() {
            return Err(NewError::NoSdk { checkout });
        }
        // Canonical, so that the dependency does not hold the `host/..` of BUILT_FROM.
        let checkout = checkout.canonicalize().map_err(|source| NewError::Io {
            path: checkout.clone(),
            source,
        })?;
        Ok(SdkSource::Path(checkout))
    }

    /// The dependency's inline table in Cargo.toml.
    fn dependency(&self) -> String {
        match self {
            SdkSource::Path(checkout) => format!(
                "{{ path = {} }}",
                toml_string(&checkout.join("sdk").to_string_lossy())
            ),
            SdkSource::Git { url, at: None } => format!("{{ git = {} }}", toml_string(url)),
            SdkSource::Git { url, at: Some(at) } => {
                let (key, value) = at.key_and_value();
                format!(
                    "{{ git = {}, {key} = {} }}",
                    toml_string(url),
                    toml_string(value)
                )
            }
        }
    }

    /// The CI workflow's command that installs `cubepod-controller` from the SDK's source, so
    /// that `policy test` runs the same contract the component was built against.
    fn controller_install(&self) -> String {
        match self {
            // A path exists only on this machine: the workflow runs where the checkout is (a
            // self-hosted runner); `--sdk-git` makes one for any runner.
            SdkSource::Path(checkout) => format!(
                "cargo install --locked --path {} --bin cubepod-controller",
                shell_word(&checkout.join("host").to_string_lossy())
            ),
            SdkSource::Git { url, at } => {
                let at = at
                    .as_ref()
                    .map(|at| {
                        let (key, value) = at.key_and_value();
                        format!(" --{key} {}", shell_word(value))
                    })
                    .unwrap_or_default();
                format!(
                    "cargo install --locked --git {}{at} cubepod-host --bin cubepod-controller",
                    shell_word(url)
                )
            }
        }
    }
}

/// Runs `policy new`: writes the crate, then names its files and what to run next.
pub(crate) fn run(
    args: &PolicyNewArgs,
    out: &mut dyn std::io::Write,
) -> Result<(), super::CliError> {
    check_name(&args.name)?;
    let sdk = SdkSource::from_args(args)?;
    let dir = args
        .path
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let written = match args.lang {
        PolicyLang::Rust => write_crate(&dir, &args.name, &sdk)?,
        PolicyLang::Python => python::write_project(&dir, &args.name, &sdk)?,
        PolicyLang::Js => js::write_project(&dir, &args.name, &sdk)?,
    };
    writeln!(out, "created policy {} in {}:", args.name, dir.display())?;
    for path in &written {
        writeln!(out, "  {path}")?;
    }
    let next = match args.lang {
        PolicyLang::Rust => None,
        PolicyLang::Python => Some("./build.sh test && ./build.sh"),
        PolicyLang::Js => Some("npm install && npm test && npm run build"),
    };
    if let Some(steps) = next {
        writeln!(
            out,
            "next: cd {} && {steps} && cubepod-controller policy test target/{}.wasm scenarios",
            dir.display(),
            args.name
        )?;
        return Ok(());
    }
    writeln!(out, "SDK: cubepod-policy-sdk = {}", sdk.dependency())?;
    if let SdkSource::Path(_) = sdk {
        writeln!(
            out,
            "the CI workflow installs cubepod-controller from that path, which a hosted runner \
             lacks: for one, run `policy new` with --sdk-git URL"
        )?;
    }
    writeln!(
        out,
        "next: cd {} && cargo test && cargo build --release --target wasm32-wasip2 && \
         cubepod-controller policy test target/wasm32-wasip2/release/{}.wasm scenarios",
        dir.display(),
        crate_name(&args.name)
    )?;
    Ok(())
}

/// Writes every template into `dir` (created, or empty), filled in; returns the paths written.
pub(crate) fn write_crate(
    dir: &Path,
    name: &str,
    sdk: &SdkSource,
) -> Result<Vec<&'static str>, NewError> {
    write_templates(dir, name, TEMPLATES, |text| {
        text.replace("__NAME__", name)
            .replace("__CRATE__", &crate_name(name))
            .replace("__SDK__", &sdk.dependency())
            .replace("__CONTROLLER_INSTALL__", &sdk.controller_install())
    })
}

/// Makes the written `script` executable (0755), as a project's `./build.sh` is run.
fn executable(script: &Path) -> Result<(), NewError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).map_err(|source| {
        NewError::Io {
            path: script.to_path_buf(),
            source,
        }
    })
}

/// Writes `templates` into `dir` (created, or empty), each filled in by `fill`; returns the paths
/// written.
fn write_templates(
    dir: &Path,
    name: &str,
    templates: &[Template],
    fill: impl Fn(&str) -> String,
) -> Result<Vec<&'static str>, NewError> {
    check_name(name)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NewError::Io { path, source }
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(NewError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        Err(error) => return Err(io(dir)(error)),
    }
    for template in templates {
        let path = dir.join(template.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        // create_new: a file that appeared since the emptiness check is not overwritten.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io(&path))?;
        std::io::Write::write_all(&mut file, fill(template.text).as_bytes()).map_err(io(&path))?;
    }
    Ok(templates.iter().map(|t| t.path).collect())
}

/// A crate name cargo takes, that is also a readable policy name.
fn check_name(name: &str) -> Result<(), NewError> {
    let bytes = name.as_bytes();
    let valid = (1..=64).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && !name.ends_with('-')
        && !name.contains("--")
        // The dependency's own name.
        && name != "cubepod-policy-sdk";
    if valid {
        Ok(())
    } else {
        Err(NewError::Name {
            name: name.to_string(),
        })
    }
}

/// The library's name, as cargo makes it: the component's file is `<crate>.wasm`.
fn crate_name(name: &str) -> String {
    name.replace('-', "_")
}

fn absolute(path: &Path) -> Result<PathBuf, NewError> {
    std::path::absolute(path).map_err(|source| NewError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// One shell word: as it is when it has nothing the shell reads, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:@+=,".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git() -> SdkSource {
        SdkSource::Git {
            url: "https://example.com/cubepod-controller.git".into(),
            at: Some(GitRef::Tag("v0.1.0".into())),
        }
    }

    #[test]
    fn names_cargo_and_a_reader_take() {
        for good in ["a", "image-allowlist", "team2-policy"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "Policy",
            "2fast",
            "-a",
            "a-",
            "a--b",
            "a_b",
            "a/b",
            "../x",
            long.as_str(),
            "cubepod-policy-sdk",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_crate_is_written_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("image-allowlist");
        let written = write_crate(&target, "image-allowlist", &git()).unwrap();
        assert!(written.contains(&".github/workflows/policy.yml"));
        for path in written {
            let text = std::fs::read_to_string(target.join(path)).unwrap();
            assert!(
                !text.contains("__"),
                "{path} has a placeholder left:\n{text}"
            );
        }
        let manifest = std::fs::read_to_string(target.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("name = \"image-allowlist\""),
            "{manifest}"
        );
        assert!(
            manifest.contains(
                "cubepod-policy-sdk = { git = \"https://example.com/cubepod-controller.git\", \
                 tag = \"v0.1.0\" }"
            ),
            "{manifest}"
        );
        let workflow =
            std::fs::read_to_string(target.join(".github/workflows/policy.yml")).unwrap();
        let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&workflow).unwrap();
        let steps = parsed["jobs"]["policy"]["steps"].as_sequence().unwrap();
        let runs: Vec<&str> = steps
            .iter()
            .filter_map(|s| s["run"].as_str())
            .map(str::trim_end)
            .collect();
        assert!(
            runs.contains(
                &"cargo install --locked --git https://example.com/cubepod-controller.git \
                  --tag v0.1.0 cubepod-host --bin cubepod-controller"
            ),
            "{runs:?}"
        );
        assert!(
            runs.iter().any(|r| r.contains(
                "policy test target/wasm32-wasip2/release/image_allowlist.wasm scenarios --junit"
            )),
            "{runs:?}"
        );
    }

    #[test]
    fn a_non_empty_directory_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let error = write_crate(dir.path(), "p", &git()).unwrap_err();
        assert!(matches!(error, NewError::NotEmpty { .. }), "{error}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
            "mine"
        );
        // An empty one is used.
        let empty = tempfile::tempdir().unwrap();
        write_crate(empty.path(), "p", &git()).unwrap();
        assert!(empty.path().join("src/lib.rs").is_file());
    }

    fn args(sdk_path: Option<&Path>) -> PolicyNewArgs {
        PolicyNewArgs {
            name: "p".into(),
            path: None,
            sdk_path: sdk_path.map(Path::to_path_buf),
            sdk_git: None,
            sdk_rev: None,
            sdk_tag: None,
            sdk_branch: None,
            lang: PolicyLang::Rust,
        }
    }

    #[test]
    fn the_sdk_is_the_checkout_built_from_unless_a_flag_names_one() {
        let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(
            SdkSource::from_args(&args(None)).unwrap(),
            SdkSource::Path(built_from.canonicalize().unwrap())
        );
        let elsewhere = tempfile::tempdir().unwrap();
        let error = SdkSource::from_args(&args(Some(elsewhere.path()))).unwrap_err();
        assert!(matches!(error, NewError::NoSdk { .. }), "{error}");
        assert!(error.to_string().contains("--sdk-git"), "{error}");
        let git = PolicyNewArgs {
            sdk_git: Some("https://example.com/c.git".into()),
            sdk_branch: Some("release-0.1".into()),
            ..args(None)
        };
        let sdk = SdkSource::from_args(&git).unwrap();
        assert_eq!(
            sdk.dependency(),
            r#"{ git = "https://example.com/c.git", branch = "release-0.1" }"#
        );
        assert_eq!(
            sdk.controller_install(),
            "cargo install --locked --git https://example.com/c.git --branch release-0.1 \
             cubepod-host --bin cubepod-controller"
        );
    }

    #[test]
    fn a_path_is_quoted_for_toml_and_the_shell() {
        let sdk = SdkSource::Path(PathBuf::from("/home/me/it's \"here\""));
        assert_eq!(
            sdk.dependency(),
            r#"{ path = "/home/me/it's \"here\"/sdk" }"#
        );
        assert_eq!(
            sdk.controller_install(),
            r#"cargo install --locked --path '/home/me/it'\''s "here"/host' --bin cubepod-controller"#
        );
    }
}
