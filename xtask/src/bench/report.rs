//! A benchmark suite's results: named numbers written as a flat JSON object to
//! `target/bench/SUITE.json`, and printed as a table with each figure's ratio to the
//! peer measured in the same run.

use anyhow::{Context, Result};
use std::path::PathBuf;

/// Results of one suite, in the order they were recorded.
pub struct Report {
    suite: &'static str,
    values: Vec<(String, f64)>,
    comparisons: Vec<Comparison>,
}

/// One of our figures next to the peer's figure for the same measurement.
struct Comparison {
    what: String,
    ours: String,
    peer: String,
    target: Option<f64>,
}

impl Report {
    /// An empty report for `suite` (the JSON file is `target/bench/<suite>.json`).
    pub fn new(suite: &'static str) -> Self {
        Report {
            suite,
            values: Vec::new(),
            comparisons: Vec::new(),
        }
    }

    /// Records a named figure (JSON key) such as `alloc_ns`.
    pub fn value(&mut self, key: &str, value: f64) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.values.push((key.to_string(), value)),
        }
    }

    /// Declares that figure `ours` is compared with figure `peer` (both already recorded
    /// with [`Report::value`]); the table shows ours/peer and, if given, whether the ratio
    /// meets `target` (lower is better: ratio <= target). The ratio is also recorded as
    /// `<ours>_ratio` (by the first comparison of `ours` only).
    pub fn compare(&mut self, what: &str, ours: &str, peer: &str, target: Option<f64>) {
        // The first comparison of a figure (against its peer) owns `<ours>_ratio`.
        let key = format!("{ours}_ratio");
        if let (Some(o), Some(p), None) = (self.get(ours), self.get(peer), self.get(&key)) {
            if p != 0.0 {
                self.value(&key, o / p);
            }
        }
        self.comparisons.push(Comparison {
            what: what.to_string(),
            ours: ours.to_string(),
            peer: peer.to_string(),
            target,
        });
    }

    /// The recorded value of `key`.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The path of this suite's JSON file.
    pub fn path(&self) -> PathBuf {
        crate::steps::root()
            .join("target")
            .join("bench")
            .join(format!("{}.json", self.suite))
    }

    /// The flat JSON object of every recorded value.
    pub fn to_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> = self
            .values
            .iter()
            .map(|(k, v)| {
                let number = serde_json::Number::from_f64(*v)
                    .map(serde_json::Value::Number)
                    .unwrap_or(serde_json::Value::Null);
                (k.clone(), number)
            })
            .collect();
        serde_json::Value::Object(map)
    }

    /// The readable table: every value, then every comparison with its ratio.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let width = self.values.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in &self.values {
            out.push_str(&format!("  {key:<width$}  {value:>14.3}\n"));
        }
        if !self.comparisons.is_empty() {
            out.push_str(&format!(
                "\n  {:<44} {:>12} {:>12} {:>8}  target\n",
                "comparison (same run)", "ours", "peer", "ratio"
            ));
            for c in &self.comparisons {
                let (o, p) = (self.get(&c.ours), self.get(&c.peer));
                let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
                let ratio = match (o, p) {
                    (Some(o), Some(p)) if p != 0.0 => Some(o / p),
                    _ => None,
                };
                let verdict = match (ratio, c.target) {
                    (Some(r), Some(t)) if r <= t => format!("<= {t} met"),
                    (Some(_), Some(t)) => format!("<= {t} MISSED"),
                    (None, Some(t)) => format!("<= {t} (no figure)"),
                    (_, None) => String::new(),
                };
                out.push_str(&format!(
                    "  {:<44} {:>12} {:>12} {:>8}  {}\n",
                    c.what,
                    fmt(o),
                    fmt(p),
                    ratio.map_or("-".to_string(), |r| format!("{r:.2}x")),
                    verdict
                ));
            }
        }
        out
    }

    /// Writes the JSON file and prints the table.
    pub fn finish(&self) -> Result<()> {
        let path = self.path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&self.to_json())?;
        std::fs::write(&path, text + "\n").with_context(|| format!("write {}", path.display()))?;
        println!("\n{}", self.table());
        println!("  written: {}", path.display());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_flat_and_ratios_are_recorded() {
        let mut r = Report::new("unit");
        r.value("alloc_ns", 5.0);
        r.value("alloc_ns_boehm", 20.0);
        r.compare("allocation", "alloc_ns", "alloc_ns_boehm", Some(1.0));
        let json = r.to_json();
        assert_eq!(json["alloc_ns"], 5.0);
        assert_eq!(json["alloc_ns_ratio"], 0.25);
        let table = r.table();
        assert!(table.contains("0.25x"), "{table}");
        assert!(table.contains("met"), "{table}");
    }

    #[test]
    fn missed_target_is_shown() {
        let mut r = Report::new("unit");
        r.value("a", 3.0);
        r.value("b", 1.0);
        r.compare("a vs b", "a", "b", Some(1.0));
        assert!(r.table().contains("MISSED"));
    }
}
