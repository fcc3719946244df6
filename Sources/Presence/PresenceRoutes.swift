import Core
import HTTP
import Identity
import JSON

/// The presence API (docs/api.md, "Presence"): the nodes a user may link to, and linking a device.
/// Who may: the gate's `.owner` for a device's link (anyone else gets the same 404 as for a device
/// that does not exist) and `.user` for the node list, which shows only the caller's own nodes.
extension PresenceService {
    public func addRoutes(to router: inout GuardedRouter) {
        router.add("GET", "/api/find-my/presence/nodes") { [self] _, caller in
            respond { () throws(APIError) in try nodesAnswer(userID: caller.userID) }
        }
        router.add("PUT", "/api/find-my/devices/{id}/presence") { [self] request, caller in
            respond { () throws(APIError) in
                let object = try parseObject(request.body, allowed: ["headscale_node"])
                let node: String?
                switch object["headscale_node"] {
                case .string(let text)? where !text.isEmpty: node = text
                case .null?: node = nil
                case nil:
                    throw APIError.badRequest(
                        .missingField, "headscale_node: the node's name or id, or null to unlink, is required"
                    )
                default:
                    throw APIError.badRequest(
                        .wrongType, "headscale_node must be a node's name or id (a non-empty string), or null"
                    )
                }
                try link(deviceID: caller.deviceID, userID: caller.userID, node: node)
                return linkAnswer(deviceID: caller.deviceID)
            }
        }
        router.add("DELETE", "/api/find-my/devices/{id}/presence") { [self] _, caller in
            respond { () throws(APIError) in
                try link(deviceID: caller.deviceID, userID: caller.userID, node: nil)
                return linkAnswer(deviceID: caller.deviceID)
            }
        }
    }

    /// The routes of a server without `--headscale-url`: each answers 503 `presence_unavailable`.
    public static func addUnavailableRoutes(to router: inout GuardedRouter) {
        let error = APIError(
            status: 503, code: .presenceUnavailable,
            message: "this server does not poll a tailnet; start it with --headscale-url (docs/presence.md)")
        router.add("GET", "/api/find-my/presence/nodes") { _, _ in error.response }
        router.add("PUT", "/api/find-my/devices/{id}/presence") { _, _ in error.response }
        router.add("DELETE", "/api/find-my/devices/{id}/presence") { _, _ in error.response }
    }

    /// `{"headscale_user": "alice", "nodes": [{"id", "name", "online", "last_seen"}]}`.
    func nodesAnswer(userID: UInt64) throws(APIError) -> HTTPResponse {
        let nodes = try linkableNodes(userID: userID)
        var writer = JSONWriter(capacity: 128 + nodes.count * 128)
        writer.beginObject()
        writer.key("headscale_user")
        writer.string(headscaleUser(userID: userID) ?? "")
        writer.key("nodes")
        writer.beginArray()
        for node in nodes {
            writer.beginObject()
            writer.key("id")
            writer.string(node.id)
            writer.key("name")
            writer.string(node.name)
            writer.key("online")
            writer.bool(node.online)
            writer.key("last_seen")
            if let seen = node.lastSeenMicros {
                writer.timestamp(micros: RFC3339.clampedMicros(seen))
            } else {
                writer.null()
            }
            writer.endObject()
        }
        writer.endArray()
        writer.endObject()
        return .json(writer.bytes)
    }

    /// `{"device_id", "headscale_node": {"id", "name"} | null, "presence": {...} | null}`.
    func linkAnswer(deviceID: UInt64) -> HTTPResponse {
        let registry = identity.registrySnapshot
        let link = registry.presence.links[deviceID]
        var writer = JSONWriter(capacity: 256)
        writer.beginObject()
        writer.key("device_id")
        writer.int64(Int64(bitPattern: deviceID))
        writer.key("headscale_node")
        if let link {
            writer.beginObject()
            writer.key("id")
            writer.string(link.nodeID)
            writer.key("name")
            writer.string(link.nodeName)
            writer.endObject()
        } else {
            writer.null()
        }
        writer.key("presence")
        PresenceView.write(&writer, registry.presence(of: deviceID, nowMicros: clockMicros()))
        writer.endObject()
        return .json(writer.bytes)
    }
}
