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
// Blocks of 1 MiB and more get pages of their own (mmap), given back when freed. By default glibc
// raises this threshold to the size of each such block freed (up to 32 MiB): after the first large
// block of a projector's catch-up (its batches of fixes, megabytes each) the next ones came from
// the heap, whose freed middle is kept and reused only by blocks that fit, and a catch-up of
// 250,000 fixes took the server from 26 to 69-72 MB at its peak; fixed, 58 MB (docs/benchmarks.md,
// "Projector catch-up memory"). MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES take precedence.
if getenv("MALLOC_MMAP_THRESHOLD_") == nil && getenv("GLIBC_TUNABLES") == nil {
    _ = glibcMallopt(glibcMallocMmapThreshold, 1 << 20)
}
// Fixing the mmap threshold also fixes the trim threshold at its default, 128 KiB, where glibc
// would otherwise have raised it with the mmap threshold: a batch request whose blocks (its body,
// the decoded fixes, the event) were the top of the heap gave those pages back as it freed them and
// faulted them in again with the next one, 0-48 faults a 1,000-fix native batch and 52-104 an
// Overland one (docs/benchmarks.md, "Batches and the heap's top"). At 4 MiB an Overland request's
// blocks stay: no faults, and 5-15 % less CPU for it; the heap-trim thread still gives the top
// back once a second. MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES take precedence.
if getenv("MALLOC_TRIM_THRESHOLD_") == nil && getenv("GLIBC_TUNABLES") == nil {
    _ = glibcMallopt(glibcMallocTrimThreshold, 4 << 20)
}

exit(
    runMain(
        CommandLine.arguments, program: "findmy", about: "findmy: a self-hosted \"find my device\" server.",
        commands: commands))
