import Events
import Ingest
import JSON

/// OwnTracks' JSON messages (docs/clients.md, "OwnTracks"), read into what the report path takes.
/// Shared by the HTTP endpoint and the MQTT subscriber: both carry the same payloads.
///
/// Rules, from the apps' sources (cited in docs/clients.md):
/// - one body is one message object, or an array of them (the Recorder's batch form); an empty
///   body is nothing at all (the apps POST a zero-length payload when a friend is deleted);
/// - a number may arrive as a JSON number or as a string holding one (GPSLogger's OwnTracks
///   template quotes every value), and `bs` also as "true"/"false";
/// - unknown members are ignored: the apps add fields over time, and a refusal would block an
///   Android queue or make iOS drop the message. Only what can never become a fix is rejected.
public enum OwnTracks {
    /// What one body holds, ready for `ClientReport`.
    public struct Decoded: Sendable {
        public var items: [ClientReport.Item] = []
        public var rejections: [ClientReport.ItemRejection] = []
        public var places: [Event] = []
        /// Types acknowledged and counted but not stored (`lwt`, `status`, `card`, ...), in order.
        public var counted: [String] = []
        public init() {}
    }

    /// The `_type`s acknowledged without being stored.
    public static let countedTypes: Set<String> = [
        "lwt", "status", "card", "steps", "request", "configuration", "cmd", "beacon", "dump", "clear",
    ]

    /// Messages one body may carry (the array form); more are rejected together, not read.
    public static let messagesPerBodyMax = 1_000

    /// Decodes a plaintext body. `deviceID` and `clientProtocol` stamp the place events.
    public static func decode(_ body: [UInt8], deviceID: UInt64, clientProtocol: ClientProtocol) -> Decoded {
        if let direct = decodeDirect(body) { return direct }
        switch document(body) {
        case .success(let document?):
            return decode(document: document, deviceID: deviceID, clientProtocol: clientProtocol)
        case .success(nil):
            return Decoded()
        case .failure(let rejection):
            var decoded = Decoded()
            decoded.rejections.append(.init(index: 0, rejection))
            return decoded
        }
    }

    /// A body parsed, for a caller that looks at it before decoding it (the HTTP endpoint, for
    /// an encrypted message): nil for a blank body (nothing at all), the rejection of one that is
    /// not JSON.
    static func document(_ body: [UInt8]) -> Result<JSONValue?, FixRejection> {
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) { return .success(nil) }
        do {
            return .success(try JSONParser.parse(body))
        } catch {
            return .failure(FixRejection(.malformed, "the body is not JSON: \(error.description)"))
        }
    }

    /// `decode` of a body already parsed by `document`.
    static func decode(document: JSONValue, deviceID: UInt64, clientProtocol: ClientProtocol) -> Decoded {
        var decoded = Decoded()
        switch document {
        case .array(let elements):
            guard elements.count <= messagesPerBodyMax else {
                decoded.rejections.append(
                    .init(
                        index: 0,
                        FixRejection(
                            .malformed,
                            "\(elements.count) messages in one body; at most \(messagesPerBodyMax)")))
                return decoded
            }
            for (index, element) in elements.enumerated() {
                decodeMessage(
                    element, index: UInt32(index), deviceID: deviceID, clientProtocol: clientProtocol,
                    into: &decoded)
            }
        default:
            decodeMessage(
                document, index: 0, deviceID: deviceID, clientProtocol: clientProtocol, into: &decoded)
        }
        return decoded
    }

    /// The `_type` of a message object, or nil.
    public static func type(of message: JSONValue) -> String? {
        if case .string(let type)? = message["_type"] { return type }
        return nil
    }

    static func decodeMessage(
        _ message: JSONValue, index: UInt32, deviceID: UInt64, clientProtocol: ClientProtocol,
        into decoded: inout Decoded
    ) {
        guard case .object(let object) = message else {
            decoded.rejections.append(
                .init(
                    index: index,
                    FixRejection(.notAnObject, "a message must be an object, found \(message.typeName)")))
            return
        }
        guard let type = type(of: message) else {
            decoded.rejections.append(
                .init(
                    index: index, FixRejection(.missingField, "_type is required (location, transition, ...)")
                ))
            return
        }
        do throws(FixRejection) {
            switch type {
            case "location":
                decoded.items.append(.init(index: index, fix: try location(object)))
            case "transition":
                decoded.places.append(
                    .regionTransition(
                        try transition(object, deviceID: deviceID, clientProtocol: clientProtocol)))
            case "waypoint":
                decoded.places.append(
                    .waypointsReported(
                        WaypointsReported(
                            deviceID: deviceID, clientProtocol: clientProtocol, complete: false,
                            waypoints: [try waypoint(object)])))
            case "waypoints":
                guard case .array(let list)? = object["waypoints"] else {
                    throw FixRejection(.missingField, "waypoints: an array of waypoint objects is required")
                }
                var waypoints: [Waypoint] = []
                for element in list {
                    guard case .object(let item) = element else {
                        throw FixRejection(.notAnObject, "waypoints: each element must be an object")
                    }
                    waypoints.append(try waypoint(item))
                }
                decoded.places.append(
                    .waypointsReported(
                        WaypointsReported(
                            deviceID: deviceID, clientProtocol: clientProtocol, complete: true,
                            waypoints: waypoints)))
            case "encrypted":
                throw FixRejection(
                    .malformed,
                    "an encrypted message inside an encrypted or array body; send one encrypted message per body"
                )
            default:
                guard countedTypes.contains(type) else {
                    throw FixRejection(
                        .malformed, "_type '\(type.prefix(40))' is not an OwnTracks message type")
                }
                decoded.counted.append(type)
            }
        } catch {
            decoded.rejections.append(.init(index: index, error))
        }
    }

    // MARK: location

    /// `_type: location` as a fix. Units: `vel` km/h (stored m/s), `tst` epoch seconds (the fix's
    /// `recorded_at`; `created_at` is ignored, the server's clock is `received_at`), `batt` percent.
    static func location(_ object: JSONObject) throws(FixRejection) -> Fix {
        guard let latitude = try number(object, "lat") else {
            throw FixRejection(.missingField, "lat is required")
        }
        guard let longitude = try number(object, "lon") else {
            throw FixRejection(.missingField, "lon is required")
        }
        let recordedAt = try epochSeconds(object, "tst")
        // iOS omits acc when it is negative (invalid); Android sends 0 when it has none. Both: unknown.
        let accuracy = try number(object, "acc").flatMap { $0 > 0 ? $0 : nil }
        let altitude = try number(object, "alt")
        // iOS omits vel and cog when negative (invalid); a negative value from anyone else means the same.
        let speed = try number(object, "vel").flatMap { $0 >= 0 ? $0 / 3.6 : nil }
        let heading = try number(object, "cog").flatMap { course -> Double? in
            guard course >= 0 else { return nil }
            // Rounded to whole degrees, 359.6 arrives as 360: the same direction as 0.
            return course == 360 ? 0 : course
        }
        let battery = try number(object, "batt")
        guard battery.map({ $0 >= 0 && $0 <= 100 }) ?? true else {
            throw FixRejection(.outOfRange, "batt must be within [0, 100], got \(battery!)")
        }
        return Fix(
            latitude: latitude, longitude: longitude, accuracyMeters: accuracy, altitudeMeters: altitude,
            speedMetersPerSecond: speed, headingDegrees: heading,
            batteryPercent: battery.map { UInt8($0.rounded()) }, isCharging: try charging(object),
            source: source(trigger: object["t"]), recordedAtMicros: recordedAt)
    }

    /// `bs`: 0 unknown, 1 unplugged, 2 charging, 3 full (plugged in); GPSLogger: "true"/"false".
    static func charging(_ object: JSONObject) throws(FixRejection) -> Bool? {
        switch object["bs"] {
        case nil, .null?: return nil
        case .bool(let flag)?: return flag
        case .string("true")?: return true
        case .string("false")?: return false
        default:
            switch try number(object, "bs") {
            case 0?, nil: return nil
            case 1?: return false
            case 2?, 3?: return true
            case let other?: throw FixRejection(.outOfRange, "bs must be 0, 1, 2 or 3, got \(other)")
            }
        }
    }

    /// The report's `source` from OwnTracks' trigger `t` (docs/clients.md has the table).
    static func source(trigger: JSONValue?) -> String {
        guard case .string(let trigger)? = trigger else { return "automatic" }
        switch trigger {
        case "u": return "manual"
        case "r": return "ondemand"
        case "c", "C", "b", "e", "l": return "geofence"
        case "p": return "ping"
        case "t": return "timer"
        case "v": return "visit"
        case "m": return "motion"
        default: return "automatic"
        }
    }

    // MARK: places

    static func transition(_ object: JSONObject, deviceID: UInt64, clientProtocol: ClientProtocol)
        throws(FixRejection) -> RegionTransition
    {
        let kind: RegionTransition.Kind
        switch object["event"] {
        case .string("enter")?: kind = .enter
        case .string("leave")?: kind = .leave
        default: throw FixRejection(.missingField, "event must be \"enter\" or \"leave\"")
        }
        let latitude = try number(object, "lat")
        let longitude = try number(object, "lon")
        guard latitude.map({ abs($0) <= 90 }) ?? true, longitude.map({ abs($0) <= 180 }) ?? true else {
            throw FixRejection(.outOfRange, "lat must be within [-90, 90] and lon within [-180, 180]")
        }
        return RegionTransition(
            deviceID: deviceID, clientProtocol: clientProtocol, kind: kind,
            recordedAtMicros: try epochSeconds(object, "tst"), regionID: text(object, "rid"),
            regionName: text(object, "desc"), trigger: text(object, "t"), latitude: latitude,
            longitude: longitude,
            accuracyMeters: try number(object, "acc").flatMap { $0 > 0 ? $0 : nil })
    }

    static func waypoint(_ object: JSONObject) throws(FixRejection) -> Waypoint {
        guard let latitude = try number(object, "lat"), abs(latitude) <= 90,
            let longitude = try number(object, "lon"), abs(longitude) <= 180
        else {
            throw FixRejection(
                .outOfRange, "a waypoint needs lat within [-90, 90] and lon within [-180, 180]")
        }
        let radius = try number(object, "rad") ?? 0
        guard radius >= 0, radius <= 1_000_000 else {
            throw FixRejection(.outOfRange, "rad must be within [0, 1000000] metres, got \(radius)")
        }
        return Waypoint(
            createdAtMicros: try epochSeconds(object, "tst"), regionID: text(object, "rid"),
            name: text(object, "desc"), latitude: latitude, longitude: longitude, radiusMeters: radius)
    }

    // MARK: values

    /// Text members are kept to this many bytes (region names are short; nothing else is stored).
    static let textBytesMax = 200

    static func text(_ object: JSONObject, _ key: String) -> String {
        guard case .string(let value)? = object[key] else { return "" }
        guard value.utf8.count > textBytesMax else { return value }
        // Cut on a character boundary.
        var cut = ""
        for character in value {
            if cut.utf8.count + character.utf8.count > textBytesMax { break }
            cut.append(character)
        }
        return cut
    }

    /// A number sent as a JSON number or as a string holding a decimal number; nil when absent,
    /// null or an empty string (GPSLogger substitutes "" for a value it does not have).
    static func number(_ object: JSONObject, _ key: String) throws(FixRejection) -> Double? {
        switch object[key] {
        case nil, .null?: return nil
        case .integer(let value)?: return Double(value)
        case .double(let value)?: return value
        case .string(let text)?:
            let trimmed = text.trimmingSpaces
            if trimmed.isEmpty { return nil }
            guard let value = decimal(trimmed) else {
                throw FixRejection(.wrongType, "\(key) must be a number, got '\(text.prefix(40))'")
            }
            return value
        case let other?:
            throw FixRejection(.wrongType, "\(key) must be a number, found \(other.typeName)")
        }
    }

    /// Decimal text only: Swift's `Double(String)` also reads "nan", "inf" and hexadecimal, which
    /// no app means.
    static func decimal(_ text: String) -> Double? {
        let allowed = text.utf8.allSatisfy {
            ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D || $0 == 0x2B || $0 == 0x65 || $0 == 0x45
        }
        guard allowed, let value = Double(text), value.isFinite else { return nil }
        return value
    }

    /// `tst` and friends: whole seconds since 1970 (fractions kept to the microsecond), required.
    static func epochSeconds(_ object: JSONObject, _ key: String) throws(FixRejection) -> Int64 {
        guard let seconds = try number(object, key) else {
            throw FixRejection(.missingField, "\(key) (seconds since 1970) is required")
        }
        // 1 January 1971 to the end of year 9999: 0 or a small number is an unset clock field.
        guard seconds >= 31_536_000, seconds < 253_402_300_800 else {
            throw FixRejection(
                .badTimestamp, "\(key) must be seconds since 1970 (1971 to 9999), got \(seconds)")
        }
        return Int64((seconds * 1_000_000).rounded())
    }
}

extension String {
    var trimmingSpaces: String {
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }) else { return "" }
        let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 })!
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
