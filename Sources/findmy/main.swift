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

// glibc malloc gives a thread that finds the arena busy an arena of its own, up to 8 per core (16
// here); each keeps the pages of its freed blocks, so findmy's threads passing requests between
// them left 4-5 MB of free memory resident (docs/benchmarks.md, "Memory"). One arena: a block
// freed by any thread is reused by any other, and small blocks still come from each thread's
// cache without the lock. MALLOC_ARENA_MAX or GLIBC_TUNABLES in the environment take precedence.
if getenv("MALLOC_ARENA_MAX") == nil && getenv("GLIBC_TUNABLES") == nil {
    _ = glibcMallopt(glibcMallocArenaMax, 1)
}

exit(
    runMain(
        CommandLine.arguments, program: "findmy", about: "findmy: a self-hosted \"find my device\" server.",
        commands: commands))
