import Events
import HTTP
import Identity
import Synchronization
import Threads

/// Counters for `GET /metrics`, in the Prometheus text format (version 0.0.4).
public final class IngestMetrics: Sendable {
    struct MessageKey: Hashable {
        var clientProtocol: ClientProtocol
        var type: String
    }

    struct RequestKey: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    /// Upper bounds of the append latency histogram, in microseconds.
    static let appendBucketsMicros: [Int64] = [
        250, 500, 1_000, 2_000, 5_000, 10_000, 25_000, 50_000, 100_000, 1_000_000,
    ]

    struct State {
        var requests: [RequestKey: Int] = [:]
        var fixesAccepted = 0
        var fixesRejected: [FixRejection.Code: Int] = [:]
        var duplicateBatches = 0
        var batchesByProtocol: [ClientProtocol: Int] = [:]
        var fixesAcceptedByProtocol: [ClientProtocol: Int] = [:]
        var fixesRejectedByProtocol: [ClientProtocol: Int] = [:]
        var clientMessages: [MessageKey: Int] = [:]
        var appendBuckets = [Int](repeating: 0, count: IngestMetrics.appendBucketsMicros.count + 1)
        var appendCount = 0
        var appendMicrosSum: Int64 = 0
    }

    private let state = Locked(State())

    public init() {}

    public func observe(_ observation: HTTPServer.Observation) {
        let key = RequestKey(
            route: observation.routeName, method: observation.method, status: observation.status)
        state.withLock { $0.requests[key, default: 0] += 1 }
    }

    func recordReport(
        accepted: Int, rejected: [FixRejection.Code: Int], clientProtocol: ClientProtocol = .native
    ) {
        state.withLock { state in
            state.fixesAccepted += accepted
            for (code, count) in rejected {
                state.fixesRejected[code, default: 0] += count
                state.fixesRejectedByProtocol[clientProtocol, default: 0] += count
            }
            state.batchesByProtocol[clientProtocol, default: 0] += 1
            state.fixesAcceptedByProtocol[clientProtocol, default: 0] += accepted
        }
    }

    /// The message types an app may send are few and fixed by its decoder, so the label set stays small.
    func recordClientMessage(_ clientProtocol: ClientProtocol, type: String) {
        state.withLock {
            $0.clientMessages[MessageKey(clientProtocol: clientProtocol, type: type), default: 0] += 1
        }
    }

    func recordDuplicate() { state.withLock { $0.duplicateBatches += 1 } }

    func recordAppend(micros: Int64) {
        let bucket = Self.appendBucketsMicros.firstIndex { micros <= $0 } ?? Self.appendBucketsMicros.count
        state.withLock { state in
            state.appendBuckets[bucket] += 1
            state.appendCount += 1
            state.appendMicrosSum += micros
        }
    }

    public var fixesAccepted: Int { state.withLock { $0.fixesAccepted } }

    /// `log`: the local log's counters; nil on a shared-log node (JetStream keeps its own).
    func render(log: LogWriterStatistics?) -> String {
        let state = state.withLock { $0 }
        var out = ""
        out +=
            "# HELP findmy_http_requests_total HTTP requests answered, by route pattern, method and status.\n"
        out += "# TYPE findmy_http_requests_total counter\n"
        for (key, count) in state.requests.sorted(by: {
            ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status)
        }) {
            out +=
                "findmy_http_requests_total{route=\"\(key.route)\",method=\"\(key.method)\",status=\"\(key.status)\"} \(count)\n"
        }
        out +=
            "# HELP findmy_fixes_accepted_total Fixes stored durably.\n# TYPE findmy_fixes_accepted_total counter\n"
        out += "findmy_fixes_accepted_total \(state.fixesAccepted)\n"
        out +=
            "# HELP findmy_fixes_rejected_total Fixes rejected, by reason code.\n# TYPE findmy_fixes_rejected_total counter\n"
        for code in FixRejection.Code.allCases {
            out +=
                "findmy_fixes_rejected_total{reason=\"\(code.rawValue)\"} \(state.fixesRejected[code] ?? 0)\n"
        }
        out += "# HELP findmy_batches_total Batches stored durably, by the protocol they arrived in.\n"
        out += "# TYPE findmy_batches_total counter\n"
        for clientProtocol in ClientProtocol.known {
            out +=
                "findmy_batches_total{protocol=\"\(clientProtocol.name)\"} \(state.batchesByProtocol[clientProtocol] ?? 0)\n"
        }
        out += "# HELP findmy_protocol_fixes_accepted_total Fixes stored durably, by protocol.\n"
        out += "# TYPE findmy_protocol_fixes_accepted_total counter\n"
        for clientProtocol in ClientProtocol.known {
            out +=
                "findmy_protocol_fixes_accepted_total{protocol=\"\(clientProtocol.name)\"} \(state.fixesAcceptedByProtocol[clientProtocol] ?? 0)\n"
        }
        out += "# HELP findmy_protocol_fixes_rejected_total Fixes or messages rejected, by protocol.\n"
        out += "# TYPE findmy_protocol_fixes_rejected_total counter\n"
        for clientProtocol in ClientProtocol.known {
            out +=
                "findmy_protocol_fixes_rejected_total{protocol=\"\(clientProtocol.name)\"} \(state.fixesRejectedByProtocol[clientProtocol] ?? 0)\n"
        }
        out +=
            "# HELP findmy_client_messages_total Messages of apps acknowledged without a fix, by protocol and type.\n"
        out += "# TYPE findmy_client_messages_total counter\n"
        for (key, count) in state.clientMessages.sorted(by: {
            ($0.key.clientProtocol, $0.key.type) < ($1.key.clientProtocol, $1.key.type)
        }) {
            out +=
                "findmy_client_messages_total{protocol=\"\(key.clientProtocol.name)\",type=\"\(key.type)\"} \(count)\n"
        }
        out +=
            "# HELP findmy_duplicate_batches_total Retried batch ids answered from the registry without appending.\n"
        out +=
            "# TYPE findmy_duplicate_batches_total counter\nfindmy_duplicate_batches_total \(state.duplicateBatches)\n"
        out += "# HELP findmy_append_seconds Time from the append call to the record being durable.\n"
        out += "# TYPE findmy_append_seconds histogram\n"
        var cumulative = 0
        for (index, bound) in Self.appendBucketsMicros.enumerated() {
            cumulative += state.appendBuckets[index]
            out += "findmy_append_seconds_bucket{le=\"\(Double(bound) / 1e6)\"} \(cumulative)\n"
        }
        cumulative += state.appendBuckets[Self.appendBucketsMicros.count]
        out += "findmy_append_seconds_bucket{le=\"+Inf\"} \(cumulative)\n"
        out += "findmy_append_seconds_sum \(Double(state.appendMicrosSum) / 1e6)\n"
        out += "findmy_append_seconds_count \(state.appendCount)\n"
        guard let log else { return out }
        out += Self.logCounters(log)
        return out
    }

    /// The local log writer's counters, which a shared-log node does not have.
    private static func logCounters(_ log: LogWriterStatistics) -> String {
        var out = ""
        out += "# HELP findmy_log_fsyncs_total Group commits (one fdatasync each) since the server started.\n"
        out += "# TYPE findmy_log_fsyncs_total counter\nfindmy_log_fsyncs_total \(log.groupCommits)\n"
        out +=
            "# HELP findmy_log_records_appended_total Records made durable; divided by fsyncs, the batches per fsync.\n"
        out +=
            "# TYPE findmy_log_records_appended_total counter\nfindmy_log_records_appended_total \(log.recordsAppended)\n"
        out += "# HELP findmy_log_bytes_appended_total Bytes of frames written.\n"
        out +=
            "# TYPE findmy_log_bytes_appended_total counter\nfindmy_log_bytes_appended_total \(log.bytesAppended)\n"
        out +=
            "# HELP findmy_log_failed_appends_total Appends that failed (disk full, I/O error); none was acknowledged.\n"
        out +=
            "# TYPE findmy_log_failed_appends_total counter\nfindmy_log_failed_appends_total \(log.failedAppends)\n"
        let perFsync = log.groupCommits > 0 ? Double(log.recordsAppended) / Double(log.groupCommits) : 0
        out += "# HELP findmy_log_batches_per_fsync Records per group commit since start.\n"
        out += "# TYPE findmy_log_batches_per_fsync gauge\nfindmy_log_batches_per_fsync \(perFsync)\n"
        return out
    }
}
