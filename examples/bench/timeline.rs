//! The timeline picture, as SVG text written by hand (no dependency):
//! panels stacked one above the other, each with a row per candidate (its
//! state over time), a row of the writes the Lease took, brackets for the
//! lease duration, renew deadline and retry period, and the interval the
//! figure measures magnified in a strip of its own.
//!
//! The text holds no blank line and no XML declaration, so that rustdoc
//! can embed it whole in the crate's documentation as an HTML block.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 30.0;
const ROW: f64 = 24.0;
const FONT: &str = "font-family=\"Helvetica, Arial, sans-serif\"";

const FOLLOWING: &str = "#d0d7de";
const LEADING: &str = "#2da44e";
const INK: &str = "#1f2328";
const MUTED: &str = "#656d76";
const WRITER: &str = "#cf222e";

/// One candidate's state over time, or another writer's one write.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub name: String,
    /// (from, to, leading); `to` `None`: to the panel's end.
    pub spans: Vec<(Instant, Option<Instant>, bool)>,
    /// Events written beside the row: when, and what.
    pub events: Vec<(Instant, String)>,
    /// Another writer: drawn as one mark, not a state.
    pub writer: bool,
}

impl Row {
    /// A candidate started at `spawned`, leading from `led` until `ended`
    /// (`note` said there).
    pub fn candidate(
        name: &str,
        spawned: Instant,
        led: Option<Instant>,
        ended: Option<Instant>,
        note: &str,
    ) -> Row {
        let mut spans = Vec::new();
        match led {
            Some(led) => {
                if led > spawned {
                    spans.push((spawned, Some(led), false));
                }
                spans.push((led, ended, true));
            }
            None => spans.push((spawned, ended, false)),
        }
        let events = ended
            .filter(|_| !note.is_empty())
            .map(|at| vec![(at, note.to_string())])
            .unwrap_or_default();
        Row {
            name: name.to_string(),
            spans,
            events,
            writer: false,
        }
    }

    /// Another writer, writing once at `at`.
    pub fn writer(what: &str, at: Instant) -> Row {
        Row {
            name: "another writer".into(),
            spans: Vec::new(),
            events: vec![(at, what.to_string())],
            writer: true,
        }
    }
}

/// A write the Lease took: when, by whom (colours it), and what.
#[derive(Debug, Clone)]
pub struct Tick {
    pub at: Instant,
    pub by: String,
    pub what: String,
}

/// A bracket under the Lease row.
#[derive(Debug, Clone)]
pub struct Mark {
    pub from: Instant,
    pub to: Instant,
    pub label: String,
}

/// One panel: a scenario from one run.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub from: Instant,
    pub to: Instant,
    /// Where the axis reads 0.
    pub zero: Instant,
    pub rows: Vec<Row>,
    pub writes: Vec<Tick>,
    pub marks: Vec<Mark>,
    /// The interval the figure measures, magnified, and its label.
    pub zoom: Option<(Instant, Instant, String)>,
    /// The figures beside it (the polling run's, say).
    pub note: String,
    /// Dashed lines with a label: what would have happened otherwise.
    pub hints: Vec<(Instant, String)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Seconds between `a` and `b`, signed.
fn secs(a: Instant, b: Instant) -> f64 {
    if b >= a {
        b.duration_since(a).as_secs_f64()
    } else {
        -a.duration_since(b).as_secs_f64()
    }
}

fn colour(by: &str) -> &'static str {
    match by {
        "a" => "#0969da",
        "b" => "#8250df",
        "" => MUTED,
        _ => WRITER,
    }
}

/// A tidy step for about `n` axis ticks over `span` seconds.
fn step(span: f64, n: f64) -> f64 {
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn label_secs(s: f64, step: f64) -> String {
    let digits = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    let v = format!("{:.*}", digits, s.abs());
    match s {
        s if s.abs() < step / 1e6 => "0".to_string(),
        s if s < 0.0 => format!("−{v} s"),
        _ => format!("+{v} s"),
    }
}

fn label_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The whole picture.
pub fn render(title: &str, subtitle: &str, panels: &[Panel]) -> String {
    let mut body = String::new();
    let mut y = 56.0;
    for p in panels {
        y = panel(&mut body, p, y) + 26.0;
    }
    let height = y + 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{}\">",
        esc(title)
    );
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"24\" {FONT} font-size=\"16\" font-weight=\"bold\" fill=\"{INK}\">{}</text>",
        esc(title)
    );
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"42\" {FONT} font-size=\"12\" fill=\"{MUTED}\">{}</text>",
        esc(subtitle)
    );
    out.push_str(&body);
    // A legend.
    let ly = height - 12.0;
    let _ = writeln!(
        out,
        "<rect x=\"16\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{FOLLOWING}\"/><text x=\"34\" y=\"{ly}\" {FONT} font-size=\"11\" fill=\"{INK}\">following</text>",
        ly - 9.0
    );
    let _ = writeln!(
        out,
        "<rect x=\"104\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{LEADING}\"/><text x=\"122\" y=\"{ly}\" {FONT} font-size=\"11\" fill=\"{INK}\">leading</text>",
        ly - 9.0
    );
    let _ = writeln!(
        out,
        "<line x1=\"186\" y1=\"{}\" x2=\"186\" y2=\"{}\" stroke=\"{INK}\" stroke-width=\"2\"/><text x=\"192\" y=\"{ly}\" {FONT} font-size=\"11\" fill=\"{INK}\">a write the Lease took (coloured by its writer)</text>",
        ly - 11.0,
        ly + 1.0
    );
    out.push_str("</svg>\n");
    out
}

/// Draw `p` from `top`; the y below it.
fn panel(out: &mut String, p: &Panel, top: f64) -> f64 {
    let span = secs(p.from, p.to).max(1e-9);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |t: Instant| LEFT + (secs(p.from, t) / span).clamp(0.0, 1.0) * plot;
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"{}\" {FONT} font-size=\"13\" font-weight=\"bold\" fill=\"{INK}\">{}</text>",
        top + 14.0,
        esc(&p.title)
    );
    // Room above the rows for the hints' labels.
    let mut y = top + if p.hints.is_empty() { 26.0 } else { 38.0 };
    let grid_top = y;
    // Candidates.
    for r in &p.rows {
        let _ = writeln!(
            out,
            "<text x=\"16\" y=\"{}\" {FONT} font-size=\"12\" fill=\"{INK}\">{}</text>",
            y + 15.0,
            esc(&r.name)
        );
        for (from, to, leading) in &r.spans {
            let (x0, x1) = (x(*from), x(to.unwrap_or(p.to)));
            let fill = if *leading { LEADING } else { FOLLOWING };
            let _ = writeln!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>",
                y + 4.0,
                (x1 - x0).max(1.0),
                ROW - 8.0
            );
            if *leading {
                let _ = writeln!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"#ffffff\">leading</text>",
                    x0 + 4.0,
                    y + 16.0
                );
            }
        }
        for (at, what) in &r.events {
            let xa = x(*at);
            let col = if r.writer { WRITER } else { INK };
            let _ = writeln!(
                out,
                "<line x1=\"{xa:.1}\" y1=\"{:.1}\" x2=\"{xa:.1}\" y2=\"{:.1}\" stroke=\"{col}\" stroke-width=\"2\"/>",
                y + 2.0,
                y + ROW - 2.0
            );
            let anchor = if xa > LEFT + plot * 0.75 {
                "end"
            } else {
                "start"
            };
            let dx = if anchor == "end" { -5.0 } else { 5.0 };
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"{col}\" text-anchor=\"{anchor}\">{}</text>",
                xa + dx,
                y + 16.0,
                esc(what)
            );
        }
        y += ROW;
    }
    // The Lease's writes.
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"{}\" {FONT} font-size=\"12\" fill=\"{INK}\">Lease writes</text>",
        y + 15.0
    );
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{FOLLOWING}\"/>",
        y + ROW / 2.0,
        LEFT + plot,
        y + ROW / 2.0
    );
    for w in p.writes.iter().filter(|w| w.at >= p.from && w.at <= p.to) {
        let xw = x(w.at);
        let _ = writeln!(
            out,
            "<line x1=\"{xw:.1}\" y1=\"{:.1}\" x2=\"{xw:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"><title>{}</title></line>",
            y + 3.0,
            y + ROW - 3.0,
            colour(&w.by),
            esc(&w.what)
        );
    }
    // Labels of the writes that are not renews, below the row.
    let mut label_y = y + ROW + 10.0;
    let mut last_x = f64::NEG_INFINITY;
    for w in p
        .writes
        .iter()
        .filter(|w| w.at >= p.from && w.at <= p.to && !w.what.starts_with("renew"))
    {
        let xw = x(w.at);
        if xw - last_x < 90.0 {
            label_y += 12.0;
        } else {
            label_y = y + ROW + 10.0;
        }
        last_x = xw;
        let _ = writeln!(
            out,
            "<text x=\"{xw:.1}\" y=\"{label_y:.1}\" {FONT} font-size=\"10\" fill=\"{}\" text-anchor=\"middle\">{}</text>",
            colour(&w.by),
            esc(&w.what)
        );
    }
    y = label_y + 6.0;
    // Brackets.
    for m in &p.marks {
        let (x0, x1) = (x(m.from), x(m.to));
        let my = y + 8.0;
        let _ = writeln!(
            out,
            "<path d=\"M{x0:.1},{:.1} V{my:.1} H{x1:.1} V{:.1}\" fill=\"none\" stroke=\"{INK}\" stroke-width=\"1\"/>",
            my - 5.0,
            my - 5.0
        );
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"{INK}\" text-anchor=\"middle\">{}</text>",
            (x0 + x1) / 2.0,
            my + 12.0,
            esc(&m.label)
        );
        y += 26.0;
    }
    // The time axis, with faint grid lines up through the rows.
    let step = step(span, 8.0);
    let first = (secs(p.zero, p.from) / step).ceil() as i64;
    let last = (secs(p.zero, p.to) / step).floor() as i64;
    let axis_y = y + 6.0;
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"{MUTED}\"/>",
        LEFT + plot
    );
    for k in first..=last {
        let s = k as f64 * step;
        let xs = LEFT + ((s - secs(p.zero, p.from)) / span) * plot;
        let _ = writeln!(
            out,
            "<line x1=\"{xs:.1}\" y1=\"{grid_top:.1}\" x2=\"{xs:.1}\" y2=\"{:.1}\" stroke=\"{FOLLOWING}\" stroke-dasharray=\"2,3\" stroke-width=\"0.6\"/>",
            axis_y + 4.0
        );
        let _ = writeln!(
            out,
            "<text x=\"{xs:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" fill=\"{MUTED}\" text-anchor=\"middle\">{}</text>",
            axis_y + 16.0,
            label_secs(s, step)
        );
    }
    for (at, what) in p
        .hints
        .iter()
        .filter(|(at, _)| *at >= p.from && *at <= p.to)
    {
        let xh = x(*at);
        let _ = writeln!(
            out,
            "<line x1=\"{xh:.1}\" y1=\"{:.1}\" x2=\"{xh:.1}\" y2=\"{:.1}\" stroke=\"{MUTED}\" stroke-dasharray=\"5,3\" stroke-width=\"1.2\"/>",
            grid_top - 6.0,
            axis_y
        );
        let anchor = if xh > LEFT + plot * 0.6 {
            "end"
        } else {
            "start"
        };
        let dx = if anchor == "end" { -4.0 } else { 4.0 };
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" font-style=\"italic\" fill=\"{MUTED}\" text-anchor=\"{anchor}\">{}</text>",
            xh + dx,
            grid_top - 2.0,
            esc(what)
        );
    }
    y = axis_y + 22.0;
    // The figure's interval, magnified.
    if let Some((from, to, label)) = &p.zoom {
        let d = to.saturating_duration_since(*from);
        let pad = d.max(Duration::from_micros(200)) / 2;
        let (zf, zt) = (*from - pad, *to + pad);
        let zspan = secs(zf, zt).max(1e-9);
        let zx = |t: Instant| LEFT + (secs(zf, t) / zspan).clamp(0.0, 1.0) * plot;
        let magnified = span / zspan;
        let _ = writeln!(
            out,
            "<text x=\"16\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"{MUTED}\">magnified ×{:.0}</text>",
            y + 14.0,
            magnified
        );
        let zy = y + 4.0;
        let _ = writeln!(
            out,
            "<rect x=\"{LEFT}\" y=\"{zy:.1}\" width=\"{plot:.1}\" height=\"16\" fill=\"#f6f8fa\" stroke=\"{FOLLOWING}\"/>"
        );
        let (x0, x1) = (zx(*from), zx(*to));
        let _ = writeln!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{zy:.1}\" width=\"{:.1}\" height=\"16\" fill=\"#fff8c5\" stroke=\"#d4a72c\"/>",
            (x1 - x0).max(1.0)
        );
        // Its two ends, on the magnified scale.
        for (xe, text, anchor) in [(x0, "0", "end"), (x1, label_ms(d).as_str(), "start")] {
            let dx = if anchor == "end" { -4.0 } else { 4.0 };
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"10\" fill=\"{MUTED}\" text-anchor=\"{anchor}\">{}</text>",
                xe + dx,
                zy + 12.0,
                esc(text)
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"{INK}\" text-anchor=\"middle\">{} = {}</text>",
            (x0 + x1) / 2.0,
            zy + 30.0,
            esc(label),
            label_ms(d)
        );
        y = zy + 38.0;
    }
    if !p.note.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"16\" y=\"{:.1}\" {FONT} font-size=\"11\" fill=\"{MUTED}\">{}</text>",
            y + 12.0,
            esc(&p.note)
        );
        y += 16.0;
    }
    y
}
