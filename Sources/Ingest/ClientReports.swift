import Core
import Crypto
import Events
import Identity
import JSON
import Threads

/// What an app's protocol decoder (the `Clients` module) hands to the report path: the request's
/// items already read from its wire format, before the fix rules. Ingest knows no protocol: it
/// validates, appends and answers once durable exactly as for a native report.
public struct ClientReport: Sendable {
    /// One item of the request read as a fix; `index` is its position in the request.
    public struct Item: Sendable {
        public var index: UInt32
        public var fix: Fix
        public init(index: UInt32, fix: Fix) {
            self.index = index
            self.fix = fix
        }
    }

    /// One item of the request that could not be read as a fix (and is not an accepted non-fix
    /// message): kept in the log's rejections and in the arrivals audit.
    public struct ItemRejection: Sendable {
        public var index: UInt32
        public var rejection: FixRejection
        public init(index: UInt32, _ rejection: FixRejection) {
            self.index = index
            self.rejection = rejection
        }
    }

    /// The device the request's credentials resolved to.
    public var deviceID: UInt64
    /// The request's batch id: the app's own, or `ClientReport.derivedBatchID` for apps without one.
    public var batchID: UUID128
    public var clientProtocol: ClientProtocol
    public var items: [Item]
    public var rejections: [ItemRejection]
    /// Region transitions and waypoints of the request, appended before its fix batch.
    public var places: [Event]
    /// When the request arrived, for a decoder that read the clock already (a fix without a time
    /// is dated on arrival, and its `recorded_at` must be that same `received_at`); nil: `submit`
    /// reads it.
    public var receivedAtMicros: Int64?
    /// The command the request answers (OwnTracks `t: "r"`), marked answered once it is durable.
    public var answers: CommandAnswerTarget? = nil

    public init(
        deviceID: UInt64, batchID: UUID128, clientProtocol: ClientProtocol, items: [Item],
        rejections: [ItemRejection] = [], places: [Event] = [], receivedAtMicros: Int64? = nil
    ) {
        self.deviceID = deviceID
        self.batchID = batchID
        self.clientProtocol = clientProtocol
        self.items = items
        self.rejections = rejections
        self.places = places
        self.receivedAtMicros = receivedAtMicros
    }

    /// The batch id of a request from an app that sends none: a version-4-shaped UUID made of the
    /// first 16 bytes of SHA-256(device id (u64 LE) ‖ protocol number ‖ body). A byte-identical
    /// resend (an app retrying after a timeout) gets the same id and is answered as a duplicate;
    /// any change of content, device or protocol gives another id.
    public static func derivedBatchID(deviceID: UInt64, clientProtocol: ClientProtocol, body: [UInt8])
        -> UUID128
    {
        // Hashed where the parts are: copying a body of hundreds of kilobytes behind the nine bytes
        // first was one more allocation of its size and one more pass over it, per request.
        let digest = withUnsafeBytes(of: deviceID.littleEndian) { device in
            withUnsafeBytes(of: clientProtocol.rawValue) { protocolNumber in
                body.withUnsafeBytes { bodyBytes in
                    SHA256.hash(concatenating: [device, protocolNumber, bodyBytes])
                }
            }
        }
        return batchID(digest: digest)
    }

    /// A version-4-shaped UUID made of the first 16 bytes of `digest` (a SHA-256): the derived
    /// batch ids of every app.
    public static func batchID(digest: [UInt8]) -> UUID128 {
        precondition(digest.count >= 16, "a batch id is made of 16 bytes of a digest")
        // Read as two big-endian words in place: `UUID128(bytes:)` over a slice is generic across
        // modules, and its unspecialised loop cost twice the hash of a single-fix body.
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in 0..<8 {
            high = high << 8 | UInt64(digest[index])
            low = low << 8 | UInt64(digest[8 + index])
        }
        // Version 4 (byte 6's high nibble) and the RFC 4122 variant (byte 8's two high bits).
        high = high & ~0xF000 | 0x4000
        low = low & ~(0xC0 << 56) | 0x80 << 56
        return UUID128(high: high, low: low)
    }
}

/// How the report path answered a `ClientReport`. The protocol decides what its app gets back.
public enum ClientReportOutcome: Sendable, Equatable {
    /// Durable at `offset`; `accepted` fixes stored, `rejected` items refused (rules or decoding).
    case stored(offset: UInt64, accepted: Int, rejected: Int)
    /// The same batch id was stored before (a resend): nothing appended, its first result.
    case duplicate(offset: UInt64, accepted: Int, rejected: Int)
    /// Nothing to append: no item, no rejection, no place.
    case empty
    /// The device's reporting is paused: nothing stored (docs/api.md, pause).
    case paused
    /// The same batch id is being appended by another request right now; retry shortly.
    case inProgress
    /// The append failed (disk full, I/O error): nothing stored, nothing acknowledged; retry later.
    case failed(APIError)
}

extension IngestService {
    /// The one entry point of the report path for apps' protocols: applies the fix rules of
    /// docs/api.md to each item (unknown accuracy allowed: an app may send none), appends the
    /// places and the fix batch, and calls `completion` exactly once, after they are durable (or
    /// at once when nothing is appended). It never blocks on the fdatasync: `completion` runs on
    /// the thread that led the group commit, and must be quick.
    public func submit(
        _ report: ClientReport, completion: @escaping @Sendable (ClientReportOutcome) -> Void
    ) {
        let received = report.receivedAtMicros ?? clockMicros()
        let (fixes, rejections) = validateItems(report, receivedAtMicros: received)
        if fixes.isEmpty && rejections.isEmpty && report.places.isEmpty { return completion(.empty) }
        var rejectionCounts: [FixRejection.Code: Int] = [:]
        for (_, rejection) in rejections { rejectionCounts[rejection.code, default: 0] += 1 }
        let key = RegistryStore.BatchKey(deviceID: report.deviceID, batchID: report.batchID)
        if let refusal = admissionRefusal(key) { return completion(refusal) }
        let batch = FixBatch(
            deviceID: report.deviceID, batchID: report.batchID, fixes: fixes,
            rejections: rejections.map { Rejection(index: $0.0, reason: $0.1.reason) },
            clientProtocol: report.clientProtocol)
        // Places first, the batch last: the batch id is remembered (a resend answered as a
        // duplicate) only when everything of the request is durable. A request of places only
        // (an OwnTracks transition) appends no empty batch: its id is remembered in memory, so a
        // resend while the server runs is a duplicate; after a restart a redelivered copy appends
        // the same place again (docs/clients.md).
        let appendsBatch = !(fixes.isEmpty && rejections.isEmpty)
        let records = report.places + (appendsBatch ? [.fixBatch(batch)] : [])
        let (acceptedCount, rejectedCount, counts) = (fixes.count, rejections.count, rejectionCounts)
        let pending = Locked((remaining: records.count, failure: APIError?.none, batchOffset: UInt64(0)))
        let clientProtocol = report.clientProtocol
        let appenderFolds = identity.store.appenderFolds
        let answers = report.answers
        for (position, event) in records.enumerated() {
            let isBatch = position == records.count - 1
            let messageID =
                isBatch && appendsBatch
                ? nil
                : SharedRegistry.placeMessageID(
                    deviceID: key.deviceID, batchID: key.batchID, index: position)
            append(EventCodec.encode(event, receivedAtMicros: received), messageID: messageID) {
                [self] result in
                let done = pending.withLock { state -> Bool in
                    switch result {
                    case .success(let offset): if isBatch { state.batchOffset = offset }
                    case .failure(let error): state.failure = state.failure ?? error
                    }
                    state.remaining -= 1
                    return state.remaining == 0
                }
                guard done else { return }
                let (failure, offset) = pending.withLock { ($0.failure, $0.batchOffset) }
                if let failure {
                    registry.write { _ = $0.batchesInFlight.remove(key) }
                    return completion(.failed(failure))
                }
                registry.write { state in
                    state.batchesInFlight.remove(key)
                    // Otherwise the node's follower folds it, in the log's order.
                    if appenderFolds { state.registry.apply(.fixBatch(batch), offset: offset) }
                }
                if appendsBatch {
                    metrics.recordReport(
                        accepted: acceptedCount, rejected: counts, clientProtocol: clientProtocol)
                }
                // Only a batch with fixes can answer (answerCommand checks): the newest fix is the answer.
                if let answers, appendsBatch {
                    identity.store.answerCommand(
                        answers, deviceID: batch.deviceID, batchOffset: offset, fixes: batch.fixes,
                        clientProtocol: clientProtocol)
                }
                completion(.stored(offset: offset, accepted: acceptedCount, rejected: rejectedCount))
            }
        }
    }

    /// The items that pass the fix rules, and every rejection (the app's own and the rules') in
    /// item order.
    private func validateItems(_ report: ClientReport, receivedAtMicros received: Int64)
        -> (fixes: [Fix], rejections: [(UInt32, FixRejection)])
    {
        let limits = arrivalLimits(report.deviceID)
        var fixes: [Fix] = []
        fixes.reserveCapacity(report.items.count)
        var rejections: [(UInt32, FixRejection)] = report.rejections.map { ($0.index, $0.rejection) }
        for item in report.items {
            do {
                fixes.append(try ReportDecoder.validate(item.fix, receivedAtMicros: received, limits: limits))
            } catch {
                rejections.append((item.index, error))
            }
        }
        rejections.sort { $0.0 < $1.0 }
        return (fixes, rejections)
    }

    /// Why the batch is not appended now: a duplicate of a stored one (counted), a paused device,
    /// or the same batch appended by another request. Nil: this request appends it, and holds it
    /// in flight until it is durable or failed.
    private func admissionRefusal(_ key: RegistryStore.BatchKey) -> ClientReportOutcome? {
        enum Admission {
            case duplicate(Registry.BatchResult)
            case paused, inProgress, append
        }
        let admission = registry.write { state -> Admission in
            if let result = state.registry.batchResult(deviceID: key.deviceID, batchID: key.batchID) {
                return .duplicate(result)
            }
            if state.registry.devices[key.deviceID]?.paused == true { return .paused }
            guard state.batchesInFlight.insert(key).inserted else { return .inProgress }
            return .append
        }
        switch admission {
        case .duplicate(let result):
            metrics.recordDuplicate()
            return .duplicate(
                offset: result.offset, accepted: result.accepted, rejected: result.rejections.count)
        case .paused: return .paused
        case .inProgress: return .inProgress
        case .append: return nil
        }
    }

    /// Counts a message an app sent that is acknowledged without being stored (OwnTracks' `lwt`,
    /// `status`, `card`, ...), for `/metrics`.
    public func recordClientMessage(_ clientProtocol: ClientProtocol, type: String) {
        metrics.recordClientMessage(clientProtocol, type: type)
    }
}

extension IngestService {
    /// `submit` for a caller on a thread that may block (a blocking route's worker): returns the
    /// outcome once the report is durable or refused.
    public func submitAndWait(_ report: ClientReport) -> ClientReportOutcome {
        let lock = ConditionLock()
        let slot = Locked(ClientReportOutcome?.none)
        submit(report) { outcome in
            lock.withLock {
                slot.withLock { $0 = outcome }
                lock.signal()
            }
        }
        lock.lock()
        defer { lock.unlock() }
        while true {
            if let outcome = slot.withLock({ $0 }) { return outcome }
            lock.wait()
        }
    }
}
