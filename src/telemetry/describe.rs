//! The `# HELP` text of every metric family, registered once when the recorder is installed
//! ([`super::serve`]). Every `tidemark_*` name the sources emit must have a line here (a unit
//! test checks it), so a scrape never shows a family without help; docs/operations.md has the
//! long form of each.

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

use Kind::{Counter, Gauge, Histogram};

/// (name, kind, help) of every metric family tidemark emits.
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    ("tidemark_build_info", Gauge, "1, labelled with the package version and the commit the binary was built from (-dirty: built from changed sources)"),
    ("tidemark_backlog_age_seconds", Gauge, "Seconds since the broker appended the oldest record not yet committed, per source partition; 0 when caught up"),
    ("tidemark_consumer_lag_records", Gauge, "Log end offset minus the committed checkpoint offset, per source partition"),
    ("tidemark_records_total", Counter, "Source records ingested"),
    ("tidemark_events_applied_total", Counter, "Deduplicated events applied to state"),
    ("tidemark_dedup_hits_total", Counter, "Events ignored as duplicates"),
    ("tidemark_dead_letters_total", Counter, "Records dead-lettered, by reject reason"),
    ("tidemark_late_events_total", Counter, "Events past window retention, written to the late side output"),
    ("tidemark_merge_broken_promises_total", Counter, "Repartitioned records that arrived below a progress promise of their upstream partition"),
    ("tidemark_sku_late_lines_total", Counter, "Order lines a SKU partition found past window retention (no inventory or velocity effect)"),
    ("tidemark_checkpoint_duration_seconds", Histogram, "Time of the fsynced state and offsets write of one commit"),
    ("tidemark_commit_phase_seconds", Histogram, "Time of a commit's other phases: on the stream thread the tasks finishing into the batch (finish) and the outputs queued in the producer (produce), on the commit thread the outputs' acknowledgement before the state write (outputs)"),
    ("tidemark_commit_wait_seconds", Histogram, "Time the stream thread waited for the previous batch's commit before finishing the next"),
    ("tidemark_latency_seconds", Histogram, "Latency of each segment of the action deadline, from broker append to the endpoint's answer"),
    ("tidemark_rebalances_total", Counter, "Partition assignment changes seen"),
    ("tidemark_partition_owned", Gauge, "1 for a partition this pod owns and has restored, 0 once revoked"),
    ("tidemark_input_partitions", Gauge, "Partition count of each consumed topic, read from the broker at start"),
    ("tidemark_partitions_restoring", Gauge, "Partitions assigned to this pod whose state is still being restored"),
    ("tidemark_paused", Gauge, "1 while consumption is paused through the admin listener"),
    ("tidemark_outbox_pending", Gauge, "Inventory actions being delivered (in flight or waiting to retry; at most 2,048 at once)"),
    ("tidemark_outbox_oldest_pending_age_seconds", Gauge, "Age of the oldest inventory action being delivered"),
    ("tidemark_outbox_expired_total", Counter, "Final outbox rows deleted once their event time fell more than the dedup retention behind"),
    ("tidemark_outbox_deferred_total", Counter, "Committed outbox rows not started at once because 2,048 deliveries were under way"),
    ("tidemark_audit_recalls_total", Counter, "Audit-topic reads when SKU partitions are assigned, by outcome"),
    ("tidemark_audit_retries_total", Counter, "Outcome audit records produced again after the broker did not take them"),
    ("tidemark_dispatch_total", Counter, "Inventory action dispatch outcomes: delivered, conflict, retry, permanent_failure"),
    ("tidemark_dispatch_redeliveries_total", Counter, "Pending actions with earlier attempts re-sent after a restart"),
    ("tidemark_dispatch_settled_from_audit_total", Counter, "Actions recorded with the outcome the audit topic already held, not sent again"),
    ("tidemark_state_disk_bytes", Gauge, "Bytes of the files under --state-dir"),
    ("tidemark_state_volume_capacity_bytes", Gauge, "Size of the volume holding --state-dir"),
    ("tidemark_state_volume_available_bytes", Gauge, "Bytes available on the volume holding --state-dir"),
    ("tidemark_state_memory_bytes", Gauge, "Memory the state store holds by RocksDB's accounting, by kind"),
    ("tidemark_state_dedup_folds_total", Counter, "Folds of recent dedup entries into table files, by result (done, failed)"),
    ("tidemark_task_entries", Gauge, "Entries the tasks hold in memory, by kind"),
    ("tidemark_fences_total", Counter, "Fence records appended to idle input partitions (internal.idle_promise = fence), by outcome"),
    ("tidemark_task_transitions_refused_total", Counter, "Task state changes the lifecycle refused (a defect)"),
    ("tidemark_skipped_records_total", Counter, "Records deleted by retention before they were processed, skipped under --accept-gaps"),
    ("tidemark_side_outputs_truncated_total", Counter, "Dead-letter and late records cut to fit their topic"),
    ("tidemark_side_output_retries_total", Counter, "Dead-letter and late records produced again after a refusal"),
    ("tidemark_output_refusals_total", Counter, "Output records the broker or producer refused for good; their batch is not committed"),
    ("tidemark_stream_restarts_total", Counter, "Times the stream restarted from its checkpoints in the same process, by reason"),
    ("tidemark_snapshot_last_success_timestamp_seconds", Gauge, "Unix time of this pod's last complete snapshot round"),
    ("tidemark_snapshots_total", Counter, "Snapshot rounds, by outcome"),
    ("tidemark_snapshot_bytes", Gauge, "Bytes uploaded by the last snapshot round (new SST files and manifests)"),
    ("tidemark_snapshot_duration_seconds", Histogram, "Duration of one snapshot round"),
    ("tidemark_snapshot_restores_total", Counter, "Partitions restored from a snapshot when assigned to this pod"),
    ("tidemark_snapshot_restore_failures_total", Counter, "Snapshot imports that failed; the partition's local state is left as it was"),
    ("tidemark_snapshot_failures_total", Counter, "Failed snapshot operations, by op (upload, list, prune, download, export); retried by the next round"),
    ("tidemark_snapshot_upload_bytes_total", Counter, "Bytes of snapshots uploaded to the snapshot store (new SST files and manifests)"),
    ("tidemark_snapshot_reused_bytes_total", Counter, "Bytes of published snapshots' SST files already in the snapshot store, not uploaded again"),
    ("tidemark_snapshot_lag_seconds", Gauge, "Seconds since the stalest owned partition's newest snapshot last held all it had committed"),
    ("tidemark_standby_partitions", Gauge, "Input partitions this pod keeps a standby task for"),
    ("tidemark_standby_lag_records", Gauge, "Records the standby tasks together are behind their owners' commits"),
    ("tidemark_standby_warm", Gauge, "1 when every standby task is within one commit of its owner"),
    ("tidemark_standby_rows_waiting", Gauge, "Outbox rows standby SKU tasks derived that the audit topic has not shown settled yet"),
    ("tidemark_standby_rows_untracked_total", Counter, "Standby outbox rows derived beyond the tracking cap"),
    ("tidemark_standby_rows_settled_total", Counter, "Standby outbox rows recorded with the outcome their owner audited"),
    ("tidemark_standby_promotions_total", Counter, "Partitions handed from a standby task to an active task"),
    ("tidemark_standby_partition", Gauge, "1 for an input partition this pod keeps a standby task for, 0 once let go"),
    ("tidemark_state_partition_local", Gauge, "1 for a partition whose state is in this pod's local store (published every 5 s by the --drop-moved-after janitor), 0 once deleted"),
    ("tidemark_state_partitions_dropped_total", Counter, "Partitions whose local state was deleted after they moved away (neither owned nor shadowed for --drop-moved-after)"),
    ("tidemark_microbatch_slice_seconds", Histogram, "Duration of one micro-batch slice"),
    ("tidemark_microbatch_slices_total", Counter, "Micro-batch slices run"),
    ("tidemark_microbatch_staleness_bound_seconds", Gauge, "Bound on the age of the micro-batch results: the schedule interval plus the last slice's duration"),
    ("tidemark_microbatch_deadline_misses_total", Counter, "Micro-batch slices whose staleness bound exceeded --deadline"),
];

/// Registers the help text of every family (and of the process metrics) with the installed
/// recorder; the exporter prints it as `# HELP` whenever the family has a series.
pub fn all() {
    for &(name, kind, help) in FAMILIES {
        let unit = name.ends_with("_seconds").then_some(Unit::Seconds);
        match (kind, unit) {
            (Counter, _) => describe_counter!(name, help),
            (Gauge, _) => describe_gauge!(name, help),
            (Histogram, Some(unit)) => describe_histogram!(name, unit, help),
            (Histogram, None) => describe_histogram!(name, help),
        }
    }
    for &(name, kind, help) in super::process::FAMILIES {
        match kind {
            Counter => describe_counter!(name, help),
            Gauge => describe_gauge!(name, help),
            Histogram => describe_histogram!(name, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Every `"tidemark_…"` string literal under src/ (the metric names the macros are given).
    fn names_in(dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                names_in(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("describe.rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for piece in text.split("\"tidemark_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                        .collect();
                    if piece[name.len()..].starts_with('"') {
                        out.insert(format!("tidemark_{name}"));
                    }
                }
            }
        }
    }

    #[test]
    fn every_metric_name_in_the_sources_has_help_text() {
        let mut emitted = BTreeSet::new();
        names_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut emitted);
        assert!(emitted.len() > 40, "found too few metric names: {emitted:?}");
        let described: BTreeSet<String> = super::FAMILIES.iter().map(|(n, _, _)| n.to_string()).collect();
        let missing: Vec<_> = emitted.difference(&described).collect();
        assert!(missing.is_empty(), "metrics without help text in src/telemetry/describe.rs: {missing:?}");
    }
}
