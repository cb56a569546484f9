//! The table of decision sites in `decision-sites.md` ("Which site to pick") is what
//! `tollgate simulate` and `tollgate simulate --normal` measure (issue 52: every table the
//! book shows is produced by a test). The simulator runs on a virtual clock from a fixed
//! seed, so its figures are the same on every machine and compared exactly: each row's
//! shortfall or excess on the two traces, store calls and peer messages a request (one
//! figure in a cell: both traces read it; `0`: `0.000`). The `local` row is per node and
//! has no design of its own. `honest-limits.md` quotes the `split` row.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde_json::Value;

use crate::common::repo_path;
use crate::common::simulate::report;

/// The table's rows: the site cell's code span and the other cells' text.
fn site_table() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(repo_path("docs/src/decision-sites.md")).unwrap();
    let mut tables: Vec<Vec<Vec<String>>> = Vec::new();
    let (mut row, mut cell) = (Vec::new(), None::<String>);
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Table(_)) => tables.push(Vec::new()),
            Event::Start(Tag::TableCell) => cell = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(c) = cell.as_mut() {
                    c.push_str(&t);
                }
            }
            Event::End(TagEnd::TableCell) => row.push(cell.take().unwrap_or_default()),
            Event::End(TagEnd::TableHead | TagEnd::TableRow) => {
                tables.last_mut().unwrap().push(std::mem::take(&mut row))
            }
            _ => {}
        }
    }
    let table = tables
        .into_iter()
        .find(|t| {
            t.first()
                .is_some_and(|h| h.len() > 2 && h[1] == "2× overload")
        })
        .expect("decision-sites.md has no table headed `site | 2× overload | normal load | …`");
    assert_eq!(
        table[0][..5],
        [
            "site",
            "2× overload",
            "normal load",
            "store calls / req",
            "peer msgs / req"
        ],
        "the site table's columns changed: teach this test the new ones"
    );
    table
        .into_iter()
        .skip(1)
        .map(|mut r| {
            let site = r.remove(0);
            (site, r)
        })
        .collect()
}

/// The figures of a cell (`−10.9 % (≤ U)` → [-10.9]; `0.046 / 0.128` → both), a
/// typographic minus read as `-`.
fn figures(cell: &str) -> Vec<f64> {
    cell.replace('−', "-")
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The row of `design` in a report.
fn row<'a>(report: &'a Value, design: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["design"] == design)
        .unwrap_or_else(|| panic!("simulate has no `{design}` row"))
}

#[test]
fn the_site_table_is_what_the_simulator_measures() {
    let runs = [
        report(&["--reps", "1"]),
        report(&["--normal", "--reps", "1"]),
    ];
    let designs = [
        ("split", "static L/N"),
        ("central", "central"),
        ("lease", "tollgate lease"),
        ("owner", "owner"),
        ("gossip 20ms", "gossip 20ms"),
    ];
    let table = site_table();
    let mut wrong = Vec::new();
    for (site, design) in designs {
        let (_, cells) = table
            .iter()
            .find(|(s, _)| s.replace(' ', "") == site.replace(' ', ""))
            .unwrap_or_else(|| panic!("the site table has no `{site}` row"));
        let measured = |key: &str, digits: usize| -> Vec<String> {
            runs.iter()
                .map(|r| {
                    let v = row(r, design)[key].as_f64().unwrap();
                    if key == "vs_bound_pct" {
                        format!("{v:+.digits$}")
                    } else {
                        format!("{v:.digits$}")
                    }
                })
                .collect()
        };
        let shown = |cells: &[&String], digits: usize| -> Vec<String> {
            let mut out: Vec<String> = cells
                .iter()
                .flat_map(|c| figures(c))
                .map(|f| {
                    if cells.len() == 2 {
                        format!("{f:+.digits$}")
                    } else {
                        format!("{f:.digits$}")
                    }
                })
                .collect();
            if out.len() == 1 {
                out.push(out[0].clone());
            }
            out
        };
        for (what, key, table_says, digits) in [
            (
                "shortfall or excess",
                "vs_bound_pct",
                shown(&[&cells[0], &cells[1]], 1),
                1,
            ),
            (
                "store calls / req",
                "calls_per_request",
                shown(&[&cells[2]], 3),
                3,
            ),
            (
                "peer msgs / req",
                "peer_msgs_per_request",
                shown(&[&cells[3]], 3),
                3,
            ),
        ] {
            let measured = measured(key, digits);
            if table_says != measured {
                wrong.push(format!(
                    "`{site}` {what}: the table shows {table_says:?}, simulate measures {measured:?} \
                     (the 2× trace, then --normal)"
                ));
            }
        }
    }
    let split = row(&runs[0], "static L/N")["vs_bound_pct"]
        .as_f64()
        .unwrap();
    let split_normal = row(&runs[1], "static L/N")["vs_bound_pct"]
        .as_f64()
        .unwrap();
    let quoted = format!(
        "{:.1} % at 2× load, {:.1} % at normal load",
        split, split_normal
    )
    .replace('-', "−");
    let honest = std::fs::read_to_string(repo_path("docs/src/honest-limits.md")).unwrap();
    if !honest.contains(&quoted) {
        wrong.push(format!("honest-limits.md does not say `{quoted}` of split"));
    }
    assert!(
        wrong.is_empty(),
        "decision-sites.md's site table drifted from the simulator:\n{}",
        wrong.join("\n")
    );
}
