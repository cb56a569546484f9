//! `--plot FILE.svg`: admitted requests per 100 ms for each design, against the limit's
//! 100 ms share, so the difference between the designs is visible at a glance.

use std::path::Path;

use plotters::prelude::*;

use super::BIN;
use super::report::Report;

/// Why the plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

/// Draw `report` into the SVG file `path`.
pub fn svg(report: &Report, path: &Path) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let bins = report.rows.first().map_or(0, |r| r.bins.len());
    let per_bin = f64::from(report.limit_per_second) * BIN as f64 / 1e9;
    let top = report
        .rows
        .iter()
        .flat_map(|r| r.bins.iter().copied())
        .max()
        .unwrap_or(1) as f64
        * 1.1;
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "admitted per 100 ms: {} nodes, {:.0}/s offered, limit {}/s burst {}",
                report.nodes, report.offered_per_second, report.limit_per_second, report.burst
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..(bins as f64 * BIN as f64 / 1e9), 0f64..top.max(1.0))
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("admitted per 100 ms")
        .draw()
        .map_err(|e| fail(&e))?;
    let secs = |i: usize| i as f64 * BIN as f64 / 1e9;
    chart
        .draw_series(LineSeries::new(
            [(0.0, per_bin), (secs(bins), per_bin)],
            BLACK.stroke_width(2),
        ))
        .map_err(|e| fail(&e))?
        .label("limit: rate x 100 ms")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, row) in report.rows.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                row.bins
                    .iter()
                    .enumerate()
                    .map(|(b, &n)| (secs(b), n as f64)),
                colour.stroke_width(1),
            ))
            .map_err(|e| fail(&e))?
            .label(format!("{} ({:+.1}%)", row.design, row.vs_bound_pct))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
