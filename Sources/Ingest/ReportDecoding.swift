import Events
import Identity
import JSON

/// Why one fix of a report was not accepted. `code` is the stable part (a metrics label and what a
/// client matches on); the reason sent back is `code: detail`, e.g.
/// `out_of_range: latitude must be within [-90, 90], got 91.5`.
public struct FixRejection: Error, Equatable, Sendable {
    public enum Code: String, Sendable, CaseIterable {
        case notAnObject = "not_an_object"
        case unknownField = "unknown_field"
        case missingField = "missing_field"
        case wrongType = "wrong_type"
        case outOfRange = "out_of_range"
        case badTimestamp = "bad_timestamp"
        case badSource = "bad_source"
        case expired
        /// An app's message that cannot be read at all (not JSON, an unknown `_type`, ...).
        case malformed
        /// An app's message larger than findmy reads (an MQTT message beyond the client's packet
        /// limit): its bytes were discarded unread.
        case tooLarge = "too_large"
    }

    public var code: Code
    public var detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var reason: String { "\(code.rawValue): \(detail)" }
}

/// A report request after decoding and per-fix validation: what will be appended.
public struct DecodedReport: Equatable, Sendable {
    public var batchID: UUID128
    public var fixes: [Fix]
    public var rejections: [Rejection]
    /// How many fixes were rejected per reason code, for metrics.
    public var rejectionCounts: [FixRejection.Code: Int]
    /// The command this batch answers (`in_reply_to`, docs/api.md); nil for most reports.
    public var inReplyTo: UUID128? = nil
}

/// Decodes `POST /api/find-my/report` bodies.
///
/// What fails the whole request (400/413) and what rejects only one fix follows one rule: a
/// problem with the envelope (not JSON, not an object, an unknown top-level member, a missing or bad
/// `batch_id`, `fixes` not an array, empty or too long) fails the request, because nothing in it can
/// be trusted to belong where it says. A problem inside one element of `fixes` (including an
/// unknown member, a wrong type, or an element that is not an object) rejects only that fix, with
/// its index and reason, so that one bad fix never blocks the fixes queued behind it on a phone.
public enum ReportDecoder {
    static let batchKeys: Set<String> = ["batch_id", "fixes", "in_reply_to"]
    static let fixKeys = Set(FixField.reported.map(\.rawValue))

    /// The report in `body`, or the error that fails the whole request. Tries `decodeDirect`
    /// first and, when it gives up, `decodeTree`, whose results are the contract.
    public static func decode(_ body: [UInt8], receivedAtMicros: Int64, limits: IngestLimits) throws(APIError)
        -> DecodedReport
    {
        if let report = decodeDirect(body, receivedAtMicros: receivedAtMicros, limits: limits) {
            return report
        }
        return try decodeTree(body, receivedAtMicros: receivedAtMicros, limits: limits)
    }

    /// Parses the whole body into a `JSONValue` tree, then decodes the report from it. Every error
    /// message a client can get comes from here.
    public static func decodeTree(_ body: [UInt8], receivedAtMicros: Int64, limits: IngestLimits)
        throws(APIError) -> DecodedReport
    {
        let document: JSONValue
        do {
            document = try JSONParser.parse(body)
        } catch {
            throw .badRequest(.malformedJson, "the body is not valid JSON: \(error.description)")
        }
        guard case .object(let object) = document else {
            throw .badRequest(
                .wrongType,
                "the body must be a JSON object {\"batch_id\": ..., \"fixes\": [...]}, found \(document.typeName)"
            )
        }
        do {
            try object.checkKeys(allowed: batchKeys)
        } catch {
            throw .badRequest(.unknownField, "\(error.pathDescription): \(error.message)")
        }
        let batchID = try decodeBatchID(object)
        guard let fixesValue = object["fixes"] else {
            throw .badRequest(.missingField, "fixes: required member is missing; send an array of fixes")
        }
        guard case .array(let elements) = fixesValue else {
            throw .badRequest(.wrongType, "fixes: expected an array, found \(fixesValue.typeName)")
        }
        guard !elements.isEmpty else {
            throw .badRequest(.emptyBatch, "fixes is empty; send at least one fix, or nothing at all")
        }
        guard elements.count <= limits.batchFixesMax else {
            throw APIError(
                status: 413, code: .tooManyFixes,
                message:
                    "\(elements.count) fixes in one batch; batchFixesMax is \(limits.batchFixesMax): split the batch"
            )
        }
        var report = DecodedReport(batchID: batchID, fixes: [], rejections: [], rejectionCounts: [:])
        if let value = object["in_reply_to"] {
            guard case .string(let text) = value, let id = UUID128(text) else {
                throw .badRequest(
                    .invalidField,
                    "in_reply_to: expected the command_id (a UUID string) of the command this batch answers")
            }
            report.inReplyTo = id
        }
        report.fixes.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            do {
                report.fixes.append(
                    try decodeFix(element, receivedAtMicros: receivedAtMicros, limits: limits))
            } catch {
                report.rejections.append(Rejection(index: UInt32(index), reason: error.reason))
                report.rejectionCounts[error.code, default: 0] += 1
            }
        }
        return report
    }

    static func decodeBatchID(_ object: JSONObject) throws(APIError) -> UUID128 {
        guard let value = object["batch_id"] else {
            throw .badRequest(
                .missingField, "batch_id: required member is missing; send a UUID generated once per batch")
        }
        guard case .string(let text) = value else {
            throw .badRequest(.wrongType, "batch_id: expected a UUID string, found \(value.typeName)")
        }
        guard let id = UUID128(text) else {
            throw .badRequest(
                .invalidBatchId,
                "batch_id: '\(text.prefix(64))' is not a UUID (like 1b4e28ba-2fa1-11d2-883f-0016d3cca427)")
        }
        return id
    }

    /// One fix, every rule of docs/api.md "Fix rules" in order; the first broken rule is the reason.
    public static func decodeFix(_ value: JSONValue, receivedAtMicros: Int64, limits: IngestLimits)
        throws(FixRejection) -> Fix
    {
        guard case .object(let object) = value else {
            throw FixRejection(.notAnObject, "a fix must be an object, found \(value.typeName)")
        }
        // One pass over the members: a fix has about ten, and this is the hot loop of a report.
        var fields = FixFields()
        for member in object.members {
            guard fields.set(member.key, member.value) else {
                throw FixRejection(
                    .unknownField,
                    "\(member.key.prefix(64)) is not a fix field; allowed: \(fixKeys.sorted().joined(separator: ", "))"
                )
            }
        }
        return try validate(fields, receivedAtMicros: receivedAtMicros, limits: limits)
    }

    /// Applies the fix rules to a fix's members, however they were read.
    /// `recordedAtMicros`: the fix time when a decoder already has it (then `fields.recordedAt` is unused).
    static func validate(
        _ fields: FixFields, receivedAtMicros: Int64, limits: IngestLimits, recordedAtMicros: Int64? = nil
    )
        throws(FixRejection) -> Fix
    {
        typealias Limits = IngestLimits
        let latitude = try number(
            fields.latitude, "latitude", required: true,
            in: Limits.latitudeDegreesMin...Limits.latitudeDegreesMax)!
        let longitude = try number(
            fields.longitude, "longitude", required: true,
            in: Limits.longitudeDegreesMin...Limits.longitudeDegreesMax)!
        let accuracy = try checkedAccuracy(number(fields.accuracy, "accuracy_m", required: true, in: nil)!)
        let altitude = try number(
            fields.altitude, "altitude_m", required: false,
            in: Limits.altitudeMetersMin...Limits.altitudeMetersMax)
        let speed = try number(
            fields.speed, "speed_mps", required: false,
            in: Limits.speedMetersPerSecondMin...Limits.speedMetersPerSecondMax)
        let heading = try number(fields.heading, "heading_deg", required: false, in: nil).map(checkedHeading)
        let battery = try batteryPercent(fields.battery)
        let charging = try optionalBool(fields.charging, "is_charging")
        let source = try decodeSource(fields.source)
        let recordedAt: Int64
        if let recordedAtMicros {
            recordedAt = recordedAtMicros
        } else {
            recordedAt = try timestamp(fields.recordedAt)
        }
        return try checkedAge(
            Fix(
                latitude: latitude, longitude: longitude, accuracyMeters: accuracy, altitudeMeters: altitude,
                speedMetersPerSecond: speed, headingDegrees: heading, batteryPercent: battery,
                isCharging: charging, source: source, recordedAtMicros: recordedAt),
            receivedAtMicros: receivedAtMicros, limits: limits)
    }

    /// The retention window and the clock flag, the last rules of every fix.
    static func checkedAge(_ fix: Fix, receivedAtMicros: Int64, limits: IngestLimits) throws(FixRejection)
        -> Fix
    {
        // A wrong device clock can make a fix look young; its age counts from the earlier clock.
        let recordedAt = fix.recordedAtMicros
        let ageMicros = receivedAtMicros - min(recordedAt, receivedAtMicros)
        guard ageMicros <= limits.retentionMicros else {
            throw FixRejection(
                .expired,
                "recorded_at \(RFC3339.formatMillis(recordedAt)) is older than the retention window of \(limits.retentionDays) days"
            )
        }
        var valid = fix
        valid.clockSuspect = recordedAt > receivedAtMicros + limits.clockSkewToleranceMicros
        return valid
    }

    static func checkedAccuracy(_ accuracy: Double) throws(FixRejection) -> Double {
        guard accuracy >= IngestLimits.accuracyMetersMin, accuracy <= IngestLimits.accuracyMetersMax else {
            throw FixRejection(
                .outOfRange,
                "accuracy_m must be within [\(format(IngestLimits.accuracyMetersMin)), \(format(IngestLimits.accuracyMetersMax))] metres, got \(accuracy)"
            )
        }
        return accuracy
    }

    static func checkedHeading(_ heading: Double) throws(FixRejection) -> Double {
        typealias Limits = IngestLimits
        guard heading >= Limits.headingDegreesMin && heading < Limits.headingDegreesMax else {
            let hint = heading == Limits.headingDegreesMax ? "; send 0" : ""
            throw FixRejection(
                .outOfRange,
                "heading_deg must be within [\(format(Limits.headingDegreesMin)), \(format(Limits.headingDegreesMax))), got \(heading)\(hint)"
            )
        }
        return heading
    }

    /// The fix rules for a fix an app's protocol decoder built (`IngestService.submit`): the same
    /// ranges, source rule, retention window and clock flag as a native fix, except that accuracy
    /// may be unknown (nil). `fix.clockSuspect` is set here, whatever the decoder put there.
    public static func validate(_ fix: Fix, receivedAtMicros: Int64, limits: IngestLimits)
        throws(FixRejection) -> Fix
    {
        typealias Limits = IngestLimits
        // The rules of `validate(_:receivedAtMicros:limits:recordedAtMicros:)` in its order, on the
        // values as they are (a decoded fix has no wrong types), so the answers are the same.
        guard fix.recordedAtMicros >= RFC3339.microsMin, fix.recordedAtMicros <= RFC3339.microsMax else {
            throw FixRejection(.badTimestamp, "the fix time is outside years 0001 to 9999 in UTC")
        }
        var valid = fix
        valid.latitude = try checkedNumber(
            fix.latitude, "latitude", in: Limits.latitudeDegreesMin...Limits.latitudeDegreesMax)
        valid.longitude = try checkedNumber(
            fix.longitude, "longitude", in: Limits.longitudeDegreesMin...Limits.longitudeDegreesMax)
        // Unknown accuracy (nil) is allowed here; a known one keeps its rule.
        if let accuracy = fix.accuracyMeters {
            _ = try checkedAccuracy(checkedNumber(accuracy, "accuracy_m", in: nil))
        }
        if let altitude = fix.altitudeMeters {
            _ = try checkedNumber(
                altitude, "altitude_m", in: Limits.altitudeMetersMin...Limits.altitudeMetersMax)
        }
        if let speed = fix.speedMetersPerSecond {
            _ = try checkedNumber(
                speed, "speed_mps", in: Limits.speedMetersPerSecondMin...Limits.speedMetersPerSecondMax)
        }
        if let heading = fix.headingDegrees {
            _ = try checkedHeading(checkedNumber(heading, "heading_deg", in: nil))
        }
        if let battery = fix.batteryPercent {
            _ = try checkedBattery(Double(battery))
        }
        try checkedSource(fix.source)
        return try checkedAge(valid, receivedAtMicros: receivedAtMicros, limits: limits)
    }

    /// The members of one fix, before their rules are applied.
    struct FixFields {
        var latitude, longitude, accuracy, altitude, speed, heading, battery, charging, source,
            recordedAt: JSONValue?

        /// Stores the member `key`; false when it is not a fix field.
        mutating func set(_ key: String, _ value: JSONValue) -> Bool {
            switch FixField(rawValue: key) {
            case .latitude?: latitude = value
            case .longitude?: longitude = value
            case .accuracy?: accuracy = value
            case .altitude?: altitude = value
            case .speed?: speed = value
            case .heading?: heading = value
            case .battery?: battery = value
            case .charging?: charging = value
            case .source?: source = value
            case .recordedAt?: recordedAt = value
            case .receivedAt?, .clockSuspect?, nil: return false
            }
            return true
        }
    }

    /// Absent and null are the same for optional fields; a required field must be a number.
    /// `range` nil: any finite number, for a caller that applies its own range.
    static func number(_ value: JSONValue?, _ key: String, required: Bool, in range: ClosedRange<Double>?)
        throws(FixRejection) -> Double?
    {
        guard let value, value != .null else {
            if required { throw FixRejection(.missingField, "\(key) is required") }
            return nil
        }
        let number: Double
        switch value {
        case .integer(let integer): number = Double(integer)
        case .double(let double): number = double
        default: throw FixRejection(.wrongType, "\(key) must be a number, found \(value.typeName)")
        }
        return try checkedNumber(number, key, in: range)
    }

    /// A number's rules once it is a number: finite, and within `range` when there is one.
    static func checkedNumber(_ number: Double, _ key: String, in range: ClosedRange<Double>?)
        throws(FixRejection) -> Double
    {
        // The parser never produces NaN or infinities; the check keeps this true for any caller.
        guard number.isFinite else {
            throw FixRejection(.outOfRange, "\(key) must be a finite number, got \(number)")
        }
        if let range, !range.contains(number) {
            throw FixRejection(
                .outOfRange,
                "\(key) must be within [\(format(range.lowerBound)), \(format(range.upperBound))], got \(number)"
            )
        }
        return number
    }

    static func format(_ bound: Double) -> String {
        bound == bound.rounded() && abs(bound) < 1e15 ? String(Int64(bound)) : String(bound)
    }

    static func batteryPercent(_ value: JSONValue?) throws(FixRejection) -> UInt8? {
        guard let value, value != .null else { return nil }
        let number: Double
        switch value {
        case .integer(let integer): number = Double(integer)
        case .double(let double): number = double
        default:
            throw FixRejection(
                .wrongType, "battery_pct must be a whole number 0 to 100, found \(value.typeName)")
        }
        return try checkedBattery(number)
    }

    static func checkedBattery(_ number: Double) throws(FixRejection) -> UInt8 {
        guard number >= IngestLimits.batteryPercentMin, number <= IngestLimits.batteryPercentMax else {
            throw FixRejection(
                .outOfRange,
                "battery_pct must be within [\(format(IngestLimits.batteryPercentMin)), \(format(IngestLimits.batteryPercentMax))], got \(number)"
            )
        }
        // Some platforms report 81.0 or 80.5; the percentage is kept whole, rounded. In range, so
        // the conversion cannot trap.
        return UInt8(number.rounded())
    }

    static func optionalBool(_ value: JSONValue?, _ key: String) throws(FixRejection) -> Bool? {
        guard let value, value != .null else { return nil }
        guard case .bool(let flag) = value else {
            throw FixRejection(.wrongType, "\(key) must be true or false, found \(value.typeName)")
        }
        return flag
    }

    static func decodeSource(_ value: JSONValue?) throws(FixRejection) -> String {
        guard let value, value != .null else {
            throw FixRejection(
                .missingField, "source is required (significant, ondemand, visit, manual, geofence, ...)")
        }
        guard case .string(let source) = value else {
            throw FixRejection(.wrongType, "source must be a string, found \(value.typeName)")
        }
        try checkedSource(source)
        return source
    }

    static func checkedSource(_ source: String) throws(FixRejection) {
        let allowed = source.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
        }
        guard !source.isEmpty, source.utf8.count <= 64, allowed else {
            throw FixRejection(.badSource, "source must be 1 to 64 characters of a-z, 0-9, '_', '-', '.'")
        }
    }

    static func timestamp(_ value: JSONValue?) throws(FixRejection) -> Int64 {
        guard let value, value != .null else {
            throw FixRejection(
                .missingField, "recorded_at is required (RFC 3339, e.g. 2026-12-02T14:00:00.123Z)")
        }
        guard case .string(let text) = value else {
            throw FixRejection(.wrongType, "recorded_at must be an RFC 3339 string, found \(value.typeName)")
        }
        do {
            return try RFC3339.parseMicros(text)
        } catch {
            throw FixRejection(
                .badTimestamp,
                "recorded_at is not RFC 3339 (\(error.description)); e.g. 2026-12-02T14:00:00.123Z")
        }
    }
}
