import HTTP
import Identity
import JSON
import Postgres
import ProjectionSchema

extension ReadService {
    /// `GET /api/find-my/admin/devices` (admin role, checked by the permission table): every device
    /// with its owner, names, pause switch and when a report last arrived. Deliberately no position,
    /// no fix time and no battery: an administrator manages devices, it does not see where they are.
    func adminDevices(_ request: HTTPRequest) throws(APIError) -> HTTPResponse {
        _ = try checkedParameters(request.queryItems, allowed: [])
        let registry = identity.registrySnapshot
        let result = try query(
            "SELECT d.id, d.last_seen_at FROM \(ProjectionSchema.Table.devices.live) d", [])
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
            writeTime(&writer, lastSeen[device.id])
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }
}
