import Identity
import Ingest
import JSON

/// Decodes the body Overland (iOS) posts, and GPSLogger's Overland-format sender:
/// `{"locations": [GeoJSON Feature, ...], "current": Feature, "trip": {...}}`.
///
/// What the app writes, from Overland-iOS's GLManager.m (docs/clients.md has the table):
/// - a location is a Point feature, `coordinates` `[longitude, latitude]`, with `properties`
///   `timestamp` (ISO 8601, whole seconds), `horizontal_accuracy` (negative: the position is
///   invalid), `altitude` with `vertical_accuracy` (negative: the altitude is invalid), `speed`
///   (m/s, negative: invalid), `course` (degrees, negative: invalid; rounded, so 359.6 arrives as
///   360), `battery_level` (0..1, -1 unknown; GPSLogger sends percent, so a value above 1 is read as
///   percent), `battery_state`, `motion`, `device_id`, `wifi`, ...;
/// - a visit is a feature with `action: "visit"`, `arrival_date` and `departure_date` (null when
///   unknown), and `timestamp` = when the app was told, so the fix is dated at arrival (or
///   departure), and the battery of that later moment is not kept;
/// - other `action`s (`paused_location_updates`, ...) and trip records (`type: "trip"`) are not
///   fixes: acknowledged, counted, not stored;
/// - `current` is the newest location, sent beside a batch when the queue holds more; it is still
///   queued on the phone and arrives again in a later batch, so it is not stored from here (history
///   would hold it twice); `trip` (the running trip) is not a fix either.
///
/// Envelope problems (not JSON, no `locations` array) fail the request with 400: the app never
/// sends such a body. A problem inside one element rejects only that element.
public enum OverlandDecoder {
    /// `decodeDirect` when it answers, otherwise `decodeTree`, whose results are the contract.
    public static func decode(_ body: [UInt8], limits: IngestLimits) throws(APIError) -> AppBatch {
        if let batch = decodeDirect(body, limits: limits) { return batch }
        return try decodeTree(body, limits: limits)
    }

    /// Parses the whole body into a `JSONValue` tree, then reads the batch from it. Every error
    /// message a client can get comes from here.
    public static func decodeTree(_ body: [UInt8], limits: IngestLimits) throws(APIError) -> AppBatch {
        let document: JSONValue
        do {
            document = try JSONParser.parse(body)
        } catch {
            throw .badRequest(.malformedJson, "the body is not valid JSON: \(error.description)")
        }
        guard case .object(let object) = document else {
            throw .badRequest(
                .wrongType,
                "the body must be a JSON object {\"locations\": [...]}, found \(document.typeName)")
        }
        guard let locationsValue = object["locations"] else {
            throw .badRequest(
                .missingField, "locations: required member is missing; send {\"locations\": [...]}")
        }
        guard case .array(let locations) = locationsValue else {
            throw .badRequest(.wrongType, "locations: expected an array, found \(locationsValue.typeName)")
        }
        guard locations.count <= limits.batchFixesMax else {
            throw APIError(
                status: 413, code: .tooManyFixes,
                message:
                    "\(locations.count) locations in one request; batchFixesMax is \(limits.batchFixesMax): lower the app's batch size"
            )
        }
        var batch = AppBatch()
        for (index, element) in locations.enumerated() {
            batch.add(index) { () throws(FixRejection) in try feature(element) }
        }
        return batch
    }

    /// One element of `locations`: a fix, nil for a feature that is not one, or why it cannot be read.
    static func feature(_ value: JSONValue) throws(FixRejection) -> AppFix? {
        guard case .object(let object) = value else {
            throw FixRejection(
                .notAnObject, "a location must be a GeoJSON Feature object, found \(value.typeName)")
        }
        return try FeatureMembers.reading(object) { members throws(FixRejection) in try feature(members) }
    }

    /// The fix in the members of one feature, however they were read (`decodeTree` or `decodeDirect`).
    static func feature(_ members: FeatureMembers) throws(FixRejection) -> AppFix? {
        guard members.hasProperties else {
            throw FixRejection(.missingField, "properties: a location needs a properties object")
        }
        if let action = members[.action], !action.isNull {
            guard action.isString("visit") else { return nil }
            return try visit(members)
        }
        if members[.type]?.isString("trip") == true { return nil }
        let (longitude, latitude) = try coordinates(members)
        let recordedAt = try time(members[.timestamp], "timestamp", required: true)!
        var fix = AppFix(
            latitude: latitude, longitude: longitude, source: "track", recordedAtMicros: recordedAt)
        fix.accuracyMeters = try accuracy(members)
        if let verticalAccuracy = try number(members[.verticalAccuracy], "vertical_accuracy"),
            verticalAccuracy < 0
        {
            fix.altitudeMeters = nil
        } else {
            fix.altitudeMeters = try number(members[.altitude], "altitude")
        }
        fix.speedMetersPerSecond = try number(members[.speed], "speed").flatMap { $0 < 0 ? nil : $0 }
        fix.headingDegrees = try number(members[.course], "course").flatMap { course in
            course < 0 ? nil : (course == 360 ? 0 : course)
        }
        fix.batteryPercent = try number(members[.batteryLevel], "battery_level").flatMap { level in
            level < 0 ? nil : (level <= 1 ? level * 100 : level)
        }
        fix.isCharging = try batteryCharging(members[.batteryState])
        return fix
    }

    static func visit(_ members: FeatureMembers) throws(FixRejection) -> AppFix? {
        let arrival = try time(members[.arrivalDate], "arrival_date", required: false)
        let departure = try time(members[.departureDate], "departure_date", required: false)
        guard let recordedAt = arrival ?? departure else { return nil }
        let (longitude, latitude) = try coordinates(members)
        var fix = AppFix(
            latitude: latitude, longitude: longitude, source: "visit", recordedAtMicros: recordedAt)
        fix.accuracyMeters = try accuracy(members)
        return fix
    }

    static func coordinates(_ members: FeatureMembers) throws(FixRejection) -> (Double, Double) {
        let longitudeValue: FeatureMembers.Value
        let latitudeValue: FeatureMembers.Value
        switch members.coordinates {
        case .missing:
            throw FixRejection(
                .missingField, "geometry.coordinates: a location needs [longitude, latitude]")
        case .notAPair(let typeName):
            throw FixRejection(
                .wrongType,
                "geometry.coordinates must be an array [longitude, latitude], found \(typeName)")
        case .pair(let longitude, let latitude):
            (longitudeValue, latitudeValue) = (longitude, latitude)
        }
        guard let longitude = try number(longitudeValue, "longitude"),
            let latitude = try number(latitudeValue, "latitude")
        else {
            throw FixRejection(.missingField, "geometry.coordinates: longitude and latitude must not be null")
        }
        return (longitude, latitude)
    }

    /// CoreLocation's `horizontalAccuracy`: negative means the coordinates are invalid.
    static func accuracy(_ members: FeatureMembers) throws(FixRejection) -> Double? {
        guard let accuracy = try number(members[.horizontalAccuracy], "horizontal_accuracy") else {
            return nil
        }
        guard accuracy >= 0 else {
            throw FixRejection(
                .outOfRange,
                "horizontal_accuracy is \(accuracy): a negative accuracy marks an invalid position (CoreLocation)"
            )
        }
        return accuracy == 0 ? nil : accuracy
    }

    /// `charging` and `full` (plugged in) are charging; `unplugged` is not; `unknown` is unknown.
    static func batteryCharging(_ value: FeatureMembers.Value?) throws(FixRejection) -> Bool? {
        guard let value, !value.isNull else { return nil }
        guard value.isText else {
            throw FixRejection(.wrongType, "battery_state must be a string, found \(value.typeName)")
        }
        if value.isString("charging") || value.isString("full") { return true }
        return value.isString("unplugged") ? false : nil
    }

    static func number(_ value: FeatureMembers.Value?, _ key: String) throws(FixRejection) -> Double? {
        switch value {
        case nil, .null?: nil
        case .number(let number)?: number
        case let value?: throw FixRejection(.wrongType, "\(key) must be a number, found \(value.typeName)")
        }
    }

    /// `number` of a member of a parsed tree (the OsmAnd protocol's JSON body reads its numbers so).
    static func number(_ value: JSONValue?, _ key: String) throws(FixRejection) -> Double? {
        switch value {
        case nil, .null?: nil
        case .integer(let integer)?: Double(integer)
        case .double(let double)?: double
        case let value?: throw FixRejection(.wrongType, "\(key) must be a number, found \(value.typeName)")
        }
    }

    static func time(_ value: FeatureMembers.Value?, _ key: String, required: Bool) throws(FixRejection)
        -> Int64?
    {
        guard let value, !value.isNull else {
            if required { throw FixRejection(.missingField, "\(key) is required (ISO 8601)") }
            return nil
        }
        let micros: Int64?
        switch value {
        case .string(let bytes): micros = AppTime.iso8601Micros(bytes)
        default:
            throw FixRejection(.wrongType, "\(key) must be an ISO 8601 string, found \(value.typeName)")
        }
        guard let micros else {
            throw FixRejection(
                .badTimestamp,
                "\(key) '\(value.text.prefix(40))' is not an ISO 8601 time with a zone (2026-12-01T08:00:00Z)"
            )
        }
        return micros
    }
}

/// What `OverlandDecoder.feature` reads of one element of `locations` (an object): whether it has a
/// `properties` object, its `geometry.coordinates`, and the scalar members of `properties` a fix is
/// made of. Both decoders fill it, `decodeTree` from the parsed tree and `decodeDirect` straight
/// from the bytes, and the same `feature` reads it: their fixes and rejections are one code's.
struct FeatureMembers {
    /// The members of `properties` that `feature` and `visit` read; every other member is ignored.
    enum Property: Int, CaseIterable {
        case action, type, timestamp, horizontalAccuracy, verticalAccuracy, altitude, speed, course
        case batteryLevel, batteryState, arrivalDate, departureDate

        var name: StaticString {
            switch self {
            case .action: "action"
            case .type: "type"
            case .timestamp: "timestamp"
            case .horizontalAccuracy: "horizontal_accuracy"
            case .verticalAccuracy: "vertical_accuracy"
            case .altitude: "altitude"
            case .speed: "speed"
            case .course: "course"
            case .batteryLevel: "battery_level"
            case .batteryState: "battery_state"
            case .arrivalDate: "arrival_date"
            case .departureDate: "departure_date"
            }
        }

        /// The member named by `bytes` (`OverlandDecoder.equal`), or nil. The length picks the one
        /// or two candidates: a location has about fifteen names, most of them not wanted.
        init?(named bytes: UnsafeBufferPointer<UInt8>) {
            let candidates: (Property, Property?)
            switch bytes.count {
            case 4: candidates = (.type, nil)
            case 5: candidates = (.speed, nil)
            case 6: candidates = (.action, .course)
            case 8: candidates = (.altitude, nil)
            case 9: candidates = (.timestamp, nil)
            case 12: candidates = (.arrivalDate, nil)
            case 13: candidates = (.batteryLevel, .batteryState)
            case 14: candidates = (.departureDate, nil)
            case 17: candidates = (.verticalAccuracy, nil)
            case 19: candidates = (.horizontalAccuracy, nil)
            default: return nil
            }
            if OverlandDecoder.equal(bytes, candidates.0.name) {
                self = candidates.0
            } else if let second = candidates.1, OverlandDecoder.equal(bytes, second.name) {
                self = second
            } else {
                return nil
            }
        }
    }

    /// A member as `feature` reads it: a scalar, or (from the tree) the type name of a container.
    /// A string is its UTF-8 bytes: still in the body when the direct decoder read it (printable
    /// ASCII without escapes), copied beside the feature while it is read when the tree path did
    /// (`reading`). No `String` is made of a string that is only compared or parsed, and the type
    /// has no reference in it: copying and dropping the members of each location was a sixth of
    /// the direct decoder's instructions while a string case held a `String` (docs/benchmarks.md).
    /// Numbers are the `Double` that `JSONValue`'s `.integer` or `.double` converts to.
    enum Value {
        case null
        case bool(Bool)
        case number(Double)
        case string(UnsafeBufferPointer<UInt8>)
        case container(typeName: StaticString)

        var isNull: Bool {
            if case .null = self { return true }
            return false
        }

        var isText: Bool {
            if case .string = self { return true }
            return false
        }

        /// Whether this is the string `expected`.
        func isString(_ expected: StaticString) -> Bool {
            if case .string(let bytes) = self { return OverlandDecoder.equal(bytes, expected) }
            return false
        }

        /// A string's text (for messages).
        var text: String {
            if case .string(let bytes) = self { return String(decoding: bytes, as: UTF8.self) }
            return ""
        }

        /// `JSONValue.typeName` of the value it was read from.
        var typeName: String {
            switch self {
            case .null: "null"
            case .bool: "boolean"
            case .number: "number"
            case .string: "string"
            case .container(let typeName): typeName.description
            }
        }
    }

    /// `geometry.coordinates`: absent (or `geometry` not an object), something other than an array
    /// of at least two elements (with its JSON type name), or its first two elements.
    enum Coordinates {
        case missing
        case notAPair(typeName: StaticString)
        case pair(Value, Value)
    }

    var hasProperties = false
    var coordinates = Coordinates.missing
    private var values = InlineArray<12, Value?>(repeating: nil)

    init() {}

    /// `JSONValue.typeName`, as a `StaticString` (which holds no reference).
    static func staticTypeName(_ value: JSONValue) -> StaticString {
        switch value {
        case .null: "null"
        case .bool: "boolean"
        case .integer, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    /// `read` of the members of a feature parsed into a tree. Their strings' bytes are copied
    /// into one buffer that lives as long as `read` runs.
    static func reading<Result>(
        _ feature: JSONObject, _ read: (FeatureMembers) throws(FixRejection) -> Result
    ) throws(FixRejection) -> Result {
        let pair: [JSONValue]?
        var members = FeatureMembers()
        switch feature["geometry"]?["coordinates"] {
        case nil: pair = nil
        case .array(let elements)? where elements.count >= 2: pair = Array(elements.prefix(2))
        case let other?:
            pair = nil
            members.coordinates = .notAPair(typeName: staticTypeName(other))
        }
        var found: [(Int, JSONValue)] = []
        if case .object(let properties)? = feature["properties"] {
            members.hasProperties = true
            for property in Property.allCases {
                if let value = properties[property.name.description] {
                    found.append((property.rawValue, value))
                }
            }
        }
        var strings: [UInt8] = []
        for value in (pair ?? []) + found.map(\.1) {
            if case .string(let text) = value { strings += text.utf8 }
        }
        return try strings.withUnsafeBufferPointer { buffer throws(FixRejection) in
            var at = 0
            func value(_ json: JSONValue) -> Value {
                switch json {
                case .null: return .null
                case .bool(let flag): return .bool(flag)
                case .integer(let integer): return .number(Double(integer))
                case .double(let double): return .number(double)
                case .string(let text):
                    let count = text.utf8.count
                    defer { at += count }
                    return .string(UnsafeBufferPointer(rebasing: buffer[at..<at + count]))
                case .array, .object: return .container(typeName: staticTypeName(json))
                }
            }
            if let pair { members.coordinates = .pair(value(pair[0]), value(pair[1])) }
            for (rawValue, json) in found { members.values[rawValue] = value(json) }
            return try read(members)
        }
    }

    /// How many `Property` cases there are: `LocationName`'s first raw values are theirs.
    static let propertyCount = 12

    /// Sets the property whose raw value is `rawValue` (below `propertyCount`).
    @inline(__always)
    mutating func set(_ rawValue: Int, _ value: Value) { values[rawValue] = value }

    subscript(property: Property) -> Value? {
        get { values[property.rawValue] }
        set { values[property.rawValue] = newValue }
    }
}
