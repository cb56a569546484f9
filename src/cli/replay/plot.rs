//! `--plot FILE.svg`: denials per minute for each policy over the replayed span, drawn with
//! plotters as `simulate --plot` is, so the moments a limit would have bitten stand out.

use std::path::Path;

use plotters::prelude::*;

use super::report::Report;

/// Why the plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

/// Draw `report`'s denials per minute into the SVG file `path`.
pub fn svg(report: &Report, path: &Path) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let start = report.minutes.first().map_or(0, |m| m.minute);
    let span = report.minutes.last().map_or(1, |m| m.minute - start + 1) as f64;
    let top = report
        .minutes
        .iter()
        .flat_map(|m| m.denied.iter().copied())
        .max()
        .unwrap_or(0) as f64;
    let caption = match &report.first {
        Some(first) => format!("denials per minute by policy, from {first}"),
        None => "denials per minute by policy (no requests)".to_owned(),
    };
    let root = SVGBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..span, 0f64..(top * 1.1).max(1.0))
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc("minutes since the first request")
        .y_desc("denied per minute")
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, name) in report.policies.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        // Minutes without requests are absent from the bins: draw them as zero.
        let mut points = Vec::with_capacity(report.minutes.len() * 2);
        let mut next = start;
        for m in &report.minutes {
            if m.minute > next {
                points.push(((next - start) as f64, 0.0));
                points.push(((m.minute - 1 - start) as f64, 0.0));
            }
            points.push(((m.minute - start) as f64, m.denied[i] as f64));
            next = m.minute + 1;
        }
        let total: u64 = report.minutes.iter().map(|m| m.denied[i]).sum();
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(format!("{name} ({total} denied)"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}
