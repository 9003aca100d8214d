//! Trend charts as PNG, drawn in memory with plotters and encoded with the `png` crate.
//!
//! Axis labels and values are drawn with DejaVu Sans, embedded in the binary (licence in
//! `assets/fonts/LICENSE-DejaVu.txt`) and rasterised by plotters' pure-Rust `ab_glyph` text
//! backend, so no system font or fontconfig is needed. The legend stays in the HTML next to
//! the image, where mail clients render text better.

use super::Chart;
use super::WeeklyReport;
use super::BUCKETS;
use chrono::{DateTime, Duration, Utc};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::sync::OnceLock;
use thiserror::Error;

/// The embedded font (DejaVu Sans, Bitstream Vera licence with DejaVu's public-domain changes).
pub static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
/// Font family name the charts ask plotters for.
const FAMILY: &str = "sans-serif";
/// Pixels left of the plot for the y values, and below it for the days.
const Y_LABELS: u32 = 64;
const X_LABELS: u32 = 34;

/// Registers [`FONT`] with plotters once; `Err` says why text cannot be drawn.
fn font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the embedded font could not be read".to_string())
        })
        .clone()
}

/// Chart width in pixels.
pub const WIDTH: u32 = 720;
/// Chart height in pixels.
pub const HEIGHT: u32 = 240;
/// Hours between vertical gridlines.
pub const DAY_LINE_HOURS: i64 = 24;

/// Line colours, one per series in order (repeats after ten); the HTML legend uses the same.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of series `i`.
pub fn color(i: usize) -> (u8, u8, u8) {
    PALETTE[i % PALETTE.len()]
}

/// The colour of series `i` as CSS hex (`#1f77b4`).
pub fn color_hex(i: usize) -> String {
    let (r, g, b) = color(i);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// A chart could not be drawn or encoded.
#[derive(Debug, Error)]
#[error("chart for {provider}: {message}")]
pub struct ChartError {
    /// Provider of the chart.
    pub provider: String,
    /// What failed.
    pub message: String,
}

/// The y axis: top value and gridline step, both round numbers (1, 2 or 5 × 10ⁿ ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Value at the top edge, ms.
    pub max: f64,
    /// Distance between horizontal gridlines, ms.
    pub step: f64,
}

/// A scale with about five gridlines that fits every point of `chart`.
pub fn scale(chart: &Chart) -> Scale {
    let top = chart.series.iter().flat_map(|s| s.p50_ms.iter().flatten()).fold(0.0_f64, |a, &b| a.max(b));
    if !(top.is_finite() && top > 0.0) {
        return Scale { max: 1.0, step: 1.0 };
    }
    let raw = top / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(10.0 * magnitude);
    let max = (top / step).ceil() * step;
    // A point exactly on the top edge would be half clipped.
    let max = if max <= top { max + step } else { max };
    Scale { max, step }
}

/// A rendered chart: the PNG and the scale it was drawn with (the HTML states the scale).
#[derive(Debug, Clone)]
pub struct Picture {
    /// PNG bytes.
    pub png: Vec<u8>,
    /// Y axis of the drawing.
    pub scale: Scale,
}

/// Every chart of `report`, in order.
pub fn pictures(report: &WeeklyReport) -> Result<Vec<Picture>, ChartError> {
    report
        .charts
        .iter()
        .map(|c| {
            let scale = scale(c);
            Ok(Picture { png: render_since(c, scale, Some(report.this_week.since))?, scale })
        })
        .collect()
}

const GRID: RGBColor = RGBColor(225, 225, 225);
const AXIS: RGBColor = RGBColor(120, 120, 120);
const AXIS_TEXT: RGBColor = RGBColor(60, 60, 60);

/// Draws `chart` (x: this week's 6-hour steps, labelled by days before the end; y: `scale`)
/// and returns the PNG bytes.
pub fn render(chart: &Chart, scale: Scale) -> Result<Vec<u8>, ChartError> {
    render_since(chart, scale, None)
}

/// [`render`] with the days labelled by date when the week's start (`since`) is known.
pub fn render_since(chart: &Chart, scale: Scale, since: Option<DateTime<Utc>>) -> Result<Vec<u8>, ChartError> {
    let fail = |message: String| ChartError { provider: chart.provider.clone(), message };
    font().map_err(fail)?;
    let mut rgb = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    draw(chart, scale, since, &mut rgb).map_err(fail)?;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, WIDTH, HEIGHT);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| fail(format!("PNG header: {e}")))?;
    writer.write_image_data(&rgb).map_err(|e| fail(format!("PNG data: {e}")))?;
    writer.finish().map_err(|e| fail(format!("PNG end: {e}")))?;
    Ok(out)
}

/// The x positions of the day lines (every 24 h, both ends included).
fn day_points() -> Vec<f64> {
    let per_day = (DAY_LINE_HOURS / super::BUCKET_HOURS) as usize;
    (0..=BUCKETS).step_by(per_day).map(|i| i as f64).collect()
}

/// Label of the day line at step `i` (every 24 h): the date when known, else days before the end.
fn day_label(i: usize, since: Option<DateTime<Utc>>) -> String {
    let hours = i as i64 * super::BUCKET_HOURS;
    match since {
        Some(s) => (s + Duration::hours(hours)).format("%a %d %b").to_string(),
        None => format!("{}d", hours / 24 - super::WEEK_DAYS),
    }
}

/// A y value in ms as the axis shows it: `250 ms`, `1.5 s`.
fn ms_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{} s", (v / 100.0).round() / 10.0)
    } else {
        format!("{v:.0} ms")
    }
}

fn draw(chart: &Chart, scale: Scale, since: Option<DateTime<Utc>>, rgb: &mut [u8]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::with_buffer(rgb, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_end = BUCKETS as f64;
    let mut plot = ChartBuilder::on(&root)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(X_LABELS)
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(0.0..x_end, 0.0..scale.max)
        .map_err(|e| err(&e))?;
    let text = (FAMILY, 12).into_font().color(&AXIS_TEXT);
    let per_day = (DAY_LINE_HOURS / super::BUCKET_HOURS) as usize;
    let steps = (scale.max / scale.step).round() as usize;
    // Values and days come from the axis painter; the gridlines are drawn below as before.
    plot.configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(steps + 1)
        .y_label_formatter(&|y| ms_label(*y))
        .y_label_style(text.clone())
        .axis_style(AXIS)
        .draw()
        .map_err(|e| err(&e))?;
    // Day labels centred under their gridlines (plotters picks its own x key points otherwise).
    for x in day_points() {
        let label = day_label(x as usize, since);
        let (w, _) = root.estimate_text_size(&label, &text).map_err(|e| err(&e))?;
        let (px, py) = plot.backend_coord(&(x, 0.0));
        let left = (px - w as i32 / 2).clamp(0, WIDTH as i32 - w as i32);
        root.draw(&Text::new(label, (left, py + 8), text.clone())).map_err(|e| err(&e))?;
    }
    let horizontal = (1..=steps).map(|k| {
        let y = k as f64 * scale.step;
        PathElement::new(vec![(0.0, y), (x_end, y)], GRID.stroke_width(1))
    });
    plot.draw_series(horizontal).map_err(|e| err(&e))?;
    let vertical = (per_day..BUCKETS).step_by(per_day).map(|i| {
        let x = i as f64;
        PathElement::new(vec![(x, 0.0), (x, scale.max)], GRID.stroke_width(1))
    });
    plot.draw_series(vertical).map_err(|e| err(&e))?;
    let axes = [vec![(0.0, scale.max), (0.0, 0.0), (x_end, 0.0)]];
    plot.draw_series(axes.into_iter().map(|p| PathElement::new(p, AXIS.stroke_width(1)))).map_err(|e| err(&e))?;

    for (i, series) in chart.series.iter().enumerate() {
        let (r, g, b) = color(i);
        let c = RGBColor(r, g, b);
        // A gap (no successful probe in a step) breaks the line instead of bridging it.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for (step, v) in series.p50_ms.iter().enumerate() {
            match v {
                Some(v) => {
                    if let Some(run) = runs.last_mut() {
                        run.push((step as f64 + 0.5, v.min(scale.max)));
                    }
                }
                None => runs.push(Vec::new()),
            }
        }
        let points: Vec<(f64, f64)> = runs.iter().flatten().copied().collect();
        plot.draw_series(runs.into_iter().filter(|r| r.len() > 1).map(|r| PathElement::new(r, c.stroke_width(2))))
            .map_err(|e| err(&e))?;
        plot.draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled()))).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::weekly::WeeklySeries;

    fn chart(points: &[Option<f64>]) -> Chart {
        let mut p50_ms = points.to_vec();
        p50_ms.resize(BUCKETS, None);
        Chart {
            provider: "groq".into(),
            series: vec![WeeklySeries { target: "groq/m".into(), region: "eu".into(), p50_ms }],
        }
    }

    #[test]
    fn scales_are_round_and_leave_room_above_the_highest_point() {
        assert_eq!(scale(&chart(&[Some(180.0), Some(430.0)])), Scale { max: 500.0, step: 100.0 });
        assert_eq!(scale(&chart(&[Some(1_000.0)])), Scale { max: 1_200.0, step: 200.0 });
        assert_eq!(scale(&chart(&[Some(42.0)])), Scale { max: 50.0, step: 10.0 });
        assert_eq!(scale(&chart(&[None])), Scale { max: 1.0, step: 1.0 });
    }

    #[test]
    fn a_chart_is_a_png_of_the_stated_size_with_the_series_colour_in_it() {
        let c = chart(&[Some(180.0), Some(200.0), None, Some(190.0)]);
        let png_bytes = render(&c, scale(&c)).expect("render");
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("png frame");
        assert_eq!((info.width, info.height), (WIDTH, HEIGHT));
        let (r, g, b) = color(0);
        assert!(buf.chunks(3).any(|p| p == [r, g, b]), "the line is drawn in the legend colour");
    }

    /// Dark (text) pixels inside a rectangle of a decoded RGB picture.
    fn ink(buf: &[u8], x: std::ops::Range<u32>, y: std::ops::Range<u32>) -> usize {
        y.flat_map(|row| x.clone().map(move |col| ((row * WIDTH + col) * 3) as usize))
            .filter(|&i| buf[i] < 140 && buf[i + 1] < 140 && buf[i + 2] < 140)
            .count()
    }

    #[test]
    fn axes_carry_values_and_days_in_the_embedded_font() {
        let c = chart(&[Some(180.0), Some(430.0)]);
        let since = chrono::DateTime::parse_from_rfc3339("2026-11-23T09:00:00Z").expect("time").to_utc();
        let png_bytes = render_since(&c, scale(&c), Some(since)).expect("render");
        if let Some(path) = std::env::var_os("VIGIL_CHART_OUT") {
            std::fs::write(path, &png_bytes).expect("write the chart for a look");
        }
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        reader.next_frame(&mut buf).expect("png frame");
        // Left of the plot: the y values ("100 ms" … "500 ms"); below it: the dates.
        assert!(ink(&buf, 0..Y_LABELS, 0..HEIGHT - X_LABELS) > 200, "y axis values are drawn");
        assert!(ink(&buf, Y_LABELS..WIDTH, HEIGHT - X_LABELS..HEIGHT) > 100, "day labels are drawn");
        assert_eq!(day_label(0, Some(since)), "Mon 23 Nov");
        assert_eq!(day_label(4, None), "-6d");
        assert_eq!((ms_label(250.0), ms_label(1500.0)), ("250 ms".to_string(), "1.5 s".to_string()));
    }
}
