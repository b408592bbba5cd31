//! The bench's table: one row per figure, with its target and verdict, rendered as
//! Markdown and written into the performance page.

use crate::steps::{Result, fail, io, root};

/// The page whose table `--write-readme` replaces.
pub const PERFORMANCE_PAGE: &str = "docs/performance.md";

/// One line of the table.
pub(crate) struct Row {
    pub(crate) figure: String,
    pub(crate) measured: String,
    pub(crate) target: String,
    /// `None`: reported only.
    pub(crate) pass: Option<bool>,
}

/// A figure that was not measured (its bench failed or was skipped).
pub(crate) fn missing(figure: &str) -> Row {
    Row {
        figure: figure.into(),
        measured: "not measured".into(),
        target: String::new(),
        pass: None,
    }
}

/// A reported figure in microseconds.
pub(crate) fn us_row(figure: &str, value: Option<f64>) -> Row {
    match value {
        Some(v) => Row {
            figure: figure.into(),
            measured: format!("{v:.2} µs"),
            target: "reported".into(),
            pass: None,
        },
        None => missing(figure),
    }
}

/// A figure with a target: at most `max` times `base` (named `base_name` in the row).
pub(crate) fn ratio_row(
    figure: &str,
    value: Option<f64>,
    base: Option<f64>,
    base_name: &str,
    max: f64,
) -> Row {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Row {
            figure: figure.into(),
            measured: format!("{v:.2} µs vs {b:.2} µs: {:.2}× {base_name}", v / b),
            target: format!("≤ {max}× {base_name}"),
            pass: Some(v / b <= max),
        },
        _ => missing(figure),
    }
}

/// A reported figure with its ratio to `base` (named `base_name` in the row).
pub(crate) fn share_row(
    figure: &str,
    value: Option<f64>,
    base: Option<f64>,
    base_name: &str,
) -> Row {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Row {
            figure: figure.into(),
            measured: format!("{v:.2} µs = {:.2}× {base_name}", v / b),
            target: "reported".into(),
            pass: None,
        },
        (v, _) => us_row(figure, v),
    }
}

/// The table as Markdown, with what was skipped and why under it.
pub(crate) fn render(rows: &[Row], skipped: &[String]) -> String {
    let mut out = String::from("| figure | measured | target | verdict |\n|---|---|---|---|\n");
    for r in rows {
        let verdict = match r.pass {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {verdict} |\n",
            r.figure, r.measured, r.target
        ));
    }
    let (met, set) = (
        rows.iter().filter(|r| r.pass == Some(true)).count(),
        rows.iter().filter(|r| r.pass.is_some()).count(),
    );
    out.push_str(&format!("\nTargets met: {met} of {set}.\n"));
    for s in skipped {
        out.push_str(&format!("\nSkipped: {s}\n"));
    }
    out
}

/// Replaces the table of the performance page (between its markers) with `table`,
/// through a temporary file, so the page is never half-written.
pub(crate) fn write_page(table: &str) -> Result {
    let page = root().join(PERFORMANCE_PAGE);
    let text = io(
        &format!("read {PERFORMANCE_PAGE}"),
        std::fs::read_to_string(&page),
    )?;
    let (begin, end) = ("<!-- bench:begin -->", "<!-- bench:end -->");
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        return fail(
            &format!("update {PERFORMANCE_PAGE}"),
            format!("no {begin} … {end} markers"),
        );
    };
    let updated = format!("{}{begin}\n{table}{}", &text[..b], &text[e..]);
    let tmp = page.with_extension("md.tmp");
    io(
        &format!("write {PERFORMANCE_PAGE}"),
        std::fs::write(&tmp, updated).and_then(|()| std::fs::rename(&tmp, &page)),
    )?;
    eprintln!("{PERFORMANCE_PAGE}: performance table updated");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_row_passes_at_its_bound_and_fails_beyond_it() {
        let at = ratio_row("x", Some(1.3), Some(1.0), "floor", 1.3);
        assert_eq!(at.pass, Some(true));
        let beyond = ratio_row("x", Some(1.31), Some(1.0), "floor", 1.3);
        assert_eq!(beyond.pass, Some(false));
        assert_eq!(beyond.target, "≤ 1.3× floor");
        assert_eq!(ratio_row("x", None, Some(1.0), "floor", 1.3).pass, None);
    }

    #[test]
    fn the_table_counts_the_targets_met() {
        let rows = [
            ratio_row("a", Some(1.0), Some(1.0), "f", 2.0),
            ratio_row("b", Some(3.0), Some(1.0), "f", 2.0),
            us_row("c", Some(1.0)),
        ];
        let table = render(&rows, &["the peer: no npm".into()]);
        assert!(table.contains("| b | 3.00 µs vs 1.00 µs: 3.00× f | ≤ 2× f | FAIL |"));
        assert!(table.contains("Targets met: 1 of 2."));
        assert!(table.contains("Skipped: the peer: no npm"));
    }
}
