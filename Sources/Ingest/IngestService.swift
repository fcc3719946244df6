import Core
import Crypto
import Events
import HTTP
import Identity
import JSON
import Synchronization
import Threads

/// The ingest side of the server: the handlers of the enrolment, push token, pause, retention and
/// report endpoints, over the registry and log writer of an `IdentityService` (see its locking).
public final class IngestService: Sendable {
    /// The callers, the registry and the log writer this service appends to.
    public let identity: IdentityService
    public let metrics: IngestMetrics
    /// The report path's limits, and (as `limits.identity`) those the identity service enforces.
    public let limits: IngestLimits

    /// Rebuilds the registry from the log: from the newest valid snapshot of `snapshots` and the
    /// records after it, or from every durable record (docs/snapshots.md).
    public init(
        log: LogWriter, limits: IngestLimits = IngestLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        snapshots: RegistrySnapshotStore? = nil
    ) throws {
        let metrics = IngestMetrics()
        self.metrics = metrics
        self.limits = limits
        identity = try IdentityService(
            log: log, limits: limits.identity, clockMicros: clockMicros,
            appendObserver: { metrics.recordAppend(micros: $0) }, snapshots: snapshots)
    }

    /// An ingest node of a shared log (`findmy serve --log nats://`): the registry is filled by
    /// `shared`'s follower, which the caller runs (docs/scale.md, "Ingest nodes").
    public init(
        shared: SharedRegistry, limits: IngestLimits = IngestLimits(),
        clockMicros: @escaping @Sendable () -> Int64 = wallClockMicros,
        snapshots: RegistrySnapshotStore? = nil, snapshotLog: (any SnapshotSharedLog)? = nil
    ) {
        let metrics = IngestMetrics()
        self.metrics = metrics
        self.limits = limits
        identity = IdentityService(
            shared: shared, limits: limits.identity, clockMicros: clockMicros,
            appendObserver: { metrics.recordAppend(micros: $0) }, snapshots: snapshots,
            snapshotLog: snapshotLog)
    }

    public var log: LogWriter { identity.store.writer }
    var registry: RegistryCell { identity.store.registry }
    var clockMicros: @Sendable () -> Int64 { identity.clockMicros }
    var statusSources: StatusSources { identity.statusSources }

    /// Adds a component's health and metrics to `/healthz` and `/metrics`.
    public func addStatusSource(_ source: any StatusSource) { identity.addStatusSource(source) }

    /// A copy of the registry, for tests and admin listings.
    public var registrySnapshot: Registry { identity.registrySnapshot }

    func appendAndApply(_ event: Event, receivedAtMicros: Int64) throws(APIError) -> UInt64 {
        try identity.appendAndApply(event, receivedAtMicros: receivedAtMicros)
    }

    func append(
        _ encoded: EncodedEvent, messageID: String? = nil,
        completion: @escaping @Sendable (Result<UInt64, APIError>) -> Void
    ) {
        identity.store.append(encoded, messageID: messageID) { completion($0.mapError(APIError.init)) }
    }
}

extension GuardedRouter {
    /// A router whose gate is `service`'s identity.
    public init(service: IngestService, listener: Listener) {
        self.init(service: service.identity, listener: listener)
    }
}
