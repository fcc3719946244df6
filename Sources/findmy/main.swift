// findmy: the command-line entry point. Each command group lives in its own file and registers
// itself in `commands`; this file only dispatches.
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
    RetentionCommand.command,
    BackupCommand.backup,
    BackupCommand.restore,
    BenchCommand.command,
]

exit(runMain(CommandLine.arguments, commands: commands))
