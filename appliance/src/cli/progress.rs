//! Progress on long work (sync, proving, model loading): a bar or a spinner drawn with
//! indicatif when stderr is a terminal; otherwise plain lines, at most one a second (and
//! the last), so logs and CI output stay readable.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often plain lines are printed at most.
const LINE_EVERY: Duration = Duration::from_secs(1);

/// One piece of long work's progress on stderr.
pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    last_line: Option<Instant>,
    /// The last line [`Progress::say`] printed (plain mode says each once).
    said: std::cell::RefCell<String>,
}

impl Progress {
    /// Progress of `label`, of a size told later by [`Progress::set`] (a spinner until then).
    pub fn new(label: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {msg} [{elapsed}]")
                    .expect("a valid template"),
            );
            bar.set_prefix(label.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            bar,
            label: label.to_owned(),
            last_line: None,
            said: std::cell::RefCell::new(String::new()),
        }
    }

    /// `done` of `total` (a bar on a terminal; a line a second otherwise).
    pub fn set(&mut self, done: u64, total: u64) {
        match &self.bar {
            Some(bar) => {
                if bar.length() != Some(total) {
                    bar.set_length(total);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {msg}",
                        )
                        .expect("a valid template")
                        .progress_chars("=> "),
                    );
                }
                bar.set_position(done);
            }
            None => {
                let due = self.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY);
                if due || done >= total {
                    eprintln!("{}: {done}/{total}", self.label);
                    self.last_line = Some(Instant::now());
                }
            }
        }
    }

    /// A line about the work: beside the bar on a terminal, on its own otherwise (where
    /// the same line twice in a row is printed once).
    pub fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(line.to_owned()),
            None => {
                let mut said = self.said.borrow_mut();
                if *said != line {
                    eprintln!("{line}");
                    line.clone_into(&mut said);
                }
            }
        }
    }

    /// Ends the display, leaving `line` as its last word.
    pub fn finish(self, line: &str) {
        match self.bar {
            Some(bar) => bar.finish_with_message(line.to_owned()),
            None => eprintln!("{line}"),
        }
    }
}
