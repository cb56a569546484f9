//! The page reader: a reference page's tables, read with pulldown-cmark (the parser mdBook
//! uses), each first-cell code span with its table's kind and the headings above it.

use std::collections::BTreeSet;
use std::path::Path;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// What one reference page documents.
#[derive(Default)]
pub struct Documented {
    /// (headings' code spans above the table, table kind, key) per first-cell code span.
    pub rows: Vec<(BTreeSet<String>, Kind, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Keys,
    Check,
    Other,
}

pub fn read_page(path: &Path) -> Documented {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc = Documented::default();
    // Open headings: (level, code spans in it).
    let mut headings: Vec<(usize, BTreeSet<String>)> = Vec::new();
    let mut in_heading: Option<(usize, BTreeSet<String>)> = None;
    let mut kind = Kind::Other;
    let mut head_cells: Vec<String> = Vec::new();
    let mut in_head = false;
    let mut cell = 0usize;
    let mut cell_text = String::new();
    let mut first_cell_code: Vec<String> = Vec::new();
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                in_heading = Some((level as usize, BTreeSet::new()))
            }
            Event::End(TagEnd::Heading(_)) => {
                let (level, spans) = in_heading.take().expect("a heading ends after it starts");
                headings.retain(|(l, _)| *l < level);
                headings.push((level, spans));
            }
            Event::Start(Tag::TableHead) => {
                in_head = true;
                head_cells.clear();
            }
            Event::End(TagEnd::TableHead) => {
                in_head = false;
                kind = match head_cells.get(1).map(|c| c.trim().to_lowercase()) {
                    Some(c) if c == "type" => Kind::Keys,
                    Some(c) if c == "bad value" => Kind::Check,
                    _ => Kind::Other,
                };
            }
            Event::Start(Tag::TableRow) => {
                cell = 0;
                first_cell_code.clear();
            }
            Event::Start(Tag::TableCell) => cell_text.clear(),
            Event::End(TagEnd::TableCell) => {
                if in_head {
                    head_cells.push(cell_text.clone());
                }
                cell += 1;
            }
            Event::End(TagEnd::TableRow) => {
                let above: BTreeSet<String> = headings
                    .iter()
                    .flat_map(|(_, s)| s.iter().cloned())
                    .collect();
                for code in &first_cell_code {
                    doc.rows.push((above.clone(), kind, code.clone()));
                }
            }
            Event::Code(c) => {
                if let Some((_, spans)) = in_heading.as_mut() {
                    spans.insert(c.to_string());
                }
                cell_text.push_str(&c);
                if cell == 0 && !in_head {
                    first_cell_code.push(c.to_string());
                }
            }
            Event::Text(t) => cell_text.push_str(&t),
            _ => {}
        }
    }
    doc
}

impl Documented {
    /// Whether `key` is in a table of `kind`, under a heading naming `section` if given.
    pub fn has(&self, key: &str, kind: Kind, section: Option<&str>) -> bool {
        self.rows.iter().any(|(above, k, code)| {
            *k == kind
                && (code == key || code.ends_with(&format!(".{key}")))
                && section.is_none_or(|s| above.contains(s))
        })
    }
}
