/// Every limit ingest enforces, each with its unit last. Defaults and what happens over each limit
/// are in docs/api.md and docs/configuration.md.
public struct IngestLimits: Sendable {
    /// A report with more fixes answers 413 `too_many_fixes`. A phone off-grid for a day at one fix
    /// a minute queues 1,440; the headroom covers a week at that rate.
    public var batchFixesMax = 10_000
    /// A larger request body answers 413 `body_too_large` (enforced by the HTTP server). A fix is
    /// about 250 bytes of JSON, so a full batch is about 2.5 MB.
    public var bodyBytesMax = 8 << 20
    /// A `recorded_at` later than `received_at` by more than this is accepted and flagged
    /// clock-suspect (DESIGN.md, "Time").
    public var clockSkewToleranceSeconds = 300
    /// A fix older than this, counted from the earlier of `recorded_at` and `received_at`, is
    /// rejected as expired: it would be deleted by the retention job anyway.
    public var retentionDays = 30
    /// Batch ids remembered per device for idempotent retries (also across restarts). A retry of
    /// an older batch id is appended again; clients retry within minutes, not hundreds of batches.
    public var recentBatchesPerDeviceMax = 256
    /// Bytes of a device name, model, push token, topic or source.
    public var textBytesMax = 512
    /// Bytes of a push token (an UnifiedPush endpoint is a URL).
    public var pushTokenBytesMax = 4096

    public init() {}

    public var retentionMicros: Int64 { Int64(retentionDays) * 86_400 * 1_000_000 }
    public var clockSkewToleranceMicros: Int64 { Int64(clockSkewToleranceSeconds) * 1_000_000 }
}
