//! The demo's report: one summary table on the terminal and a directory with `index.html`,
//! the JSON results, each benchmark's own output and the PNG plots.
//!
//! Every figure is shown beside its same-run reference (a ceiling, a local baseline, or
//! another figure of the same run) with the ratio, and every section carries the commands
//! that reproduce it. A benchmark that failed stays in the report as failed, with its
//! error, so one broken benchmark never hides the others.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// What a figure is compared with.
#[derive(Clone, Debug)]
pub struct Reference {
    pub label: String,
    pub value: f64,
}

/// One figure of the summary.
#[derive(Clone, Debug)]
pub struct Row {
    pub figure: String,
    pub unit: String,
    pub value: f64,
    pub refs: Vec<Reference>,
}

impl Row {
    pub fn new(figure: impl Into<String>, unit: &str, value: f64) -> Row {
        Row {
            figure: figure.into(),
            unit: unit.into(),
            value,
            refs: vec![],
        }
    }

    /// Adds a reference when it was measured (`None` is left out, not shown as zero).
    pub fn vs(mut self, label: impl Into<String>, value: Option<f64>) -> Row {
        if let Some(v) = value {
            self.refs.push(Reference {
                label: label.into(),
                value: v,
            });
        }
        self
    }
}

/// One benchmark of the report.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// Short name: the benchmark column of the summary and the stem of its files.
    pub name: String,
    pub title: String,
    /// What it measures, one or two sentences.
    pub about: String,
    /// Commands that reproduce it, after the cluster set-up.
    pub commands: Vec<String>,
    /// Why the benchmark failed; `None` when it ran.
    pub error: Option<String>,
    pub secs: f64,
    pub rows: Vec<Row>,
    /// Files in the report directory, by relative path.
    pub json: Option<String>,
    pub output: Option<String>,
    pub images: Vec<String>,
}

/// The whole report.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub title: String,
    /// Sentences on the set-up (cluster shape, throttle, machine).
    pub setup: Vec<String>,
    /// Commands that set up what every section's commands run against.
    pub setup_commands: Vec<String>,
    pub sections: Vec<Section>,
    pub wall_s: f64,
}

fn pct(v: f64, r: f64) -> String {
    if r > 0.0 {
        format!("{:.0}%", 100.0 * v / r)
    } else {
        "-".into()
    }
}

/// A figure with a precision fit for its size.
pub fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The summary's lines: benchmark, figure, value, reference, reference value, percentage.
fn summary_lines(r: &Report) -> Vec<[String; 6]> {
    let mut out = vec![];
    for s in &r.sections {
        if let Some(e) = &s.error {
            let msg = e.lines().next().unwrap_or("").to_string();
            out.push([
                s.name.clone(),
                "FAILED".into(),
                "-".into(),
                msg,
                "".into(),
                "".into(),
            ]);
            continue;
        }
        for row in &s.rows {
            let fig = format!("{} ({})", row.figure, row.unit);
            let first = row.refs.first();
            out.push([
                s.name.clone(),
                fig,
                num(row.value),
                first.map(|x| x.label.clone()).unwrap_or("-".into()),
                first.map(|x| num(x.value)).unwrap_or("-".into()),
                first.map(|x| pct(row.value, x.value)).unwrap_or("-".into()),
            ]);
            for x in row.refs.iter().skip(1) {
                let blank = String::new;
                out.push([
                    blank(),
                    blank(),
                    blank(),
                    x.label.clone(),
                    num(x.value),
                    pct(row.value, x.value),
                ]);
            }
        }
    }
    out
}

/// Prints the one summary table.
pub fn print_summary(r: &Report) {
    let head = ["benchmark", "figure", "value", "reference", "ref", "%"].map(String::from);
    let lines = summary_lines(r);
    let mut w = [0usize; 6];
    for l in std::iter::once(&head).chain(&lines) {
        for (i, c) in l.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for (n, l) in std::iter::once(&head).chain(&lines).enumerate() {
        println!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:<w3$}  {:>w4$}  {:>w5$}",
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            l[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5]
        );
        if n == 0 {
            println!("{}", "-".repeat(w.iter().sum::<usize>() + 10));
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}\
td.n{text-align:right}th{background:#f3f3f3}pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;word-break:break-all}\
.failed{color:#b00;font-weight:bold}img{max-width:100%;border:1px solid #ddd}";

fn html_table(lines: &[[String; 6]]) -> String {
    let mut h = String::from(
        "<table><tr><th>benchmark</th><th>figure</th><th>value</th>\
         <th>reference</th><th>ref</th><th>%</th></tr>\n",
    );
    for l in lines {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            esc(&l[0]), esc(&l[1]), esc(&l[2]), esc(&l[3]), esc(&l[4]), esc(&l[5])
        );
    }
    h + "</table>\n"
}

fn html_section(s: &Section) -> String {
    let mut h = format!(
        "<h2 id=\"{0}\">{1}</h2>\n<p>{2}</p>\n",
        esc(&s.name),
        esc(&s.title),
        esc(&s.about)
    );
    match &s.error {
        None => {
            let _ = writeln!(h, "<p>Ran in {:.1} s.</p>", s.secs);
            let one = Report {
                sections: vec![s.clone()],
                ..Report::default()
            };
            h += &html_table(&summary_lines(&one));
        }
        Some(e) => {
            let _ = writeln!(
                h,
                "<p class=failed>FAILED after {:.1} s:</p><pre>{}</pre>",
                s.secs,
                esc(e)
            );
        }
    }
    for img in &s.images {
        let _ = writeln!(h, "<p><img src=\"{0}\" alt=\"{0}\"></p>", esc(img));
    }
    let _ = writeln!(
        h,
        "<p>Reproduce (after the set-up above):</p>\n<pre>{}</pre>",
        esc(&s.commands.join("\n"))
    );
    let files: Vec<String> = [&s.json, &s.output]
        .into_iter()
        .flatten()
        .map(|f| format!("<a href=\"{0}\">{0}</a>", esc(f)))
        .collect();
    if !files.is_empty() {
        let _ = writeln!(h, "<p>Files: {}</p>", files.join(", "));
    }
    h
}

/// The whole page.
pub fn html(r: &Report) -> String {
    let mut h = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title><style>{STYLE}</style></head><body>\n<h1>{0}</h1>\n",
        esc(&r.title)
    );
    for p in &r.setup {
        let _ = writeln!(h, "<p>{}</p>", esc(p));
    }
    let _ = writeln!(
        h,
        "<p>Set-up:</p>\n<pre>{}</pre>",
        esc(&r.setup_commands.join("\n"))
    );
    let _ = writeln!(
        h,
        "<h2>Summary</h2>\n<p>Wall time of the whole demo: {:.0} s.</p>",
        r.wall_s
    );
    h += &html_table(&summary_lines(r));
    for s in &r.sections {
        h += &html_section(s);
    }
    h + "</body></html>\n"
}

/// The summary as JSON (one object per figure), for scripts.
pub fn summary_json(r: &Report) -> Value {
    let sections: Vec<Value> = r
        .sections
        .iter()
        .map(|s| {
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|row| {
                    let refs: Vec<Value> = row
                        .refs
                        .iter()
                        .map(|x| json!({"label": x.label, "value": x.value, "pct": 100.0 * row.value / x.value}))
                        .collect();
                    json!({"figure": row.figure, "unit": row.unit, "value": row.value, "references": refs})
                })
                .collect();
            json!({
                "benchmark": s.name,
                "ok": s.error.is_none(),
                "error": s.error,
                "secs": s.secs,
                "commands": s.commands,
                "figures": rows,
                "json": s.json,
                "images": s.images,
            })
        })
        .collect();
    json!({"title": r.title, "setup": r.setup, "setup_commands": r.setup_commands,
           "wall_s": r.wall_s, "sections": sections})
}

/// Writes `index.html` and `summary.json` into `dir`.
pub fn write(r: &Report, dir: &Path) -> Result<()> {
    let p = dir.join("index.html");
    std::fs::write(&p, html(r)).with_context(|| format!("cannot write {}", p.display()))?;
    crate::util::write_json(&dir.join("summary.json"), &summary_json(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_sections_and_references_show() {
        let r = Report {
            title: "t <x>".into(),
            sections: vec![
                Section {
                    name: "io".into(),
                    rows: vec![Row::new("write", "MiB/s", 300.0)
                        .vs("ceiling", Some(400.0))
                        .vs("baseline", None)
                        .vs("local", Some(600.0))],
                    images: vec!["a.png".into()],
                    ..Section::default()
                },
                Section {
                    name: "md".into(),
                    error: Some("bench md: not implemented yet".into()),
                    ..Section::default()
                },
            ],
            ..Report::default()
        };
        let lines = summary_lines(&r);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0][5], "75%");
        assert_eq!(lines[1][5], "50%");
        assert_eq!(lines[2][1], "FAILED");
        let page = html(&r);
        assert!(page.contains("t &lt;x&gt;") && page.contains("<img src=\"a.png\""));
        assert!(page.contains("not implemented yet"));
        assert_eq!(summary_json(&r)["sections"][1]["ok"], false);
    }
}
