//! The JUnit XML report CI systems read: one `testsuite` per scenario file, one `testcase` per
//! scenario, a `failure` holding the readable diff. Written by hand: the format is small, and
//! all it needs is correct escaping.

use std::fmt::Write as _;
use std::path::Path;

use super::runner::Report;

/// The report of `reports`, grouped by file in the order first seen.
pub(crate) fn render(reports: &[Report]) -> String {
    let mut files: Vec<&Path> = Vec::new();
    for report in reports {
        if !files.contains(&report.file.as_path()) {
            files.push(&report.file);
        }
    }
    let failures = reports.iter().filter(|r| !r.passed()).count();
    let total: f64 = reports.iter().map(|r| r.duration.as_secs_f64()).sum();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"cubepod-controller policy test\" tests=\"{}\" failures=\"{failures}\" \
         errors=\"0\" time=\"{total:.3}\">",
        reports.len()
    );
    for file in files {
        let cases: Vec<&Report> = reports.iter().filter(|r| r.file == file).collect();
        let failed = cases.iter().filter(|r| !r.passed()).count();
        let time: f64 = cases.iter().map(|r| r.duration.as_secs_f64()).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" \
             skipped=\"0\" time=\"{time:.3}\">",
            escape(&file.display().to_string()),
            cases.len()
        );
        for case in cases {
            let classname = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = write!(
                xml,
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" time=\"{:.3}\"",
                escape(&case.name),
                escape(&classname),
                escape(&file.display().to_string()),
                case.duration.as_secs_f64()
            );
            if case.passed() {
                xml.push_str("/>\n");
                continue;
            }
            // The message is what a CI page shows in one line: the diff, collapsed and cut.
            let mut message = case
                .failures
                .iter()
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ");
            if message.chars().count() > 300 {
                message = message.chars().take(300).collect::<String>() + "...";
            }
            let _ = writeln!(
                xml,
                ">\n      <failure message=\"{}\" type=\"ScenarioFailed\">{}</failure>\n    </testcase>",
                escape(&message),
                escape(&case.failures.join("\n"))
            );
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// Text for an attribute or element: the five special characters as entities, and the
/// characters XML 1.0 cannot hold at all (most control characters) replaced.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Newlines and tabs stay as they are in element text; in attributes they would be
            // normalized to spaces by a parser, which is harmless for a message.
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn report(name: &str, file: &str, failures: &[&str]) -> Report {
        Report {
            name: name.to_string(),
            file: PathBuf::from(file),
            failures: failures.iter().map(|s| s.to_string()).collect(),
            duration: Duration::from_millis(12),
        }
    }

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            escape("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\u{FFFD}"
        );
    }

    #[test]
    fn groups_cases_by_file_and_holds_the_diff() {
        let xml = render(&[
            report("ok", "s/a.yaml", &[]),
            report(
                "bad <one>",
                "s/a.yaml",
                &["status.phase: expected \"Paused\""],
            ),
            report("other", "s/b.yaml", &[]),
        ]);
        assert!(xml.contains(
            "<testsuites name=\"cubepod-controller policy test\" tests=\"3\" failures=\"1\""
        ));
        assert!(xml.contains("<testsuite name=\"s/a.yaml\" tests=\"2\" failures=\"1\""));
        assert!(
            xml.contains(
                "<testcase name=\"ok\" classname=\"a\" file=\"s/a.yaml\" time=\"0.012\"/>"
            )
        );
        assert!(xml.contains("<testcase name=\"bad &lt;one&gt;\""));
        assert!(xml.contains(
            "<failure message=\"status.phase: expected &quot;Paused&quot;\" type=\"ScenarioFailed\">status.phase"
        ));
        assert_eq!(xml.matches("<testsuite ").count(), 2);
        assert!(xml.ends_with("</testsuites>\n"));
    }
}
