//! `policy new --lang js`: an npm project of its own on the JavaScript SDK (`sdk/js/` of a
//! checkout, by path): the default decisions with one overridden as an example (the same as the
//! Rust crate's), its unit tests, the same scenarios, a build script on the toolchain its
//! package.json pins, and a CI workflow. The files are the templates of `new/js/`.

use std::path::Path;

use super::{NewError, SdkSource, Template, write_templates};

const TEMPLATES: &[Template] = &[
    Template {
        path: "package.json",
        text: include_str!("js/package.json.tmpl"),
    },
    Template {
        path: "policy.js",
        text: include_str!("js/policy.js.tmpl"),
    },
    Template {
        path: "component.js",
        text: include_str!("js/component.js.tmpl"),
    },
    Template {
        path: "test/policy.test.js",
        text: include_str!("js/policy.test.js.tmpl"),
    },
    Template {
        path: "build.sh",
        text: include_str!("js/build.sh.tmpl"),
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
        text: include_str!("js/policy.yml.tmpl"),
    },
    Template {
        path: "README.md",
        text: include_str!("js/README.md.tmpl"),
    },
    Template {
        path: ".gitignore",
        text: include_str!("js/gitignore.tmpl"),
    },
];

/// The package.json dependency on the SDK, a JSON string: npm installs a package from a path,
/// not from a subdirectory of a git repository.
fn dependency(sdk: &SdkSource) -> Result<String, NewError> {
    match sdk {
        SdkSource::Path(checkout) => {
            let path = checkout.join("sdk").join("js");
            Ok(serde_json::Value::from(format!("file:{}", path.display())).to_string())
        }
        SdkSource::Git { .. } => Err(NewError::JsSdkGit),
    }
}

/// Writes the project into `dir` (created, or empty); returns the paths written.
pub(crate) fn write_project(
    dir: &Path,
    name: &str,
    sdk: &SdkSource,
) -> Result<Vec<&'static str>, NewError> {
    let dependency = dependency(sdk)?;
    let written = write_templates(dir, name, TEMPLATES, |text| {
        text.replace("__NAME__", name)
            .replace("__SDK__", &dependency)
            .replace("__CONTROLLER_INSTALL__", &sdk.controller_install())
    })?;
    // The build script runs as `./build.sh` (and `npm run build`).
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
        let checkout = std::path::PathBuf::from("/src/cubepod \"x\"");
        let written = write_project(&target, "pool-cap", &SdkSource::Path(checkout)).unwrap();
        assert!(written.contains(&"build.sh"));
        for path in written {
            let text = std::fs::read_to_string(target.join(path)).unwrap();
            assert!(
                !text.contains("__"),
                "{path} has a placeholder left:\n{text}"
            );
        }
        let package: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(target.join("package.json")).unwrap())
                .unwrap();
        assert_eq!(package["name"], "pool-cap");
        assert_eq!(
            package["dependencies"]["@cubepod/policy"],
            "file:/src/cubepod \"x\"/sdk/js"
        );
        assert_eq!(
            package["devDependencies"]["@bytecodealliance/componentize-js"],
            "0.23.0"
        );
        let git = SdkSource::Git {
            url: "https://example.com/c.git".into(),
            at: None,
        };
        let empty = tempfile::tempdir().unwrap();
        let error = write_project(empty.path(), "p", &git).unwrap_err();
        assert!(error.to_string().contains("--sdk-path"), "{error}");
    }
}
