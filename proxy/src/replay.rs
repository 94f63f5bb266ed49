//! Historical replay: a file of `address,block` lines in, a file of answers
//! out, through the same private path as the proxy.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use alloy_primitives::Address;
use anyhow::{Context, Result};
use serde_json::Value;

use ethpir_client::block::{parse_block, BlockSelector};
use ethpir_client::{parse_address, PrivateReader};

/// Totals of a replay.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    pub answered: usize,
    pub failed: usize,
}

/// One input line.
struct Line {
    number: usize,
    address: String,
    block: String,
}

/// What became of one line: `(snapshot, balance in wei, nonce)` or why not.
type Answer = Result<(String, String, u64), String>;

/// Replays `input` into `output` (CSV: `address,block,snapshot,balance_wei,nonce,error`).
/// `progress(done, total)` is called as lines are answered (or refused);
/// the caller decides how to show it.
pub async fn replay(
    reader: &PrivateReader,
    input: &Path,
    output: &Path,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<ReplaySummary> {
    let lines = read_lines(input)?;
    let mut answers: Vec<Answer> = vec![Err(String::new()); lines.len()];
    let groups = group_by_block(&lines, &mut answers);
    let total = lines.len();
    let mut done = total - groups.values().map(Vec::len).sum::<usize>();
    progress(done, total);
    for (selector, members) in groups {
        for chunk in members.chunks(64) {
            let addresses: Vec<_> = chunk.iter().map(|(_, a)| *a).collect();
            for ((i, _), r) in chunk.iter().zip(reader.lookup(&selector, &addresses).await) {
                answers[*i] = r
                    .map(|s| (s.snapshot, s.balance.to_string(), s.nonce))
                    .map_err(|e| e.to_string());
            }
            done += chunk.len();
            progress(done, total);
        }
    }
    write_answers(output, &lines, answers)
}

/// The `address,block` lines of the input (blank lines, `#` comments and a
/// header skipped).
fn read_lines(input: &Path) -> Result<Vec<Line>> {
    let file =
        std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut lines = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", input.display()))?;
        let t = line.trim();
        if t.is_empty()
            || t.starts_with('#')
            || (i == 0 && t.to_ascii_lowercase().starts_with("address"))
        {
            continue;
        }
        let (address, block) = t.split_once(',').unwrap_or((t, "latest"));
        lines.push(Line {
            number: i + 1,
            address: address.trim().to_string(),
            block: block.trim().to_string(),
        });
    }
    Ok(lines)
}

/// Groups the lines by the block they ask about, so that each group goes
/// out in batches; a line with a bad address or block gets its error in
/// `answers` instead.
fn group_by_block(
    lines: &[Line],
    answers: &mut [Answer],
) -> HashMap<BlockSelector, Vec<(usize, Address)>> {
    let mut groups: HashMap<BlockSelector, Vec<(usize, Address)>> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let address = match parse_address(&line.address) {
            Ok(a) => a,
            Err(e) => {
                answers[i] = Err(e);
                continue;
            }
        };
        // Blocks: decimal or 0x numbers, tags, or block hashes.
        let block_value = match line.block.parse::<u64>() {
            Ok(n) => Value::String(format!("{n:#x}")),
            Err(_) if line.block.is_empty() => Value::String("latest".into()),
            Err(_) => Value::String(line.block.clone()),
        };
        match parse_block(Some(&block_value)) {
            Ok(selector) => groups.entry(selector).or_default().push((i, address)),
            Err(e) => answers[i] = Err(e),
        }
    }
    groups
}

/// Writes the CSV of answers (errors on stderr too) and counts them.
fn write_answers(output: &Path, lines: &[Line], answers: Vec<Answer>) -> Result<ReplaySummary> {
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?,
    );
    writeln!(out, "address,block,snapshot,balance_wei,nonce,error")?;
    let mut summary = ReplaySummary::default();
    for (line, r) in lines.iter().zip(answers) {
        match r {
            Ok((snap, balance, nonce)) => {
                summary.answered += 1;
                writeln!(
                    out,
                    "{},{},{snap},{balance},{nonce},",
                    line.address, line.block
                )?;
            }
            Err(e) => {
                summary.failed += 1;
                eprintln!("line {}: {}: {e}", line.number, line.address);
                writeln!(
                    out,
                    "{},{},,,,\"{}\"",
                    line.address,
                    line.block,
                    e.replace('"', "'")
                )?;
            }
        }
    }
    out.flush()?;
    Ok(summary)
}
