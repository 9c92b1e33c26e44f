//! What both state benches share: criterion timings by default, or `-- --report N DIR`, which
//! prints the JSON report of a store of N entries built under DIR (what `bench/run` records).

use criterion::Criterion;

pub type Report = fn(u64, &std::path::Path) -> Result<(), Box<dyn std::error::Error>>;

/// Runs `report` when `--report N [DIR]` is given (DIR defaults to `default_dir` under the
/// temporary directory), `bench` under criterion otherwise.
pub fn main(default_dir: &str, report: Report, bench: fn(&mut Criterion)) -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--report") {
        let n: u64 = args.get(at + 1).ok_or("--report N DIR: N missing")?.parse()?;
        let dir =
            args.get(at + 2).map(std::path::PathBuf::from).unwrap_or_else(|| std::env::temp_dir().join(default_dir));
        return report(n, &dir);
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    Ok(())
}
