//! How a snapshot is built: one typed settings type for the flags of
//! `ethpir-snapshot build` / `plan` and the `[build]` table of the
//! follower's config, with one set of defaults (the flags' defaults) and
//! one mapping to the pipeline's [`BuildOptions`].

use std::sync::Arc;

use clap::{Args, Parser};
use pir_core::{Arity, Expansion, Packing};
use serde::Deserialize;

// The device choice is part of the settings (tests and configs name it).
pub use gpu_kernels::Device;

use crate::pipeline::{resolve_packing, BuildOptions, HintBudget};
use crate::progress::ProgressFn;

/// How a database is laid out: filter arity and packing.
#[derive(Args, Clone, Debug, PartialEq, Eq)]
pub struct LayoutSettings {
    /// Binary fuse filter arity: 3 (smaller queries) or 4 (smaller
    /// database).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=4))]
    pub arity: u8,
    /// Packing factor k: "auto" or a number (1 = plain ChalametPIR layout).
    #[arg(long, default_value = "auto")]
    pub packing: String,
    /// Hint size budget for automatic packing: MiB, or "auto" (a full
    /// snapshot gets the smallest hint that keeps a lookup under
    /// --lookup-target-kib, up to --hint-cap-mib; other kinds 32 MiB).
    #[arg(long, default_value = "auto")]
    pub hint_budget_mib: HintBudget,
    /// Query + response bytes per lookup a base aims at, KiB (with an
    /// automatic hint budget).
    #[arg(long, default_value_t = 1536)]
    pub lookup_target_kib: u64,
    /// Largest hint a base may get to meet the lookup target, MiB.
    #[arg(long, default_value_t = 512)]
    pub hint_cap_mib: u64,
}

/// Everything a build is told.
#[derive(Args, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "BuildTable")]
pub struct BuildSettings {
    /// Where to build the hint: auto (GPU if usable, else CPU), cpu, cuda.
    #[arg(long, default_value = "auto")]
    pub device: Device,
    /// How the public matrix is expanded from its seed: aes128-ctr (fast
    /// wherever the CPU has AES instructions: x86-64, ARMv8) or
    /// turboshake128 (for wallets on CPUs without them).
    #[arg(long, default_value_t = Expansion::default())]
    pub matrix_expansion: Expansion,
    #[command(flatten)]
    pub layout: LayoutSettings,
    /// Working memory of the encoder, MiB: it builds as many partitions'
    /// filters at a time as fit and reads records.bin again for each such
    /// group (the database is written to its file as it is made).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub encode_memory_mib: u64,
    /// Levels of at most this many records also publish their whole table,
    /// which clients download instead of the hint when it is smaller (0:
    /// none; every level is then read by PIR).
    #[arg(long, default_value_t = snapshot_build::pipeline::WHOLE_MAX_RECORDS as u64)]
    pub whole_table_max_records: u64,
}

/// Why settings cannot make a build.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("build.{field}: {reason}")]
    Field { field: &'static str, reason: String },
}

fn field(field: &'static str) -> impl Fn(String) -> SettingsError {
    move |reason| SettingsError::Field { field, reason }
}

impl Default for BuildSettings {
    /// The flags' defaults (the one place they are written).
    fn default() -> Self {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            settings: BuildSettings,
        }
        Defaults::parse_from(["defaults"]).settings
    }
}

impl LayoutSettings {
    /// The arity, the packing of every level and that of the bases.
    pub fn resolve(&self) -> Result<(Arity, Packing, Option<Packing>), SettingsError> {
        let (packing, base_packing) = resolve_packing(
            &self.packing,
            self.hint_budget_mib,
            self.lookup_target_kib,
            self.hint_cap_mib,
        )
        .map_err(|e| field("packing")(e.to_string()))?;
        let arity = Arity::from_u8(self.arity).map_err(|e| field("arity")(e.to_string()))?;
        Ok((arity, packing, base_packing))
    }
}

impl BuildSettings {
    /// The pipeline's options, progress reported to `progress`.
    pub fn options(&self, progress: Option<ProgressFn>) -> Result<BuildOptions, SettingsError> {
        let (arity, packing, base_packing) = self.layout.resolve()?;
        Ok(BuildOptions {
            arity,
            packing,
            base_packing,
            hint: Arc::new(self.device),
            expansion: self.matrix_expansion,
            progress,
            encode_memory_bytes: usize::try_from(self.encode_memory_mib.saturating_mul(1 << 20))
                .unwrap_or(usize::MAX)
                .max(1),
            whole_table_max_records: usize::try_from(self.whole_table_max_records)
                .unwrap_or(usize::MAX),
        })
    }
}

/// The `[build]` table as TOML spells it; [`BuildSettings`] is read
/// through it so that unknown keys are refused and every value is typed
/// (a wrong device or expansion is an error when the config is read).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BuildTable {
    device: Option<String>,
    matrix_expansion: Option<String>,
    arity: Option<u8>,
    packing: Option<String>,
    hint_budget_mib: Option<HintBudget>,
    lookup_target_kib: Option<u64>,
    hint_cap_mib: Option<u64>,
    encode_memory_mib: Option<u64>,
    whole_table_max_records: Option<u64>,
}

/// A text field parsed into its type, or `None` when the table leaves it out.
fn parsed<T: std::str::FromStr<Err = String>>(
    name: &'static str,
    text: Option<String>,
) -> Result<Option<T>, SettingsError> {
    text.map(|t| t.parse().map_err(field(name))).transpose()
}

impl TryFrom<BuildTable> for BuildSettings {
    type Error = SettingsError;
    fn try_from(t: BuildTable) -> Result<Self, SettingsError> {
        let d = BuildSettings::default();
        let settings = BuildSettings {
            device: parsed("device", t.device)?.unwrap_or(d.device),
            matrix_expansion: parsed("matrix_expansion", t.matrix_expansion)?
                .unwrap_or(d.matrix_expansion),
            layout: LayoutSettings {
                arity: t.arity.unwrap_or(d.layout.arity),
                packing: t.packing.unwrap_or(d.layout.packing),
                hint_budget_mib: t.hint_budget_mib.unwrap_or(d.layout.hint_budget_mib),
                lookup_target_kib: t.lookup_target_kib.unwrap_or(d.layout.lookup_target_kib),
                hint_cap_mib: t.hint_cap_mib.unwrap_or(d.layout.hint_cap_mib),
            },
            encode_memory_mib: t.encode_memory_mib.unwrap_or(d.encode_memory_mib),
            whole_table_max_records: t
                .whole_table_max_records
                .unwrap_or(d.whole_table_max_records),
        };
        // What the flags check when parsed, checked here too.
        settings.layout.resolve()?;
        if settings.encode_memory_mib == 0 {
            return Err(field("encode_memory_mib")("at least 1".into()));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_flags_and_a_table_overrides_them() {
        let d = BuildSettings::default();
        assert_eq!(d.device, Device::Auto);
        assert_eq!(d.layout.arity, 3);
        assert_eq!(d.layout.hint_budget_mib, HintBudget::Auto);
        assert_eq!(d.encode_memory_mib, 1024);
        let t: BuildSettings = toml::from_str("device = \"cpu\"\narity = 4").unwrap();
        assert_eq!(t.device, Device::Cpu);
        assert_eq!(t.layout.arity, 4);
        assert_eq!(t.layout.packing, d.layout.packing);
    }

    #[test]
    fn wrong_values_and_unknown_keys_are_refused() {
        for bad in [
            "device = \"tpu\"",
            "matrix_expansion = \"aes\"",
            "arity = 7",
            "packing = \"lots\"",
            "encode_memory_mib = 0",
            "colour = \"blue\"",
        ] {
            assert!(toml::from_str::<BuildSettings>(bad).is_err(), "{bad}");
        }
    }
}
