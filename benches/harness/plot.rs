//! A plot of how figures grow with a count, as SVG text: one panel per
//! figure, the count on a log scale, one line per store. Written by hand,
//! since a few paths and labels need no plotting library.

use std::fmt::Write;

/// One line: a store's value at each count.
pub struct Series {
    pub name: String,
    /// (count, value), in order of count.
    pub points: Vec<(f64, f64)>,
}

/// One figure: its lines, and its goal as a dashed line if it has one.
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
    pub goal: Option<f64>,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];
const WIDTH: f64 = 330.0;
const HEIGHT: f64 = 230.0;
const COLUMNS: usize = 3;
/// Room for the title and legend above the panels.
const TOP: f64 = 50.0;
/// Inside a panel: room for the y labels, the title, the x labels.
const LEFT: f64 = 55.0;
const RIGHT: f64 = 15.0;
const ABOVE: f64 = 28.0;
const BELOW: f64 = 35.0;

/// A round step for about five ticks up to `max`.
fn step(max: f64) -> f64 {
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole picture: `title` above, the stores' legend, then the panels.
pub fn svg(title: &str, panels: &[Panel]) -> String {
    let rows = panels.len().div_ceil(COLUMNS).max(1);
    let (w, h) = (WIDTH * COLUMNS as f64, TOP + HEIGHT * rows as f64);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="14" font-weight="bold">{}</text>"#,
        escape(title)
    );
    // The legend: every series name met, in order, one color each.
    let mut names: Vec<&str> = Vec::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    let color = |name: &str| {
        let i = names.iter().position(|n| *n == name).unwrap_or(0);
        COLORS[i % COLORS.len()]
    };
    for (i, name) in names.iter().enumerate() {
        let x = 10.0 + 110.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="36" x2="{}" y2="36" stroke="{}" stroke-width="2"/><text x="{}" y="40">{}</text>"#,
            x + 20.0,
            color(name),
            x + 25.0,
            escape(name)
        );
    }
    let _ = writeln!(
        out,
        r#"<line x1="{}" y1="36" x2="{}" y2="36" stroke="gray" stroke-dasharray="4 3"/><text x="{}" y="40">goal</text>"#,
        10.0 + 110.0 * names.len() as f64,
        30.0 + 110.0 * names.len() as f64,
        35.0 + 110.0 * names.len() as f64
    );
    for (i, panel) in panels.iter().enumerate() {
        let x0 = WIDTH * (i % COLUMNS) as f64;
        let y0 = TOP + HEIGHT * (i / COLUMNS) as f64;
        self::panel(&mut out, panel, x0, y0, &color);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, panel: &Panel, x0: f64, y0: f64, color: &dyn Fn(&str) -> &'static str) {
    let points = panel.series.iter().flat_map(|s| &s.points);
    let counts: Vec<f64> = points.clone().map(|p| p.0).filter(|n| *n > 0.0).collect();
    let values = points.map(|p| p.1).filter(|v| v.is_finite());
    let top = values.chain(panel.goal).fold(0.0f64, f64::max);
    let step = if top > 0.0 { step(top * 1.05) } else { 1.0 };
    let y_max = (top * 1.05 / step).ceil().max(1.0) * step;
    let logs = counts.iter().map(|n| n.log10());
    let lo = 10f64.powf(logs.clone().fold(f64::INFINITY, f64::min).floor());
    let hi = 10f64.powf(logs.fold(f64::NEG_INFINITY, f64::max).ceil());
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (1.0, 10.0)
    };
    let (left, right) = (x0 + LEFT, x0 + WIDTH - RIGHT);
    let (up, down) = (y0 + ABOVE, y0 + HEIGHT - BELOW);
    let x = |n: f64| left + (n.log10() - lo.log10()) / (hi.log10() - lo.log10()) * (right - left);
    let y = |v: f64| down - v / y_max * (down - up);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
        left,
        y0 + 16.0,
        escape(&panel.title)
    );
    // Axes, decades on x, round steps on y, with light grid lines.
    let mut n = lo;
    while n <= hi * 1.001 {
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{up}" x2="{0:.1}" y2="{down}" stroke="#ddd"/><text x="{0:.1}" y="{1}" text-anchor="middle">{2}</text>"##,
            x(n),
            down + 14.0,
            label(n)
        );
        n *= 10.0;
    }
    let mut v = 0.0;
    while v <= y_max * 1.0001 {
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="#ddd"/><text x="{1}" y="{2:.1}" text-anchor="end">{3}</text>"##,
            y(v),
            left - 4.0,
            y(v) + 4.0,
            label(v)
        );
        v += step;
    }
    let _ = writeln!(
        out,
        r#"<path d="M{left} {up} V{down} H{right}" fill="none" stroke="black"/>"#
    );
    if let Some(goal) = panel.goal {
        let _ = writeln!(
            out,
            r#"<line x1="{left}" y1="{0:.1}" x2="{right}" y2="{0:.1}" stroke="gray" stroke-dasharray="4 3"/>"#,
            y(goal)
        );
    }
    for s in &panel.series {
        let mut d = String::new();
        for &(n, v) in s.points.iter().filter(|(n, v)| *n > 0.0 && v.is_finite()) {
            let _ = write!(
                d,
                "{}{:.1} {:.1}",
                if d.is_empty() { "M" } else { " L" },
                x(n),
                y(v)
            );
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                x(n),
                y(v),
                color(&s.name)
            );
        }
        let _ = writeln!(
            out,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="2"/>"#,
            color(&s.name)
        );
    }
}
