import Core
import Events
import Identity
import JSON
import Synchronization

/// The server's geofences as OwnTracks waypoints (docs/geofences.md, "OwnTracks waypoints"): an
/// OwnTracks phone that reports gets a `setWaypoints` command holding the fences that name it,
/// once after they were defined or changed, in the answer to its next HTTP request or published to
/// its `<topic>/cmd` after its next MQTT message. The phone then monitors them itself and sends
/// `transition` messages, stored as the device's own view (event 25); the server's decision, from the
/// fixes, stays the one that notifies.
///
/// Only fences of the device's owner are sent: a fence drawn by someone the device is shared with
/// names a place of theirs, which the phone's owner was not told. A waypoint's `tst` is what
/// OwnTracks identifies it by, so it is the fence's id (stable over renames, moves and restarts),
/// and `rid` says it is findmy's. What was handed out is remembered in memory: after a restart every
/// OwnTracks phone gets its fences once more, which is harmless (the same `tst` replaces).
public final class FenceWaypoints: Sendable {
    /// The one memory of the process: the HTTP routes and the MQTT subscriber share it.
    public static let shared = FenceWaypoints()
    private let handedOut = Mutex<[UInt64: [UInt8]]>([:])

    public init() {}

    /// The command to send device `deviceID` now, or nil when it already has its fences (or has none
    /// and never had). Marks it handed out; `forget` undoes that when it could not be sent.
    public func take(for deviceID: UInt64, identity: IdentityService) -> [UInt8]? {
        let fences = identity.store.registry.read { state -> [GeofenceDefined] in
            guard let owner = state.registry.devices[deviceID]?.userID else { return [] }
            return state.registry.geofences.fences(ownedBy: owner).filter { $0.deviceIDs.contains(deviceID) }
        }
        // Nearly every phone: no fence names it, and it was never sent any.
        if fences.isEmpty, handedOut.withLock({ $0[deviceID] == nil }) { return nil }
        let message = Self.command(fences)
        return handedOut.withLock { sent -> [UInt8]? in
            if sent[deviceID] == message || (sent[deviceID] == nil && fences.isEmpty) { return nil }
            sent[deviceID] = message
            return message
        }
    }

    /// The command was not delivered: send it again next time.
    public func forget(_ deviceID: UInt64) { handedOut.withLock { _ = $0.removeValue(forKey: deviceID) } }

    /// `{"_type":"cmd","action":"setWaypoints","waypoints":{"_type":"waypoints","waypoints":[...]}}`
    /// (OwnTracks booklet, JSON: `_type=cmd`, `_type=waypoints`, `_type=waypoint`).
    public static func command(_ fences: [GeofenceDefined]) -> [UInt8] {
        var w = JSONWriter(capacity: 128 + fences.count * 128)
        w.beginObject()
        w.key("_type")
        w.string("cmd")
        w.key("action")
        w.string("setWaypoints")
        w.key("waypoints")
        w.beginObject()
        w.key("_type")
        w.string("waypoints")
        w.key("waypoints")
        w.beginArray()
        for fence in fences.sorted(by: { $0.geofenceID < $1.geofenceID }) {
            w.beginObject()
            w.key("_type")
            w.string("waypoint")
            w.key("desc")
            w.string(fence.name)
            w.key("lat")
            w.finiteDouble(fence.latitude)
            w.key("lon")
            w.finiteDouble(fence.longitude)
            w.key("rad")
            w.int64(Int64(saturating: fence.radiusMeters.rounded()) ?? 0)
            w.key("tst")
            w.int64(Int64(bitPattern: fence.geofenceID))
            w.key("rid")
            w.string("findmy-\(fence.geofenceID)")
            w.endObject()
        }
        w.endArray()
        w.endObject()
        w.endObject()
        return w.bytes
    }
}
