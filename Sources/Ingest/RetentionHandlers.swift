import Core
import Events
import HTTP
import Identity
import JSON

/// Retention and erasure: the owner's endpoints (docs/api.md) and the admin's retention setting.
/// Each is one event in the log; the projector and the compactor do the deleting
/// (docs/retention.md). For now "owner" is the device's user; sharing and roles come later.
extension IngestService {
    /// Windows longer than this (a century) are refused: the arithmetic would overflow.
    public static let retentionDaysMax = 36_500

    public func addRetentionRoutes(to router: inout GuardedRouter) {
        // `.owner` routes: the gate has checked that the caller owns the device in the path.
        router.add("PUT", "/api/find-my/devices/{id}/retention") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try setDeviceRetention(request, deviceID: caller.deviceID)
            }
        }
        router.add("POST", "/api/find-my/devices/{id}/erase") { [self] request, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try eraseHistory(request, deviceID: caller.deviceID)
            }
        }
        router.add("DELETE", "/api/find-my/devices/{id}") { [self] _, caller in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                try removeDevice(deviceID: caller.deviceID)
            }
        }
    }

    public func addRetentionAdminRoutes(to router: inout GuardedRouter) {
        router.add("POST", "/admin/retention") { [self] request, _ in
            respond(retryAfter: .whenBatchInProgress) { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["device", "user", "days"])
                let device = try field { () throws(JSONAccessError) in try object.int64IfPresent("device") }
                let user = try field { () throws(JSONAccessError) in try object.stringIfPresent("user") }
                let days = try Self.days(object)
                let scope: RetentionScope
                switch (device, user) {
                case (let id?, nil):
                    guard id > 0, registry.read({ $0.registry.liveDevice(UInt64(id)) }) != nil else {
                        throw APIError(status: 404, code: .deviceNotFound, message: "no device \(id)")
                    }
                    scope = .device(UInt64(id))
                case (nil, let name?):
                    guard let found = registry.read({ $0.registry.user(named: name) }) else {
                        throw APIError(
                            status: 404, code: .userNotFound, message: "no user named '\(name)'")
                    }
                    scope = .user(found.id)
                default:
                    throw .badRequest(.invalidField, "give exactly one of device (an id) and user (a name)")
                }
                let offset = try identity.store.mutations.withLock { _ throws(APIError) in
                    try appendAndApply(
                        .retentionChanged(RetentionChanged(scope: scope, days: days)),
                        receivedAtMicros: clockMicros())
                }
                return .json(Self.retentionAnswer(days: days, offset: offset))
            }
        }
    }

    /// The caller's own device named by the path, or 404 exactly as for a device that does not
    /// exist, so that ids of other users' devices cannot be probed.
    static func days(_ object: JSONObject) throws(APIError) -> UInt32? {
        guard let value = object["days"] else {
            throw .badRequest(
                .missingField, "days: give a whole number of days, or null to use the default")
        }
        if value == .null { return nil }
        guard case .integer(let days) = value, days >= 1, days <= Int64(retentionDaysMax) else {
            throw .badRequest(
                .invalidField,
                "days must be a whole number from 1 to \(retentionDaysMax), or null to clear it")
        }
        return UInt32(days)
    }

    static func retentionAnswer(days: UInt32?, offset: UInt64) -> [UInt8] {
        var writer = JSONWriter(capacity: 64)
        writer.beginObject()
        writer.key("days")
        if let days { writer.int64(Int64(days)) } else { writer.null() }
        writer.key("offset")
        writer.int64(Int64(offset))
        writer.endObject()
        return writer.bytes
    }

    func setDeviceRetention(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let object = try parseObject(request.body, allowed: ["days"])
        let days = try Self.days(object)
        let offset = try setRetention(deviceID: deviceID, days: days)
        return .json(Self.retentionAnswer(days: days, offset: offset))
    }

    /// Sets the device's own window (nil: back to its user's or the server's). The caller has
    /// checked ownership. Used by the API and by the panel's retention form.
    public func setRetention(deviceID: UInt64, days: UInt32?) throws(APIError) -> UInt64 {
        if let days, days < 1 || days > UInt32(Self.retentionDaysMax) {
            throw .badRequest(
                .invalidField, "days must be a whole number from 1 to \(Self.retentionDaysMax)")
        }
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .retentionChanged(RetentionChanged(scope: .device(deviceID), days: days)),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info("retention_changed", ["device_id": .int(Int64(deviceID))])
        return offset
    }

    /// The device's own retention override, and the window that applies to it (the override, else
    /// its user's, else the server's `retentionDays`), as the compactor and the arrival check use it.
    public func retentionDays(deviceID: UInt64) -> (override: UInt32?, effective: Int) {
        let override = registry.read { $0.registry.devices[deviceID]?.retentionDays }
        return (override, arrivalLimits(deviceID).retentionDays)
    }

    func eraseHistory(_ request: HTTPRequest, deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let object = try parseObject(
            request.body.isEmpty ? Array("{}".utf8) : request.body, allowed: ["from", "to"])
        func time(_ key: String) throws(APIError) -> Int64? {
            guard let text = try field({ () throws(JSONAccessError) in try object.stringIfPresent(key) })
            else {
                return nil
            }
            do {
                return try RFC3339.parseMicros(text)
            } catch {
                throw .badRequest(.invalidField, "\(key): '\(text.prefix(64))' is not an RFC 3339 time")
            }
        }
        let from = try time("from")
        let to = try time("to")
        let offset = try eraseHistory(deviceID: deviceID, fromMicros: from, toMicros: to)
        return .json("{\"erased\": true, \"offset\": \(offset)}")
    }

    /// Erases the device's fixes with `recorded_at` in [from, to) (nil: unbounded on that side).
    /// The caller has checked ownership. Used by the API and by the panel's erase form.
    ///
    /// Only an event: the projector deletes the rows when it folds it (from then on no read shows
    /// them), and the compactor's next run removes the bytes from the log segments, the table files
    /// and the WAL (docs/retention.md, "Erasure and removal"). Until then they are on disk.
    public func eraseHistory(deviceID: UInt64, fromMicros from: Int64?, toMicros to: Int64?) throws(APIError)
        -> UInt64
    {
        if let from, let to, from >= to {
            throw .badRequest(.invalidField, "from must be before to")
        }
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .historyErased(HistoryErased(deviceID: deviceID, fromMicros: from, toMicros: to)),
                receivedAtMicros: clockMicros())
        }
        StructuredLog.info("history_erased", ["device_id": .int(Int64(deviceID))])
        return offset
    }

    func removeDevice(deviceID: UInt64) throws(APIError) -> HTTPResponse {
        let offset = try identity.store.mutations.withLock { _ throws(APIError) in
            try appendAndApply(
                .deviceRemoved(DeviceRemoved(deviceID: deviceID)), receivedAtMicros: clockMicros())
        }
        StructuredLog.info("device_removed", ["device_id": .int(Int64(deviceID))])
        return .json("{\"removed\": true, \"offset\": \(offset)}")
    }

    /// The limits a report of this device is checked with: the arrival check refuses fixes older
    /// than the device's effective window (its override, else its user's, else `retentionDays`),
    /// the same rule the compactor deletes by, so a longer window accepts older fixes and a
    /// shorter one refuses what the next compaction would delete anyway.
    func arrivalLimits(_ deviceID: UInt64) -> IngestLimits {
        var policy = registry.read { $0.registry.retention }
        policy.settings.retentionDays = limits.retentionDays
        var adjusted = limits
        adjusted.retentionDays = policy.windowDays(device: deviceID)
        return adjusted
    }
}
