import Core
import Crypto
import Events
import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// The command API (docs/api.md "Commands", docs/commands.md). POST appends through
/// `CommandService`; the GETs read the projection's `commands` and `command_deliveries` tables
/// (ONE statement each, so a generation swap is never straddled). The gate's `.locator` let the
/// caller through: the owner, or a grantee whose share permits locating; anyone else got the 404
/// of a device they cannot see.
public final class CommandRoutes: Sendable {
    public let service: CommandService
    /// The read API's pool; nil with `--projector off` (the GETs then answer 503 reads_unavailable).
    let pool: PostgresPool?
    /// The projection's checkpoint, for `after_offset`.
    let projectedEnd: @Sendable () -> UInt64
    /// How long a read with `after_offset` waits for the projection.
    let afterOffsetWaitMillisMax: Int

    public init(
        service: CommandService, pool: PostgresPool?, projectedEnd: @escaping @Sendable () -> UInt64,
        afterOffsetWaitMillisMax: Int = 5_000
    ) {
        self.service = service
        self.pool = pool
        self.projectedEnd = projectedEnd
        self.afterOffsetWaitMillisMax = afterOffsetWaitMillisMax
    }

    public func addRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/api/find-my/devices/{id}/commands") { [self] request, caller in
            post(request, caller)
        }
        router.add("GET", "/api/find-my/devices/{id}/commands") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try list(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/commands/{command_id}") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try one(request, deviceID: caller.deviceID)
            }
        }
    }

    // MARK: POST

    func post(_ request: HTTPRequest, _ caller: GateCaller) -> HTTPResponse {
        let kind: CommandKind
        let message: String?
        let phone: String?
        do throws(APIError) {
            let object = try parseObject(request.body, allowed: ["kind", "message", "phone"])
            let kindText = try field { () throws(JSONAccessError) in try object.string("kind") }
            guard let parsed = CommandKind(rawValue: kindText) else {
                throw .badRequest(
                    .invalidField, "kind is one of locate, sound, lost, found; got '\(kindText.prefix(32))'")
            }
            kind = parsed
            message = try field { () throws(JSONAccessError) in try object.stringIfPresent("message") }
            phone = try field { () throws(JSONAccessError) in try object.stringIfPresent("phone") }
        } catch {
            return error.response
        }
        do {
            let requested = try service.request(
                deviceID: caller.deviceID, userID: caller.userID, kind: kind, message: message, phone: phone)
            var writer = JSONWriter(capacity: 256)
            writer.beginObject()
            writer.key("command_id")
            writer.string(requested.commandID.description)
            writer.key("kind")
            writer.string(kind.rawValue)
            writer.key("state")
            writer.string("pending")
            writer.key("requested_at")
            writer.string(RFC3339.formatMicros(requested.requestedAtMicros))
            writer.key("requested_by")
            writer.string(service.identity.userName(caller.userID) ?? "")
            writer.key("offset")
            writer.int64(Int64(requested.offset))
            writer.endObject()
            return .json(writer.bytes, status: 202)
        } catch {
            return error.response
        }
    }

    // MARK: GET

    func list(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        try checkParameters(request, allowed: ["limit", "cursor", "after_offset"])
        let limits = service.limits
        var limit = limits.pageCommandsDefault
        if let text = request.queryItems.first(where: { $0.name == "limit" })?.value {
            guard let number = Int(text), number >= 1, number <= limits.pageCommandsMax else {
                throw APIError(
                    status: 400, code: .invalidLimit,
                    message:
                        "limit must be a whole number from 1 to \(limits.pageCommandsMax), got '\(text.prefix(20))'"
                )
            }
            limit = number
        }
        var after: CommandCursor?
        if let text = request.queryItems.first(where: { $0.name == "cursor" })?.value {
            after = try CommandCursor.decode(text, deviceID: deviceID)
        }
        try waitForProjection(request)
        let commands = try read(deviceID: deviceID, commandID: nil, after: after, limit: limit + 1)
        let page = commands.prefix(limit)
        var writer = JSONWriter(capacity: 512 + page.count * 512)
        writer.beginObject()
        writer.key("commands")
        writer.beginArray()
        for command in page { write(command, &writer) }
        writer.endArray()
        writer.key("next_cursor")
        if commands.count > limit, let last = page.last {
            writer.string(
                CommandCursor(
                    deviceID: deviceID, requestedAtMicros: last.requestedAtMicros, logOffset: last.logOffset
                )
                .encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    func one(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        try checkParameters(request, allowed: ["after_offset"])
        let notFound = APIError(
            status: 404, code: .commandNotFound,
            message:
                "no command with this id for this device; list them with GET /api/find-my/devices/{id}/commands"
        )
        guard let id = request.pathParameters["command_id"].flatMap({ UUID128($0) }) else { throw notFound }
        try waitForProjection(request)
        guard let command = try read(deviceID: deviceID, commandID: id, after: nil, limit: 1).first else {
            // Requested, but the projection has not caught up: say what the server knows.
            throw notFound
        }
        var writer = JSONWriter(capacity: 1024)
        write(command, &writer)
        return .json(writer.bytes)
    }

    private func checkParameters(_ request: HTTPRequest, allowed: Set<String>) throws(APIError) {
        for item in request.queryItems where !allowed.contains(item.name) {
            throw APIError(
                status: 400, code: .unknownParameter,
                message:
                    "unknown query parameter '\(item.name.prefix(40))'; this listing takes \(allowed.sorted().joined(separator: ", "))"
            )
        }
    }

    /// With `after_offset=N`, waits until the projection holds offset N (as the read API does).
    private func waitForProjection(_ request: HTTPRequest) throws(APIError) {
        guard let text = request.queryItems.first(where: { $0.name == "after_offset" })?.value else { return }
        guard let offset = UInt64(text) else {
            throw APIError(
                status: 400, code: .invalidAfterOffset,
                message:
                    "after_offset must be the offset a write answered, a whole number; got '\(text.prefix(24))'"
            )
        }
        let durableEnd = service.identity.store.durableEnd
        guard offset < durableEnd else {
            throw APIError(
                status: 400, code: .invalidAfterOffset,
                message: "after_offset \(offset) was never written: the log ends at offset \(durableEnd)")
        }
        let deadline = monotonicMicros() + Int64(afterOffsetWaitMillisMax) * 1_000
        while projectedEnd() <= offset {
            guard monotonicMicros() < deadline else {
                throw APIError(
                    status: 503, code: .projectionBehind,
                    message:
                        "the projection has not reached offset \(offset) within \(afterOffsetWaitMillisMax) ms "
                        + "(it is at \(projectedEnd())); retry, or see /healthz for the projector's lag")
            }
            // As the read API's after_offset (ReadService.waitForProjection): a short poll, bounded.
            usleep(2_000)
        }
    }

    // MARK: rows

    struct Delivery {
        var channel: String
        var state: String
        var atMicros: Int64
        var detail: String
        var retryAtMicros: Int64?
        /// The provider said the token or endpoint is gone for good (`push_token_invalidated`).
        var addressDead: Bool
    }

    struct Answer {
        var answeredAtMicros: Int64
        var clientProtocol: String
        var latitude: Double?
        var longitude: Double?
        var accuracyMeters: Double?
        var recordedAtMicros: Int64?
        var receivedAtMicros: Int64?
        var batteryPercent: Int64?
    }

    struct Command {
        var commandID: String
        var kind: String
        var state: String
        var message: String
        var phone: String
        var requestedBy: UInt64
        var requestedAtMicros: Int64
        var logOffset: UInt64
        var endedAtMicros: Int64?
        var endReason: String?
        var answer: Answer?
        var deliveries: [Delivery] = []
    }

    /// A page of the device's commands, newest first (or the one `commandID`), each with its
    /// deliveries in log order and the fix that answered it: one statement.
    func read(deviceID: UInt64, commandID: UUID128?, after: CommandCursor?, limit: Int) throws(APIError)
        -> [Command]
    {
        guard let pool else {
            throw APIError(
                status: 503, code: .readsUnavailable,
                message:
                    "this server runs with --projector off and has no database to read from; start it with --projector on"
            )
        }
        let commands = ProjectionSchema.Table.commands.live
        let deliveries = ProjectionSchema.Table.commandDeliveries.live
        let locations = ProjectionSchema.Table.deviceLocations.live
        let sql = """
            WITH page AS (
                SELECT * FROM \(commands) c
                WHERE c.device_id = $1 AND ($2::uuid IS NULL OR c.command_id = $2::uuid)
                  AND ($3::timestamptz IS NULL OR (c.requested_at, c.log_offset) < ($3::timestamptz, $4::bigint))
                ORDER BY c.requested_at DESC, c.log_offset DESC LIMIT $5)
            SELECT p.command_id::text, p.kind, p.state, p.message, p.phone, p.requested_by, p.requested_at,
                p.log_offset, p.ended_at, p.end_reason, p.answered_at, p.answer_protocol,
                l.latitude, l.longitude, l.accuracy_m, l.recorded_at, l.received_at, l.battery_pct,
                d.channel, d.state, d.at, d.detail, d.retry_at, d.address_dead
            FROM page p
            LEFT JOIN \(locations) l ON l.device_id = p.device_id AND l.log_offset = p.answer_log_offset
                AND l.fix_index = p.answer_fix_index
            LEFT JOIN \(deliveries) d ON d.command_id = p.command_id
            ORDER BY p.requested_at DESC, p.log_offset DESC, d.log_offset
            """
        let parameters: [PostgresValue?] = [
            .int64(Int64(deviceID)), commandID.map { .uuid(high: $0.high, low: $0.low) },
            after.map { .timestamp(micros: $0.requestedAtMicros) }, .int64(Int64(after?.logOffset ?? 0)),
            .int64(Int64(limit)),
        ]
        do {
            let result = try pool.execute(sql, parameters)
            var list: [Command] = []
            for row in 0..<result.rowCount {
                let id = result.string(row, 0) ?? ""
                if list.last?.commandID != id {
                    var command = Command(
                        commandID: id, kind: result.string(row, 1) ?? "", state: result.string(row, 2) ?? "",
                        message: result.string(row, 3) ?? "", phone: result.string(row, 4) ?? "",
                        requestedBy: UInt64(try result.int64(row, 5) ?? 0),
                        requestedAtMicros: try result.timestampMicros(row, 6) ?? 0,
                        logOffset: UInt64(try result.int64(row, 7) ?? 0),
                        endedAtMicros: try result.timestampMicros(row, 8),
                        endReason: result.string(row, 9))
                    if let answeredAt = try result.timestampMicros(row, 10) {
                        command.answer = Answer(
                            answeredAtMicros: answeredAt, clientProtocol: result.string(row, 11) ?? "",
                            latitude: try result.double(row, 12), longitude: try result.double(row, 13),
                            accuracyMeters: try result.double(row, 14),
                            recordedAtMicros: try result.timestampMicros(row, 15),
                            receivedAtMicros: try result.timestampMicros(row, 16),
                            batteryPercent: try result.int64(row, 17))
                    }
                    list.append(command)
                }
                if let channel = result.string(row, 18) {
                    list[list.count - 1].deliveries.append(
                        Delivery(
                            channel: channel, state: result.string(row, 19) ?? "",
                            atMicros: try result.timestampMicros(row, 20) ?? 0,
                            detail: result.string(row, 21) ?? "",
                            retryAtMicros: try result.timestampMicros(row, 22),
                            addressDead: try result.bool(row, 23) ?? false))
                }
            }
            return list
        } catch {
            StructuredLog.error("commands_read_failed", ["error": .string("\(error)")])
            throw APIError(
                status: 503, code: .databaseUnavailable,
                message: "the database did not answer this read; retry shortly (the server log has the cause)"
            )
        }
    }

    func write(_ command: Command, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("command_id")
        writer.string(command.commandID)
        writer.key("kind")
        writer.string(command.kind)
        writer.key("state")
        writer.string(command.state)
        writer.key("requested_at")
        writer.string(RFC3339.formatMicros(command.requestedAtMicros))
        writer.key("requested_by")
        writer.string(service.identity.userName(command.requestedBy) ?? "user \(command.requestedBy)")
        if command.kind == CommandKind.lost.rawValue {
            writer.key("message")
            writer.string(command.message)
            writer.key("phone")
            writer.string(command.phone)
        }
        writer.key("deliveries")
        writer.beginArray()
        for delivery in command.deliveries { write(delivery, &writer) }
        writer.endArray()
        writer.key("answer")
        if let answer = command.answer { write(answer, &writer) } else { writer.null() }
        writer.key("ended_at")
        if let ended = command.endedAtMicros {
            writer.string(RFC3339.formatMicros(ended))
        } else {
            writer.null()
        }
        writer.key("end_reason")
        if let reason = command.endReason { writer.string(reason) } else { writer.null() }
        writer.endObject()
    }

    private func write(_ delivery: Delivery, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("channel")
        writer.string(delivery.channel)
        writer.key("state")
        writer.string(delivery.state)
        writer.key("at")
        writer.string(RFC3339.formatMicros(delivery.atMicros))
        writer.key("detail")
        writer.string(delivery.detail)
        writer.key("retry_at")
        if let retry = delivery.retryAtMicros {
            writer.string(RFC3339.formatMicros(retry))
        } else {
            writer.null()
        }
        writer.key("address_dead")
        writer.bool(delivery.addressDead)
        writer.endObject()
    }

    private func write(_ answer: Answer, _ writer: inout JSONWriter) {
        writer.beginObject()
        writer.key("answered_at")
        writer.string(RFC3339.formatMicros(answer.answeredAtMicros))
        writer.key("protocol")
        writer.string(answer.clientProtocol)
        writer.key("fix")
        // The fix is gone when retention or an erasure removed it since; the answer stays.
        if let latitude = answer.latitude, let longitude = answer.longitude,
            let recorded = answer.recordedAtMicros, let received = answer.receivedAtMicros
        {
            writer.beginObject()
            writer.key("latitude")
            writer.double(latitude)
            writer.key("longitude")
            writer.double(longitude)
            writer.key("accuracy_m")
            if let accuracy = answer.accuracyMeters { writer.double(accuracy) } else { writer.null() }
            writer.key("battery_pct")
            if let battery = answer.batteryPercent { writer.int64(battery) } else { writer.null() }
            writer.key("recorded_at")
            writer.string(RFC3339.formatMicros(recorded))
            writer.key("received_at")
            writer.string(RFC3339.formatMicros(received))
            writer.endObject()
        } else {
            writer.null()
        }
        writer.endObject()
    }
}

/// A position in a device's commands, newest first, handed to clients as an opaque `next_cursor`:
/// Base64URL of version 1 (1 byte), device id, requested at (µs), log offset (8 bytes each,
/// big-endian). The device is checked on the way back.
struct CommandCursor: Equatable {
    var deviceID: UInt64
    var requestedAtMicros: Int64
    var logOffset: UInt64

    var encoded: String {
        var bytes: [UInt8] = [1]
        for value in [deviceID, UInt64(bitPattern: requestedAtMicros), logOffset] {
            for shift in stride(from: 56, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
        }
        return Base64URL.encode(bytes)
    }

    static func decode(_ text: String, deviceID: UInt64) throws(APIError) -> CommandCursor {
        let invalid = APIError(
            status: 400, code: .invalidCursor,
            message:
                "cursor is not a next_cursor this listing returned; pass next_cursor unchanged, or omit cursor"
        )
        guard let bytes = Base64URL.decode(text), bytes.count == 25, bytes[0] == 1 else { throw invalid }
        var values: [UInt64] = []
        for start in stride(from: 1, to: 25, by: 8) {
            values.append(bytes[start..<start + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }
        guard values[0] == deviceID else { throw invalid }
        return CommandCursor(
            deviceID: values[0], requestedAtMicros: Int64(bitPattern: values[1]), logOffset: values[2])
    }
}
