//! Whether output gets ANSI colour: only on a terminal, and never when `NO_COLOR` is set to a
//! non-empty value (<https://no-color.org>). Logs and `policy test` ask the same question.

use std::ffi::OsStr;
use std::io::IsTerminal;

/// The decision, from what it depends on: whether the stream is a terminal, and the value of
/// `NO_COLOR` (`None` when unset).
pub(crate) fn wanted(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    // An empty NO_COLOR means unset, as the convention says.
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Colour for what goes to `stream` (stdout or stderr) in this process's environment.
pub fn for_stream(stream: &impl IsTerminal) -> bool {
    wanted(
        stream.is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(wanted(true, None));
        assert!(
            !wanted(false, None),
            "a file or a pipe gets no escape codes"
        );
        assert!(!wanted(true, Some(OsStr::new("1"))));
        assert!(
            !wanted(true, Some(OsStr::new("false"))),
            "any non-empty value"
        );
        assert!(wanted(true, Some(OsStr::new(""))), "empty is unset");
        assert!(!wanted(false, Some(OsStr::new("1"))));
    }
}
