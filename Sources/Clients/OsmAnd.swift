import HTTP
import Identity
import Ingest
import JSON

/// Decodes the OsmAnd protocol (Traccar Client, GPSLogger's custom URL, OsmAnd's online tracking):
/// one fix a request, as query parameters (`GET`, or `POST` with an empty body), as an urlencoded
/// form body, or as the JSON body of Traccar Client 9 (`{"device_id", "location": {...}}`).
///
/// The parameters, as the Traccar server reads them (OsmAndProtocolDecoder.java), which every one of
/// these apps was written against (docs/clients.md has the table and its sources):
/// `id`/`deviceid` (the device token), `lat` and `lon` or `location=lat,lon`, `timestamp` (seconds,
/// milliseconds, ISO 8601 or `yyyy-MM-dd HH:mm:ss` UTC; see `AppTime.osmandMicros`), `speed` in
/// knots, `bearing` or `heading`, `altitude`, `accuracy` (0 or absent: unknown), `hdop`, `batt`
/// (percent), `charge` (`true`), `alarm`. Two more, findmy's own: `speed_mps` (metres per second,
/// for GPSLogger's `%SPD` and OsmAnd's `{5}`, which are m/s though the protocol's `speed` is knots)
/// wins over `speed`. Other parameters (`ignition`, `cell`, `wifi`, ...) are ignored. A value sent
/// twice: the first counts.
///
/// Content never fails the request: these apps resend a refused fix for ever, ahead of every fix
/// queued behind it, so a fix that can never be valid is answered 200 and recorded as a rejection.
public enum OsmAndDecoder {
    /// Knots to metres per second: one knot is 1852 m an hour (the international nautical mile).
    static let metersPerSecondPerKnot = 1852.0 / 3600.0
    /// How far a position is off, 1 sigma, per unit of HDOP: half the 15 m at 95 % confidence of
    /// gpsd's error model without DGPS (`H_UERE_NO_DGPS`, libgpsd_core.c), since 95 % is about 2
    /// sigma and phones report accuracy at about 1 sigma (68 %). docs/clients.md.
    static let metersPerHDOP = 7.5

    /// A request read: the device token it carries (nil: none in the query, form or JSON body), and
    /// its fix or why it has none.
    public struct Decoded: Equatable, Sendable {
        public var token: String?
        public var batch: AppBatch
        /// The number of elements of a JSON `location` array longer than the `fixesMax` of
        /// `decode`, which were not read: the request is refused whole, as any other route's batch
        /// over `batchFixesMax` is.
        public var locationsOverLimit: Int?
    }

    public static func decode(
        _ request: HTTPRequest, receivedAtMicros: Int64, fixesMax: Int = IngestLimits().batchFixesMax
    ) -> Decoded {
        if isJSON(request) {
            return decodeJSON(request.body, receivedAtMicros: receivedAtMicros, fixesMax: fixesMax)
        }
        var parameters = Parameters(request.queryItems)
        if !request.body.isEmpty { parameters.add(parseForm(request.body)) }
        var batch = AppBatch()
        do {
            batch.fixes.append(
                AppBatch.Item(index: 0, fix: try fix(parameters, receivedAtMicros: receivedAtMicros)))
        } catch {
            batch.rejections.append(AppRejection(index: 0, error.code, error.detail))
        }
        return Decoded(token: parameters["id"] ?? parameters["deviceid"], batch: batch)
    }

    /// JSON by its content type, as the Traccar server decides, or by a body that starts like an
    /// object when the query holds no position (a client that forgot the header).
    static func isJSON(_ request: HTTPRequest) -> Bool {
        if let type = request.headers["Content-Type"], type.lowercased().hasPrefix("application/json") {
            return true
        }
        guard request.query("lat") == nil, request.query("location") == nil else { return false }
        return request.body.first(where: { $0 != 0x20 && $0 != 0x0A && $0 != 0x0D && $0 != 0x09 })
            == UInt8(ascii: "{")
    }

    /// The query and form fields by name, the first of each name.
    struct Parameters {
        var values: [String: String] = [:]

        init(_ items: [(name: String, value: String)]) { add(items) }

        mutating func add(_ items: [(name: String, value: String)]) {
            for item in items where values[item.name] == nil { values[item.name] = item.value }
        }

        /// An empty value (`hdop=` from GPSLogger's `%HDOP` without a GPS fix) is absent.
        subscript(name: String) -> String? {
            guard let value = values[name], !value.isEmpty else { return nil }
            return value
        }
    }

    static func fix(_ parameters: Parameters, receivedAtMicros: Int64) throws(FixRejection) -> AppFix {
        let latitude: Double
        let longitude: Double
        if let pair = parameters["location"], parameters["lat"] == nil {
            let parts = pair.split(separator: ",", omittingEmptySubsequences: false)
            guard parts.count == 2 else {
                throw FixRejection(
                    .wrongType, "location must be 'latitude,longitude', got '\(pair.prefix(64))'")
            }
            latitude = try decimal(String(parts[0]), "location's latitude")
            longitude = try decimal(String(parts[1]), "location's longitude")
        } else {
            guard let lat = parameters["lat"], let lon = parameters["lon"] else {
                throw FixRejection(.missingField, "lat and lon (or location=lat,lon) are required")
            }
            latitude = try decimal(lat, "lat")
            longitude = try decimal(lon, "lon")
        }
        var recordedAt = receivedAtMicros
        if let text = parameters["timestamp"] {
            guard let micros = AppTime.osmandMicros(text) else {
                throw FixRejection(
                    .badTimestamp,
                    "timestamp '\(text.prefix(40))' is none of: seconds or milliseconds since 1970, ISO 8601 with a zone, yyyy-MM-dd HH:mm:ss (UTC)"
                )
            }
            recordedAt = micros
        }
        var fix = AppFix(
            latitude: latitude, longitude: longitude,
            source: parameters["alarm"] == nil ? "track" : "alarm", recordedAtMicros: recordedAt)
        fix.accuracyMeters = try accuracy(
            parameters["accuracy"].map { (text) throws(FixRejection) in try decimal(text, "accuracy") },
            hdop: parameters["hdop"].map { (text) throws(FixRejection) in try decimal(text, "hdop") })
        fix.altitudeMeters = try parameters["altitude"].map { (text) throws(FixRejection) in
            try decimal(text, "altitude")
        }
        if let metersPerSecond = parameters["speed_mps"] {
            fix.speedMetersPerSecond = try decimal(metersPerSecond, "speed_mps")
        } else if let knots = parameters["speed"] {
            fix.speedMetersPerSecond = try decimal(knots, "speed") * metersPerSecondPerKnot
        }
        if let bearing = parameters["bearing"] ?? parameters["heading"] {
            fix.headingDegrees = try decimal(bearing, "bearing")
        }
        fix.batteryPercent = try parameters["batt"].map { (text) throws(FixRejection) in
            try decimal(text, "batt")
        }
        fix.isCharging = parameters["charge"].flatMap { text in
            switch text.lowercased() {
            case "true", "1": true
            case "false", "0": false
            default: nil
            }
        }
        return fix
    }

    /// `accuracy` when the app knows it; 0 means it does not (Traccar Client sends 0 for the GPS
    /// provider). Otherwise an estimate from `hdop` (0: unknown as well).
    static func accuracy(_ accuracy: Double?, hdop: Double?) throws(FixRejection) -> Double? {
        if let accuracy, accuracy != 0 { return accuracy }
        guard let hdop, hdop != 0 else { return nil }
        guard hdop > 0 else { throw FixRejection(.outOfRange, "hdop must be positive, got \(hdop)") }
        return hdop * metersPerHDOP
    }

    /// A decimal number as Java and Kotlin print one (`52.520008`, `-5.0E-4`, `85.0`). Swift's
    /// `Double(_:)` would also take `nan`, `inf` and hexadecimal, which no app sends.
    static func decimal(_ text: String, _ name: String) throws(FixRejection) -> Double {
        let plain = text.utf8.allSatisfy { byte in
            AppTime.isDigit(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
        }
        guard plain, let value = Double(text), value.isFinite else {
            throw FixRejection(.wrongType, "\(name) must be a decimal number, got '\(text.prefix(40))'")
        }
        return value
    }

    // MARK: Traccar Client 9's JSON

    /// `{"device_id": TOKEN, "location": {"timestamp", "coords": {latitude, longitude, accuracy,
    /// speed (m/s, -1 unknown), heading (-1 unknown), altitude}, "battery": {level (0..1, -1
    /// unknown), is_charging}, "event", "is_moving", "odometer", "activity", "extras", ...}}`, as the
    /// app's location template writes it. `location` may also be an array of such objects (the
    /// geolocation library's batch mode); each element is one fix, indexed in order.
    static func decodeJSON(_ body: [UInt8], receivedAtMicros: Int64, fixesMax: Int) -> Decoded {
        var batch = AppBatch()
        guard let document = try? JSONParser.parse(body), case .object = document else {
            batch.rejections.append(
                AppRejection(
                    index: 0, .notAnObject, "the body is not a JSON object {\"device_id\", \"location\"}"))
            return Decoded(token: nil, batch: batch)
        }
        let token: String? =
            if case .string(let text)? = document["device_id"] { text } else { nil }
        let locations: [JSONValue] =
            switch document["location"] {
            case .array(let elements)?: elements
            case let value?: [value]
            case nil: []
            }
        guard locations.count <= fixesMax else {
            return Decoded(token: token, batch: batch, locationsOverLimit: locations.count)
        }
        if locations.isEmpty {
            batch.rejections.append(AppRejection(index: 0, .missingField, "location is required"))
        }
        for (index, location) in locations.enumerated() {
            do {
                batch.fixes.append(AppBatch.Item(index: index, fix: try jsonFix(location)))
            } catch {
                batch.rejections.append(AppRejection(index: index, error.code, error.detail))
            }
        }
        return Decoded(token: token, batch: batch)
    }

    static func jsonFix(_ location: JSONValue) throws(FixRejection) -> AppFix {
        guard case .object = location else {
            throw FixRejection(.notAnObject, "location must be an object, found \(location.typeName)")
        }
        guard let coords = location["coords"], case .object = coords else {
            throw FixRejection(.missingField, "location.coords is required (latitude, longitude)")
        }
        guard let latitude = try OverlandDecoder.number(coords["latitude"], "coords.latitude"),
            let longitude = try OverlandDecoder.number(coords["longitude"], "coords.longitude")
        else {
            throw FixRejection(.missingField, "coords.latitude and coords.longitude are required")
        }
        guard case .string(let text)? = location["timestamp"] else {
            throw FixRejection(.missingField, "location.timestamp is required (ISO 8601)")
        }
        guard let recordedAt = AppTime.iso8601Micros(text) else {
            throw FixRejection(
                .badTimestamp, "location.timestamp '\(text.prefix(40))' is not an ISO 8601 time with a zone")
        }
        var fix = AppFix(
            latitude: latitude, longitude: longitude, source: source(location), recordedAtMicros: recordedAt)
        fix.accuracyMeters = try OverlandDecoder.number(coords["accuracy"], "coords.accuracy").flatMap {
            $0 <= 0 ? nil : $0
        }
        fix.altitudeMeters = try OverlandDecoder.number(coords["altitude"], "coords.altitude")
        fix.speedMetersPerSecond = try OverlandDecoder.number(coords["speed"], "coords.speed").flatMap {
            $0 < 0 ? nil : $0
        }
        fix.headingDegrees = try OverlandDecoder.number(coords["heading"], "coords.heading").flatMap {
            $0 < 0 ? nil : $0
        }
        if let battery = location["battery"], case .object = battery {
            fix.batteryPercent = try OverlandDecoder.number(battery["level"], "battery.level").flatMap {
                $0 < 0 ? nil : $0 * 100
            }
            if case .bool(let charging)? = battery["is_charging"] { fix.isCharging = charging }
        }
        return fix
    }

    /// The geolocation library's `event`: a heartbeat or a geofence crossing is said so; a
    /// location, a motion change or a provider change is a point of the track. `alarm` (SOS) wins.
    static func source(_ location: JSONValue) -> String {
        if let alarm = location["alarm"], alarm != .null { return "alarm" }
        switch location["event"] {
        case .string("heartbeat")?: return "heartbeat"
        case .string("geofence")?: return "geofence"
        default: return "track"
        }
    }
}
