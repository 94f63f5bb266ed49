//! Loading a TOML config file: the one loader every program uses, with the
//! file's path in every error.

use std::path::Path;

/// Why a config file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
}

/// Reads and parses a TOML file into `T`.
pub fn load_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: shown,
        source,
    })
}

/// A setting in seconds (fractions allowed) as a duration within
/// `least..=most`: a file may say `nan` or `inf`, which
/// [`std::time::Duration::from_secs_f64`] would panic on; NaN is `least`.
pub fn seconds(value: f64, least: f64, most: f64) -> std::time::Duration {
    let value = if value.is_nan() { least } else { value };
    std::time::Duration::from_secs_f64(value.clamp(least, most))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_bounded_whatever_the_file_says() {
        use std::time::Duration;
        assert_eq!(seconds(f64::NAN, 0.05, 10.0), Duration::from_millis(50));
        assert_eq!(seconds(f64::INFINITY, 0.0, 10.0), Duration::from_secs(10));
        assert_eq!(seconds(-3.0, 0.0, 10.0), Duration::ZERO);
        assert_eq!(seconds(1.5, 0.0, 10.0), Duration::from_millis(1500));
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        name: String,
    }

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("ethpir-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "name = \"x\"\n").unwrap();
        assert_eq!(load_toml::<Sample>(&good).unwrap().name, "x");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "nmae = 1\n").unwrap();
        let e = load_toml::<Sample>(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("nmae"), "{e}");
        let e = load_toml::<Sample>(&dir.join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
