use std::process::ExitCode;

use clap::Parser;
use tidemark::cli::{ActionsCommand, BatchCommand, Cli, Command, QueryCommand};
use tidemark::cmd;
use tidemark_topology::config;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tidemark::telemetry::logging::init(&cli.log, cli.log_format);
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => cmd::run::run(args, &runtime()?)?,
        Command::Demo(args) => cmd::demo::run(args)?,
        Command::Gen(args) => {
            let settings = tidemark::kafka::KafkaSettings::from_args(&args.kafka)?;
            cmd::gen::run(args, &settings)?
        }
        Command::Validate { file } => match config::load(&file) {
            Ok(t) => println!("{}: valid topology `{}` ({} rules)", file.display(), t.name, t.rules.len()),
            Err(e) => {
                eprint!("{e}");
                return Ok(ExitCode::from(2));
            }
        },
        Command::Topics(args) => {
            let topology = config::load(&args.topology)?;
            let settings = tidemark::kafka::KafkaSettings::from_args(&args.kafka)?;
            let created =
                runtime()?.block_on(tidemark::kafka::admin::ensure_topics(&settings, &topology, args.replication))?;
            println!("created {} topic(s): {}", created.len(), created.join(", "));
        }
        Command::Query(QueryCommand::Dashboard(args)) => {
            let settings = tidemark::kafka::KafkaSettings::from_args(&args.kafka)?;
            cmd::query::dashboard(args, &settings)?
        }
        Command::Batch(BatchCommand::Close(args)) => cmd::batch::close(args)?,
        Command::Batch(BatchCommand::Adjust(args)) => cmd::batch::adjust(args)?,
        Command::Batch(BatchCommand::Show(args)) => cmd::batch::show(args)?,
        Command::Batch(BatchCommand::Shadow(args)) => cmd::batch::shadow(args)?,
        Command::Microbatch(args) => cmd::microbatch::run(args, &runtime()?)?,
        Command::Shadow(args) => return cmd::shadow::run(args),
        Command::Actions(ActionsCommand::List(args)) => cmd::actions::list(args)?,
        Command::Actions(ActionsCommand::Resend(args)) => cmd::actions::resend(args, &runtime()?)?,
    }
    Ok(ExitCode::SUCCESS)
}
