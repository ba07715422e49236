//! `policy new --lang python`: a project of its own on the Python SDK (`sdk/python/` of a
//! checkout, by path): the default decisions with one overridden as an example (the same as the
//! Rust crate's), its unit tests (pytest), the same scenarios, a build script that pins
//! componentize-py, and a CI workflow. The files are the templates of `new/python/`.

use std::path::Path;

use super::{NewError, SdkSource, Template, write_templates};

const TEMPLATES: &[Template] = &[
    Template {
        path: "app.py",
        text: include_str!("python/app.py.tmpl"),
    },
    Template {
        path: "test_app.py",
        text: include_str!("python/test_app.py.tmpl"),
    },
    Template {
        path: "build.sh",
        text: include_str!("python/build.sh.tmpl"),
    },
    // The same decisions as the Rust crate's, so the same scenarios.
    Template {
        path: "scenarios/new-sandbox.yaml",
        text: include_str!("scenarios/new-sandbox.yaml"),
    },
    Template {
        path: "scenarios/pool-cap.yaml",
        text: include_str!("scenarios/pool-cap.yaml"),
    },
    Template {
        path: ".github/workflows/policy.yml",
        text: include_str!("python/policy.yml.tmpl"),
    },
    Template {
        path: "README.md",
        text: include_str!("python/README.md.tmpl"),
    },
    Template {
        path: ".gitignore",
        text: include_str!("python/gitignore.tmpl"),
    },
];

/// Writes the project into `dir` (created, or empty); returns the paths written. The project
/// builds against a checkout's `wit/` and `sdk/python/`, so it takes the SDK by path only.
pub(crate) fn write_project(
    dir: &Path,
    name: &str,
    sdk: &SdkSource,
) -> Result<Vec<&'static str>, NewError> {
    let SdkSource::Path(checkout) = sdk else {
        return Err(NewError::PythonSdkGit);
    };
    let checkout = super::shell_word(&checkout.to_string_lossy());
    let written = write_templates(dir, name, TEMPLATES, |text| {
        text.replace("__NAME__", name)
            .replace("__SDK__", &checkout)
            .replace("__CONTROLLER_INSTALL__", &sdk.controller_install())
    })?;
    // The build script runs as `./build.sh`.
    super::executable(&dir.join("build.sh"))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_is_written_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("pool-cap");
        let checkout = std::path::PathBuf::from("/src/cubepod x");
        let written = write_project(&target, "pool-cap", &SdkSource::Path(checkout)).unwrap();
        assert!(written.contains(&"build.sh"));
        for path in written {
            let text = std::fs::read_to_string(target.join(path)).unwrap();
            for placeholder in ["__NAME__", "__SDK__", "__CONTROLLER_INSTALL__"] {
                assert!(
                    !text.contains(placeholder),
                    "{path} has a placeholder left:\n{text}"
                );
            }
        }
        let build = std::fs::read_to_string(target.join("build.sh")).unwrap();
        assert!(build.contains("CUBEPOD='/src/cubepod x'\n"), "{build}");
        assert!(build.contains("VERSION=0.25.1"), "{build}");
        let app = std::fs::read_to_string(target.join("app.py")).unwrap();
        assert!(app.contains("NAME = \"pool-cap\""), "{app}");
        let git = SdkSource::Git {
            url: "https://example.com/c.git".into(),
            at: None,
        };
        let empty = tempfile::tempdir().unwrap();
        let error = write_project(empty.path(), "p", &git).unwrap_err();
        assert!(error.to_string().contains("--sdk-path"), "{error}");
    }
}
