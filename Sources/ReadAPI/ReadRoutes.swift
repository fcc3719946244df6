import Core
import HTTP
import Identity
import JSON
import Postgres
import Threads

/// The routes of the read API (docs/api.md, "Read API") and their handlers: each checks its query,
/// waits for the projection when asked (`after_offset`), runs one statement (`ReadStatements`) and
/// writes the rows (`RowEncoding`, `DeviceCards`), a page at a time (`Paging`).
///
/// Who reads, and which device, come from the gate (`GateCaller`): `.user` for the list, `.viewer`
/// for a device's routes, which the gate lets through only for a device the reader may see now.
extension ReadService {
    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/api/find-my/devices") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try devices(request, reader: caller.userID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in try device(request, caller) }
        }
        router.add("GET", "/api/find-my/devices/{id}/locations") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try locations(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/stays") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try stays(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/arrivals") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try arrivals(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/imports") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try imports(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/devices/{id}/export") { [self] request, caller in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in
                try export(request, deviceID: caller.deviceID)
            }
        }
        router.add("GET", "/api/find-my/admin/devices") { [self] request, _ in
            respond(retryAfter: .whenUnavailable) { () throws(APIError) in try adminDevices(request) }
        }
    }

    /// The read routes of a server without a database (`--projector off`): each answers 503
    /// `reads_unavailable`, so a client learns why instead of getting a 404 or a 405.
    public static func addUnavailableRoutes(to router: inout GuardedRouter) {
        let error = APIError(
            status: 503, code: .readsUnavailable,
            message:
                "this server runs with --projector off and has no database to read from; start it with --projector on"
        )
        for pattern in [
            "/api/find-my/devices", "/api/find-my/devices/{id}", "/api/find-my/devices/{id}/locations",
            "/api/find-my/devices/{id}/arrivals", "/api/find-my/devices/{id}/imports",
            "/api/find-my/devices/{id}/export", "/api/find-my/devices/{id}/stays",
            "/api/find-my/admin/devices",
        ] {
            router.add("GET", pattern) { _, _ in error.response }
        }
    }

    // MARK: handlers

    func devices(_ request: HTTPRequest, reader: UInt64) throws(APIError) -> HTTPResponse {
        _ = try checkedParameters(request.queryItems, allowed: ["after_offset"])
        try waitForProjection(request)
        let scope = access.scope(of: reader)
        let sharedIDs = scope.sharedBy.keys.sorted()
        // The kept card of each device in scope, by the scope's index.
        let kept = cards.cards(scope.deviceIDs)
        // By id; nil for a device read again below.
        var list: [(id: UInt64, card: DeviceCard?)]
        if kept.count(where: { $0 != nil }) * 2 < scope.deviceIDs.count {
            // Few cards (a first read): every column in one statement, as if there were no cache.
            let fresh = try makeCards(
                try query(Self.devicesStatement(ownerID: reader, sharedIDs: sharedIDs)), scope)
            cards.insert(fresh)
            cards.count(reused: 0, written: fresh.count)
            list = fresh.map { ($0.id, $0.card) }
        } else {
            // The versions PostgreSQL has now; a card of another version is read and written again.
            let versions = try query(Self.deviceVersionsStatement(ownerID: reader, sharedIDs: sharedIDs))
            var stale: [UInt64] = []
            list = try decoding { () throws(PostgresError) in
                try rowsInScope(versions, scope).map { (id, row) throws(PostgresError) in
                    if let index = scope.index(of: id), let card = kept[index],
                        card.version == (try DeviceVersion(versions, row, 1))
                    {
                        return (id, card)
                    }
                    stale.append(id)
                    return (id, nil)
                }
            }
            cards.count(reused: list.count - stale.count, written: stale.count)
            if !stale.isEmpty {
                // Read a moment after the versions, so possibly newer: each device is still one
                // row's state, and a device gone in between is left out, as the scope would.
                let fresh = try makeCards(try query(Self.devicesStatement(ids: stale)), scope)
                cards.insert(fresh)
                var next = fresh.startIndex
                for index in list.indices where list[index].card == nil {
                    // Both by id, the fresh ones a subset of the stale.
                    while next < fresh.endIndex, fresh[next].id < list[index].id { next += 1 }
                    if next < fresh.endIndex, fresh[next].id == list[index].id {
                        list[index].card = fresh[next].card
                    }
                }
            }
        }
        let sharedBy = { (id: UInt64) -> String? in scope.sharedBy.isEmpty ? nil : scope.sharedBy[id] }
        var bytesMax = 64
        for (id, card) in list {
            bytesMax += card?.bytesMax(sharedByUTF8Count: sharedBy(id)?.utf8.count ?? 0) ?? 0
        }
        let now = clockMicros()
        // Most lists link nothing: then no device is looked up (an id's hash per device).
        let presence = identity.store.presence(of: list.map(\.id), nowMicros: now)
        var writer = JSONWriter(capacity: bytesMax)
        writer.beginObject()
        writer.key("devices")
        writer.beginArray()
        for case (let id, let card?) in list {
            card.write(
                &writer, nowMicros: now, sharedBy: sharedBy(id),
                presence: presence.isEmpty ? nil : presence[id])
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }

    func device(_ request: HTTPRequest, _ caller: GateCaller) throws(APIError) -> HTTPResponse {
        let deviceID = caller.deviceID
        let sharedBy = caller.device.flatMap(access.sharedBy)
        _ = try checkedParameters(request.queryItems, allowed: ["after_offset"])
        try waitForProjection(request)
        let result = try query(Self.devicesStatement(ids: [deviceID]))
        // Known to the registry but not projected yet: the same answer as any unknown device.
        guard result.rowCount == 1 else { throw ReadAccess.notFound }
        var scratch = JSONWriter(capacity: 2048)
        let card = try decoding { () throws(PostgresError) in try makeCard(result, 0, scratch: &scratch) }
        var writer = JSONWriter(capacity: card.bytesMax(sharedByUTF8Count: sharedBy?.utf8.count ?? 0))
        let now = clockMicros()
        card.write(
            &writer, nowMicros: now, sharedBy: sharedBy,
            presence: identity.store.presence(of: [deviceID], nowMicros: now)[deviceID])
        guard sharedBy == nil else { return .json(writer.bytes) }
        // The owner's own settings, from the registry: whoever knows an ntfy topic's URL reads what
        // is sent there, so it is not on the card that those the device is shared with are shown.
        let owned = Self.appendingMember(
            writer.bytes, key: "ntfy_topic_url", identity.ntfyTopicURL(deviceID: deviceID))
        return .json(FoundNoticeCard.appending(identity.foundNotice(deviceID: deviceID), to: owned))
    }

    /// `object` (a JSON object's bytes, ending in `}`) with one more member, a string or null.
    static func appendingMember(_ object: [UInt8], key: String, _ value: String?) -> [UInt8] {
        precondition(object.last == UInt8(ascii: "}"), "not a JSON object")
        var member = JSONWriter(capacity: 32 + key.utf8.count + (value?.utf8.count ?? 0))
        member.string(key)
        var bytes = Array(object.dropLast())
        bytes.append(contentsOf: (bytes.last == UInt8(ascii: "{") ? [] : [UInt8(ascii: ",")]) + member.bytes)
        bytes.append(UInt8(ascii: ":"))
        bytes.append(contentsOf: JSONWriter.encode(value.map { .string($0) } ?? .null))
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    func locations(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .locations, deviceID: deviceID,
            limitDefault: limits.historyPageFixesDefault, limitMax: limits.historyPageFixesMax)
        try waitForProjection(request)
        // As for the devices: every fix's reservation fits without growing the buffer, an array
        // kept from an earlier page when there is one (a fresh mapping costs a fault a page).
        var writer = JSONWriter(buffer: KeptBuffers.shared.take(capacity: 4096 + query.limit * 768))
        writer.beginObject()
        writer.key("locations")
        writer.beginArray()
        var written = 0
        var nextPage = false
        // The keyset of the last fix written, which the next page's cursor carries.
        var last: (recordedAt: Int64?, latitude: Double, longitude: Double) = (nil, 0, 0)
        var previous = PreviousFix()
        // One binary COPY, its rows written as they arrive: no result parsed by libpq, no FETCH
        // round trips (PostgresCopyOut.swift; docs/benchmarks.md).
        let copyQuery = Self.locationsCopyQuery(deviceID: deviceID, query)
        _ = try database {
            try pool.withConnection { connection in
                try connection.copyOutBinary(
                    query: copyQuery, fieldCount: Self.locationsCopyFieldCount,
                    settings: Self.locationsCopySettings
                ) { row in
                    guard written < query.limit else {
                        nextPage = true
                        return
                    }
                    let fix = try FixRow(&row)
                    writer.flatObject(bytesMax: fix.bytesMax) { object in
                        fix.write(&object, previous: &previous)
                    }
                    written += 1
                    last = (fix.recordedAt, fix.latitude, fix.longitude)
                }
            }
        }
        writer.endArray()
        writer.key("next_cursor")
        if nextPage {
            let keyset = try decoding { () throws(PostgresError) in
                guard let recordedAt = last.recordedAt else {
                    throw PostgresError(
                        .decode, message: "the last fix of a page has an infinite recorded_at")
                }
                return FixKeyset(
                    recordedAtMicros: recordedAt, latitude: last.latitude, longitude: last.longitude)
            }
            writer.string(LocationsCursor(deviceID: deviceID, keyset: keyset).encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    func arrivals(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let query = try HistoryQuery.parse(
            request.queryItems, kind: .arrivals, deviceID: deviceID,
            limitDefault: limits.arrivalsPageBatchesDefault, limitMax: limits.arrivalsPageBatchesMax)
        try waitForProjection(request)
        let result = try self.query(Self.arrivalsStatement(deviceID: deviceID, query))
        let rows = min(result.rowCount, query.limit)
        var writer = JSONWriter(capacity: 256 + rows * 220)
        writer.beginObject()
        writer.key("arrivals")
        writer.beginArray()
        try decoding { () throws(PostgresError) in
            for row in 0..<rows { try writeArrival(&writer, result, row) }
        }
        writer.endArray()
        writer.key("next_cursor")
        if result.rowCount > query.limit {
            let cursor = try decoding { () throws(PostgresError) in
                try HistoryCursor(arrivalsOf: deviceID, after: result, rows - 1)
            }
            writer.string(cursor.encoded)
        } else {
            writer.null()
        }
        writer.endObject()
        return .json(writer.bytes)
    }

    /// `GET /api/find-my/admin/devices` (admin role, checked by the permission table): every device
    /// with its owner, names, pause switch and when a report last arrived. Deliberately no position,
    /// no fix time and no battery: an administrator manages devices, it does not see where they are.
    func adminDevices(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        _ = try checkedParameters(request.queryItems, allowed: [])
        let registry = identity.registrySnapshot
        let result = try query(Self.lastSeenStatement)
        var lastSeen: [UInt64: Int64] = [:]
        try decoding { () throws(PostgresError) in
            for row in 0..<result.rowCount {
                if let micros = try result.timestampMicros(row, 1) {
                    lastSeen[UInt64(bitPattern: try result.int64(row, 0) ?? 0)] = micros
                }
            }
        }
        var writer = JSONWriter(capacity: 256 + registry.devices.count * 200)
        writer.beginObject()
        writer.key("devices")
        writer.beginArray()
        for device in registry.devices.values.sorted(by: { $0.id < $1.id }) {
            writer.beginObject()
            writer.key("id")
            writer.int64(Int64(device.id))
            writer.key("name")
            writer.string(device.name)
            writer.key("owner")
            writer.string(registry.users[device.userID]?.name ?? "")
            writer.key("platform")
            writer.string(device.platform)
            writer.key("model")
            writer.string(device.model)
            writer.key("paused")
            writer.bool(device.paused)
            writer.key("last_seen_at")
            writer.flatValue(bytesMax: JSONFlatObject.timestampBytesMax) { object in
                Self.writeTime(&object, lastSeen[device.id])
            }
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }
}
