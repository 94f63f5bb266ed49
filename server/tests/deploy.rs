//! The settings the Kubernetes manifests carry (deploy/kubernetes/
//! config.yaml) are read by the programs' own config loaders, which refuse
//! unknown keys: a manifest cannot drift from the code unnoticed. (The
//! manifests' shapes are checked against the Kubernetes schemas by
//! scripts/check-deploy.sh.)

use server::ServerConfig;
use snapshotter::follow::FollowConfig;

/// The literal block under `key: |` in a YAML file (its indented lines).
fn block(yaml: &str, key: &str) -> String {
    let head = format!("{key}: |");
    let mut lines = yaml.lines().skip_while(|l| l.trim() != head);
    let marker = lines
        .next()
        .unwrap_or_else(|| panic!("no {key} in the ConfigMap"));
    let indent = marker.len() - marker.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
        .collect()
}

#[test]
fn the_configmap_settings_are_read_by_the_programs() {
    let yaml = include_str!("../../deploy/kubernetes/config.yaml");
    let dir = tempfile::tempdir().unwrap();
    for (key, export) in [("server.toml", false), ("primary.toml", true)] {
        let path = dir.path().join(key);
        std::fs::write(&path, block(yaml, key)).unwrap();
        let config = ServerConfig::from_file(&path).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(config.store, std::path::Path::new("/store"), "{key}");
        assert_eq!(config.export_files, export, "{key}");
        assert_eq!(config.listen.port(), 8546, "{key}: the port the probes use");
    }
    let path = dir.path().join("follow.toml");
    std::fs::write(&path, block(yaml, "follow.toml")).unwrap();
    let follow = FollowConfig::from_file(&path).unwrap();
    assert_eq!(
        follow.store.as_deref(),
        Some(std::path::Path::new("/store"))
    );
}
