/// Events about places rather than fixes: a device entering or leaving a region, and the regions
/// (waypoints) a device has defined. OwnTracks sends both (`_type: transition`, `waypoint`,
/// `waypoints`); the geofence work folds them. docs/log-format.md, types 25 and 26.
///
/// They carry coordinates, so `recordedMin`/`recordedMax` of their header hold their device time,
/// as a fix batch's do: a scan can find them by time without decoding.

/// A device crossed a region's border, as the device saw it.
public struct RegionTransition: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case enter = 0
        case leave = 1
    }

    public var deviceID: UInt64
    public var clientProtocol: ClientProtocol
    public var kind: Kind
    /// Device clock: when the transition happened (OwnTracks `tst`).
    public var recordedAtMicros: Int64
    /// The region's id on the device (OwnTracks `rid`); empty when not sent.
    public var regionID: String
    /// The region's name (OwnTracks `desc`).
    public var regionName: String
    /// What made the device notice (OwnTracks `t`: `c` circular region, `b` beacon, `l` location).
    public var trigger: String
    public var latitude: Double?
    public var longitude: Double?
    public var accuracyMeters: Double?

    public init(
        deviceID: UInt64, clientProtocol: ClientProtocol, kind: Kind, recordedAtMicros: Int64,
        regionID: String, regionName: String, trigger: String, latitude: Double?, longitude: Double?,
        accuracyMeters: Double?
    ) {
        self.deviceID = deviceID
        self.clientProtocol = clientProtocol
        self.kind = kind
        self.recordedAtMicros = recordedAtMicros
        self.regionID = regionID
        self.regionName = regionName
        self.trigger = trigger
        self.latitude = latitude
        self.longitude = longitude
        self.accuracyMeters = accuracyMeters
    }

    /// Bitwise for the doubles, as `Fix`: the log keeps them bit for bit.
    public static func == (lhs: RegionTransition, rhs: RegionTransition) -> Bool {
        lhs.deviceID == rhs.deviceID && lhs.clientProtocol == rhs.clientProtocol && lhs.kind == rhs.kind
            && lhs.recordedAtMicros == rhs.recordedAtMicros && lhs.regionID == rhs.regionID
            && lhs.regionName == rhs.regionName && lhs.trigger == rhs.trigger
            && lhs.latitude?.bitPattern == rhs.latitude?.bitPattern
            && lhs.longitude?.bitPattern == rhs.longitude?.bitPattern
            && lhs.accuracyMeters?.bitPattern == rhs.accuracyMeters?.bitPattern
    }
}

/// One region a device defined (OwnTracks `_type: waypoint`).
public struct Waypoint: Equatable, Sendable {
    /// Device clock: when the region was created (OwnTracks `tst`, its identity on the device).
    public var createdAtMicros: Int64
    public var regionID: String
    public var name: String
    public var latitude: Double
    public var longitude: Double
    /// 0 for a region without a radius (a beacon region).
    public var radiusMeters: Double

    public init(
        createdAtMicros: Int64, regionID: String, name: String, latitude: Double, longitude: Double,
        radiusMeters: Double
    ) {
        self.createdAtMicros = createdAtMicros
        self.regionID = regionID
        self.name = name
        self.latitude = latitude
        self.longitude = longitude
        self.radiusMeters = radiusMeters
    }

    public static func == (lhs: Waypoint, rhs: Waypoint) -> Bool {
        lhs.createdAtMicros == rhs.createdAtMicros && lhs.regionID == rhs.regionID && lhs.name == rhs.name
            && lhs.latitude.bitPattern == rhs.latitude.bitPattern
            && lhs.longitude.bitPattern == rhs.longitude.bitPattern
            && lhs.radiusMeters.bitPattern == rhs.radiusMeters.bitPattern
    }
}

/// Regions a device reported: one new or changed (`complete` false), or its whole list (`complete`
/// true, OwnTracks `_type: waypoints`, which replaces what was known).
public struct WaypointsReported: Equatable, Sendable {
    public var deviceID: UInt64
    public var clientProtocol: ClientProtocol
    public var complete: Bool
    public var waypoints: [Waypoint]

    public init(deviceID: UInt64, clientProtocol: ClientProtocol, complete: Bool, waypoints: [Waypoint]) {
        self.deviceID = deviceID
        self.clientProtocol = clientProtocol
        self.complete = complete
        self.waypoints = waypoints
    }
}

extension EventCodec {
    /// Unknown optional doubles are written as NaN bits with a presence byte before them.
    private static func optionalDouble(_ value: Double?, _ writer: inout ByteWriter) {
        writer.u8(value == nil ? 0 : 1)
        writer.u64(value?.bitPattern ?? 0)
    }

    private static func optionalDouble(_ reader: inout ByteReader) throws -> Double? {
        let present = try reader.u8()
        let bits = try reader.u64()
        guard present <= 1 else { throw DecodeError.invalid("presence flag \(present) is not 0 or 1") }
        return present == 1 ? Double(bitPattern: bits) : nil
    }

    /// The type, device and recorded range of a place event, its payload written to `writer`.
    static func encodePlace(_ event: Event, into writer: inout ByteWriter) -> (
        type: UInt8, deviceKey: UInt64, recordedMin: Int64, recordedMax: Int64
    )? {
        switch event {
        case .regionTransition(let transition):
            writer.u64(transition.deviceID)
            writer.u8(transition.clientProtocol.rawValue)
            writer.u8(transition.kind.rawValue)
            writer.i64(transition.recordedAtMicros)
            writer.string(transition.regionID)
            writer.string(transition.regionName)
            writer.string(transition.trigger)
            optionalDouble(transition.latitude, &writer)
            optionalDouble(transition.longitude, &writer)
            optionalDouble(transition.accuracyMeters, &writer)
            return (
                EventType.regionTransition.rawValue, transition.deviceID, transition.recordedAtMicros,
                transition.recordedAtMicros
            )
        case .waypointsReported(let reported):
            writer.u64(reported.deviceID)
            writer.u8(reported.clientProtocol.rawValue)
            writer.u8(reported.complete ? 1 : 0)
            writer.u32(UInt32(reported.waypoints.count))
            for waypoint in reported.waypoints {
                writer.i64(waypoint.createdAtMicros)
                writer.string(waypoint.regionID)
                writer.string(waypoint.name)
                writer.u64(waypoint.latitude.bitPattern)
                writer.u64(waypoint.longitude.bitPattern)
                writer.u64(waypoint.radiusMeters.bitPattern)
            }
            let times = reported.waypoints.map(\.createdAtMicros)
            return (
                EventType.waypointsReported.rawValue, reported.deviceID, times.min() ?? 0, times.max() ?? 0
            )
        default:
            return nil
        }
    }

    /// The payload of a version 1 `waypoints_reported` with no waypoint: device id, protocol,
    /// complete flag and a zero count.
    static let emptyWaypointListBytes = 8 + 1 + 1 + 4

    /// True when the record is a list of no waypoints (a device that has no regions left), told
    /// from the header alone: its recorded range is 0, like a region created in 1970's first
    /// microsecond, and only the payload's size tells them apart.
    public static func isEmptyWaypointList(_ header: RecordHeader) -> Bool {
        header.type == EventType.waypointsReported.rawValue && header.eventVersion == 1
            && header.uncompressedBytes == UInt32(emptyWaypointListBytes)
    }

    static func decodePlace(_ type: EventType, _ reader: inout ByteReader) throws -> Event? {
        switch type {
        case .regionTransition:
            let deviceID = try reader.u64()
            let protocolNumber = try reader.u8()
            let kindNumber = try reader.u8()
            guard let clientProtocol = ClientProtocol(rawValue: protocolNumber) else {
                throw DecodeError.invalid("protocol \(protocolNumber) is out of range")
            }
            guard let kind = RegionTransition.Kind(rawValue: kindNumber) else {
                throw DecodeError.invalid("transition kind \(kindNumber) is not 0 (enter) or 1 (leave)")
            }
            return .regionTransition(
                RegionTransition(
                    deviceID: deviceID, clientProtocol: clientProtocol, kind: kind,
                    recordedAtMicros: try reader.i64(), regionID: try reader.string(),
                    regionName: try reader.string(), trigger: try reader.string(),
                    latitude: try optionalDouble(&reader), longitude: try optionalDouble(&reader),
                    accuracyMeters: try optionalDouble(&reader)))
        case .waypointsReported:
            let deviceID = try reader.u64()
            let protocolNumber = try reader.u8()
            let complete = try reader.u8()
            let count = Int(try reader.u32())
            guard let clientProtocol = ClientProtocol(rawValue: protocolNumber) else {
                throw DecodeError.invalid("protocol \(protocolNumber) is out of range")
            }
            guard complete <= 1 else { throw DecodeError.invalid("complete flag \(complete) is not 0 or 1") }
            // Each waypoint is at least 36 bytes: a bound before reserving.
            guard count <= reader.remaining / 36 else {
                throw DecodeError.invalid("waypoint count \(count) too large")
            }
            var waypoints: [Waypoint] = []
            for _ in 0..<count {
                waypoints.append(
                    Waypoint(
                        createdAtMicros: try reader.i64(), regionID: try reader.string(),
                        name: try reader.string(), latitude: Double(bitPattern: try reader.u64()),
                        longitude: Double(bitPattern: try reader.u64()),
                        radiusMeters: Double(bitPattern: try reader.u64())))
            }
            return .waypointsReported(
                WaypointsReported(
                    deviceID: deviceID, clientProtocol: clientProtocol, complete: complete == 1,
                    waypoints: waypoints))
        default:
            return nil
        }
    }
}
