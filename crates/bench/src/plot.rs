//! PNG line charts of benchmark results (plotters, bitmap backend).
//!
//! Text is drawn with an embedded DejaVu Sans through ab_glyph, so charts render the same on
//! any machine, without system fonts or fontconfig. Every chart has a title, labelled axes
//! with units and a legend; same-run references (the ceiling of the emulated disks, the
//! local baseline) are drawn dashed beside the measured series.

use anyhow::{anyhow, bail, Context, Result};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use stripefs_rpc::units::format_size;

/// Chart size in pixels.
const WIDTH_PX: u32 = 960;
const HEIGHT_PX: u32 = 600;
/// The font name registered for every text element.
const FONT: &str = "sans-serif";
/// Most series one chart draws (colours stay distinguishable).
pub const MAX_SERIES: usize = 12;
/// Free space above the highest point, as a fraction of it, for the legend.
const HEADROOM: f64 = 0.45;

/// How the x values are laid out and labelled.
#[derive(Clone, Debug)]
pub enum XAxis {
    /// Plain numbers (clients, servers).
    Linear,
    /// Byte sizes on a log2 scale, labelled `64K`, `1M`.
    Log2Bytes,
    /// Named categories at x = 0, 1, 2, ...
    Categories(Vec<String>),
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Index into the palette; a reference shares the colour of what it is compared with.
    pub color: usize,
    /// Dashed without point markers: a reference, not a measurement.
    pub reference: bool,
}

/// A line chart of series against x.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
}

/// Registers the embedded font once; plotters with ab_glyph has no other source of glyphs.
fn fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure would be a build defect.
        let ok = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .is_ok();
        assert!(ok, "embedded DejaVu Sans does not parse");
    });
}

fn palette(i: usize) -> RGBColor {
    // As many colours as a chart has series (MAX_SERIES), so that none repeats.
    const COLORS: [RGBColor; MAX_SERIES] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(90, 90, 90),
        RGBColor(23, 190, 207),
        RGBColor(227, 119, 194),
        RGBColor(140, 86, 75),
        RGBColor(188, 189, 34),
        RGBColor(0, 0, 128),
        RGBColor(128, 0, 0),
    ];
    COLORS[i % COLORS.len()]
}

/// Where a value sits on the drawn x axis.
fn x_pos(axis: &XAxis, x: f64) -> f64 {
    match axis {
        XAxis::Log2Bytes => x.max(1.0).log2(),
        _ => x,
    }
}

fn x_label_text(axis: &XAxis, v: f64) -> String {
    let near = (v - v.round()).abs() < 1e-6;
    match axis {
        XAxis::Linear if near => format!("{}", v.round() as i64),
        XAxis::Linear => format!("{v:.1}"),
        XAxis::Log2Bytes if near => format_size(2f64.powf(v.round()) as u64),
        XAxis::Categories(names) if near && v >= 0.0 => {
            names.get(v.round() as usize).cloned().unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// Draws `chart` to the PNG file `path`.
pub fn line_chart(path: &Path, chart: &Chart) -> Result<()> {
    let pts: Vec<(f64, f64)> = chart.series.iter().flat_map(|s| s.points.clone()).collect();
    if pts.is_empty() {
        bail!("nothing to plot in {}", path.display());
    }
    if chart.series.len() > MAX_SERIES {
        bail!(
            "{} series is more than a chart shows ({MAX_SERIES})",
            chart.series.len()
        );
    }
    fonts();
    draw(path, chart, &pts).map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))
}

fn draw(
    path: &Path,
    chart: &Chart,
    pts: &[(f64, f64)],
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let xs: Vec<f64> = pts.iter().map(|p| x_pos(&chart.x_axis, p.0)).collect();
    let (mut x0, mut x1) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let pad = ((x1 - x0) * 0.08).max(0.4);
    (x0, x1) = (x0 - pad, x1 + pad);
    let y_max = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * (1.0 + HEADROOM);
    let x_ticks = ((x1 - x0).ceil() as usize + 1).clamp(2, 16);

    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(&chart.title, (FONT, 22))
        .margin(18)
        .x_label_area_size(55)
        .y_label_area_size(75)
        .build_cartesian_2d(x0..x1, 0f64..y_max)?;
    let axis = chart.x_axis.clone();
    ch.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(x_ticks)
        .x_label_formatter(&|v| x_label_text(&axis, *v))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for s in &chart.series {
        draw_series(&mut ch, &chart.x_axis, s)?;
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()?;
    root.present()?;
    Ok(())
}

type Ctx<'a> = ChartContext<
    'a,
    BitMapBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn draw_series(
    ch: &mut Ctx<'_>,
    axis: &XAxis,
    s: &Series,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let color = palette(s.color);
    let mut pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x_pos(axis, x), y)).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    if s.reference {
        let style = color.stroke_width(2);
        ch.draw_series(DashedLineSeries::new(pts, 8, 6, style))?
            .label(&s.label)
            .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 24, y)], 5, 3, style));
    } else {
        let style = color.stroke_width(3);
        ch.draw_series(LineSeries::new(pts.clone(), style))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        ch.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    Ok(())
}

/// A mix of pairs: (total pairs, intranode pairs).
type Mix = (u64, u64);

/// `bench balance --plot`: throughput (MiB/s) against the mix of intranode and internode
/// pairs, one line per file size, from the balance report's `rows`
/// (`intranode`, `internode`, `size_bytes`, `mib_s`).
pub fn balance(report: &serde_json::Value, path: &Path) -> Result<()> {
    let rows = report["rows"]
        .as_array()
        .context("balance report has no `rows` list")?;
    let mut mixes = std::collections::BTreeSet::new();
    let mut by_size: BTreeMap<u64, Vec<(Mix, f64)>> = BTreeMap::new();
    for r in rows {
        let field = |k: &str| {
            r[k].as_u64()
                .with_context(|| format!("balance row lacks `{k}`: {r}"))
        };
        let (i, e, size) = (
            field("intranode")?,
            field("internode")?,
            field("size_bytes")?,
        );
        let mib_s = r["mib_s"]
            .as_f64()
            .with_context(|| format!("balance row lacks `mib_s`: {r}"))?;
        // Ordered by total pairs, then from all internode to all intranode.
        mixes.insert((i + e, i));
        by_size.entry(size).or_default().push(((i + e, i), mib_s));
    }
    let mixes: Vec<Mix> = mixes.into_iter().collect();
    let names = mixes
        .iter()
        .map(|&(t, i)| format!("{i} intra + {} inter", t - i))
        .collect();
    let series = by_size
        .iter()
        .enumerate()
        .map(|(n, (size, pts))| Series {
            label: format!("{} files", format_size(*size)),
            points: pts
                .iter()
                .map(|(m, y)| (mixes.iter().position(|x| x == m).unwrap_or(0) as f64, *y))
                .collect(),
            color: n,
            reference: false,
        })
        .collect();
    line_chart(
        path,
        &Chart {
            title: "Disk/Net balance: copy throughput vs mix of producer-consumer pairs".into(),
            x_label: "pairs (intranode + internode)".into(),
            y_label: "throughput (MiB/s, files x size / time)".into(),
            x_axis: XAxis::Categories(names),
            series,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_png(p: &Path) -> bool {
        let b = std::fs::read(p).unwrap();
        b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 10_000
    }

    #[test]
    fn draws_sizes_with_reference() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.png");
        let xs = [65536.0, 262144.0, 1048576.0];
        let chart = Chart {
            title: "t".into(),
            x_label: "stripe size (bytes, log scale)".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Log2Bytes,
            series: vec![
                Series {
                    label: "write".into(),
                    points: xs.iter().map(|&x| (x, 100.0)).collect(),
                    color: 0,
                    reference: false,
                },
                Series {
                    label: "ceiling".into(),
                    points: xs.iter().map(|&x| (x, 400.0)).collect(),
                    color: 5,
                    reference: true,
                },
            ],
        };
        line_chart(&p, &chart).unwrap();
        assert!(is_png(&p));
    }

    #[test]
    fn balance_chart_from_rows() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b.png");
        let mut rows = vec![];
        for size in [1u64 << 20, 16 << 20] {
            for i in 0..=2u64 {
                rows.push(serde_json::json!({"intranode": i, "internode": 2 - i,
                    "size_bytes": size, "mib_s": 50.0 + i as f64 * 10.0}));
            }
        }
        balance(&serde_json::json!({ "rows": rows }), &p).unwrap();
        assert!(is_png(&p));
        assert!(balance(&serde_json::json!({ "rows": [{"intranode": 1}] }), &p).is_err());
    }

    #[test]
    fn empty_chart_is_an_error() {
        let chart = Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_axis: XAxis::Linear,
            series: vec![],
        };
        assert!(line_chart(Path::new("/nonexistent/x.png"), &chart).is_err());
    }
}
