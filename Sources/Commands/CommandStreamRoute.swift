import HTTP
import Identity

extension CommandStreams {
    /// `GET /api/find-my/device/commands/stream` (docs/api.md), for a device token.
    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/api/find-my/device/commands/stream") { [self] request, caller in
            open(request, caller)
        }
    }

    func open(_ request: HTTPRequest, _ caller: GateCaller) -> HTTPResponse {
        let deviceID = caller.tokenDeviceID
        let lastEventID: UInt64?
        do throws(APIError) {
            lastEventID = try Self.lastEventID(request)
        } catch {
            return error.response
        }
        guard let tokenHash = caller.tokenHash else {
            // The `.device` permission resolves a bearer token, whose hash the gate keeps.
            preconditionFailure("a device route's caller comes with its token's hash")
        }
        guard let reservation = reserve(deviceID: deviceID) else {
            var response = APIError(
                status: 503, code: .tooManyStreams,
                message:
                    "this server holds as many command streams as it allows (\(limits.streamsMax), --command-streams-max); reconnect after Retry-After, and meanwhile take commands from report answers"
            ).response
            response.headers.set("Retry-After", "\(limits.retryAfterSeconds)")
            return response
        }
        let headers = HTTPHeaders([
            ("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-store"),
            // nginx buffers a proxied answer unless told not to; an event must not wait in it.
            ("X-Accel-Buffering", "no"),
        ])
        return .pushed(
            headers: headers, bufferedBytesMax: limits.bufferedBytesMax,
            unacknowledgedSecondsMax: limits.heartbeatSeconds
        ) { [self] stream in
            attach(
                stream, reservation: reservation, deviceID: deviceID, tokenHash: tokenHash,
                lastEventID: lastEventID)
        }
    }

    /// The `Last-Event-ID` header, else the `last_event_id` query parameter (for clients that
    /// cannot set headers, as a browser's EventSource on its first connection); nil without either.
    static func lastEventID(_ request: HTTPRequest) throws(APIError) -> UInt64? {
        for item in request.queryItems where item.name != "last_event_id" {
            throw APIError(
                status: 400, code: .unknownParameter,
                message: "unknown query parameter '\(item.name.prefix(40))'; this stream takes last_event_id")
        }
        guard
            let text = request.headers["Last-Event-ID"]
                ?? request.queryItems.first(where: { $0.name == "last_event_id" })?.value
        else { return nil }
        guard let value = UInt64(text) else {
            throw APIError(
                status: 400, code: .invalidLastEventId,
                message:
                    "Last-Event-ID (or last_event_id) must be the id of a command event this stream sent, a whole number; got '\(text.prefix(24))'"
            )
        }
        return value
    }
}
