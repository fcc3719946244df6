import Events
import JSON

/// Location history as CSV: a header row naming the columns, then one fix a row.
///
/// - Separator: `,` or `;` (or a tab), whichever the header holds most of outside quotes.
///   Fields may be quoted (`"..."`, `""` for a quote inside, line breaks inside allowed).
/// - Columns, matched case-insensitively: latitude `lat`/`latitude`; longitude
///   `lon`/`lng`/`long`/`longitude`; time `time`/`timestamp`/`recorded_at`/`datetime`/`date`;
///   accuracy `accuracy`/`acc`/`horizontal_accuracy` (metres); altitude `altitude`/`alt`/`ele`/
///   `elevation`; `speed` (m/s); course `course`/`bearing`/`heading`/`cog`; battery
///   `battery`/`batt`/`battery_level` (percent; 0..1 read as a fraction), `battery_percent`
///   (percent, always); `charging`/`is_charging` (true/false, 1/0, yes/no); source `source`/
///   `provider` ("track" when absent). `hdop` is not accuracy (it has no unit) and is not read.
///   Latitude, longitude and time are required in the header; other columns are ignored.
/// - Times: RFC 3339, or `YYYY-MM-DD HH:MM:SS[.f]` with a space and no zone (read as UTC), or
///   epoch seconds (milliseconds above 10^11).
/// - Numbers with a decimal point; with `;` as the separator also with a decimal comma.
/// - A row whose latitude, longitude or time cell is empty is counted ("incomplete_row"); a
///   cell that cannot be read, or a row with a different number of fields, is an error naming the
///   line. Empty lines are skipped.
public struct CSVReader<Source: ByteSource>: FixReader {
    private var lines: LineReader<Source>
    private var columns: Columns?
    private var separator: UInt8 = UInt8(ascii: ",")

    struct Columns {
        var count: Int
        var latitude: Int
        var longitude: Int
        var time: Int
        var accuracy: Int?
        var altitude: Int?
        var speed: Int?
        var course: Int?
        var battery: Int?
        var batteryPercent: Int?
        var charging: Int?
        var source: Int?
    }

    public init(_ source: Source) {
        lines = LineReader(source)
    }

    public mutating func next() throws(ImportError) -> ImportItem? {
        while true {
            guard let fields = try row() else { return nil }
            if fields.count == 1 && fields[0].isEmpty { continue }
            guard let columns else {
                try readHeader(fields)
                continue
            }
            guard fields.count == columns.count else {
                throw failure("this row has \(fields.count) fields, the header names \(columns.count)")
            }
            return try item(fields, columns)
        }
    }

    private mutating func readHeader(_ fields: [String]) throws(ImportError) {
        let names = fields.map { $0.lowercased().trimmingCharacters().description }
        func find(_ candidates: [String]) -> Int? {
            for candidate in candidates { if let index = names.firstIndex(of: candidate) { return index } }
            return nil
        }
        guard let latitude = find(CSVHeader.latitudeNames), let longitude = find(CSVHeader.longitudeNames),
            let time = find(CSVHeader.timeNames)
        else {
            throw failure(
                "the header must name a latitude (lat), a longitude (lon, lng) and a time column (time, timestamp, date), found: \(fields.joined(separator: ", "))"
            )
        }
        var columns = Columns(count: fields.count, latitude: latitude, longitude: longitude, time: time)
        columns.accuracy = find(CSVHeader.accuracyNames)
        columns.altitude = find(CSVHeader.altitudeNames)
        columns.speed = find(CSVHeader.speedNames)
        columns.course = find(CSVHeader.courseNames)
        columns.battery = find(CSVHeader.batteryNames)
        columns.batteryPercent = find(CSVHeader.batteryPercentNames)
        columns.charging = find(CSVHeader.chargingNames)
        columns.source = find(CSVHeader.sourceNames)
        self.columns = columns
    }

    private func item(_ fields: [String], _ columns: Columns) throws(ImportError) -> ImportItem {
        let latitudeText = fields[columns.latitude].trimmingCharacters()
        let longitudeText = fields[columns.longitude].trimmingCharacters()
        let timeText = fields[columns.time].trimmingCharacters()
        if latitudeText.isEmpty || longitudeText.isEmpty || timeText.isEmpty {
            return .notAFix(kind: "incomplete_row")
        }
        guard let latitude = number(latitudeText) else {
            throw failure("latitude \"\(latitudeText)\" is not a number")
        }
        guard let longitude = number(longitudeText) else {
            throw failure("longitude \"\(longitudeText)\" is not a number")
        }
        guard let micros = Self.micros(String(timeText)) else {
            throw failure(
                "time \"\(timeText)\" is neither an RFC 3339 time nor epoch seconds or milliseconds")
        }
        func optional(_ column: Int?, _ name: String) throws(ImportError) -> Double? {
            guard let column else { return nil }
            let text = fields[column].trimmingCharacters()
            if text.isEmpty { return nil }
            guard let value = number(text) else { throw failure("\(name) \"\(text)\" is not a number") }
            return value
        }
        var battery = try optional(columns.batteryPercent, "battery_percent").flatMap { $0 < 0 ? nil : $0 }
        if battery == nil {
            battery = try optional(columns.battery, "battery").flatMap {
                $0 < 0 ? nil : $0 <= 1 ? $0 * 100 : $0
            }
        }
        let chargingText = columns.charging.map { fields[$0].trimmingCharacters().lowercased() } ?? ""
        var charging: Bool?
        switch chargingText {
        case "": charging = nil
        case "true", "1", "yes": charging = true
        case "false", "0", "no": charging = false
        default: throw failure("charging \"\(chargingText)\" is neither true nor false")
        }
        let source = columns.source.map { fields[$0].trimmingCharacters() }.flatMap { $0.isEmpty ? nil : $0 }
        return .fix(
            Fix(
                latitude: latitude, longitude: longitude,
                accuracyMeters: try optional(columns.accuracy, "accuracy").flatMap { $0 > 0 ? $0 : nil },
                altitudeMeters: try optional(columns.altitude, "altitude"),
                speedMetersPerSecond: try optional(columns.speed, "speed").flatMap { $0 >= 0 ? $0 : nil },
                headingDegrees: try optional(columns.course, "course").flatMap { $0 >= 0 ? $0 : nil },
                batteryPercent: battery.flatMap { $0 <= 100 ? UInt8($0.rounded()) : nil },
                isCharging: charging,
                source: source.map { String($0) } ?? "track", recordedAtMicros: micros))
    }

    /// A finite number; with `;` between fields a decimal comma is read too (`52,5163`), as
    /// spreadsheets in much of Europe write it.
    private func number(_ text: Substring) -> Double? {
        var value = Double(text)
        if value == nil, separator == UInt8(ascii: ";"),
            text.utf8.filter({ $0 == UInt8(ascii: ",") }).count == 1,
            !text.contains(".")
        {
            value = Double(String(text.map { $0 == "," ? "." : $0 }))
        }
        return value.flatMap { $0.isFinite ? $0 : nil }
    }

    /// RFC 3339; `YYYY-MM-DD HH:MM:SS[.f]` (a space, no zone: UTC); epoch seconds or milliseconds.
    static func micros(_ text: String) -> Int64? {
        if let micros = ImportValues.rfc3339Micros(text) { return micros }
        var bytes = Array(text.utf8)
        if bytes.count >= 19 && bytes[4] == UInt8(ascii: "-") && bytes[10] == UInt8(ascii: " ") {
            bytes[10] = UInt8(ascii: "T")
            let last = bytes[bytes.count - 1]
            let hasZone =
                last == UInt8(ascii: "Z") || last == UInt8(ascii: "z")
                || (bytes.count >= 25
                    && (bytes[bytes.count - 6] == UInt8(ascii: "+")
                        || bytes[bytes.count - 6] == UInt8(ascii: "-")))
            if !hasZone { bytes.append(UInt8(ascii: "Z")) }
            return try? RFC3339.parseMicros(bytes)
        }
        return EpochTime.micros(text)
    }

    // MARK: Fields

    /// The next row's fields; a quoted field may run over several lines.
    private mutating func row() throws(ImportError) -> [String]? {
        guard var line = try lines.next() else { return nil }
        if lines.lineNumber == 1 {
            if line.starts(with: [0xEF, 0xBB, 0xBF]) { line = line.dropFirst(3) }
            separator = Self.separator(of: line)
        }
        var fields: [String] = []
        var field: [UInt8] = []
        var quoted = false
        var position = line.startIndex
        while true {
            if position == line.endIndex {
                guard quoted else { break }
                guard let more = try lines.next() else { throw failure("a quoted field is not closed") }
                field.append(0x0A)
                line = more
                position = line.startIndex
                continue
            }
            let byte = line[position]
            position += 1
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if position < line.endIndex && line[position] == UInt8(ascii: "\"") {
                        field.append(byte)
                        position += 1
                    } else {
                        quoted = false
                    }
                } else {
                    field.append(byte)
                }
            } else if byte == separator {
                fields.append(String(decoding: field, as: UTF8.self))
                field.removeAll(keepingCapacity: true)
            } else if byte == UInt8(ascii: "\"") && field.allSatisfy({ $0 == 0x20 }) {
                quoted = true
                field.removeAll(keepingCapacity: true)
            } else {
                field.append(byte)
            }
        }
        fields.append(String(decoding: field, as: UTF8.self))
        return fields
    }

    static func separator(of header: ArraySlice<UInt8>) -> UInt8 {
        let candidates: [UInt8] = [UInt8(ascii: ","), UInt8(ascii: ";"), 0x09]
        var counts = [0, 0, 0]
        var quoted = false
        for byte in header {
            if byte == UInt8(ascii: "\"") { quoted.toggle() }
            if !quoted, let index = candidates.firstIndex(of: byte) { counts[index] += 1 }
        }
        // On a tie the comma: the first of the largest.
        return candidates[counts.firstIndex(of: counts.max()!)!]
    }

    private func failure(_ message: String) -> ImportError {
        ImportError(message, byteOffset: lines.lineOffset, line: lines.lineNumber)
    }
}

/// The column names a CSV header may use, lowercased.
enum CSVHeader {
    static let latitudeNames = ["lat", "latitude"]
    static let longitudeNames = ["lon", "lng", "long", "longitude"]
    static let timeNames = ["time", "timestamp", "recorded_at", "datetime", "date"]
    static let accuracyNames = ["accuracy", "acc", "horizontal_accuracy"]
    static let altitudeNames = ["altitude", "alt", "ele", "elevation"]
    static let speedNames = ["speed"]
    static let courseNames = ["course", "bearing", "heading", "cog"]
    static let batteryNames = ["battery", "batt", "battery_level"]
    /// Always a percentage, never a fraction: findmy's export writes this one, so that 1% reads
    /// back as 1% and not as a full battery.
    static let batteryPercentNames = ["battery_percent"]
    static let chargingNames = ["charging", "is_charging"]
    static let sourceNames = ["source", "provider"]
}
