//! Every `RIVET_*` environment variable Rivet reads, in one table: name,
//! default and what it does. The parsers read variables through [`var`],
//! which refuses (panics on) a name the table lacks, so a parser cannot use
//! a setting the table does not list; `rivetrun --info --all` and
//! `rivet-bench info --all` print [`listing`]; the README's settings table
//! is [`markdown_table`] (a test compares them); and the engine warns once
//! at init about `RIVET_*` variables that are not in the table, naming the
//! closest known one ([`unknown_in_env`]). No Rivet crate below this one:
//! the PMI client, the netmods, the engine and the launcher all use it.
//!
//! Module map: `lib.rs` the lookup (`var`), the `--info --all` listing, the README table and the
//! unknown-name warning with the closest name; `table.rs` the table itself. This crate has no
//! dependencies.

mod table;

pub use table::{Scope, Setting, SETTINGS};

/// The table's entry for `name`.
pub fn lookup(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The value of setting `name` in the environment (unset: `None`).
///
/// # Panics
/// If `name` is not in the table: every setting a parser reads must be
/// listed (a test of each parser runs this check).
pub fn var(name: &str) -> Option<String> {
    assert!(
        lookup(name).is_some(),
        "{name} is read but not in rivet-settings' table"
    );
    std::env::var(name).ok()
}

/// Where a setting's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Environment,
    Default,
}

/// One line of the listing: a setting, its value in force and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub setting: &'static Setting,
    pub value: String,
    pub source: Source,
}

/// Every setting with the value in force in `env` (e.g. `std::env::var`).
pub fn effective(env: impl Fn(&str) -> Option<String>) -> Vec<Effective> {
    SETTINGS
        .iter()
        .map(|s| match env(s.name) {
            Some(v) => Effective {
                setting: s,
                value: v,
                source: Source::Environment,
            },
            None => Effective {
                setting: s,
                value: s.default.to_string(),
                source: Source::Default,
            },
        })
        .collect()
}

/// The `--info --all` listing: one block per setting, the value in force
/// and where it came from, the default, the doc; then unknown `RIVET_*`
/// variables of `env_names`.
pub fn listing(env: impl Fn(&str) -> Option<String>, env_names: &[String]) -> String {
    let mut out =
        String::from("settings (RIVET_* environment variables; value in force [source]):\n");
    for e in effective(&env) {
        let source = match e.source {
            Source::Environment => "environment",
            Source::Default => "default",
        };
        let value = if e.value.is_empty() {
            "(unset)"
        } else if e.setting.name.ends_with("_SECRET") {
            // The job's secrets authenticate its processes: never shown.
            "(set, not shown)"
        } else {
            &e.value
        };
        out += &format!(
            "  {:<30} {value} [{source}]; default {}; {}\n      {}\n",
            e.setting.name,
            if e.setting.default.is_empty() {
                "unset"
            } else {
                e.setting.default
            },
            e.setting.scope.name(),
            e.setting.doc
        );
    }
    for (name, near) in unknown(env_names) {
        out += &format!("  {name}: not a Rivet setting{}\n", did_you_mean(near));
    }
    out
}

fn did_you_mean(near: Option<&str>) -> String {
    near.map_or(String::new(), |n| format!(" (did you mean {n}?)"))
}

/// The `RIVET_*` names among `names` that are not settings, each with the
/// closest setting's name if one is close (a likely typo).
pub fn unknown(names: &[String]) -> Vec<(String, Option<&'static str>)> {
    names
        .iter()
        .filter(|n| n.starts_with("RIVET_") && lookup(n).is_none())
        .map(|n| (n.clone(), closest(n)))
        .collect()
}

/// `unknown` over this process's environment.
pub fn unknown_in_env() -> Vec<(String, Option<&'static str>)> {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    unknown(&names)
}

/// The warning lines for unknown settings (empty if there are none).
pub fn warnings(unknown: &[(String, Option<&'static str>)]) -> Vec<String> {
    unknown
        .iter()
        .map(|(name, near)| {
            format!(
                "rivet: warning: {name} is not a Rivet setting and is ignored{}",
                did_you_mean(*near)
            )
        })
        .collect()
}

/// Print `warnings(unknown_in_env())` to stderr, once per process.
pub fn warn_unknown_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for line in warnings(&unknown_in_env()) {
            eprintln!("{line}");
        }
    });
}

/// The setting nearest `name` by edit distance, if within a third of the
/// length after `RIVET_` (at least 1 edit): `RIVET_SHM_EAGERMAX` →
/// `RIVET_SHM_EAGER_MAX`.
pub fn closest(name: &str) -> Option<&'static str> {
    let (best, d) = SETTINGS
        .iter()
        .map(|s| (s.name, edit_distance(name, s.name)))
        .min_by_key(|&(_, d)| d)?;
    let suffix = name.strip_prefix("RIVET_").unwrap_or(name).len();
    (d <= (suffix / 3).max(1)).then_some(best)
}

/// Edit distance over bytes (setting names are ASCII), a swap of two
/// neighbours counting as one edit (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * w + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let mut best = (d[(i - 1) * w + j - 1] + usize::from(a[i - 1] != b[j - 1]))
                    .min(d[(i - 1) * w + j] + 1)
                    .min(d[i * w + j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * w + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * w + b.len()]
}

/// The README's settings table (user settings; test hooks left out).
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | default | meaning |\n| --- | --- | --- |\n");
    for s in SETTINGS.iter().filter(|s| s.scope != Scope::Test) {
        let default = if s.default.is_empty() {
            "unset".to_string()
        } else {
            format!("`{}`", s.default)
        };
        out += &format!(
            "| `{}` | {default} | {} |\n",
            s.name,
            s.doc.replace('|', "\\|")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_sorted_by_scope_and_documented() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert!(s.name.starts_with("RIVET_"), "{}", s.name);
            assert!(!s.doc.is_empty(), "{} has no doc", s.name);
            assert!(
                SETTINGS[i + 1..].iter().all(|o| o.name != s.name),
                "{} twice",
                s.name
            );
        }
        assert!(
            lookup("RIVET_PMI").is_some(),
            "the PMI client's choice is listed"
        );
    }

    #[test]
    fn typos_name_the_closest_setting() {
        assert_eq!(closest("RIVET_SHM_EAGERMAX"), Some("RIVET_SHM_EAGER_MAX"));
        assert_eq!(closest("RIVET_NETMODE"), Some("RIVET_NETMOD"));
        assert_eq!(closest("RIVET_TCP_BAKEND"), Some("RIVET_TCP_BACKEND"));
        assert_eq!(closest("RIVET_SOMETHING_ELSE_ENTIRELY"), None);
        let names: Vec<String> = ["RIVET_SHM_EAGERMAX", "RIVET_NETMOD", "PATH", "RIVET_ZZZ"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let u = unknown(&names);
        assert_eq!(
            u,
            [
                (
                    "RIVET_SHM_EAGERMAX".to_string(),
                    Some("RIVET_SHM_EAGER_MAX")
                ),
                ("RIVET_ZZZ".to_string(), None)
            ]
        );
        let w = warnings(&u);
        assert_eq!(
            w[0],
            "rivet: warning: RIVET_SHM_EAGERMAX is not a Rivet setting and is ignored \
             (did you mean RIVET_SHM_EAGER_MAX?)"
        );
        assert!(!w[1].contains("did you mean"));
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("YEILD", "YIELD"), 1);
    }

    #[test]
    fn listing_shows_value_source_and_default() {
        let env = |k: &str| (k == "RIVET_YIELD").then(|| "always".to_string());
        let e = effective(env);
        let y = e.iter().find(|e| e.setting.name == "RIVET_YIELD").unwrap();
        assert_eq!(
            (y.value.as_str(), y.source),
            ("always", Source::Environment)
        );
        let n = e.iter().find(|e| e.setting.name == "RIVET_NETMOD").unwrap();
        assert_eq!((n.value.as_str(), n.source), ("auto", Source::Default));
        let text = listing(env, &["RIVET_YEILD".to_string()]);
        assert!(text.contains("RIVET_YIELD"), "{text}");
        assert!(
            text.contains("always [environment]; default auto"),
            "{text}"
        );
        assert!(text.contains("RIVET_YEILD: not a Rivet setting (did you mean RIVET_YIELD?)"));
        assert_eq!(text.matches("[default]").count() + 1, SETTINGS.len());
    }

    #[test]
    #[should_panic(expected = "not in rivet-settings' table")]
    fn reading_an_unlisted_setting_is_a_bug() {
        var("RIVET_NOT_A_SETTING");
    }
}

#[cfg(test)]
mod readme {
    const BEGIN: &str = "<!-- settings table begin -->\n";
    const END: &str = "<!-- settings table end -->";

    /// The README's settings table is `markdown_table()`, byte for byte.
    #[test]
    fn readme_settings_table_is_generated_from_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
        let text = std::fs::read_to_string(path).expect("README.md");
        let start = text.find(BEGIN).expect("the table's begin marker") + BEGIN.len();
        let end = text.find(END).expect("the table's end marker");
        let want = super::markdown_table();
        if std::env::var_os("RIVET_BLESS").is_some() {
            let new = format!("{}{want}{}", &text[..start], &text[end..]);
            std::fs::write(path, new).expect("rewriting README.md");
            return;
        }
        assert!(
            text[start..end] == want,
            "README.md's settings table differs from settings/src/table.rs: run \
             `RIVET_BLESS=1 cargo test -p rivet-settings readme` and commit it"
        );
    }
}
