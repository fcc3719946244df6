/// Geofences drawn on the server (docs/log-format.md, types 36-37, docs/geofences.md).
///
/// A geofence is a circle (centre, radius in metres) that its owner asks about for a list of
/// devices. Defining one is one event (type 36, a create or a full replacement: the last definition
/// of an id wins); deleting it another (type 37). Transitions are not events: they are a projection
/// folded from the fixes and these definitions (Sources/Geofences), rebuilt from the log like any other.
///
/// Payload of type 36, version 1: u64 geofence id, u64 owner user id, string name, f64 latitude,
/// f64 longitude, f64 radius in metres, u32 device count, u64 device ids (ascending). Type 37,
/// version 1: u64 geofence id, u64 owner user id. Doubles as their IEEE 754 bit pattern (u64).

/// A geofence was created, or replaced as a whole (type 36).
public struct GeofenceDefined: Equatable, Sendable {
    public var geofenceID: UInt64
    public var ownerUserID: UInt64
    public var name: String
    public var latitude: Double
    public var longitude: Double
    public var radiusMeters: Double
    /// The devices it is evaluated for, ascending, each visible to the owner when defined.
    public var deviceIDs: [UInt64]

    public init(
        geofenceID: UInt64, ownerUserID: UInt64, name: String, latitude: Double, longitude: Double,
        radiusMeters: Double, deviceIDs: [UInt64]
    ) {
        self.geofenceID = geofenceID
        self.ownerUserID = ownerUserID
        self.name = name
        self.latitude = latitude
        self.longitude = longitude
        self.radiusMeters = radiusMeters
        self.deviceIDs = deviceIDs
    }

    /// Bitwise for the doubles, as `Fix`: the log keeps them bit for bit.
    public static func == (lhs: GeofenceDefined, rhs: GeofenceDefined) -> Bool {
        lhs.geofenceID == rhs.geofenceID && lhs.ownerUserID == rhs.ownerUserID && lhs.name == rhs.name
            && lhs.latitude.bitPattern == rhs.latitude.bitPattern
            && lhs.longitude.bitPattern == rhs.longitude.bitPattern
            && lhs.radiusMeters.bitPattern == rhs.radiusMeters.bitPattern && lhs.deviceIDs == rhs.deviceIDs
    }
}

/// A geofence was deleted by its owner (type 37): its definition and its transitions go.
public struct GeofenceDeleted: Equatable, Sendable {
    public var geofenceID: UInt64
    public var ownerUserID: UInt64

    public init(geofenceID: UInt64, ownerUserID: UInt64) {
        self.geofenceID = geofenceID
        self.ownerUserID = ownerUserID
    }
}

extension EventCodec {
    /// Devices named by one geofence at most: bounds a payload and a decoder's allocation.
    public static let geofenceDevicesMax = 1_000

    static func encodeGeofence(_ event: Event, into w: inout ByteWriter) -> UInt8? {
        switch event {
        case .geofenceDefined(let fence):
            precondition(fence.deviceIDs.count <= geofenceDevicesMax)
            w.u64(fence.geofenceID)
            w.u64(fence.ownerUserID)
            w.string(fence.name)
            w.u64(fence.latitude.bitPattern)
            w.u64(fence.longitude.bitPattern)
            w.u64(fence.radiusMeters.bitPattern)
            w.u32(UInt32(fence.deviceIDs.count))
            for id in fence.deviceIDs { w.u64(id) }
            return EventType.geofenceDefined.rawValue
        case .geofenceDeleted(let deleted):
            w.u64(deleted.geofenceID)
            w.u64(deleted.ownerUserID)
            return EventType.geofenceDeleted.rawValue
        default:
            return nil
        }
    }

    static func decodeGeofence(_ type: EventType, _ r: inout ByteReader) throws -> Event? {
        switch type {
        case .geofenceDefined:
            let id = try r.u64()
            let owner = try r.u64()
            let name = try r.string()
            let latitude = Double(bitPattern: try r.u64())
            let longitude = Double(bitPattern: try r.u64())
            let radius = Double(bitPattern: try r.u64())
            let count = Int(try r.u32())
            guard count <= geofenceDevicesMax, count <= r.remaining / 8 else {
                throw DecodeError.invalid("geofence device count \(count) too large")
            }
            var devices: [UInt64] = []
            devices.reserveCapacity(count)
            for _ in 0..<count { devices.append(try r.u64()) }
            return .geofenceDefined(
                GeofenceDefined(
                    geofenceID: id, ownerUserID: owner, name: name, latitude: latitude, longitude: longitude,
                    radiusMeters: radius, deviceIDs: devices))
        case .geofenceDeleted:
            return .geofenceDeleted(GeofenceDeleted(geofenceID: try r.u64(), ownerUserID: try r.u64()))
        default:
            return nil
        }
    }
}
