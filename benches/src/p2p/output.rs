//! Where result rows go: the table as they come (rank 0) or JSON at the
//! end, under a note on the thread level and the pairs measuring.

use rivet::ThreadLevel;

use crate::report::{self, Row};
use crate::sizes::Kind;

/// The comment line under a table's title: the thread level asked for and
/// provided, and the pairs of ranks measuring.
pub(crate) fn level_note(asked: ThreadLevel, provided: ThreadLevel, pairs: u32) -> String {
    format!("# thread level {asked} (provided {provided}), {pairs} pair(s) measuring")
}

/// Where rows go: the table as they come (rank 0), or the JSON at the end.
pub(crate) struct Output {
    kind: Kind,
    csv: bool,
    ranks: u32,
    threads: u32,
    window: usize,
    json: bool,
    print: bool,
    rows: Vec<Row>,
}

impl Output {
    /// `note`: a comment line printed between the title and the header.
    pub(crate) fn new(
        kind: Kind,
        (ranks, threads, window): (u32, u32, usize),
        note: String,
        (json, csv): (bool, bool),
        print: bool,
    ) -> Output {
        if print && !json && !csv {
            println!("{}", report::title(kind, ranks, threads, window));
            println!("{note}");
            println!("{}", report::column_header(kind));
        }
        Output {
            kind,
            csv,
            ranks,
            threads,
            window,
            json,
            print,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, row: Row) {
        if self.print && !self.json && !self.csv {
            println!("{}", report::table_row(self.kind, row.size, row.value));
        }
        self.rows.push(row);
    }

    pub(crate) fn finish(self) {
        if self.print && self.csv {
            print!(
                "{}",
                report::csv_doc(self.kind, self.ranks, self.threads, self.window, &self.rows)
            );
        }
        if self.print && self.json {
            println!(
                "{}",
                report::json_doc(self.kind, self.ranks, self.threads, self.window, &self.rows)
            );
        }
    }
}
