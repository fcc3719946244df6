import Events
import HTTPClient
import Synchronization
import Threads
import Workload

#if canImport(Glibc)
    import Glibc
#endif

/// What a load run sends, whichever client sends it (`LoadTarget.drive` here, one Swift thread
/// and keep-alive connection per device; `WrkDriver`, wrk and ops/bench/report.lua): one endpoint,
/// one connection per device with that device's credentials, and a body that is the same bytes for
/// every request but for a fresh unique id in the middle (`bodyPrefix ‖ id ‖ bodySuffix`, the id a
/// UUID string). Native reports need a new `batch_id` per request, and the apps without one (their
/// batch id is derived from the body) need a new body, or every request after the first would be
/// answered as a resend without appending.
struct LoadTarget: Sendable {
    var path: String
    /// The `Authorization` value of each connection, one device each.
    var authorizations: [String]
    /// Sent with every request besides `Authorization`.
    var headers: [(name: String, value: String)]
    var bodyPrefix: [UInt8]
    var bodySuffix: [UInt8]
    /// The fixes one request carries, for fixes/s.
    var fixesPerRequest: Int
    /// A request counts when answered 200 and, when this is set, with exactly this body (the
    /// Swift driver checks it; wrk counts any 2xx).
    var expectedBody: [UInt8]?
    /// When set (`ingest --tracks distinct`, Swift driver only): per connection, the suffixes its
    /// requests take in turn, each device its own track, instead of `bodySuffix` for everyone.
    var connectionSuffixes: [[[UInt8]]]? = nil
    /// How the unique id is written: a UUID, or 11 decimal digits for a body that carries it in a
    /// number (Overland's, whose batch id comes from the decoded fixes: AppBench.overland).
    var uniqueForm = UniqueForm.uuid
    /// When set (wrk only, `ingest --phases whole`): the body suffix holds `recordedAtMarker`
    /// once, which ops/bench/report.lua replaces in each request with this time (Unix
    /// milliseconds) plus its request counter: every request a different fix, as a phone's are.
    /// Without it every request carries the same fix, which the projection folds as a duplicate.
    var recordedFromMillis: Int64? = nil

    static let recordedAtMarker = "@RECORDED_AT@"

    enum UniqueForm: Sendable { case uuid, digits }

    var connections: Int { authorizations.count }

    func body(unique: UUID128) -> [UInt8] {
        var body = bodyPrefix
        body.reserveCapacity(bodyPrefix.count + 36 + bodySuffix.count)
        switch uniqueForm {
        case .uuid: body += Array(unique.description.utf8)
        case .digits: body += Array(String(unique.low % 100_000_000_000).leftPadded(11).utf8)
        }
        body += bodySuffix
        return body
    }

    struct Result {
        var requests = 0
        var failures = 0
        var fixesPerSecond = 0.0
        var requestsPerSecond = 0.0
        var p50Micros: Int64 = 0
        var p99Micros: Int64 = 0

        /// Runs of equal length as one: rates averaged, counts summed, percentiles the median of
        /// the runs' (they cannot be merged exactly).
        static func combined(_ runs: [Result]) -> Result {
            guard runs.count > 1 else { return runs.first ?? Result() }
            var result = Result()
            result.requests = runs.reduce(0) { $0 + $1.requests }
            result.failures = runs.reduce(0) { $0 + $1.failures }
            result.fixesPerSecond = runs.reduce(0) { $0 + $1.fixesPerSecond } / Double(runs.count)
            result.requestsPerSecond = runs.reduce(0) { $0 + $1.requestsPerSecond } / Double(runs.count)
            result.p50Micros = median(runs.map(\.p50Micros))!
            result.p99Micros = median(runs.map(\.p99Micros))!
            return result
        }

        /// Runs of equal length, each figure the median of the runs' (failures summed).
        static func figureMedian(_ runs: [Result]) -> Result {
            var result = Result()
            result.requests = median(runs.map(\.requests))!
            result.failures = runs.reduce(0) { $0 + $1.failures }
            result.fixesPerSecond = median(runs.map(\.fixesPerSecond))!
            result.requestsPerSecond = median(runs.map(\.requestsPerSecond))!
            result.p50Micros = median(runs.map(\.p50Micros))!
            result.p99Micros = median(runs.map(\.p99Micros))!
            return result
        }
    }

    /// One thread and keep-alive connection per device, each posting back to back for `seconds`.
    func drive(_ address: String, seconds: Double) -> Result {
        drive(spreadOver: [address], seconds: seconds)
    }

    /// As `drive(_:seconds:)`, connection `i` to `addresses[i % addresses.count]`: the same load
    /// spread over several servers (ingest nodes), as a load balancer without affinity would.
    func drive(spreadOver addresses: [String], seconds: Double) -> Result {
        precondition(!addresses.isEmpty, "drive needs an address")
        struct ThreadResult: Sendable {
            var latencies: [Int64] = []
            var failures = 0
        }
        let results = Mutex<[ThreadResult]>([])
        let start = monotonicMicros()
        let end = start + Int64(seconds * 1_000_000)
        let threads = authorizations.enumerated().map { connectionIndex, authorization in
            spawnThread {
                var sent = 0
                let connection = HTTPConnection(address: addresses[connectionIndex % addresses.count])
                var result = ThreadResult()
                result.latencies.reserveCapacity(100_000)
                let headers = [("Authorization", authorization)] + self.headers
                while monotonicMicros() < end {
                    var request = body(unique: UUID128.random())
                    if let suffixes = connectionSuffixes?[connectionIndex] {
                        request.removeLast(bodySuffix.count)
                        request += suffixes[sent % suffixes.count]
                        sent += 1
                    }
                    let sentAt = monotonicMicros()
                    guard let response = try? connection.send("POST", path, headers: headers, body: request),
                        response.status == 200, expectedBody == nil || response.body == expectedBody
                    else {
                        result.failures += 1
                        continue
                    }
                    result.latencies.append(monotonicMicros() - sentAt)
                }
                results.withLock { $0.append(result) }
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        let elapsed = Double(monotonicMicros() - start) / 1_000_000
        let all = results.withLock { $0 }
        let latencies = all.flatMap(\.latencies).sorted()
        var outcome = Result()
        outcome.requests = latencies.count
        outcome.failures = all.reduce(0) { $0 + $1.failures }
        outcome.requestsPerSecond = Double(latencies.count) / elapsed
        outcome.fixesPerSecond = Double(latencies.count * fixesPerRequest) / elapsed
        if !latencies.isEmpty {
            outcome.p50Micros = latencies[latencies.count / 2]
            outcome.p99Micros = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
        }
        return outcome
    }
}
