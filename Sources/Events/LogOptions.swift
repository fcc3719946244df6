import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// Settings of the log writer; every limit carries its unit.
public struct LogOptions: Sendable {
    /// The active segment is sealed and a new one started before a group commit once it holds this many bytes.
    public var segmentBytesMax = 64 << 20
    /// ... or once it is this old (server clock), so that retention never waits on a quiet log.
    public var segmentAgeSecondsMax = 3600
    /// Extra time a group's leader waits for more appends before writing; 0 relies on natural batching
    /// (appends that arrive during an fdatasync form the next group).
    public var groupCommitDelayMicros = 0
    /// At most this many bytes of frames are written by one group commit.
    public var groupBytesMax = 16 << 20
    public var io: any FileIO = PosixFileIO()
    public var clockMicros: @Sendable () -> Int64 = wallClockMicros
    /// Where the writer reports what recovery did (one line each).
    public var diagnostics: @Sendable (String) -> Void = { line in writeStandardError(line) }
    /// Called when fdatasync fails. It must not return: after a failed fsync the kernel may have
    /// dropped the dirty pages, and a retried fsync can report success for data that is gone.
    public var onSyncFailure: @Sendable (IOError) -> Never = { error in
        fatalError("findmy: fdatasync failed, stopping so that nothing unsynced is acknowledged: \(error)")
    }
    /// Whether opening a log written before log ids gives it one (docs/log-format.md, "Log identity").
    /// Off only for `findmy log verify`, which changes nothing but a torn tail.
    public var assignsLogID = true

    public init() {}
}
