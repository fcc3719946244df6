import Events

/// What an import has read so far: what `--dry-run` prints and what progress shows. Pure: fed the
/// items a reader hands out, one by one.
public struct ImportSummary: Equatable, Sendable {
    /// The window a dry run measures against: the device's retention (RetentionPolicy), at the time
    /// the import would store its fixes.
    public struct RetentionCheck: Sendable {
        public var policy: RetentionPolicy
        public var deviceID: UInt64
        public var nowMicros: Int64

        public init(policy: RetentionPolicy, deviceID: UInt64, nowMicros: Int64) {
            self.policy = policy
            self.deviceID = deviceID
            self.nowMicros = nowMicros
        }

        /// The fix arrives now, in a record after every erasure and removal already in the log:
        /// only the window can make it dead on arrival.
        public func isExpired(recordedAtMicros: Int64) -> Bool {
            policy.fixDeath(
                device: deviceID, recordOffset: .max, receivedAtMicros: nowMicros,
                recordedAtMicros: recordedAtMicros, nowMicros: nowMicros) == .expired
        }
    }

    public private(set) var fixes = 0
    /// Items that are not fixes, by kind ("activity", "place_name", "entry_of_unknown_format"...).
    public private(set) var notAFixByKind: [String: Int] = [:]
    public private(set) var earliestRecordedAtMicros: Int64?
    public private(set) var latestRecordedAtMicros: Int64?
    /// Fixes the report path will reject as expired: older than the device's window on arrival.
    public private(set) var outsideRetention = 0
    /// Bytes of the file read so far, for progress (ImportChunker sets it from a ByteCounter).
    public internal(set) var bytesRead: Int64 = 0
    public let retention: RetentionCheck?

    public init(retention: RetentionCheck? = nil) { self.retention = retention }

    public mutating func add(_ item: ImportItem) {
        switch item {
        case .notAFix(let kind):
            notAFixByKind[kind, default: 0] += 1
        case .fix(let fix):
            fixes += 1
            let recordedAt = fix.recordedAtMicros
            earliestRecordedAtMicros = min(earliestRecordedAtMicros ?? recordedAt, recordedAt)
            latestRecordedAtMicros = max(latestRecordedAtMicros ?? recordedAt, recordedAt)
            if let retention, retention.isExpired(recordedAtMicros: recordedAt) { outsideRetention += 1 }
        }
    }

    public static func == (lhs: ImportSummary, rhs: ImportSummary) -> Bool {
        lhs.fixes == rhs.fixes && lhs.notAFixByKind == rhs.notAFixByKind
            && lhs.earliestRecordedAtMicros == rhs.earliestRecordedAtMicros
            && lhs.latestRecordedAtMicros == rhs.latestRecordedAtMicros
            && lhs.outsideRetention == rhs.outsideRetention && lhs.bytesRead == rhs.bytesRead
    }
}
