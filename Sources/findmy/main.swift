// findmy: the command-line entry point. Each command group lives in its own file and registers
// itself in `commands`; this file only dispatches.
import CLI

#if canImport(Glibc)
    import Glibc
#endif

let commands: [Command] = [
    LogCommand.command,
    ServeCommand.command,
    ProjectCommand.project,
    ProjectCommand.replay,
    UserCommand.command,
    CompactCommand.command,
    ImportCommand.command,
    RetentionCommand.command,
    BackupCommand.backup,
    BackupCommand.restore,
    BenchMoved.command,
    ProjectorCommand.command,
    PurgeCommand.command,
    ExportCommand.command,
]

exit(
    runMain(
        CommandLine.arguments, program: "findmy", about: "findmy: a self-hosted \"find my device\" server.",
        commands: commands))
