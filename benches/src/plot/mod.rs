//! Plots of a comparison: `rivet-bench plot RESULTS.json -o FILE` and
//! `rivet-bench compare ... --plot FILE`. Both read the JSON document
//! `compare --json` prints (`data`), so a plot can be redrawn later from a
//! saved run, and draw it with plotters (`draw`): per benchmark measured at
//! two sizes or more, the median curve of every stack on log-log axes with
//! its min-max band, and below it each Rivet stack's median over the best
//! peer's. SVG by default, PNG when the file name ends in `.png`.
//!
//! Text needs a TrueType font for its layout (SVG too: plotters measures
//! labels to place them). The font is read at run time, not built in:
//! `RIVET_BENCH_FONT` if set, else the first of a few usual system paths
//! (DejaVu Sans, package fonts-dejavu-core; Liberation; FreeFont; Noto).

mod data;
mod draw;

use std::path::{Path, PathBuf};

pub use data::Figure;

/// Options of `rivet-bench plot`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A `rivet-bench compare --json` document (its last JSON line is used).
    results: PathBuf,
    /// The picture: `.svg` or `.png` [default: RESULTS with .svg].
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.results)
        .map_err(|e| format!("cannot read {}: {e}", args.results.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("{}: no JSON document in it", args.results.display()))?;
    let output = args
        .output
        .unwrap_or_else(|| args.results.with_extension("svg"));
    plot_json(line, &output)
}

/// Draw the compare document `json` into `output`; says where on stderr.
pub fn plot_json(json: &str, output: &Path) -> Result<(), String> {
    let figure = Figure::from_json(json)?;
    for note in &figure.notes {
        eprintln!("rivet-bench: plot: {note}");
    }
    draw::draw(&figure, output)?;
    eprintln!("rivet-bench: plot written to {}", output.display());
    Ok(())
}

/// The picture format a file name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
}

pub fn format_of(path: &Path) -> Result<Format, String> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(format!(
            "{}: the plot's file name must end in .svg or .png",
            path.display()
        )),
    }
}

/// Where fonts usually are on Linux distributions (regular sans faces).
const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
];

/// Register a sans-serif font with plotters, once per process.
fn load_font() -> Result<(), String> {
    static LOADED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let from_env = std::env::var_os("RIVET_BENCH_FONT").map(PathBuf::from);
            let candidates: Vec<PathBuf> = match from_env {
                Some(p) => vec![p],
                None => FONT_PATHS.iter().map(PathBuf::from).collect(),
            };
            for path in &candidates {
                let Ok(bytes) = std::fs::read(path) else {
                    continue;
                };
                // plotters keeps fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font(
                    "sans-serif",
                    plotters::style::FontStyle::Normal,
                    bytes,
                )
                .map_err(|_| format!("{}: not a TrueType font", path.display()));
            }
            Err(format!(
                "no font to draw text with: set RIVET_BENCH_FONT to a .ttf file, or install \
                 fonts-dejavu-core (looked at {})",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example in docs/: a real `compare --json` run and the plots
    /// drawn from it (`rivet-bench plot docs/compare-shm.json -o ...`).
    const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/compare-shm");

    fn example_figure() -> Figure {
        let json =
            std::fs::read_to_string(format!("{EXAMPLE}.json")).expect("docs/compare-shm.json");
        Figure::from_json(json.lines().last().expect("a line")).expect("a compare document")
    }

    /// `#RRGGBB` of each stack, in the figure's order.
    fn colours(figure: &Figure) -> Vec<(String, [u8; 3])> {
        figure
            .stacks
            .iter()
            .map(|s| {
                let c = draw::colour(&figure.stacks, s);
                (s.clone(), [c.0, c.1, c.2])
            })
            .collect()
    }

    /// The SVG's `<text>` contents, trimmed.
    fn svg_texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>'))
            .filter_map(|(_, rest)| rest.split_once("</text>"))
            .map(|(body, _)| body.trim().to_string())
            .collect()
    }

    #[test]
    fn example_svg_has_a_series_per_stack_axis_labels_and_a_legend() {
        let figure = example_figure();
        let svg = std::fs::read_to_string(format!("{EXAMPLE}.svg")).expect("docs/compare-shm.svg");
        let panels = figure.panels.len();
        assert!(panels >= 2, "latency and bw at least");
        for (name, [r, g, b]) in colours(&figure) {
            let stroke = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"");
            // Curves are 2 px wide: one per panel, plus the ratio curve of a Rivet stack.
            let curves = svg
                .split("<polyline")
                .filter(|p| p.contains(&stroke) && p.contains("stroke-width=\"2\""))
                .count();
            let per_panel = if name.starts_with("rivet") { 2 } else { 1 };
            assert_eq!(curves, per_panel * panels, "{name}'s curves");
            // The legend: a 3 px swatch and the name, once per panel.
            let swatches = svg
                .split("<polyline")
                .filter(|p| p.contains(&stroke) && p.contains("stroke-width=\"3\""))
                .count();
            assert_eq!(swatches, panels, "{name}'s legend entries");
            let texts = svg_texts(&svg);
            assert_eq!(
                texts.iter().filter(|t| **t == name).count(),
                panels,
                "{name}"
            );
        }
        let texts = svg_texts(&svg);
        for label in ["Message size (bytes)", "Latency (us)", "Bandwidth (MB/s)"] {
            assert!(
                texts.iter().any(|t| t == label),
                "axis label {label:?} in {texts:?}"
            );
        }
        assert!(texts.iter().any(|t| t.starts_with("Rivet / best peer")));
    }

    #[test]
    fn example_png_has_its_size_and_every_stacks_colour() {
        let figure = example_figure();
        let file = std::fs::File::open(format!("{EXAMPLE}.png")).expect("docs/compare-shm.png");
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a frame");
        assert_eq!(
            (info.width, info.height),
            (draw::PANEL_WIDTH * figure.panels.len() as u32, draw::HEIGHT)
        );
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
            .chunks_exact(3)
            .map(|p| [p[0], p[1], p[2]])
            .collect();
        for (name, rgb) in colours(&figure) {
            let n = pixels.iter().filter(|p| **p == rgb).count();
            // Two panels of a 2 px line and a legend swatch: hundreds of pixels.
            assert!(n > 300, "{name}: only {n} pixels of its colour");
        }
        // Text and axes: dark pixels.
        let dark = pixels.iter().filter(|p| p.iter().all(|&c| c < 60)).count();
        assert!(dark > 2000, "{dark} dark pixels: no text?");
    }

    #[test]
    fn file_names_choose_the_format() {
        assert_eq!(format_of(Path::new("a.svg")), Ok(Format::Svg));
        assert_eq!(format_of(Path::new("A.PNG")), Ok(Format::Png));
        assert!(format_of(Path::new("a.pdf"))
            .unwrap_err()
            .contains(".svg or .png"));
        assert!(format_of(Path::new("a")).is_err());
    }
}
