// findmy-bench: the benchmark and load drivers, apart from the shipped `findmy` (which holds
// commands only). Each driver lives in its own file and registers itself here; the drivers start
// the real `findmy` found beside this executable. Build with -c release to measure; figures and
// how to read them: docs/benchmarks.md.
import CLI

#if canImport(Glibc)
    import Glibc
#endif

let commands: [Command] = [
    IngestBench.command,
    ReadBench.command,
    ExportBench.command,
    ProjectBench.command,
    LogBench.command,
    NATSLogBench.command,
    IngestNodesBench.command,
    NodeStartBench.command,
    PartitionedProjectorBench.command,
    MigrateBench.command,
    LoadDriver.command,
    StartupBench.command,
    StartupAfterCompactionBench.command,
    SnapshotIngestBench.command,
    CompactIngestBench.command,
    PushBench.command,
    CommandsBench.command,
    StreamBench.command,
    AgentBench.command,
    GeofenceBench.command,
    CodecBench.command,
    ImportBench.command,
]

exit(
    runMain(
        CommandLine.arguments, program: "findmy-bench",
        about: "findmy-bench: benchmark and load drivers for findmy (docs/benchmarks.md).", commands: commands
    ))
