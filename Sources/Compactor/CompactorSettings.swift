import Events
import HTTP
import Identity
import JSON

/// The retention compactor inside `findmy serve`: its settings and its admin routes
/// (docs/retention.md). Its schedule is `CompactorService`, one of the server's services.
public enum CompactService {
    public static let settings: [(flag: String, environment: String, help: String)] = [
        (
            "arrivals-retention-days", "FINDMY_ARRIVALS_RETENTION_DAYS",
            "batch envelopes (what arrived when, without coordinates) are kept this long (default 90)"
        ),
        (
            "compact-interval-seconds", "FINDMY_COMPACT_INTERVAL_SECONDS",
            "the retention compactor runs this often; expired data outlives its window by at most this (default 3600)"
        ),
        (
            "compact-first-run-seconds", "FINDMY_COMPACT_FIRST_RUN_SECONDS",
            "the compactor's first run comes this long after start, or after the interval when that is shorter (default 30)"
        ),
        (
            "delete-rows-per-batch-max", "FINDMY_DELETE_ROWS_PER_BATCH_MAX",
            "rows one DELETE of the compactor removes at most (default 5000)"
        ),
    ]

    public struct Configuration: Sendable {
        public var options = Compactor.Options()
        public var schedule = CompactorService.Schedule()
        public init() {}
    }

    /// Reads the settings with `integer(flag, default, min)`, the serve command's parser.
    public static func configuration(retentionDays: Int, _ integer: (String, Int, Int) throws -> Int) throws
        -> Configuration
    {
        var configuration = Configuration()
        configuration.options.settings = RetentionSettings(
            retentionDays: retentionDays,
            arrivalsRetentionDays: try integer("arrivals-retention-days", 90, 1))
        configuration.schedule.intervalMicros =
            Int64(try integer("compact-interval-seconds", 3600, 1)) * 1_000_000
        configuration.schedule.firstRunDelayMicros =
            Int64(try integer("compact-first-run-seconds", 30, 1)) * 1_000_000
        configuration.options.deleteRowsPerBatchMax = try integer("delete-rows-per-batch-max", 5000, 1)
        return configuration
    }

    /// A long poll of `GET /admin/compact/runs/{id}` waits at most this long for the run to end.
    public static let runWaitMillisMax = 60_000

    /// The admin routes (docs/retention.md, "Running it by hand"):
    /// - `POST /admin/compact {"as_of": "...", "dry_run": false}`: one run now, its report as JSON
    ///   once it is done (for scripts that wait as long as a run takes);
    /// - `POST /admin/compact/runs` (same body): starts a run, answers `202 {"run_id", "state"}` at once;
    /// - `GET /admin/compact/runs/{id}?wait_ms=N`: where the run is, once it has ended or N ms
    ///   passed: `{"run_id", "state": "waiting|running|done|failed", "phase", "report", "error"}`.
    public static func addAdminRoute(to router: inout GuardedRouter, compactor: Compactor) {
        router.add("POST", "/admin/compact") { request, _ in
            let asOf: Int64?
            let dryRun: Bool
            switch runRequest(request) {
            case .success(let parsed): (asOf, dryRun) = parsed
            case .failure(let refusal): return refusal.response
            }
            do {
                return .json(CompactReportJSON.encode(try compactor.run(asOfMicros: asOf, dryRun: dryRun)))
            } catch {
                return .error(status: 500, code: .compactionFailed, message: "\(error)")
            }
        }
        router.add("POST", "/admin/compact/runs") { request, _ in
            let asOf: Int64?
            let dryRun: Bool
            switch runRequest(request) {
            case .success(let parsed): (asOf, dryRun) = parsed
            case .failure(let refusal): return refusal.response
            }
            guard let id = compactor.start(asOfMicros: asOf, dryRun: dryRun) else {
                return .error(
                    status: 503, code: .busy,
                    message: "the server is stopping; run findmy compact once it is up again")
            }
            let state = compactor.runState(id, waitMicros: 0) ?? .waiting
            return .json(CompactRunJSON.encode(id: id, state), status: 202)
        }
        router.add("GET", "/admin/compact/runs/{id}") { request, _ in
            guard let text = request.pathParameters["id"], let id = Int(text), id > 0 else {
                return .error(status: 400, code: .invalidField, message: "the run id is a positive number")
            }
            var waitMillis = 0
            if let wait = request.query("wait_ms") {
                guard let millis = Int(wait), (0...runWaitMillisMax).contains(millis) else {
                    return .error(
                        status: 400, code: .invalidField,
                        message: "wait_ms is a number of milliseconds from 0 to \(runWaitMillisMax)")
                }
                waitMillis = millis
            }
            guard let state = compactor.runState(id, waitMicros: Int64(waitMillis) * 1000) else {
                return .error(
                    status: 404, code: .compactionRunNotFound,
                    message:
                        "this server started no compaction run \(id) (or it was long ago, or before a restart); "
                        + "start one with POST /admin/compact/runs")
            }
            return .json(CompactRunJSON.encode(id: id, state))
        }
    }

    /// The body of a run request: `{"as_of": "...", "dry_run": false}`, both optional.
    public static func runRequest(_ request: HTTPRequest) -> Result<(asOf: Int64?, dryRun: Bool), APIError> {
        do {
            guard
                case .object(let object) = try JSONParser.parse(
                    request.body.isEmpty ? Array("{}".utf8) : request.body)
            else {
                return .failure(
                    APIError(status: 400, code: .wrongType, message: "the body must be a JSON object"))
            }
            try object.checkKeys(allowed: ["as_of", "dry_run"])
            let asOf = try object.stringIfPresent("as_of").map { try RFC3339.parseMicros($0) }
            return .success((asOf, try object.boolIfPresent("dry_run") ?? false))
        } catch {
            return .failure(APIError(status: 400, code: .invalidField, message: "\(error)"))
        }
    }
}
