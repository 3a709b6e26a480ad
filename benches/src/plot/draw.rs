//! Drawing a `Figure` with plotters: one column per benchmark, its curves
//! (log-log, median line with points, min-max band) above, the ratio of
//! each Rivet stack to its reference below (linear y, 1 marked). A stack keeps
//! its colour in every panel; each values panel has the legend.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::data::{Figure, Panel};
use super::{format_of, load_font, Format};

/// Colours by stack order (Rivet's stacks come first in every table).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(214, 39, 40),   // red
    RGBColor(44, 160, 44),   // green
    RGBColor(255, 127, 14),  // orange
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(127, 127, 127), // grey
];

pub(super) const PANEL_WIDTH: u32 = 620;
pub(super) const HEIGHT: u32 = 820;
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing the plot: {e}")
}

pub fn draw(figure: &Figure, path: &Path) -> Result<(), String> {
    let format = format_of(path)?;
    load_font()?;
    let size = (PANEL_WIDTH * figure.panels.len() as u32, HEIGHT);
    match format {
        Format::Svg => draw_on(SVGBackend::new(path, size).into_drawing_area(), figure),
        Format::Png => draw_on(BitMapBackend::new(path, size).into_drawing_area(), figure),
    }
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &Figure,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(&figure.title, (FONT, 22).into_font())
        .map_err(err)?;
    let columns = root.split_evenly((1, figure.panels.len()));
    for (area, panel) in columns.iter().zip(&figure.panels) {
        let height = area.dim_in_pixel().1 as i32;
        let (top, bottom) = area.split_vertically(height * 64 / 100);
        values(&top, panel, &figure.stacks)?;
        ratios(&bottom, panel, &figure.stacks)?;
    }
    root.present().map_err(err)
}

pub(super) fn colour(stacks: &[String], name: &str) -> RGBColor {
    let i = stacks.iter().position(|s| s == name).unwrap_or(0);
    PALETTE[i % PALETTE.len()]
}

/// 1, 2, .. 512, 1K, .. 512K, 1M, .. for message sizes; plain for ranks.
fn fmt_key(key: f64, sizes: bool) -> String {
    let k = key.round() as u64;
    if !sizes {
        return k.to_string();
    }
    match k {
        k if k >= 1 << 30 && k % (1 << 30) == 0 => format!("{}G", k >> 30),
        k if k >= 1 << 20 && k % (1 << 20) == 0 => format!("{}M", k >> 20),
        k if k >= 1 << 10 && k % (1 << 10) == 0 => format!("{}K", k >> 10),
        k => k.to_string(),
    }
}

/// A value with about three significant digits, no exponent.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The keys' range, a little wider than the data on a log axis.
fn key_range(panel: &Panel) -> (f64, f64) {
    let keys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = keys.fold((f64::MAX, f64::MIN), |(l, h), k| (l.min(k), h.max(k)));
    (lo / 1.3, hi * 1.3)
}

fn values<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    stacks: &[String],
) -> Result<(), String> {
    let (x0, x1) = key_range(panel);
    let all = panel.series.iter().flat_map(|s| s.points.iter());
    let (y0, y1) = all.fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p.2), h.max(p.3)));
    let sizes = panel.key == "size";
    let better = if panel.lower_is_better {
        "lower is better"
    } else {
        "higher is better"
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} ({better})", panel.title()),
            (FONT, 18).into_font(),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1).log_scale().base(if sizes { 2.0 } else { 10.0 }),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc())
        .y_desc(panel.y_desc())
        .y_labels(12)
        .x_label_formatter(&|k| fmt_key(*k, sizes))
        .y_label_formatter(&|v| fmt_value(*v))
        .label_style((FONT, 13).into_font())
        .axis_desc_style((FONT, 15).into_font())
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()
        .map_err(err)?;
    for s in &panel.series {
        let c = colour(stacks, &s.name);
        // The min-max band: max along the keys, back along min.
        let band: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (p.0, p.3))
            .chain(s.points.iter().rev().map(|p| (p.0, p.2)))
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(band, c.mix(0.18).filled())))
            .map_err(err)?;
        let line = s.points.iter().map(|p| (p.0, p.1));
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)))
            .map_err(err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(3)));
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 3, c.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(if panel.lower_is_better {
            SeriesLabelPosition::UpperLeft
        } else {
            SeriesLabelPosition::LowerRight
        })
        .label_font((FONT, 14).into_font())
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(err)
}

fn ratios<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    stacks: &[String],
) -> Result<(), String> {
    let (x0, x1) = key_range(panel);
    let sizes = panel.key == "size";
    let all = panel
        .ratios
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.1));
    let (lo, hi) = all.fold((1.0f64, 1.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let against = match panel.ratios.first() {
        Some(r) if panel.ratios.iter().all(|o| o.against == r.against) => r.against.clone(),
        Some(_) => "its reference".to_string(),
        None => "best peer".to_string(),
    };
    let caption = if panel.ratios.is_empty() {
        "no Rivet stack and peer to compare".to_string()
    } else {
        format!(
            "Rivet / {against} ({} 1 is better)",
            if panel.lower_is_better {
                "below"
            } else {
                "above"
            }
        )
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 15).into_font())
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1).log_scale().base(if sizes { 2.0 } else { 10.0 }),
            (lo - (hi - lo) * 0.12).max(0.0)..hi + (hi - lo) * 0.12 + 0.05,
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc())
        .y_desc("ratio (median / median)")
        .x_label_formatter(&|k| fmt_key(*k, sizes))
        .y_label_formatter(&|v| trim(*v))
        .label_style((FONT, 13).into_font())
        .axis_desc_style((FONT, 15).into_font())
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            [(x0, 1.0), (x1, 1.0)],
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(err)?;
    for r in &panel.ratios {
        let c = colour(stacks, &r.name);
        chart
            .draw_series(LineSeries::new(r.points.iter().copied(), c.stroke_width(2)))
            .map_err(err)?;
        chart
            .draw_series(r.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_sizes_and_short_numbers() {
        assert_eq!(fmt_key(1.0, true), "1");
        assert_eq!(fmt_key(512.0, true), "512");
        assert_eq!(fmt_key(65536.0, true), "64K");
        assert_eq!(fmt_key(4194304.0, true), "4M");
        assert_eq!(fmt_key(1536.0, true), "1536");
        assert_eq!(fmt_key(32.0, false), "32");
        assert_eq!(fmt_value(0.25), "0.25");
        assert_eq!(fmt_value(12.5), "12.5");
        assert_eq!(fmt_value(3000.0), "3000");
        assert_eq!(fmt_value(25000.0), "25k");
        assert_eq!(fmt_value(9_500_000.0), "9.5M");
    }
}
