import Events

/// The geofences defined on the server (docs/geofences.md): what the API needs to decide
/// who may read or change a fence, without a database. Folded from the log by `Registry.apply`, so
/// it is in the registry snapshot (body version 6). The transitions themselves are the geofence
/// projection's (Sources/Geofences).
public struct GeofenceBook: Equatable, Sendable {
    public internal(set) var fences: [UInt64: GeofenceDefined] = [:]
    /// Every id ever defined, deleted ones included: an id is never given to another fence.
    public internal(set) var highestID: UInt64 = 0

    public init() {}

    public var nextID: UInt64 { highestID + 1 }

    /// The fences of `userID`, by id.
    public func fences(ownedBy userID: UInt64) -> [GeofenceDefined] {
        fences.values.filter { $0.ownerUserID == userID }.sorted { $0.geofenceID < $1.geofenceID }
    }

    mutating func apply(_ event: Event) {
        switch event {
        case .geofenceDefined(let fence):
            // An id is its first owner's: a definition naming another owner is not trusted.
            if let existing = fences[fence.geofenceID], existing.ownerUserID != fence.ownerUserID { return }
            fences[fence.geofenceID] = fence
            highestID = max(highestID, fence.geofenceID)
        case .geofenceDeleted(let deleted):
            guard fences[deleted.geofenceID]?.ownerUserID == deleted.ownerUserID else { return }
            fences[deleted.geofenceID] = nil
        case .deviceRemoved(let removed):
            // A removed device is gone from every fence, or a PUT repeating the fence's list (as a GET
            // answered it) would be refused for naming a device nobody can see. A pure fold of the
            // log, so replays and snapshots agree; a fence left with no device stays, watching none.
            for (id, fence) in fences where fence.deviceIDs.contains(removed.deviceID) {
                fences[id]?.deviceIDs.removeAll { $0 == removed.deviceID }
            }
        default:
            break
        }
    }
}

// Snapshot body, version 6 (appended after version 4's part; 5 is presence's part):
// u64 highest id, u32 count, then each fence as the payload of its type 36 event.
extension Registry {
    func encodeGeofencePart(_ w: inout ByteWriter) {
        w.u64(geofences.highestID)
        w.u32(UInt32(geofences.fences.count))
        for fence in geofences.fences.values {
            w.u32(UInt32(fence.deviceIDs.count))
            w.u64(fence.geofenceID)
            w.u64(fence.ownerUserID)
            w.string(fence.name)
            w.u64(fence.latitude.bitPattern)
            w.u64(fence.longitude.bitPattern)
            w.u64(fence.radiusMeters.bitPattern)
            for id in fence.deviceIDs { w.u64(id) }
        }
    }

    mutating func decodeGeofencePart(_ r: inout ByteReader) throws {
        geofences.highestID = try r.u64()
        for _ in 0..<(try r.u32()) {
            let count = Int(try r.u32())
            guard count <= EventCodec.geofenceDevicesMax else {
                throw DecodeError.invalid("a geofence with \(count) devices")
            }
            var fence = GeofenceDefined(
                geofenceID: try r.u64(), ownerUserID: try r.u64(), name: try r.string(),
                latitude: Double(bitPattern: try r.u64()), longitude: Double(bitPattern: try r.u64()),
                radiusMeters: Double(bitPattern: try r.u64()), deviceIDs: [])
            for _ in 0..<count { fence.deviceIDs.append(try r.u64()) }
            guard fence.geofenceID <= geofences.highestID, geofences.fences[fence.geofenceID] == nil else {
                throw DecodeError.invalid("geofence \(fence.geofenceID) is inconsistent")
            }
            geofences.fences[fence.geofenceID] = fence
        }
    }
}
