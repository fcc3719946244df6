// The JSON of the findmy API as the client writes and reads it (docs/api.md): a fix as a report
// carries it, the answers of enrolment and reports, and commands. Writing is by hand so that the
// queue's files hold exactly the bytes a report sends.

enum Wire {
    /// A fix as one element of a report's `fixes`, on one line; nil when the position is not a
    /// finite number (no JSON can say it; the server would refuse it anyway).
    static func fixJSON(_ fix: ClientFix) -> String? {
        guard fix.latitude.isFinite, fix.longitude.isFinite else { return nil }
        var members = ["\"latitude\":\(fix.latitude)", "\"longitude\":\(fix.longitude)"]
        func add(_ name: String, _ value: Double?) {
            if let value, value.isFinite { members.append("\"\(name)\":\(value)") }
        }
        add("accuracy_m", fix.accuracyMeters)
        add("altitude_m", fix.altitudeMeters)
        add("speed_mps", fix.speedMetersPerSecond)
        add("heading_deg", fix.headingDegrees)
        add("battery_pct", fix.batteryPercent)
        if let charging = fix.isCharging { members.append("\"is_charging\":\(charging)") }
        members.append("\"source\":\(quoted(fix.source))")
        members.append("\"recorded_at\":\"\(timestamp(micros: fix.recordedAtMicros))\"")
        return "{" + members.joined(separator: ",") + "}"
    }

    /// A JSON string literal.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// RFC 3339 in UTC with microseconds, `2026-12-02T14:00:00.123456Z`.
    static func timestamp(micros: Int64) -> String {
        let secondsTotal = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = micros - secondsTotal * 1_000_000
        let days = secondsTotal >= 0 ? secondsTotal / 86_400 : (secondsTotal - 86_399) / 86_400
        let secondOfDay = secondsTotal - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let fractionText = String(fraction)
        return "\(year)-\(two(month))-\(two(day))T\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60))"
            + ":\(two(secondOfDay % 60)).\(String(repeating: "0", count: 6 - fractionText.count))\(fractionText)Z"
    }

    /// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard Hinnant's
    /// `civil_from_days`).
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// A report's body from the queue's lines: the batch id, `in_reply_to`, and the fixes as stored.
    static func reportBody(batchID: String, inReplyTo: String?, fixLines: [Substring]) -> [UInt8] {
        var body = "{\"batch_id\":\(quoted(batchID)),"
        if let inReplyTo { body += "\"in_reply_to\":\(quoted(inReplyTo))," }
        body += "\"fixes\":[" + fixLines.joined(separator: ",") + "]}"
        return Array(body.utf8)
    }
}

/// A command as a report answer's `commands[]` and the stream's `command` event carry it.
public struct ClientCommand: Sendable, Equatable {
    public var commandID: String
    /// `locate`, `sound`, `lost` or `found`.
    public var kind: String
    public var requestedAt: String?
    public var message: String?
    public var phone: String?

    public init(
        commandID: String, kind: String, requestedAt: String? = nil, message: String? = nil,
        phone: String? = nil
    ) {
        self.commandID = commandID
        self.kind = kind
        self.requestedAt = requestedAt
        self.message = message
        self.phone = phone
    }

}
