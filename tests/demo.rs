//! The README's first command, `scripts/demo.sh`, runs `tidemark demo`: a mock Kafka
//! cluster inside the process, generated orders and the example topology. It must end by
//! itself with its summary on any machine, without a broker. (It once waited forever for a
//! topic the topology had gained but the demo did not create.)

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far above what 3,000 events take (7 s here): only a demo that hangs reaches it.
const HANG: Duration = Duration::from_secs(120);

#[test]
fn the_demo_processes_its_generated_orders_and_ends_with_a_summary_without_a_broker() {
    let state = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["demo", "--events", "3000", "--rate", "20000", "--state-dir"])
        .arg(state.path().join("demo-state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tidemark demo");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break Some(status);
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = reader.join().expect("stderr reader");
    let tail: String = text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    let status = status.unwrap_or_else(|| panic!("the demo did not end within {HANG:?}:\n{tail}"));
    assert!(status.success(), "the demo failed ({status}):\n{tail}");
    assert!(!text.contains("does not exist"), "the demo waited for a topic it did not create:\n{tail}");
    assert!(text.contains("dashboard topic holds"), "no dashboard summary:\n{tail}");
    let windows = text
        .lines()
        .find_map(|l| l.split("dashboard topic holds ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("cannot read the window count:\n{tail}"));
    assert!(windows > 0, "the demo's dashboard holds no window:\n{tail}");
}
