//! Rule sections for tests: the example's three rules with thresholds low enough to fire on
//! small generated histories (a few thousand events over a few dozen SKUs).

/// The `[[rules]]` of `oversell`, `low_stock` (threshold 25) and `velocity_spike` (8 units,
/// factor 2, 15 baseline windows) in the given modes; append it to the example topology cut
/// at `# Anomaly rules.`.
pub fn firing_rules(oversell: &str, low_stock: &str, velocity_spike: &str) -> String {
    format!(
        r#"
[[rules]]
id = "oversell"
version = 1
mode = "{oversell}"

[[rules]]
id = "low_stock"
version = 1
mode = "{low_stock}"
params = {{ threshold = 25, replenish_to = 100 }}

[[rules]]
id = "velocity_spike"
version = 1
mode = "{velocity_spike}"
params = {{ min_units = 8, factor = "2.0", baseline_windows = 15 }}
"#
    )
}
