import Core
import HTTP

/// A request the server refuses as a whole: the HTTP status, a stable `code` for programs, and a
/// message that tells the client what to change. Every code is listed in docs/api.md.
public struct APIError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Every code an API error body can carry, as it is spelled on the wire (`rawValue`). Handlers
    /// and pages match on these cases, never on the text.
    public enum Code: String, Sendable, CaseIterable {
        case adminOnly = "admin_only"
        case batchInProgress = "batch_in_progress"
        case busy = "busy"
        case commandNotFound = "command_not_found"
        case commandRateLimited = "command_rate_limited"
        case compactionFailed = "compaction_failed"
        case compactionRunNotFound = "compaction_run_not_found"
        case crossOriginRequest = "cross_origin_request"
        case csrfFieldMissing = "csrf_field_missing"
        case csrfTokenInvalid = "csrf_token_invalid"
        case csrfTokenMissing = "csrf_token_missing"
        case databaseUnavailable = "database_unavailable"
        case deviceNotFound = "device_not_found"
        case emptyBatch = "empty_batch"
        case geofenceNotFound = "geofence_not_found"
        case importNotFound = "import_not_found"
        case invalidAfterOffset = "invalid_after_offset"
        case invalidBatchId = "invalid_batch_id"
        case invalidCredentials = "invalid_credentials"
        case invalidCursor = "invalid_cursor"
        case invalidField = "invalid_field"
        case invalidLastEventId = "invalid_last_event_id"
        case invalidLimit = "invalid_limit"
        case invalidRange = "invalid_range"
        case invalidSession = "invalid_session"
        case invalidToken = "invalid_token"
        case invalidUntil = "invalid_until"
        case logUnavailable = "log_unavailable"
        case malformedJson = "malformed_json"
        case presenceNodeNotFound = "presence_node_not_found"
        case presenceUnavailable = "presence_unavailable"
        case missingField = "missing_field"
        case missingToken = "missing_token"
        case noAlertTarget = "no_alert_target"
        case outOfRange = "out_of_range"
        case projectionBehind = "projection_behind"
        case readsUnavailable = "reads_unavailable"
        case registryConflict = "registry_conflict"
        case reportingPaused = "reporting_paused"
        case shareNotFound = "share_not_found"
        case tooManyAttempts = "too_many_attempts"
        case tooManyAttemptsFromAddress = "too_many_attempts_from_address"
        case tooManyAuthFailures = "too_many_auth_failures"
        case tooManyFixes = "too_many_fixes"
        case tooManyGeofences = "too_many_geofences"
        case tooManyStreams = "too_many_streams"
        case unknownField = "unknown_field"
        case unknownFormat = "unknown_format"
        case unknownParameter = "unknown_parameter"
        case unsupportedMediaType = "unsupported_media_type"
        case userExists = "user_exists"
        case userNotFound = "user_not_found"
        case wrongType = "wrong_type"
    }

    public var status: Int
    public var code: Code
    public var message: String

    public init(status: Int, code: Code, message: String) {
        self.status = status
        self.code = code
        self.message = message
    }

    public var description: String { "\(status) \(code.rawValue): \(message)" }

    public var response: HTTPResponse { .error(status: status, code: code, message: message) }

    /// A device the caller may not see answers exactly like one that does not exist, body included,
    /// so that ids cannot be probed.
    public static let deviceNotFound = APIError(
        status: 404, code: .deviceNotFound,
        message:
            "no device with this id among the devices you can see; list yours with GET /api/find-my/devices")

    package static func badRequest(_ code: Code, _ message: String) -> APIError {
        APIError(status: 400, code: code, message: message)
    }
}

/// Which errors of a handler also tell the client to try again in a second (`Retry-After: 1`).
public enum RetryAfter: Sendable {
    /// None: the error says what to change, or carries its own Retry-After.
    case never
    /// Any 503: a database or a projection that answers again shortly.
    case whenUnavailable
    /// `batch_in_progress`: an earlier request is still storing the same batch.
    case whenBatchInProgress
}

/// The response of `body`, or its error as JSON: how every API handler answers.
public func respond(
    retryAfter: RetryAfter = .never, _ body: () throws(APIError) -> HTTPResponse
) -> HTTPResponse {
    do {
        return try body()
    } catch {
        var response = error.response
        let retryable =
            switch retryAfter {
            case .never: false
            case .whenUnavailable: error.status == 503
            case .whenBatchInProgress: error.code == .batchInProgress
            }
        if retryable { response.headers.set("Retry-After", "1") }
        return response
    }
}

extension HTTPResponse {
    /// The JSON error body (`{"error": {"code", "message"}}`) with one of the API's typed codes.
    public static func error(status: Int, code: APIError.Code, message: String) -> HTTPResponse {
        .error(status: status, code: code.rawValue, message: message)
    }
}

extension APIError: RegistryConflictReporting {
    /// The 503 a failed append answers: the log could not store the request, or other servers
    /// kept taking the id a change claimed. Nothing was stored either way.
    package init(_ failure: AppendFailure) {
        switch failure {
        case .logUnavailable(let reason):
            self.init(
                status: 503, code: .logUnavailable,
                message:
                    "the server could not store the request durably (\(reason)); nothing was stored, send it again later"
            )
        case .registryConflict:
            self.init(
                status: 503, code: .registryConflict,
                message:
                    "other servers took the new id at the same moment, again and again; nothing was stored, send the request again"
            )
        }
    }

    /// `MutationLock` decides again after a conflict, which reaches it as this error.
    package var isRegistryConflict: Bool { code == .registryConflict }
}
